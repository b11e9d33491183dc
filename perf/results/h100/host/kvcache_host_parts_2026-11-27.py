import time, torch, sys
sys.path.insert(0, "src")
import tilewright
from tilewright.ops import kvcache as K
from torch.nn.functional import scaled_dot_product_attention as sdpa
B, H, Hkv, S, D = 2, 16, 4, 512, 128
q = torch.randn(B, 1, H, D, device="cuda", dtype=torch.bfloat16)
kc = torch.randn(B, S, Hkv, D, device="cuda", dtype=torch.bfloat16); vc = torch.randn_like(kc)
sl = torch.full((B,), S, dtype=torch.int32, device="cuda")
def t(f, n=3000):
    for _ in range(50): f()
    torch.cuda.synchronize(); t0 = time.perf_counter()
    for _ in range(n): f()
    el = time.perf_counter() - t0; torch.cuda.synchronize()
    return el / n * 1e6
for rep in range(2):
    r = {}
    r["op validate=False"] = t(lambda: tilewright.flash_attention_with_kvcache(q, kc, vc, sl, validate=False))
    r["op"] = t(lambda: tilewright.flash_attention_with_kvcache(q, kc, vc, sl))
    r["sdpa"] = t(lambda: sdpa(q.transpose(1, 2), kc.transpose(1, 2), vc.transpose(1, 2), enable_gqa=True))
    key = K._replay_key(q, kc, vc, sl, None, None, True, None, None, None, None)
    rp = K._replays[key]
    r["replay_key"] = t(lambda: K._replay_key(q, kc, vc, sl, None, None, True, None, None, None, None))
    r["replay()"] = t(lambda: rp(q, kc, vc, sl, None))
    o = torch.empty(rp._parts_numel, device="cuda"); l = torch.empty(rp._parts_numel, device="cuda")
    r["split bound launch"] = t(lambda: rp._split(q.data_ptr(), kc.data_ptr(), vc.data_ptr(), sl.data_ptr(), sl.data_ptr(), o.data_ptr(), l.data_ptr()))
    out = torch.empty_like(q); lse = torch.empty(B, H, 1, device="cuda")
    r["combine bound launch"] = t(lambda: rp._combine(o.data_ptr(), l.data_ptr(), out.data_ptr(), lse.data_ptr()))
    r["torch.empty"] = t(lambda: torch.empty(rp._parts_numel, device="cuda"))
    r["check_values cached"] = t(lambda: K._check_values(sl, 0, S, None, B))
    print(" | ".join(f"{k} {v:.1f}" for k, v in r.items()), flush=True)
