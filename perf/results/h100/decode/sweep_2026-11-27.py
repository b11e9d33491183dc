"""kvcache kernels: device time (graph_ms: cold L2, no host) per launch shape and split count; host cost per call."""
import os, sys, time
import torch
sys.path.insert(0, "src")
import tilewright
from tilewright.triton_kernels import kvcache_attention as kv
from tilewright.bench.decode import _paged, copy_bandwidth_gbps, _DEFAULT
from tilewright.bench.common import graph_ms, loop_ms_alternating
from torch.nn.attention import SDPBackend, sdpa_kernel
import warnings; warnings.filterwarnings("ignore")
out = os.environ.get("OUT", ".")
bw = copy_bandwidth_gbps()
sms = torch.cuda.get_device_properties(0).multi_processor_count
print(f"copy bw {bw:.0f} GB/s, {sms} SMs", flush=True)
rows = [r[:4] for r in _DEFAULT] + [(8, 64, 8, 32768)]
cfgs = [(64, 4, 3), (64, 4, 4), (128, 4, 3), (64, 8, 3), (32, 4, 4), (128, 8, 3)]
res = []
t0 = time.time()
def sdpa(q, kc, vc, be):
    with sdpa_kernel(be):
        return torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), kc.transpose(1, 2), vc.transpose(1, 2), enable_gqa=True)
for B, Hq, Hkv, S in rows:
    D = 128
    q = torch.randn(B, 1, Hq, D, device="cuda", dtype=torch.bfloat16)
    kc = torch.randn(B, S, Hkv, D, device="cuda", dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    sl = torch.full((B,), S, dtype=torch.int32, device="cuda")
    ref = sdpa(q, kc, vc, SDPBackend.FLASH_ATTENTION).transpose(1, 2)
    kvb = 2 * kc.numel() * 2
    d = kv.default_splits(B, Hkv, S, q.device)
    BH = B * Hkv
    cands = sorted({max(1, d // 2), d, 2 * d, max(1, sms // BH), max(1, 2 * sms // BH), max(1, 3 * sms // BH), max(1, 4 * sms // BH)})
    cands = [c for c in cands if c <= 132 and S / c >= 64]
    best = None
    for bn, w, st in cfgs:
        cfg = dict(block_n=bn, num_warps=w, num_stages=st)
        for sp in cands:
            fn = lambda: kv.kvcache_attention(q, kc, vc, sl, None, num_splits=sp, config=cfg)
            o, _ = fn(); err = (o.float() - ref.float()).abs().max().item()
            ms = graph_ms(fn, calls=10, replays=7)
            res.append(dict(B=B, Hq=Hq, S=S, page=0, splits=sp, default=d, block_n=bn, warps=w, stages=st, us=ms * 1e3, frac=kvb / ms / 1e6 / bw, err=err))
            if best is None or ms < best[0]: best = (ms, cfg, sp)
    line = {}
    for page in (16, 256):
        pk, pv, tb = _paged(kc, vc, page)
        for tag, cfg, sp in (("best", best[1], best[2]), ("dflt", {}, d)):
            fn = lambda: kv.kvcache_attention(q, pk, pv, sl, tb, num_splits=sp, config=cfg)
            o, _ = fn(); err = (o.float() - ref.float()).abs().max().item()
            ms = graph_ms(fn, calls=10, replays=7)
            line[f"p{page}{tag}"] = ms * 1e3
            res.append(dict(B=B, Hq=Hq, S=S, page=page, splits=sp, default=d, block_n=cfg.get("block_n", 64), warps=cfg.get("num_warps", 4), stages=cfg.get("num_stages", 3), us=ms * 1e3, frac=kvb / ms / 1e6 / bw, err=err))
        del pk, pv
    for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION), ("eff", SDPBackend.EFFICIENT_ATTENTION)):
        try:
            line[name] = graph_ms(lambda: sdpa(q, kc, vc, be), calls=10, replays=7) * 1e3
        except Exception as e:
            line[name] = float("nan")
    line["op"] = graph_ms(lambda: tilewright.flash_attention_with_kvcache(q, kc, vc, sl), calls=10, replays=7) * 1e3
    dflt = [r for r in res if r["B"] == B and r["S"] == S and r["Hq"] == Hq and r["page"] == 0 and r["splits"] == d and (r["block_n"], r["warps"], r["stages"]) == (64, 4, 3)][0]["us"]
    print(f"B{B} {Hq}/{Hkv} S{S}: floor {kvb / bw / 1e3:.1f}us default({d}) {dflt:.1f} best {best[0]*1e3:.1f}us {best[1]} sp {best[2]} | "
          + " ".join(f"{k}={v:.1f}" for k, v in line.items()) + f"  t={time.time()-t0:.0f}s", flush=True)
    if (B, S) == (8, 4096):
        fns = [lambda: tilewright.flash_attention_with_kvcache(q, kc, vc, sl), lambda: tilewright.flash_attention_with_kvcache(q, kc, vc, sl, validate=False),
               lambda: sdpa(q, kc, vc, SDPBackend.CUDNN_ATTENTION), lambda: sdpa(q, kc, vc, SDPBackend.FLASH_ATTENTION)]
        for f in fns: f()
        # host: many calls queued; small cache so the GPU is not the bound
        qs, kcs, vcs, sls = q[:1], kc[:1, :256], vc[:1, :256], sl[:1] * 0 + 256
        fns_s = [lambda: tilewright.flash_attention_with_kvcache(qs, kcs, vcs, sls), lambda: tilewright.flash_attention_with_kvcache(qs, kcs, vcs, sls, validate=False),
                 lambda: sdpa(qs, kcs, vcs, SDPBackend.CUDNN_ATTENTION), lambda: sdpa(qs, kcs, vcs, SDPBackend.FLASH_ATTENTION)]
        ts = loop_ms_alternating(fns_s, rep_ms=300)
        print("host per call (us) B1 S256: op validate, op no-validate, sdpa cudnn, sdpa flash:", [round(t * 1e3, 1) for t in ts], flush=True)
        import cProfile, pstats
        pr = cProfile.Profile(); pr.enable()
        for _ in range(300): tilewright.flash_attention_with_kvcache(qs, kcs, vcs, sls, validate=False)
        pr.disable(); torch.cuda.synchronize()
        pstats.Stats(pr).sort_stats("tottime").print_stats(14)
    del kc, vc; torch.cuda.empty_cache()
import pandas as pd
pd.DataFrame(res).to_csv(f"{out}/sweep_decode2.csv", index=False)
