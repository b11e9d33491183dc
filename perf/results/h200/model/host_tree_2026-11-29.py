"""Where a model-bench step's host time goes (the steps host_stall_2026-11-29.py found host-heavy: ViT-L prefill
fwd + bwd 3.0-3.4 ms of host a step against torch eager's 1.9-2.2): a pyinstrument tree of 10 steps issued behind a
sleep kernel (nothing waits for the GPU), the backward on the calling thread (torch.autograd's multithreading off,
so the sampler sees it), after 3 warm steps; then the host time a step with and without the profiler.
`PROFILER=pyinstrument PYTHONPATH=<pyinstrument>:src python perf/results/h200/model/host_tree_2026-11-29.py
<case> <fwd|fwd+bwd> [provider]` (provider: tilewright_eager, the default, or torch_eager)."""
import sys
import time

import torch

from model_steps import case_inputs, step_of

case, ref, ours, x = case_inputs(sys.argv[1])
mode = sys.argv[2]
provider = sys.argv[3] if len(sys.argv) > 3 else "tilewright_eager"
step = step_of(ours if provider == "tilewright_eager" else ref, x, mode)
torch.autograd.set_multithreading_enabled(False)
print(torch.cuda.get_device_name(), torch.__version__, case.tag, mode, provider, flush=True)


def host_ms(n=10):
    torch.cuda._sleep(int(4e8))
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return 1e3 * (t1 - t0) / n


for _ in range(3):
    step()
torch.cuda.synchronize()
print(f"host ms/step: {', '.join(f'{host_ms():.3f}' for _ in range(3))}", flush=True)
from pyinstrument import Profiler  # noqa: E402

prof = Profiler(interval=0.0002)
torch.cuda._sleep(int(4e8))
prof.start()
for _ in range(10):
    step()
prof.stop()
torch.cuda.synchronize()
print(prof.output_text(unicode=False, color=False, show_all=False))
