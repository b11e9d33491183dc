"""A/B of the dK / dV kernel's row statistics, one source tree per process: `PYTHONPATH=<tree>/src python
stats_ab_2026-11-29.py <label> [--build-only]`. Times `attention_bwd_sm90.launch_dkdv` alone (variant b, dQ in the
pass) on fixed inputs - the forward's out / LSE from tilewright, delta = rowsum(dO * O) - with triton's do_bench
(median); a tree whose launch_dkdv takes ``stats`` gets them packed once, outside the timing. Before timing, one small
causal case is checked against float64 autograd (dK, dV, dQ max error / max |ref|). One CSV line per row: label, row,
ms, dk_sum, dv_sum (the sums compare the trees' outputs on identical inputs)."""
import inspect
import math
import sys

import torch
import triton

import tilewright
from tilewright.cuda_fallback import attention_bwd_sm90 as cb

label = sys.argv[1]
build_only = "--build-only" in sys.argv
ROWS = ((2, 16, 16, 8192, 128, True), (1, 16, 16, 16384, 128, True), (4, 32, 8, 2048, 128, True),
        (8, 16, 4, 2048, 128, True), (2, 16, 16, 4096, 64, True), (1, 28, 4, 3000, 96, True),
        (2, 16, 16, 8192, 128, False))
takes_stats = "stats" in inspect.signature(cb.launch_dkdv).parameters


def inputs(B, Hq, Hkv, S, D, causal, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=g) for H in (Hq, Hkv, Hkv))
    do = torch.randn(B, Hq, S, D, device="cuda", dtype=torch.bfloat16, generator=g)
    out, lse = tilewright.flash_attention(q, k, v, causal=causal, return_lse=True)
    delta = (do.float() * out.float()).sum(-1).contiguous()
    return q, k, v, do, lse.contiguous(), delta


def run_dkdv(q, k, v, do, lse, delta, causal):
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    acc = torch.zeros(q.shape, device="cuda", dtype=torch.float32)
    kw = {"stats": cb.pack_statistics(lse, delta)} if takes_stats else {}
    scale = 1.0 / math.sqrt(q.shape[-1])

    def launch():
        cb.launch_dkdv(do, q, k, v, lse, delta, dk, dv, causal, scale, "b", dq_accum=acc, **kw)
    return launch, dk, dv, acc


# correctness: one small causal GQA case with a tail, against float64 autograd
B, Hq, Hkv, S, D = 1, 4, 2, 1000, 128
q, k, v, do, lse, delta = inputs(B, Hq, Hkv, S, D, True, 1)
launch, dk, dv, acc = run_dkdv(q, k, v, do, lse, delta, True)
launch()
torch.cuda.synchronize()
qr, kr, vr = (t.double().requires_grad_() for t in (q, k, v))
ref = torch.nn.functional.scaled_dot_product_attention(qr, kr.repeat_interleave(2, 1), vr.repeat_interleave(2, 1),
                                                       is_causal=True)
gq, gk, gv = torch.autograd.grad(ref, (qr, kr, vr), do.double())
err = [((a.double() - r).abs().max() / r.abs().max()).item() for a, r in ((dk, gk), (dv, gv), (acc, gq))]
print(f"{label},check_1x4/2x1000x128_causal,dk {err[0]:.2e},dv {err[1]:.2e},dq {err[2]:.2e}", flush=True)
if build_only:
    for (B, Hq, Hkv, S, D, causal) in ROWS:
        q, k, v, do, lse, delta = inputs(B, Hq, Hkv, min(S, 256), D, causal, 0)
        run_dkdv(q, k, v, do, lse, delta, causal)[0]()
    torch.cuda.synchronize()
    sys.exit(0)
for (B, Hq, Hkv, S, D, causal) in ROWS:
    q, k, v, do, lse, delta = inputs(B, Hq, Hkv, S, D, causal, 0)
    launch, dk, dv, acc = run_dkdv(q, k, v, do, lse, delta, causal)
    ms = triton.testing.do_bench(launch, warmup=50, rep=400, return_mode="median")
    print(f"{label},B{B}_{Hq}/{Hkv}_S{S}_D{D}_{'causal' if causal else 'full'},{ms:.4f},"
          f"{dk.float().abs().sum().item():.6e},{dv.float().abs().sum().item():.6e}", flush=True)
    del q, k, v, do, lse, delta, dk, dv, acc
