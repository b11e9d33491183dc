"""A/B of the attention kernels' CTA order (longest causal tiles first over every head vs within each head), run once
per source tree: `PYTHONPATH=<tree>/src python heavy_first_ab_2026-11-28.py <label>`. Forward and forward + backward
through the public op on tilewright's own kernels (TILEWRIGHT_ATEN_BELOW=0: no SDPA route), cuDNN (K / V repeated
for GQA) in the same process; medians of triton's do_bench. One line per row: label, row, tw fwd, tw fwd+bwd,
cuDNN fwd, cuDNN fwd+bwd (ms)."""
import os
import sys

os.environ["TILEWRIGHT_ATEN_BELOW"] = "0"
import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

import tilewright

label = sys.argv[1]
ROWS = ((2, 16, 16, 8192, 128, True), (1, 16, 16, 16384, 128, True), (4, 32, 8, 2048, 128, True),
        (8, 16, 4, 2048, 128, True), (2, 16, 16, 4096, 64, True), (1, 28, 4, 3000, 96, True),
        (2, 16, 16, 8192, 128, False))
torch.manual_seed(0)
for (B, Hq, Hkv, S, D, causal) in ROWS:
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for H in (Hq, Hkv, Hkv))
    do = torch.randn(B, Hq, S, D, device="cuda", dtype=torch.bfloat16)
    kk = k.detach().repeat_interleave(Hq // Hkv, 1).requires_grad_()
    vv = v.detach().repeat_interleave(Hq // Hkv, 1).requires_grad_()

    def fwd(fn, *args):
        def run():
            with torch.no_grad():
                fn(*args)
        return run

    def fb(fn, *args):
        def run():
            torch.autograd.grad(fn(*args), args, do)
        return run

    def tw(q, k, v):
        return tilewright.flash_attention(q, k, v, causal=causal)

    def sd(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    times = [triton.testing.do_bench(f(tw, q, k, v), warmup=50, rep=300, return_mode="median") for f in (fwd, fb)]
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        times += [triton.testing.do_bench(f(sd, q, kk, vv), warmup=50, rep=300, return_mode="median")
                  for f in (fwd, fb)]
    print(f"{label},B{B}_{Hq}/{Hkv}_S{S}_D{D}_{'causal' if causal else 'full'}," + ",".join(f"{t:.4f}" for t in times),
          flush=True)
    del q, k, v, kk, vv, do
