"""Issue 14: where the B1 forward + backward's host time goes (kernels_llama-small_fwdbwd_s39.txt: GPU 0.39 ms a step
under a 3.25 ms wall for tilewright eager, torch eager 0.46 / 1.97). Per provider (torch eager, tilewright eager)
of a case: the queued loop's wall (20 steps, no sync inside, median of 5), then cProfile over 20 steps - the top
functions by own time and by cumulative time. `PYTHONPATH=src python <this file> [case tag]` from this folder."""
import cProfile
import io
import pstats
import sys
import time

import torch

from model_steps import builds, case_inputs, step_of

tag = sys.argv[1] if len(sys.argv) > 1 else "llama-small"
case, ref, ours, x = case_inputs(tag)
makers = builds(ref, ours)
print(torch.cuda.get_device_name(), torch.__version__, tag, "fwd+bwd", flush=True)
for name in ("torch_eager", "tilewright_eager"):
    step = step_of(makers[name](), x, "fwd+bwd")
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    walls = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(20):
            step()
        torch.cuda.synchronize()
        walls.append((time.perf_counter() - t0) / 20 * 1e3)
    print(f"===== {name}: wall {sorted(walls)[2]:.3f} ms/step (loops: {', '.join(f'{w:.3f}' for w in walls)})",
          flush=True)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(20):
        step()
    torch.cuda.synchronize()
    prof.disable()
    for key in ("tottime", "cumulative"):
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(45)
        print(f"--- {name} by {key} (20 steps)\n" + "\n".join(buf.getvalue().splitlines()[4:]), flush=True)
