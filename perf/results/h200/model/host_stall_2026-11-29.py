"""Why a tilewright model step's queued wall exceeds its GPU time (kernels_2026-11-29.py, 06:2x run: Llama prefill
forward GPU 2.44 ms, wall 2.75 ms; ViT-L prefill fwd + bwd GPU 3.81 ms, wall 4.38 ms; torch's steps: wall = GPU + 1-4%).
Per (case, mode, provider):
1. host time of 10 steps issued behind a ~200 ms sleep kernel (nothing can finish, so a step that waits for the
   GPU shows up as the sleep's length: a synchronising call), and the wall of the same 10 steps after it;
2. torch's sync debug mode over one step (torch-level synchronising calls: .item(), copies to the host, ...);
3. the CUDA runtime / driver calls torch.profiler sees on the host over 5 steps, by name: count and total time
   (cudaMalloc / cudaFree / synchronise / memcpy are the suspects).
`PYTHONPATH=src python perf/results/h200/model/host_stall_2026-11-29.py <case> <fwd|fwd+bwd> [providers]`"""
import collections
import sys
import time
import warnings

import torch
from torch.profiler import ProfilerActivity, profile

from model_steps import builds, case_inputs, step_of

case, ref, ours, x = case_inputs(sys.argv[1])
mode = sys.argv[2]
makers = builds(ref, ours)
names = sys.argv[3].split(",") if len(sys.argv) > 3 else ["torch_eager", "tilewright_eager"]
print(torch.cuda.get_device_name(), torch.__version__, case.tag, mode, flush=True)
SLEEP_CYCLES = int(4e8)  # ~200 ms at the H200's ~1.98 GHz
for name in names:
    step = step_of(makers[name](), x, mode)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    for rnd in range(3):
        torch.cuda._sleep(SLEEP_CYCLES)
        t0 = time.perf_counter()
        for _ in range(10):
            step()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        print(f"{name}: host {1e3 * (t1 - t0) / 10:.3f} ms/step issued behind the sleep; issue-to-done "
              f"{1e3 * (t2 - t0):.1f} ms for 10 steps", flush=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    syncs = [str(w.message)[:160] for w in caught if "synchroniz" in str(w.message).lower()]
    print(f"{name}: torch-level synchronising calls in one step: {len(syncs)}", *syncs[:8], sep="\n  ", flush=True)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            step()
        torch.cuda.synchronize()
    agg = collections.defaultdict(lambda: [0.0, 0])
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CPU and (e.name.startswith("cuda") or e.name.startswith("cu")):
            agg[e.name][0] += e.cpu_time_total
            agg[e.name][1] += 1
    print(f"{name}: runtime / driver calls over 5 steps (count, total us):")
    for k, (t, n) in sorted(agg.items(), key=lambda kv: -kv[1][0])[:14]:
        print(f"  {n:6d} {t:10.1f}  {k[:100]}")
