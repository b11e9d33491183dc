import torch, triton, tilewright
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
bench = lambda f: triton.testing.do_bench(f, warmup=5, rep=40, return_mode="median")
print("card", torch.cuda.get_device_name(), flush=True)
for B, Hq, Hkv, S, D, causal in [(1, 28, 4, 3000, 96, True), (2, 16, 16, 4096, 96, False), (4, 32, 8, 2048, 80, True), (2, 16, 16, 4096, 160, True)]:
    q = torch.randn(B, Hq, S, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(B, Hkv, S, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(B, Hkv, S, D, device="cuda", dtype=torch.bfloat16)
    r = {}
    for be in ("triton", "cuda", None):
        f = lambda: tilewright.flash_attention(q, k, v, causal=causal, backend=be)
        try:
            f(); r[str(be)] = bench(f)
        except Exception as e:
            r[str(be)] = repr(e)[:100]
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        f = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=Hq != Hkv)
        try:
            f(); r["cudnn"] = bench(f)
        except Exception as e:
            r["cudnn"] = repr(e)[:100]
    print(B, Hq, Hkv, S, D, causal, {a: (round(b, 4) if isinstance(b, float) else b) for a, b in r.items()}, flush=True)
