"""Attention backward through the public op: Triton dK/dV vs the sm_90a dK/dV kernel (env switch), cuDNN beside."""
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
    for name, env in (("triton", "0"), ("cuda_dkdv", "1")):
        os.environ["TILEWRIGHT_CUDA_ATTN_BWD"] = env
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
    diff = max((a.float() - b.float()).abs().max().item() for a, b in zip(res["triton_g"], res["cuda_dkdv_g"]))
    print(f"B{B} {Hq}/{Hkv} S{S} D{D} causal={causal}: bwd triton {res['triton']:.3f} ms, cuda dK/dV {res['cuda_dkdv']:.3f} ms "
          f"({res['triton'] / res['cuda_dkdv']:.2f}x), cuDNN {res['cudnn']:.3f} ms (ours/cuDNN {res['cudnn'] / res['cuda_dkdv']:.2f}x); "
          f"max |grad diff| triton vs cuda {diff:.3g}", flush=True)
