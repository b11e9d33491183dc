"""The model-bench step the session-28 scripts time (kernels, host_stall, host_tree `_2026-11-29.py`, run from this
folder's path so this module is importable): a case's blocks and input, each provider's build, one step (forward
under no_grad, or forward + backward), and the per-kernel-name GPU time of torch.profiler events."""
import collections

import torch

from tilewright.bench import model


def case_inputs(tag: str):
    """(case, torch block, tilewright block, input) of a model-bench case tag, bf16 on the GPU."""
    case = [c for c in model.SUITES["default"] if c.tag == tag][0]
    ref, ours = model.build_blocks(case, "cuda", torch.bfloat16)
    return case, ref, ours, model.make_input(case, "cuda", torch.bfloat16)


def builds(ref, ours) -> dict:
    """Provider name -> a function making its block (compiled ones compile on first call)."""
    return {"torch_eager": lambda: ref, "torch_compile": lambda: torch.compile(ref),
            "tilewright_eager": lambda: ours, "tilewright_compile": lambda: torch.compile(ours)}


def step_of(blk, x, mode: str):
    """One step of ``blk`` on ``x``: ``mode`` "fwd" (no_grad) or "fwd+bwd" (gradients cleared, then backward)."""
    def step():
        if mode == "fwd":
            with torch.no_grad():
                blk(x)
        else:
            blk.zero_grad(set_to_none=True)
            x.grad = None
            blk(x).sum().backward()
    return step


def kernel_times(prof) -> dict:
    """Kernel name -> [total device us, count] over a torch.profiler run's CUDA events."""
    agg = collections.defaultdict(lambda: [0.0, 0])
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            agg[e.name][0] += e.device_time_total
            agg[e.name][1] += 1
    return agg
