"""Issue 14: the Llama B1 x S512 block's two residual GEMMs without autograd (wo: 512 x 2048 x 2048 + x, down: 512 x
2048 x 5632 + h) - the GEMM family keeps its kernels there (a recorded replay, ops/_aten.py's rule since session 12)
while torch runs F.linear + add. Which costs less: host per call (N queued calls, no sync, interleaved) and GPU time
(CUDA-graph replays, interleaved), same process. What serves each call is printed from the replay cache.

    PYTHONPATH=src python perf/results/h200/host/b1_residual_route_2026-12-02.py > $OUT/b1_residual_route.txt"""
import warnings

import torch
import torch.nn.functional as F

import tilewright
from tilewright import _native
from tilewright.bench.common import graph_ms_alternating
from tilewright.bench.host import host_us_alternating
from tilewright.ops import gemm

warnings.filterwarnings("ignore")
print(torch.cuda.get_device_name(), torch.__version__, "| native:", _native.load(block=True) is not None, flush=True)
torch.manual_seed(0)
dev, dt = "cuda", torch.bfloat16
torch.set_grad_enabled(False)
for name, K, N in (("wo+res", 2048, 2048), ("down+res", 5632, 2048)):
    a = torch.randn(1, 512, K, device=dev, dtype=dt)
    w = torch.randn(N, K, device=dev, dtype=dt) / K ** 0.5
    r = torch.randn(1, 512, N, device=dev, dtype=dt)
    ours, peer = (lambda: tilewright.linear(a, w, residual=r)), (lambda: F.linear(a, w) + r)
    err = (ours().float() - peer().float()).abs().max().item()
    ours()
    served = sorted({type(v).__name__ for v in gemm._replays.values()})
    for rnd in range(3):
        us = host_us_alternating([peer, ours])
        ms = graph_ms_alternating([peer, ours])
        print(f"{name} round {rnd}: host torch {us[0]:.1f} us | tilewright {us[1]:.1f} us ({us[1] - us[0]:+.1f}) | "
              f"GPU torch {ms[0] * 1e3:.1f} us | tilewright {ms[1] * 1e3:.1f} us ({ms[0] / ms[1]:.3f}x) | "
              f"served by {served} | max abs diff {err:.3g}", flush=True)
    gemm._replays.clear()
