"""hdim-64 forward with a share of the exponentials on the FMA pipe (TW_EXP_FMA = every k-th 8-column chunk),
kernel launches into preallocated out / lse, cuDNN (SDPA) in the same process; median ms over do_bench."""
import dataclasses
import torch, triton
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
from tilewright.cuda_fallback import attention_sm90 as ca
rows = [(2, 8, 8, 8192, 64, False), (2, 8, 8, 8192, 64, True), (4, 16, 16, 2048, 64, True),
        (1, 16, 16, 16384, 64, True), (2, 16, 16, 8192, 128, True)]
for (B, H, Hkv, S, D, causal) in rows:
    q, k, v = (torch.randn(B, h, S, D, device="cuda", dtype=torch.bfloat16) for h in (H, Hkv, Hkv))
    out = torch.empty_like(q); lse = torch.empty(B, H, S, device="cuda")
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        c = triton.testing.do_bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), warmup=25, rep=300,
                                    return_mode="median")
    res = []
    for kk in (0, 8, 4, 2, 0):
        var = dataclasses.replace(ca.VARIANTS["c"], exp_fma=kk)
        t = triton.testing.do_bench(lambda: ca.launch_attention(q, k, v, out, lse, causal, None, var), warmup=25,
                                    rep=300, return_mode="median")
        res.append(f"k{kk} {t:.4f} ({c / t:.3f}x)")
    print(f"B{B} {H}/{Hkv} S{S} D{D} causal={int(causal)}: cuDNN {c:.4f} ms | " + " | ".join(res), flush=True)
