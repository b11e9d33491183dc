"""GPU kernels a model-bench step launches, per provider (session 41): where the Llama B8 forward + backward's
time goes on torch.compile(torch block), the tilewright block eager and compiled. Also each step's wall time (CUDA
events over 20 steps, median of 5 rounds), so the kernel sum and the wall can be compared.

    python prof_step_s41.py llama-prefill fwdbwd
"""
import statistics
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from tilewright.bench import model

tag, kind = sys.argv[1], sys.argv[2]
model._raise_recompile_limit()
case = [c for c in model.SUITES["default"] if c.tag == tag][0]
ref, ours = model.build_blocks(case, "cuda", torch.bfloat16)
x = model.make_input(case, "cuda", torch.bfloat16)
print(torch.cuda.get_device_name(), torch.__version__, case, flush=True)


def step(blk):
    if kind == "fwd":
        with torch.no_grad():
            blk(x)
    else:
        blk(x).sum().backward()


for name, blk in (("torch_compile", torch.compile(ref, dynamic=False)), ("tw_eager", ours),
                  ("tw_compile", torch.compile(ours, dynamic=False))):
    for _ in range(3):
        step(blk)
    torch.cuda.synchronize()
    walls = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(20):
            step(blk)
        b.record()
        torch.cuda.synchronize()
        walls.append(a.elapsed_time(b) / 20)
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(5):
            step(blk)
        torch.cuda.synchronize()
    ev = [e for e in p.key_averages() if e.device_type.name == "CUDA" and e.self_device_time_total > 0]
    tot = sum(e.self_device_time_total for e in ev) / 5 / 1e3
    print(f"== {name}: wall {statistics.median(walls):.3f} ms/step, GPU kernels {tot:.3f} ms/step", flush=True)
    for e in sorted(ev, key=lambda e: -e.self_device_time_total)[:30]:
        print(f"  {e.self_device_time_total / 5 / 1e3:8.3f} ms  x{e.count // 5:3d}  {e.key[:120]}")
