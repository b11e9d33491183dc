"""Where an eager call's host time goes (issue 14): each part of tilewright.linear's and flash_attention's replayed
call timed alone on the device's CPU, beside torch's op, then cProfile of 20,000 calls of each.
Run: PYTHONPATH=src python perf/results/h200/host/host_parts_2026-11-29.py > $OUT/host_parts.txt"""
import cProfile
import io
import pstats
import statistics
import time

import torch
import torch.nn.functional as F

import tilewright
from tilewright.bench.host import host_us_alternating
from tilewright.ops import _fast, attention as A, gemm as G

dev = torch.device("cuda")
bf = torch.bfloat16
print(torch.cuda.get_device_name(), torch.__version__)
x = torch.randn(1000, 1536, device=dev, dtype=bf)
w = torch.randn(3000, 1536, device=dev, dtype=bf) / 40
q, k, v = (torch.randn(2, 16, 512, 128, device=dev, dtype=bf) for _ in range(3))
for _ in range(3):
    tilewright.linear(x, w)
    tilewright.flash_attention(q, k, v, causal=True)
torch.cuda.synchronize()
key = G._replay_key(x, w, None, None, None, None, None, "linear")
replay = G._replays[key]
akey = A._replay_key(q, k, v, True, None, None, "top_left", None)
areplay = A._replays[akey]
print("linear replay:", type(replay).__name__, "| attention replay:", type(areplay).__name__)


def pure(fn, n=20000, runs=7):
    best = []
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(best)


rows = [("tilewright.linear", "F.linear", lambda: tilewright.linear(x, w), lambda: F.linear(x, w)),
        ("AtenGemm replay", "F.linear", lambda: replay(x, w, None, None), lambda: F.linear(x, w)),
        ("flash_attention", "SDPA", lambda: tilewright.flash_attention(q, k, v, causal=True),
         lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)),
        ("AtenAttention replay", "empty_strided", lambda: areplay(q, k, v),
         lambda: torch.empty_strided((1000, 3000), (3000, 1), dtype=bf, device=dev))]
for a, b, fa, fb in rows:
    for _ in range(3):
        ta, tb = host_us_alternating([fa, fb])
        print(f"queued: {a:24s} {ta:7.2f} us | {b:16s} {tb:7.2f} us")
for name, fn in [("G._replay_key", lambda: G._replay_key(x, w, None, None, None, None, None, "linear")),
                 ("A._replay_key", lambda: A._replay_key(q, k, v, True, None, None, "top_left", None)),
                 ("_fast.state", _fast.state), ("_fast.sig(x)", lambda: _fast.sig(x)),
                 ("_fast.eligible(q,k,v)", lambda: _fast.eligible(q, k, v)),
                 ("dict get", lambda: G._replays.get(key)), ("x.data_ptr", x.data_ptr),
                 ("torch.cuda.current_stream raw", lambda: torch._C._cuda_getCurrentRawStream(0))]:
    print(f"pure: {name:30s} {pure(fn):7.3f} us")
for name, fn in [("linear", lambda: tilewright.linear(x, w)),
                 ("flash_attention", lambda: tilewright.flash_attention(q, k, v, causal=True))]:
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for i in range(20000):
        fn()
        if i % 200 == 199:
            torch.cuda.synchronize()
    prof.disable()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(18)
    print(f"== cProfile, 20,000 calls of {name}\n" + s.getvalue())
