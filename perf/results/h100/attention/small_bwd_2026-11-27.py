"""Attention backward through the op at small / mid shapes: Triton (TILEWRIGHT_CUDA_ATTN_BWD=0) vs the default (CUDA
where it wins, bound launches) vs cuDNN, interleaved do_bench medians."""
import os
import torch, triton
import torch.nn.functional as F
import tilewright
from torch.nn.attention import sdpa_kernel, SDPBackend
for (B, Hq, Hkv, Sq, Skv, D, causal) in ((4, 16, 16, 512, 512, 64, True), (4, 16, 16, 512, 512, 64, False),
                                          (2, 16, 16, 512, 4096, 128, False), (1, 16, 4, 512, 512, 128, True),
                                          (8, 16, 4, 2048, 2048, 128, True)):
    q = torch.randn(B, Hq, Sq, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(B, Hkv, Skv, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    do = torch.randn(B, Hq, Sq, D, device="cuda", dtype=torch.bfloat16)
    res = {}
    for rep in range(3):
        for name, env in (("triton", "0"), ("default", "")):
            os.environ["TILEWRIGHT_CUDA_ATTN_BWD"] = env
            o = tilewright.flash_attention(q, k, v, causal=causal)
            f = lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
            res.setdefault(name, []).append(triton.testing.do_bench(f, warmup=10, rep=100, return_mode="median"))
    os.environ["TILEWRIGHT_CUDA_ATTN_BWD"] = ""
    g = Hq // Hkv
    kk, vv = (t.detach().repeat_interleave(g, 1).requires_grad_() for t in (k, v))
    qq = q.detach().requires_grad_()
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        o = F.scaled_dot_product_attention(qq, kk, vv, is_causal=causal)
        f = lambda: torch.autograd.grad(o, (qq, kk, vv), do, retain_graph=True)
        res["cudnn"] = [triton.testing.do_bench(f, warmup=10, rep=100, return_mode="median")]
    m = {k_: sorted(v_)[len(v_) // 2] for k_, v_ in res.items()}
    print(f"B{B} {Hq}/{Hkv} Sq{Sq} Skv{Skv} D{D} causal={causal}: bwd triton {m['triton']:.4f} ms | default "
          f"{m['default']:.4f} ms ({m['triton'] / m['default']:.2f}x triton, {m['cudnn'] / m['default']:.2f}x cuDNN) | "
          f"cuDNN {m['cudnn']:.4f} ms", flush=True)
