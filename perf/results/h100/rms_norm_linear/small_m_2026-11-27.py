"""Small-M rms_norm_linear: two-pass (rule forced on via TWO_PASS_MIN_FLOPS = 0) vs the fused kernel vs torch eager:
GPU time (CUDA graph, cold L2, interleaved) and host time per eager call (200 calls queued, no sync, median of 7)."""
import os, time, importlib, statistics, torch, torch.nn.functional as F
import tilewright
from tilewright.bench.common import graph_ms_alternating
mod = importlib.import_module("tilewright.ops.rms_norm_linear")
EPS = 1e-6
def tw(two):
    def f(x, g, w):
        mod.TWO_PASS_MIN_FLOPS = 0.0 if two else 2.0 ** 36
        os.environ["TILEWRIGHT_RMS_TWO_PASS"] = "1" if two else "0"
        return tilewright.rms_norm_linear(x, g, w, eps=EPS)
    return f
eager = lambda x, g, w: F.linear(F.rms_norm(x, (x.shape[-1],), g, EPS), w)
def host_us(f, args, n=200):
    f(*args); torch.cuda.synchronize()
    ts = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(n):
            f(*args)
        ts.append((time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
    return statistics.median(ts)
for M, N, K in ((1, 4096, 4096), (16, 4096, 4096), (128, 4096, 4096), (512, 3072, 2048), (1024, 4096, 4096), (2048, 2048, 2048)):
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    g = (1 + 0.1 * torch.randn(K, device="cuda")).bfloat16()
    w = (torch.randn(N, K, device="cuda") / K ** 0.5).bfloat16()
    ref = F.linear(F.rms_norm(x.double(), (K,), g.double(), EPS), w.double())
    e2 = ((tw(True)(x, g, w).double() - ref).abs().max() / ref.abs().max()).item()
    with torch.no_grad():
        ms = graph_ms_alternating([lambda: tw(True)(x, g, w), lambda: tw(False)(x, g, w), lambda: eager(x, g, w)])
        hs = [host_us(f, (x, g, w)) for f in (tw(True), tw(False), eager)]
    print(f"{M}x{N}x{K}: GPU two_pass {ms[0]*1000:.1f} us fused {ms[1]*1000:.1f} eager {ms[2]*1000:.1f} | "
          f"host two_pass {hs[0]:.1f} us fused {hs[1]:.1f} eager {hs[2]:.1f} | relerr two_pass {e2:.2e}", flush=True)
