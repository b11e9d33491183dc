"""Issue 14: apply_rotary replayed under autograd (the forward's launch inside the op's node, the backward's rotation
back) against the full path under autograd (what ran before: a replay only without autograd), in one process on the
Llama B1 forward + backward (host-bound: host_profile_b1_fwdbwd_s39.txt - GPU 0.39 ms under a ~2 ms wall, the
rotary forward with grad ~250 us a call under cProfile against torch's two formulas' ~150). Providers interleaved,
7 rounds of 20 queued steps, medians; torch eager beside them. `PYTHONPATH=src python <this file> [case tag]` from
this folder."""
import statistics
import sys
import time

import torch

from model_steps import builds, case_inputs, step_of
from tilewright.ops import rotary as op_rotary

tag = sys.argv[1] if len(sys.argv) > 1 else "llama-small"
case, ref, ours, x = case_inputs(tag)
makers = builds(ref, ours)
print(torch.cuda.get_device_name(), torch.__version__, tag, "fwd+bwd", flush=True)
new_fwd, new_bwd = op_rotary._replayed_with_grad, op_rotary._rotated


def old_fwd(replay, x, cos, sin, rotary_dim):  # the full path under autograd (no replay)
    cos3 = cos if cos.dim() == 3 else cos.unsqueeze(0)
    sin3 = sin if sin.dim() == 3 else sin.unsqueeze(0)
    return op_rotary.call_op(op_rotary.rotary_op, x, cos3, sin3, rotary_dim, False)


def old_bwd(x, cos3, sin3, rotary_dim, backward):
    return op_rotary.call_op(op_rotary.rotary_op, x, cos3, sin3, rotary_dim, backward)


providers = {"torch_eager": (makers["torch_eager"](), None), "tw_grad_replay": (makers["tilewright_eager"](), True),
             "tw_full_path": (makers["tilewright_eager"](), False)}
steps = {n: step_of(b, x, "fwd+bwd") for n, (b, _) in providers.items()}


def run(name, n):
    replay = providers[name][1]
    if replay is not None:
        op_rotary._replayed_with_grad, op_rotary._rotated = (new_fwd, new_bwd) if replay else (old_fwd, old_bwd)
    for _ in range(n):
        steps[name]()


for name in providers:
    run(name, 5)
torch.cuda.synchronize()
times = {n: [] for n in providers}
names = list(providers)
for r in range(7):
    for name in names[r % 3:] + names[:r % 3]:
        run(name, 2)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        run(name, 20)
        torch.cuda.synchronize()
        times[name].append((time.perf_counter() - t0) / 20 * 1e3)
med = {n: statistics.median(v) for n, v in times.items()}
print(", ".join(f"{n} {t:.3f} ms" for n, t in med.items()))
print(f"tw_grad_replay: {med['torch_eager'] / med['tw_grad_replay']:.3f}x torch eager, "
      f"{med['tw_full_path'] / med['tw_grad_replay']:.3f}x the full path; "
      f"tw_full_path {med['torch_eager'] / med['tw_full_path']:.3f}x torch eager")
for n, v in times.items():
    print(f"  {n}: " + " ".join(f"{t:.3f}" for t in v))
