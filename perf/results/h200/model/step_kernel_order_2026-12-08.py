"""Every GPU kernel of one model-bench step in launch order, per provider (session 43): which of the Llama B8 step's
GEMMs tilewright runs slower than torch.compile's cuBLAS calls in the same place. Session 41's profile summed them
by name (tilewright's ten GEMMs 5.19 ms against the corresponding ten cuBLAS calls' ~5.04) while each GEMM alone
measured 0.99-1.05x cuBLAS (gemm/model_points_2026-11-28.txt); this lists them one by one, each kernel's median
over STEPS profiled steps at its position in the step.

    python step_kernel_order_2026-12-08.py llama-prefill fwdbwd

(The model bench's step: model_steps.step_of - a forward + backward clears the gradients first.)
"""
import os
import statistics
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_steps import case_inputs, step_of  # noqa: E402

from tilewright.bench import model  # noqa: E402

STEPS = 5
tag, mode = sys.argv[1], {"fwd": "fwd", "fwdbwd": "fwd+bwd"}[sys.argv[2]]
model._raise_recompile_limit()
case, ref, ours, x = case_inputs(tag)
print(torch.cuda.get_device_name(), torch.__version__, case, flush=True)

for name, blk in (("torch_compile", torch.compile(ref, dynamic=False)),
                  ("tw_compile", torch.compile(ours, dynamic=False)), ("tw_eager", ours)):
    step = step_of(blk, x, mode)
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(STEPS):
            step()
            torch.cuda.synchronize()
    ev = sorted((e for e in p.events() if e.device_type.name == "CUDA" and e.device_time_total > 0),
                key=lambda e: e.time_range.start)
    per = len(ev) // STEPS
    if per * STEPS != len(ev):
        print(f"== {name}: {len(ev)} kernels over {STEPS} steps - not a whole number a step; listing step 1 only")
        step_ev = [ev[:per]]
    else:
        step_ev = [ev[i * per:(i + 1) * per] for i in range(STEPS)]
    total = sum(e.device_time_total for e in ev) / len(step_ev) / 1e3 if len(step_ev) == STEPS else float("nan")
    print(f"== {name}: {per} kernels a step, {total:.3f} ms of kernels a step", flush=True)
    gemm_sum = 0.0
    for i in range(per):
        us = statistics.median(s[i].device_time_total for s in step_ev)
        nm = step_ev[0][i].name
        is_gemm = any(t in nm for t in ("gemm", "nvjet", "cutlass", "sm90_xmma", "tw_swiglu"))
        gemm_sum += us if is_gemm else 0.0
        print(f"  {i:3d} {us:9.1f} us {'G' if is_gemm else ' '} {nm[:110]}")
    print(f"  GEMM kernels: {gemm_sum / 1e3:.3f} ms a step", flush=True)
