"""Attention backward through the public op at head dims padded onto the CUDA 128 build: Triton's backward
(TILEWRIGHT_CUDA_ATTN_BWD=0) vs the sm_90a kernels forced on (=1; variant b, dQ in the pass), cuDNN (SDPA) beside;
hdim 128 as the unpadded reference."""
import os
import torch, triton
import torch.nn.functional as F
import tilewright
from torch.nn.attention import sdpa_kernel, SDPBackend
os.environ["TILEWRIGHT_ATEN_BELOW"] = "0"
for (B, Hq, Hkv, S, D, causal) in ((2, 16, 16, 4096, 128, True), (2, 16, 16, 4096, 96, True), (1, 28, 4, 3000, 96, True),
                                   (8, 16, 4, 2048, 96, True), (2, 16, 16, 4096, 80, False), (4, 16, 16, 2048, 112, True),
                                   (2, 16, 16, 4096, 96, False)):
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for H in (Hq, Hkv, Hkv))
    do = torch.randn(B, Hq, S, D, device="cuda", dtype=torch.bfloat16)
    res = {}
    for name, env in (("triton", "0"), ("cuda", "1")):
        os.environ["TILEWRIGHT_CUDA_ATTN_BWD"] = env
        o = tilewright.flash_attention(q, k, v, causal=causal)
        f = lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
        res[name + "_g"] = f()
        res[name] = triton.testing.do_bench(f, warmup=25, rep=200, return_mode="median")
    kk = k.repeat_interleave(Hq // Hkv, 1).detach().requires_grad_()
    vv = v.repeat_interleave(Hq // Hkv, 1).detach().requires_grad_()
    qq = q.detach().requires_grad_()
    try:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            o = F.scaled_dot_product_attention(qq, kk, vv, is_causal=causal)
            f = lambda: torch.autograd.grad(o, (qq, kk, vv), do, retain_graph=True)
            f()
            res["cudnn"] = triton.testing.do_bench(f, warmup=25, rep=200, return_mode="median")
    except RuntimeError as e:
        res["cudnn"] = float("nan")
    diff = max((a.float() - b.float()).abs().max().item() for a, b in zip(res["triton_g"], res["cuda_g"]))
    print(f"B{B} {Hq}/{Hkv} S{S} D{D} causal={causal}: bwd triton {res['triton']:.3f} ms | cuda {res['cuda']:.3f} ms "
          f"({res['triton'] / res['cuda']:.2f}x triton, {res['cudnn'] / res['cuda']:.2f}x cuDNN) | cuDNN "
          f"{res['cudnn']:.3f} ms | max |grad diff| cuda vs triton {diff:.3g}", flush=True)
