"""Sweep the kvcache split kernel's launch shape and split count on decode rows; print a table, write CSV."""
import itertools, os, sys, time
import torch, triton
sys.path.insert(0, "src")
import tilewright
from tilewright.triton_kernels import kvcache_attention as kv
from tilewright.bench.decode import _paged, copy_bandwidth_gbps

out = os.environ.get("OUT", ".")
bw = copy_bandwidth_gbps()
print(f"copy bw {bw:.0f} GB/s", flush=True)
rows = [(1, 32, 8, 8192), (8, 32, 8, 4096), (8, 32, 8, 32768), (64, 32, 8, 8192), (1, 32, 8, 131072), (8, 64, 8, 32768), (64, 32, 8, 1024)]
cfgs = [dict(block_n=bn, num_warps=w, num_stages=st) for bn in (32, 64, 128) for w in (4, 8) for st in (2, 3, 4)]
res = []
t0 = time.time()
for B, Hq, Hkv, S in rows:
    D = 128
    q = torch.randn(B, 1, Hq, D, device="cuda", dtype=torch.bfloat16)
    kc = torch.randn(B, S, Hkv, D, device="cuda", dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    sl = torch.full((B,), S, dtype=torch.int32, device="cuda")
    ref = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), kc.transpose(1, 2), vc.transpose(1, 2), enable_gqa=True).transpose(1, 2)
    kvb = 2 * kc.numel() * 2
    d = kv.default_splits(B, Hkv, S, q.device)
    paged = {None: (kc, vc, None), 16: _paged(kc, vc, 16), 256: _paged(kc, vc, 256)}
    best = None
    for cfg in cfgs:
        for sp in sorted({max(1, d // 2), d, d * 2, d * 4, min(64, max(1, S // 256))}):
            try:
                fn = lambda: kv.kvcache_attention(q, kc, vc, sl, None, num_splits=sp, config=cfg)
                o, _ = fn()
                err = (o.float() - ref.float()).abs().max().item()
                ms = triton.testing.do_bench(fn, warmup=5, rep=20, return_mode="median")
            except Exception as e:
                print("fail", B, S, cfg, sp, type(e).__name__, str(e)[:100]); continue
            g = kvb / ms / 1e6
            res.append(dict(B=B, Hq=Hq, S=S, page=0, splits=sp, default_splits=d, **cfg, ms=ms, gbps=g, frac=g / bw, err=err))
            if best is None or ms < best[0]:
                best = (ms, cfg, sp)
    # paged with the best and the default config
    for page in (16, 256):
        pk, pv, tb = paged[page]
        for cfg, sp in ((best[1], best[2]), (dict(block_n=64, num_warps=4, num_stages=3), d)):
            fn = lambda: kv.kvcache_attention(q, pk, pv, sl, tb, num_splits=sp, config=cfg)
            o, _ = fn(); err = (o.float() - ref.float()).abs().max().item()
            ms = triton.testing.do_bench(fn, warmup=5, rep=20, return_mode="median")
            g = kvb / ms / 1e6
            res.append(dict(B=B, Hq=Hq, S=S, page=page, splits=sp, default_splits=d, **cfg, ms=ms, gbps=g, frac=g / bw, err=err))
    # whole op: validate on / off; SDPA backends
    from torch.nn.attention import SDPBackend, sdpa_kernel
    extra = {}
    for v in (True, False):
        extra[f"op_validate={v}"] = triton.testing.do_bench(lambda: tilewright.flash_attention_with_kvcache(q, kc, vc, sl, validate=v), warmup=5, rep=30, return_mode="median")
    for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION), ("eff", SDPBackend.EFFICIENT_ATTENTION)):
        try:
            with sdpa_kernel(be):
                f = lambda: torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), kc.transpose(1, 2), vc.transpose(1, 2), enable_gqa=True)
                f()
                extra[name] = triton.testing.do_bench(f, warmup=5, rep=30, return_mode="median")
        except Exception as e:
            extra[name] = float("nan")
    print(f"B{B} {Hq}/{Hkv} S{S} D{D}: floor {kvb / bw / 1e6 * 1e3:.1f}us best {best[0]*1e3:.1f}us {best[1]} splits {best[2]} (default {d}) "
          + " ".join(f"{k}={v*1e3:.1f}us" for k, v in extra.items()) + f"  t={time.time()-t0:.0f}s", flush=True)
    for r in res:
        if r["S"] == S and r["B"] == B and r["page"]:
            print("   paged", r["page"], r["block_n"], r["num_warps"], r["num_stages"], r["splits"], f"{r['ms']*1e3:.1f}us {r['frac']:.2f}")
    del kc, vc, paged; torch.cuda.empty_cache()
import pandas as pd
df = pd.DataFrame(res); df.to_csv(f"{out}/sweep_decode.csv", index=False)
for (B, S), g in df[df.page == 0].groupby(["B", "S"]):
    print(B, S); print(g.sort_values("ms").head(6).to_string(index=False))
