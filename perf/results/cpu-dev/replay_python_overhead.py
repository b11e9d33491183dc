# Pure-Python cost of the eager replay path on the CPU dev box (2 cores): CUDA eligibility and the launch faked.
# Run: PYTHONPATH=src python perf/results/cpu-dev/replay_python_overhead.py
import timeit, torch, cProfile, pstats, io
torch._C._cuda_getDevice = lambda: 0
import tilewright
from tilewright.ops import _fast
import tilewright.ops.gemm as g
_fast.eligible = lambda *t: True
g._fast.eligible = _fast.eligible
x = torch.randn(64, 96, dtype=torch.bfloat16); w = torch.randn(48, 96, dtype=torch.bfloat16)
class FakeBound:
    def __call__(self, *p): pass
def install(xx, grad):
    key = g._replay_key(xx, w, None, None, None, None, None, "linear")
    out = torch.empty(64, 48, dtype=torch.bfloat16)
    pre = torch.empty(0, dtype=torch.bfloat16)
    outs = {"c_ptr": (0, out)} if not grad else {"c_ptr": (0, out), "preact_ptr": (1, pre)}
    rep = _fast.build([(FakeBound(), {"a_ptr": xx, "b_ptr": w.t(), "c_ptr": out})], {"a_ptr": (0, xx), "b_ptr": (1, w)}, outs)
    g._replays[key] = rep
install(x, False)
N = 20000
t = timeit.timeit(lambda: tilewright.linear(x, w), number=N) / N * 1e6
print(f"no-grad replay path (python only, fake launch): {t:.1f} us")
print(f"  F.linear CPU 64x96x48: {timeit.timeit(lambda: torch.nn.functional.linear(x, w), number=N)/N*1e6:.1f} us")
xg = x.clone().requires_grad_(True)
install(xg, True)
t = timeit.timeit(lambda: tilewright.linear(xg, w), number=N) / N * 1e6
print(f"grad replay path: {t:.1f} us")
print(f"  F.linear grad: {timeit.timeit(lambda: torch.nn.functional.linear(xg, w), number=N)/N*1e6:.1f} us")
pr = cProfile.Profile(); pr.enable()
for _ in range(5000): tilewright.linear(xg, w)
pr.disable(); s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(14); print(s.getvalue()[:3000])
pr = cProfile.Profile(); pr.enable()
for _ in range(5000): tilewright.linear(x, w)
pr.disable(); s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(12); print(s.getvalue()[:2500])
