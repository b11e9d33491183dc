"""Issue 17's "forward + backward >= 1.0x eager on every row": tilewright.rms_norm_linear's training step (forward,
then backward to x, the norm weight and the weight with a fixed upstream gradient) against the eager pair
F.rms_norm + F.linear and torch.compile of that pair, on the issue's five rows plus two decode rows, bf16, H200.
Steady-state loop time (bench.common.loop_ms_alternating: steps queued back to back, the providers' runs
interleaved, median of 7 runs of ~1/7 of rep_ms each) - what a training loop sees, host included - and the kernel
time of the tilewright and eager steps (torch.profiler over 10 steps), so a host-bound row shows as loop >> kernels.
`PYTHONPATH=src python perf/results/h200/rms_norm_linear/fwd_bwd_rows_2026-11-29.py [--graphs]`

--graphs (added session 30: one run's profiler sums moved 10% against the previous session's at 16384 x 3072 x 2048):
also each step captured in a CUDA graph (the backward included) and the three graphs replayed interleaved with the L2
flushed, 15 rounds (bench.common.graph_ms_alternating) - the GPU time of the steps without host, the providers under
the same clocks."""
import collections
import sys

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import tilewright
from tilewright.bench.common import graph_ms_alternating, loop_ms_alternating

ROWS = ((8192, 4096, 4096), (8192, 6144, 4096), (3000, 5120, 5120), (2048, 14336, 4096), (128, 4096, 4096),
        (16384, 3072, 2048), (16384, 11264, 2048))
EPS = 1e-6
torch.manual_seed(0)
print(torch.cuda.get_device_name(), torch.__version__, flush=True)
pair = lambda x, g, w: F.linear(F.rms_norm(x, (x.shape[-1],), g, EPS), w)  # noqa: E731
compiled = torch.compile(pair)


def kernel_ms(step, n=10):
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            step()
        torch.cuda.synchronize()
    agg = collections.defaultdict(float)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            agg[e.name] += e.device_time_total
    return sum(agg.values()) / n / 1e3


for M, N, K in ROWS:
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    g = (torch.rand(K, device="cuda", dtype=torch.bfloat16) + 0.5).requires_grad_()
    w = (torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5).requires_grad_()
    dy = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)

    def step_of(fn):
        def step():
            torch.autograd.grad(fn(x, g, w), (x, g, w), dy)
        return step

    provs = {"tilewright": step_of(lambda x, g, w: tilewright.rms_norm_linear(x, g, w, eps=EPS)),
             "eager": step_of(pair), "compile": step_of(compiled)}
    for s in provs.values():
        s()
    loops = loop_ms_alternating(list(provs.values()), rep_ms=300)
    kt, ke = kernel_ms(provs["tilewright"]), kernel_ms(provs["eager"])
    t, e, c = loops
    print(f"{M}x{N}x{K}: fwd+bwd loop tilewright {t:.4f} ms, eager {e:.4f}, compile {c:.4f} -> "
          f"{e / t:.3f}x eager, {c / t:.3f}x compile; kernels tilewright {kt:.4f}, eager {ke:.4f}", flush=True)
    if "--graphs" in sys.argv:
        try:
            gt, ge, gc = graph_ms_alternating(list(provs.values()), calls=5, replays=15)
            print(f"{M}x{N}x{K}: fwd+bwd graphs tilewright {gt:.4f} ms, eager {ge:.4f}, compile {gc:.4f} -> "
                  f"{ge / gt:.3f}x eager, {gc / gt:.3f}x compile", flush=True)
        except RuntimeError as e:
            print(f"{M}x{N}x{K}: graph capture failed: {str(e).splitlines()[0][:120]}", flush=True)
            torch.cuda.synchronize()
