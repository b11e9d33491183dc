"""Issue 14: at B 1 x S 512 without autograd, the GEMMs with a fused epilogue (ViT-L: patch_embed + pos_embed,
proj + residual, fc1 + GELU, fc2 + residual; Llama: wo + residual, down + residual) go to cuBLAS and torch's add /
GELU - two ATen ops each (the router prefers cuBLAS's mainloop at these shapes: gemm._plain_gemm_on_cublas) - where
tilewright's kernel would do each in one replayed launch. At a host-bound size the launch count is the cost: which
is faster, per call (N queued calls, no sync) and per forward (the blocks under no_grad, torch eager beside), same
process, loops interleaved. ``TILEWRIGHT_CUBLAS=0`` (set per call, part of the replay key) stands for the kernels'
route; it also moves the plain GEMMs (qkv) onto the kernels, printed separately.

Prediction: a replayed launch ~15-17 us of host against F.linear + add's ~21-23 (session 38's probes): ~5 us less a
call, four calls in the ViT-L forward (0.78x -> ~0.85x torch eager), two in Llama's.

    PYTHONPATH=src python perf/results/h200/host/b1_epilogue_kernels_ab_2026-12-02.py > $OUT/b1_epilogue_ab.txt"""
import os
import warnings

import torch
import torch.nn.functional as F

from tilewright import _native
from tilewright.bench import model
from tilewright.bench.common import loop_ms_alternating
from tilewright.bench.host import host_us_alternating
from tilewright.ops import gemm

warnings.filterwarnings("ignore")
print(torch.cuda.get_device_name(), torch.__version__, "| native:", _native.load(block=True) is not None, flush=True)


def routed(fn, cublas: str):
    def run():
        os.environ["TILEWRIGHT_CUBLAS"] = cublas
        return fn()
    return run


torch.set_grad_enabled(False)
for tag in ("vit-small", "llama-small"):
    case = [c for c in model.SUITES["default"] if c.tag == tag][0]
    ref, ours = model.build_blocks(case, "cuda", torch.bfloat16)
    x0 = model.make_input(case, "cuda", torch.bfloat16)
    want = ref(x0).float()
    for cublas in ("1", "0"):
        err = (routed(lambda: ours(x0), cublas)().float() - want).abs().max().item()
        assert err < 0.25, (tag, cublas, err)
    if tag == "vit-small":
        B, S, _ = x0.shape
        x = ours.patch_embed(x0, residual=ours.pos_embed)
        q, k, v = ours._heads(ours.qkv(ours.norm1(x)))
        o = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, S, -1)
        n1, n2 = ours.norm1(x), ours.norm2(x)
        f1 = ours.fc1(n2)
        calls = {"patch_embed+pos": (lambda: ours.patch_embed(x0, residual=ours.pos_embed),
                                     lambda: ref.patch_embed(x0) + ref.pos_embed),
                 "qkv (plain)": (lambda: ours.qkv(n1), lambda: ref.qkv(n1)),
                 "proj+res": (lambda: ours.proj(o, residual=x), lambda: x + ref.proj(o)),
                 "fc1+gelu": (lambda: ours.fc1(n2), lambda: F.gelu(ref.fc1(n2))),
                 "fc2+res": (lambda: ours.fc2(f1, residual=x), lambda: x + ref.fc2(f1))}
    else:
        a = torch.randn(1, 512, 2048, device="cuda", dtype=torch.bfloat16)
        f = torch.randn(1, 512, 5632, device="cuda", dtype=torch.bfloat16)
        calls = {"wo+res": (lambda: ours.wo(a, residual=x0), lambda: x0 + ref.wo(a)),
                 "down+res": (lambda: ours.w_down(f, residual=x0), lambda: x0 + ref.w_down(f))}
    for name, (mine, peer) in calls.items():
        served = {}
        for cublas in ("1", "0"):
            gemm._replays.clear()
            routed(mine, cublas)(), routed(mine, cublas)()
            served[cublas] = sorted({type(v).__name__ for v in gemm._replays.values()})
        for r in range(2):
            us = host_us_alternating([peer, routed(mine, "1"), routed(mine, "0")], calls=300, runs=7)
            print(f"{tag} {name:16s} round {r}: torch {us[0]:6.1f} us | cuBLAS route {us[1]:6.1f} us "
                  f"{served['1']} | kernels {us[2]:6.1f} us {served['0']}", flush=True)
    fns = [lambda: ref(x0), routed(lambda: ours(x0), "1"), routed(lambda: ours(x0), "0")]
    for r in range(3):
        ms = loop_ms_alternating(fns, rep_ms=300)
        print(f"{tag} fwd round {r}: torch eager {ms[0] * 1e3:.1f} us | tilewright cuBLAS route {ms[1] * 1e3:.1f} us "
              f"({ms[0] / ms[1]:.3f}x torch) | kernels {ms[2] * 1e3:.1f} us ({ms[0] / ms[2]:.3f}x torch)", flush=True)
    del ref, ours
