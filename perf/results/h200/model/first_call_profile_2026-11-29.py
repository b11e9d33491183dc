"""Where the model bench's first tilewright forward goes (issue 14: <= 5 s with an empty tuning cache, <= 20 s fully
cold; the 2026-11-29 06:00 run's Llama B8 first call took 26.4 s on a fresh host, 06:25's 8.9 s): one process, one
block, its first forward under cProfile (torch.no_grad, synced), then the top functions by cumulative and own time.
Run it with fresh TILEWRIGHT_CACHE_DIR / TRITON_CACHE_DIR (fully cold), then again with the same ones after deleting
the tuning cache's autotune.json (kernels on disk, no tuning results).
`PYTHONPATH=src python perf/results/h200/model/first_call_profile_2026-11-29.py <case tag>`"""
import cProfile
import io
import pstats
import sys
import time

t_start = time.perf_counter()
import torch  # noqa: E402

from tilewright.bench import model  # noqa: E402

case = [c for c in model.SUITES["default"] if c.tag == sys.argv[1]][0]
ref, ours = model.build_blocks(case, "cuda", torch.bfloat16)
x = model.make_input(case, "cuda", torch.bfloat16)
with torch.no_grad():
    ref(x)
torch.cuda.synchronize()
t0 = time.perf_counter()
with torch.no_grad():
    ref(x)
torch.cuda.synchronize()
print(f"{torch.cuda.get_device_name()} {torch.__version__} {case.tag}: process start to first torch forward done "
      f"{t0 - t_start:.2f} s; torch's second forward {1e3 * (time.perf_counter() - t0):.1f} ms", flush=True)
prof = cProfile.Profile()
t0 = time.perf_counter()
prof.enable()
with torch.no_grad():
    ours(x)
torch.cuda.synchronize()
prof.disable()
print(f"tilewright first forward: {time.perf_counter() - t0:.2f} s", flush=True)
t0 = time.perf_counter()
with torch.no_grad():
    ours(x)
torch.cuda.synchronize()
print(f"tilewright second forward: {1e3 * (time.perf_counter() - t0):.1f} ms", flush=True)
for order, n in (("cumulative", 45), ("tottime", 20)):
    s = io.StringIO()
    pstats.Stats(prof, stream=s).strip_dirs().sort_stats(order).print_stats(n)
    print(s.getvalue())
