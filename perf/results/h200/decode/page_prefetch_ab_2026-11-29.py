"""A/B of PAGE_PREFETCH (triton_kernels/kvcache_attention.py; issue 16: paged decode within 5% of contiguous decode
on the same rows) on H200: paged caches (pages of 16 and 256, shuffled) against the contiguous default, GQA 32/8,
D 128, bf16, rows B 1 / 8 / 64 x Skv 1k / 8k / 32k, CUDA-graph replays interleaved per row (cold L2,
bench.common.graph_ms_alternating). Written in session 29, not yet run.

Why: Triton 3.6's pipeliner compiles the default paged loop (page lookup inside the step) with a single K / V
buffer at num_stages 3 or 4 - the table load takes a stage of its own - so every step waits out a whole K / V round
trip (AOT sm_90 TTGIR; tests/test_kvcache.py checks the shared memory). Providers per page size:
  default          the paged default (64-key steps, 4 stages: one K / V buffer)
  s5               the same lookup at 5 stages (two K / V buffers, the table load two steps ahead): the fix that
                   needs no kernel change, for comparison
  prefetch         PAGE_PREFETCH at its ring (3 stages: two K / V buffers, 70 KB, ~three programs per SM fit)
  prefetch_s4      PAGE_PREFETCH at 4 stages (three buffers, 104 KB: two programs per SM)
  prefetch_cshape  PAGE_PREFETCH at the contiguous launch's shape (split count, key step, stages)
Checks each provider's output against the contiguous one (max |diff| <= 2e-2) and reports whether prefetch equals
default bit for bit (only addressing differs). Prints a line per row, CSV lines, and per provider the paged /
contiguous ratios (min / geomean / max) and prefetch's ratio to the default; writes $OUT/page_prefetch_ab.csv.
Run: `PYTHONPATH=src python perf/results/h200/decode/page_prefetch_ab_2026-11-29.py` on one GPU."""
import csv
import math
import os
import time
import warnings

import torch

from tilewright.bench.common import graph_ms_alternating
from tilewright.bench.decode import _paged
from tilewright.triton_kernels import kvcache_attention as kv

warnings.filterwarnings("ignore")
out_dir = os.environ.get("OUT", ".")
dev = torch.device("cuda")
print(f"{torch.cuda.get_device_name()}: {torch.cuda.get_device_properties(0).multi_processor_count} SMs", flush=True)
ROWS = [(B, 32, 8, S, 128) for B in (1, 8, 64) for S in (1024, 8192, 32768)]
PAGES = (16, 256)
VARIANTS = ("default", "s5", "prefetch", "prefetch_s4", "prefetch_cshape")
res, bit_equal, t0 = [], {}, time.time()
for B, Hq, Hkv, S, D in ROWS:
    q = torch.randn(B, 1, Hq, D, device=dev, dtype=torch.bfloat16)
    kc = torch.randn(B, S, Hkv, D, device=dev, dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    sl = torch.full((B,), S, dtype=torch.int32, device=dev)
    c_splits, c_bn, c_stages = kv.launch_shape(B, Hkv, S, D, dev)[:3]
    configs = {"default": (None, {}), "s5": (None, {"num_stages": 5}), "prefetch": (None, {"page_prefetch": True}),
               "prefetch_s4": (None, {"page_prefetch": True, "num_stages": 4}),
               "prefetch_cshape": (c_splits, {"page_prefetch": True, "block_n": c_bn, "num_stages": c_stages})}
    fns = {"contiguous": lambda: kv.kvcache_attention(q, kc, vc, sl, None)}
    caches = []
    for page in PAGES:
        pk, pv, tb = _paged(kc, vc, page)
        caches.append((pk, pv, tb))
        for name, (splits, cfg) in configs.items():
            fns[f"p{page}_{name}"] = (lambda pk=pk, pv=pv, tb=tb, splits=splits, cfg=cfg:
                                      kv.kvcache_attention(q, pk, pv, sl, tb, num_splits=splits, config=cfg or None))
    want = fns["contiguous"]()[0].float()
    outs = {name: fn()[0] for name, fn in fns.items()}
    for name, o in outs.items():
        err = (o.float() - want).abs().max().item()
        assert err <= 2e-2, f"B{B} S{S} {name}: max |diff| {err:.3e} against contiguous"
    for page in PAGES:
        bit_equal[(B, S, page)] = torch.equal(outs[f"p{page}_prefetch"], outs[f"p{page}_default"])
    del outs
    times = dict(zip(fns, graph_ms_alternating(list(fns.values()), calls=10, replays=9)))
    base = times["contiguous"]
    for name, ms in times.items():
        res.append(dict(B=B, Hq=Hq, Hkv=Hkv, S=S, D=D, provider=name, us=round(ms * 1e3, 2),
                        vs_contiguous=round(ms / base, 4), splits_paged=kv.default_splits(B, Hkv, S, dev, paged=True),
                        splits_contiguous=c_splits))
    line = f"B{B} S{S}: contiguous {base * 1e3:.1f} us"
    for page in PAGES:
        line += f" | p{page} " + " ".join(f"{v} {times[f'p{page}_{v}'] / base:.3f}" for v in VARIANTS)
        line += f" (prefetch == default bit for bit: {bit_equal[(B, S, page)]})"
    print(line + f"; t={time.time() - t0:.0f}s", flush=True)
    kc = vc = caches = fns = None  # free the row's caches before the next row allocates its own
    torch.cuda.empty_cache()

fields = list(res[0])
print("\nCSV")
print(",".join(fields))
for r in res:
    print(",".join(str(r[f]) for f in fields))
with open(os.path.join(out_dir, "page_prefetch_ab.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=fields)
    w.writeheader()
    w.writerows(res)


def spread(xs):
    return f"min {min(xs):.3f} geomean {math.exp(sum(map(math.log, xs)) / len(xs)):.3f} max {max(xs):.3f}"


print("\nSummary: paged / contiguous per provider (issue 16's bar: <= 1.05 on every row)")
for page in PAGES:
    for v in VARIANTS:
        ratios = [r["vs_contiguous"] for r in res if r["provider"] == f"p{page}_{v}"]
        over = sum(x > 1.05 for x in ratios)
        print(f"  p{page}_{v:16s} {spread(ratios)}  rows over 1.05: {over}/{len(ratios)}")
    us = {(r["B"], r["S"], r["provider"]): r["us"] for r in res}
    for v in VARIANTS[1:]:
        ratios = [us[(B, S, f"p{page}_{v}")] / us[(B, S, f"p{page}_default")] for B, _, _, S, _ in ROWS]
        print(f"  p{page}_{v:16s} / p{page}_default: {spread(ratios)}")
print(f"prefetch == default bit for bit on {sum(bit_equal.values())}/{len(bit_equal)} (row, page) pairs")
