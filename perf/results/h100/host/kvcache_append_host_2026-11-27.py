import time, torch, sys
sys.path.insert(0, "src")
import tilewright
from torch.nn.functional import scaled_dot_product_attention as sdpa
B, H, Hkv, S, D = 2, 16, 4, 512, 128
q = torch.randn(B, 1, H, D, device="cuda", dtype=torch.bfloat16)
kc = torch.randn(B, S + 8, Hkv, D, device="cuda", dtype=torch.bfloat16); vc = torch.randn_like(kc)
kn = torch.randn(B, 1, Hkv, D, device="cuda", dtype=torch.bfloat16); vn = torch.randn_like(kn)
sl = torch.full((B,), S, dtype=torch.int32, device="cuda")
def t(f, n=2000):
    for _ in range(50): f()
    torch.cuda.synchronize(); t0 = time.perf_counter()
    for _ in range(n): f()
    el = time.perf_counter() - t0; torch.cuda.synchronize(); return el / n * 1e6
def torch_append():
    kc[torch.arange(B, device="cuda"), sl.long()] = kn[:, 0]; vc[torch.arange(B, device="cuda"), sl.long()] = vn[:, 0]
    return sdpa(q.transpose(1, 2), kc.transpose(1, 2), vc.transpose(1, 2), enable_gqa=True)
for _ in range(3):
    print("host us: append+attend", round(t(lambda: tilewright.flash_attention_with_kvcache(q, kc, vc, sl, k=kn, v=vn)), 1),
          "| attend only", round(t(lambda: tilewright.flash_attention_with_kvcache(q, kc, vc, sl)), 1),
          "| sdpa", round(t(lambda: sdpa(q.transpose(1, 2), kc.transpose(1, 2), vc.transpose(1, 2), enable_gqa=True)), 1),
          "| torch index_put x2 + sdpa", round(t(torch_append), 1))
