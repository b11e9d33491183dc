import os, sys, time
import torch
sys.path.insert(0, "src")
from tilewright.triton_kernels import kvcache_attention as kv
from tilewright.bench.decode import _paged, copy_bandwidth_gbps
from tilewright.bench.common import graph_ms
import warnings; warnings.filterwarnings("ignore")
out = os.environ.get("OUT", ".")
bw = copy_bandwidth_gbps(); sms = 132
print(f"copy bw {bw:.0f}", flush=True)
res = []
for B, S in ((1, 1024), (1, 8192), (8, 1024), (8, 4096), (8, 32768), (64, 1024), (1, 131072)):
    Hq, Hkv, D = 32, 8, 128
    q = torch.randn(B, 1, Hq, D, device="cuda", dtype=torch.bfloat16)
    kc = torch.randn(B, S, Hkv, D, device="cuda", dtype=torch.bfloat16); vc = torch.randn_like(kc)
    sl = torch.full((B,), S, dtype=torch.int32, device="cuda")
    kvb = 2 * kc.numel() * 2
    BH = B * Hkv
    caches = {0: (kc, vc, None), 16: _paged(kc, vc, 16), 256: _paged(kc, vc, 256)}
    line = []
    for page, (k_, v_, tb) in caches.items():
        for m in (1, 2, 3):
            sp = max(1, min(m * sms // BH, S // 64))
            for cfg in (dict(block_n=64, num_warps=4, num_stages=3), dict(block_n=64, num_warps=4, num_stages=4), dict(block_n=128, num_warps=4, num_stages=3), dict(block_n=64, num_warps=8, num_stages=3)):
                for skip in (False, True):
                    if skip and (page or m > 1):
                        continue
                    c = dict(cfg, skip_combine=skip)
                    ms = graph_ms(lambda: kv.kvcache_attention(q, k_, v_, sl, tb, num_splits=sp, config=c), calls=10, replays=9)
                    res.append(dict(B=B, S=S, page=page, mult=m, splits=sp, skip=skip, **cfg, us=ms * 1e3, frac=kvb / ms / 1e6 / bw))
        best = min((r for r in res if r["B"] == B and r["S"] == S and r["page"] == page and not r["skip"]), key=lambda r: r["us"])
        line.append(f"page{page}: best {best['us']:.1f}us m{best['mult']} sp{best['splits']} {best['block_n']}/{best['num_warps']}/{best['num_stages']}")
    base = [r for r in res if r["B"] == B and r["S"] == S and r["page"] == 0 and r["mult"] == 1 and r["block_n"] == 64 and r["num_stages"] == 3 and r["num_warps"] == 4]
    line.append("combine cost: " + " ".join(f"{'split only' if r['skip'] else 'both'}={r['us']:.1f}" for r in base))
    print(f"B{B} S{S} floor {kvb / bw / 1e3:.1f}us | " + " | ".join(line), flush=True)
    del caches, kc, vc; torch.cuda.empty_cache()
import pandas as pd
pd.DataFrame(res).to_csv(f"{out}/sweep3.csv", index=False)
