"""Attention backward through the public op: Triton dK/dV vs the sm_90a dK/dV kernel variants given as arguments
(env switch; default: a), cuDNN beside. Usage: python bwd_cuda_bench.py [a] [b] [b+kernel] [b+atomic]
("+kernel": the CUDA dQ kernel, "+atomic": dQ in the dK/dV pass; plain: Triton's dQ). With "a" it is the run of
bwd_cuda_dkdv_2026-11-27_0455.txt (session 10's script, which this one replaces); bwd_cuda_dq_2026-11-27_0700.txt
holds session 11's runs. The "triton" baseline sets TILEWRIGHT_CUDA_ATTN_BWD=0."""
import os, statistics, sys
import torch, triton
import torch.nn.functional as F
import tilewright
from torch.nn.attention import sdpa_kernel, SDPBackend
rows = []
for (B, Hq, Hkv, S, D, causal) in ((8, 16, 4, 2048, 128, True), (2, 16, 16, 8192, 128, True), (2, 16, 16, 4096, 128, False),
                                   (4, 32, 8, 2048, 128, True), (2, 8, 8, 8192, 64, False), (8, 16, 16, 2048, 64, True)):
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for H in (Hq, Hkv, Hkv))
    do = torch.randn(B, Hq, S, D, device="cuda", dtype=torch.bfloat16)
    res = {}
    # dK/dV kernel variants to time (a: one consumer warpgroup, b: two), each with a dQ mode after "+"
    variants = sys.argv[1:] or ["a"]
    for name, env, var in (("triton", "0", "a"), *((f"cuda_dkdv_{v}", "1", v) for v in variants)):
        os.environ["TILEWRIGHT_CUDA_ATTN_BWD"] = env
        os.environ["TILEWRIGHT_CUDA_ATTN_BWD_VARIANT"] = var.split("+")[0]
        os.environ["TILEWRIGHT_CUDA_ATTN_BWD_DQ"] = var.split("+")[1] if "+" in var else "triton"
        o = tilewright.flash_attention(q, k, v, causal=causal)
        f = lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
        g = f()
        res[name] = triton.testing.do_bench(f, warmup=25, rep=200, return_mode="median")
        res[name + "_g"] = g
    kk, vv = k.repeat_interleave(Hq // Hkv, 1).detach().requires_grad_(), v.repeat_interleave(Hq // Hkv, 1).detach().requires_grad_()
    qq = q.detach().requires_grad_()
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        o = F.scaled_dot_product_attention(qq, kk, vv, is_causal=causal)
        f = lambda: torch.autograd.grad(o, (qq, kk, vv), do, retain_graph=True)
        f()
        res["cudnn"] = triton.testing.do_bench(f, warmup=25, rep=200, return_mode="median")
    line = f"B{B} {Hq}/{Hkv} S{S} D{D} causal={causal}: bwd triton {res['triton']:.3f} ms, cuDNN {res['cudnn']:.3f} ms"
    for v in variants:
        c = res[f"cuda_dkdv_{v}"]
        diff = max((a.float() - b.float()).abs().max().item() for a, b in zip(res["triton_g"], res[f"cuda_dkdv_{v}_g"]))
        line += (f" | cuda dK/dV {v} {c:.3f} ms ({res['triton'] / c:.2f}x triton, {res['cudnn'] / c:.2f}x cuDNN;"
                 f" max |grad diff| vs triton {diff:.3g})")
    print(line, flush=True)
