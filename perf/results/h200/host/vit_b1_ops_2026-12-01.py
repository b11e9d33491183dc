"""Issue 14: which call of the ViT-L B1 x S512 eager forward (no_grad) costs its host lead over torch - each
tilewright call of TilewrightViTBlock.forward timed beside the torch code TorchViTBlock runs for it, on the step's own
tensors (N queued calls, no sync, interleaved: bench.host.host_us_alternating), and what served it (the replay cache
entry's type: AtenGemm / AtenAttention = torch's ops, Replay = a recorded kernel launch).

    PYTHONPATH=src python perf/results/h200/host/vit_b1_ops_2026-12-01.py > $OUT/vit_b1_ops.txt"""
import warnings

import torch
import torch.nn.functional as F

import tilewright
from tilewright import _native
from tilewright.bench import model
from tilewright.bench.host import host_us_alternating
from tilewright.ops import _fast, attention, gemm

warnings.filterwarnings("ignore")
print(torch.cuda.get_device_name(), torch.__version__, "| native:", _native.load(block=True) is not None, flush=True)
for tag in ("vit-small", "llama-small"):
    case = [c for c in model.SUITES["default"] if c.tag == tag][0]
    ref, ours = model.build_blocks(case, "cuda", torch.bfloat16)
    x0 = model.make_input(case, "cuda", torch.bfloat16)
    torch.set_grad_enabled(False)
    if tag == "vit-small":
        B, S, _ = x0.shape
        x = ours.patch_embed(x0, residual=ours.pos_embed)
        n1 = ours.norm1(x)
        q, k, v = ours._heads(ours.qkv(n1))
        o = tilewright.flash_attention(q, k, v, causal=False).transpose(1, 2).reshape(B, S, -1)
        n2 = ours.norm2(x)
        f1 = ours.fc1(n2)
        calls = {
            "patch_embed+pos": (lambda: ours.patch_embed(x0, residual=ours.pos_embed),
                                lambda: ref.patch_embed(x0) + ref.pos_embed),
            "qkv": (lambda: ours.qkv(n1), lambda: ref.qkv(n1)),
            "attention": (lambda: tilewright.flash_attention(q, k, v, causal=False),
                          lambda: F.scaled_dot_product_attention(q, k, v)),
            "proj+res": (lambda: ours.proj(o, residual=x), lambda: x + ref.proj(o)),
            "fc1+gelu": (lambda: ours.fc1(n2), lambda: F.gelu(ref.fc1(n2))),
            "fc2+res": (lambda: ours.fc2(f1, residual=x), lambda: x + ref.fc2(f1)),
            "layernorm (both)": (lambda: ours.norm1(x), lambda: ref.norm1(x)),
        }
    else:
        c = ours.dims
        calls = {"norm_qkv": (lambda: ours.attn_norm_qkv(x0),
                              lambda: F.linear(F.rms_norm(x0, (x0.shape[-1],), ours.attn_norm_qkv.norm_weight, c.eps),
                                               ours.attn_norm_qkv.weight))}
    for name, (mine, peer) in calls.items():
        _fast.invalidate()
        mine(), mine()
        served = sorted({type(v).__name__ for cache in (gemm._replays, attention._replays) for v in cache.values()})
        for r in range(2):
            us = host_us_alternating([peer, mine], calls=300, runs=7)
            print(f"{tag} {name:18s} round {r}: torch {us[0]:6.1f} us | tilewright {us[1]:6.1f} us "
                  f"(+{us[1] - us[0]:5.1f}) | served by {served}", flush=True)
    torch.set_grad_enabled(True)
    del ref, ours
