# Pure-Python host cost of the ATen route on the CPU dev box (2 cores), CPU tensors made eligible, tiny shapes.
# Run: PYTHONPATH=src python perf/results/cpu-dev/route_key_cost_2026-11-27.py
import timeit, torch, torch.nn.functional as F
torch._C._cuda_getDevice = lambda: 0
import tilewright
from tilewright.ops import _fast, _aten, gemm
_fast.eligible = lambda *t: True
x = torch.randn(2, 4, 16, requires_grad=True); w = torch.randn(8, 16, requires_grad=True)
N = 50000
def bench(f):
    f()
    return min(timeit.repeat(f, number=N, repeat=5)) / N * 1e6
key = gemm._replay_key(x, w, None, None, None, None, None, "linear")
rep = gemm._replays[key] if key in gemm._replays else None
tilewright.linear(x, w)
rep = gemm._replays[key]
print(type(rep).__name__)
print("key", bench(lambda: gemm._replay_key(x, w, None, None, None, None, None, "linear")))
print("get", bench(lambda: gemm._replays.get(key)))
print("call", bench(lambda: rep(x, w, None, None)))
print("F.linear", bench(lambda: F.linear(x, w, None)))
print("needs_grad", bench(lambda: gemm._needs_grad(x, w, None, None)))
print("state", bench(_fast.state))
print("sig x4", bench(lambda: (_fast.sig(x), _fast.sig(w), _fast.sig(None), _fast.sig(None))))
print("full", bench(lambda: tilewright.linear(x, w)))
