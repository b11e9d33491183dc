"""Where a model-bench step's time goes, per provider: GPU time per kernel name (torch.profiler, summed over 5 steps
/ 5), the step's GPU total, and its wall time in a queued loop (20 steps, no sync between them) - a wall well above
the GPU total is host time. Follows h100/model/prof_prefill_2026-11-27.py (fwd + bwd only), with the forward alone
(torch.no_grad) as the other mode.

`PYTHONPATH=src python perf/results/h200/model/kernels_2026-11-29.py <case tag> <fwd|fwd+bwd> [providers]`
(case tags: llama-prefill, llama-small, vit-prefill, vit-small; providers: comma-separated of torch_eager,
torch_compile, tilewright_eager, tilewright_compile)."""
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from model_steps import builds, case_inputs, kernel_times, step_of

case, ref, ours, x = case_inputs(sys.argv[1])
mode = sys.argv[2]
makers = builds(ref, ours)
names = sys.argv[3].split(",") if len(sys.argv) > 3 else list(makers)
print(torch.cuda.get_device_name(), torch.__version__, case.tag, mode, flush=True)
for name in names:
    step = step_of(makers[name](), x, mode)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    walls = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(20):
            step()
        torch.cuda.synchronize()
        walls.append((time.perf_counter() - t0) / 20 * 1e3)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            step()
        torch.cuda.synchronize()
    agg = kernel_times(prof)
    total = sum(t for t, _ in agg.values()) / 5 / 1000
    print(f"===== {case.tag} {mode} {name}: GPU {total:.3f} ms/step, wall {sorted(walls)[2]:.3f} ms/step "
          f"(median of 5 loops of 20)", flush=True)
    for k, (t, n) in sorted(agg.items(), key=lambda kv: -kv[1][0])[:24]:
        print(f"  {t / 5 / 1000:8.3f} ms x {n // 5:3d}  {k[:120]}")
