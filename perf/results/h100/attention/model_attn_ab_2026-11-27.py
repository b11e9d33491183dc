"""Model blocks fwd+bwd: torch eager vs tilewright with the Triton attention backward vs the CUDA one (variant b, dQ
in the pass), interleaved. Usage: python model_attn_ab.py [cases...]"""
import os, sys, statistics
import torch
from tilewright.bench import model as mb
from tilewright.bench.common import loop_ms_alternating

def env(on):
    os.environ["TILEWRIGHT_CUDA_ATTN_BWD"] = "1" if on else "0"
    os.environ["TILEWRIGHT_CUDA_ATTN_BWD_VARIANT"] = "b"
    os.environ["TILEWRIGHT_CUDA_ATTN_BWD_DQ"] = "atomic"

tags = sys.argv[1:] or ["llama-prefill", "vit-prefill", "llama-small", "vit-small"]
for case in mb.SUITES["default"]:
    if case.tag not in tags:
        continue
    ref, ours = mb.build_blocks(case, "cuda", torch.bfloat16)
    x = mb.make_input(case, "cuda", torch.bfloat16)
    g = None
    def step(block, on=None):
        def f():
            if on is not None:
                env(on)
            xx = x.detach().requires_grad_(x.requires_grad)
            y = block(xx)
            y.backward(torch.ones_like(y))
            for p in block.parameters():
                p.grad = None
        return f
    fns = [step(ref), step(ours, False), step(ours, True)]
    for f in fns:
        f()
    # gradients agree between the two backward paths
    grads = []
    for on in (False, True):
        env(on)
        xx = x.detach().requires_grad_(True)
        y = ours(xx)
        y.float().square().mean().backward()
        grads.append([xx.grad.float()] + [p.grad.float().clone() for p in ours.parameters()])
        for p in ours.parameters():
            p.grad = None
    diff = max(((a - b).abs().max() / (b.abs().max() + 1e-6)).item() for a, b in zip(*grads))
    ms = loop_ms_alternating(fns, repeats=9)
    print(f"{case.tag}: torch eager {ms[0]:.3f} ms | tw triton-bwd {ms[1]:.3f} ms ({ms[0]/ms[1]:.3f}x eager) | "
          f"tw cuda-bwd {ms[2]:.3f} ms ({ms[0]/ms[2]:.3f}x eager, {ms[1]/ms[2]:.3f}x triton-bwd) | max rel grad diff {diff:.2e}",
          flush=True)
