# Pure-Python host cost of the ATen route on the CPU dev box (2 cores), CPU tensors made eligible, tiny shapes.
# Run: PYTHONPATH=src python perf/results/cpu-dev/route_cost_2026-11-27.py
import timeit, torch, torch.nn.functional as F
torch._C._cuda_getDevice = lambda: 0
import tilewright
from tilewright.ops import _fast, _aten
_fast.eligible = lambda *t: True
x = torch.randn(2, 4, 16, requires_grad=True); w = torch.randn(8, 16, requires_grad=True); r = torch.randn(2, 4, 8)
x2 = torch.randn(8, 16, requires_grad=True); r2 = torch.randn(8, 8)
g = torch.rand(16, requires_grad=True)
N = 20000
def bench(f):
    f()
    return min(timeit.repeat(f, number=N, repeat=5)) / N * 1e6
for name, f in [("tw linear+res 3d", lambda: tilewright.linear(x, w, residual=r)),
                ("torch linear+add 3d", lambda: F.linear(x, w) + r),
                ("tw linear+res 2d", lambda: tilewright.linear(x2, w, residual=r2)),
                ("torch F.linear(x2, w, r2)", lambda: F.linear(x2, w, r2)),
                ("torch linear+add 2d", lambda: F.linear(x2, w) + r2),
                ("tw linear 3d", lambda: tilewright.linear(x, w)),
                ("torch linear 3d", lambda: F.linear(x, w)),
                ("tw rms_norm_linear", lambda: tilewright.rms_norm_linear(x, g, w, eps=1e-5)),
                ("torch rms+linear", lambda: F.linear(F.rms_norm(x, (16,), g, 1e-5), w)),
                ("tw attention", None)]:
    if f is None: continue
    print(f"{name:28s} {bench(f):7.2f} us")
