"""Host cost of the attention op's fwd + bwd on its own kernels (issue 15: the GQA rows' wall time exceeded their
kernels' sum by 600-900 us a step, cuDNN's by ~250): per row, the wall time per step of STEPS queued steps (no sync
inside: host-bound when it exceeds the kernels' sum) for tilewright (TILEWRIGHT_ATEN_BELOW=0,
TILEWRIGHT_CUDA_ATTN_BWD=1) and SDPA cuDNN, then cProfile of tilewright's steps (top functions by own and by
cumulative time), or with PROFILER=pyinstrument its sampled call tree.
Run: PYTHONPATH=src python bwd_host_profile_2026-11-29.py."""
import cProfile
import io
import os
import pstats
import threading

os.environ.setdefault("TILEWRIGHT_ATEN_BELOW", "0")
os.environ.setdefault("TILEWRIGHT_CUDA_ATTN_BWD", "1")
import torch
from attention_steps import Step, per_step_us, row_name

import tilewright

ROWS = ((1, 16, 16, 1024, 128, True), (1, 28, 4, 3000, 96, True))
STEPS = 50
torch.manual_seed(0)
print(torch.cuda.get_device_name(), torch.__version__, flush=True)


class _Identity(torch.autograd.Function):
    """The engine's own cost a step: a Python Function whose forward and backward launch nothing."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return g


for (B, Hq, Hkv, S, D, causal) in ROWS:
    row = row_name(B, Hq, Hkv, S, D, causal)
    step = Step(B, Hq, Hkv, S, D, causal)
    q, k, v, do, tw, sd = step.q, step.k, step.v, step.do, step.tw, step.sd

    def tw_fwd():
        with torch.no_grad():
            tilewright.flash_attention(q, k, v, causal=causal)

    def engine():
        torch.autograd.grad(_Identity.apply(q), (q,), do)

    for fn in (tw, tw_fwd, sd, engine):
        for _ in range(10):
            fn()
    def one_thread(fn):
        # autograd's backward on the calling thread instead of its CUDA device thread
        def run():
            with torch.autograd.set_multithreading_enabled(False):
                fn()
        return run

    print("threads:", [t.name for t in threading.enumerate()], flush=True)
    for name, fn in (("tw fwd+bwd", tw), ("tw fwd", tw_fwd), ("cudnn fwd+bwd", sd), ("engine, empty Function", engine),
                     ("tw fwd+bwd, backward on this thread", one_thread(tw)),
                     ("cudnn fwd+bwd, backward on this thread", one_thread(sd)),
                     ("engine, empty Function, on this thread", one_thread(engine))):
        runs = [per_step_us(fn, STEPS) for _ in range(5)]
        runs.sort()
        print(f"{row},{name}: host us/step {runs[2][0]:.1f}, wall us/step {runs[2][1]:.1f}", flush=True)
    if os.environ.get("PROFILER") == "pyinstrument":
        from pyinstrument import Profiler

        prof = Profiler(interval=0.0002)
        step = one_thread(tw)
        prof.start()
        for _ in range(4 * STEPS):
            step()
        prof.stop()
        torch.cuda.synchronize()
        print(f"--- {row} pyinstrument, fwd + bwd on this thread ({4 * STEPS} steps)\n" +
              prof.output_text(unicode=False, color=False), flush=True)
    if os.environ.get("PROFILER") in ("pyinstrument", "none"):  # sampling, ~10x less overhead than cProfile's
        from tilewright.ops import attention as ops_attention
        from tilewright.ops._eager import call_op

        # the backward op called on this thread (autograd runs it on its device thread, which a profiler of this
        # one does not see): its host cost alone, and the engine's as the rest of grad's. Under no_grad, as the
        # engine calls it: call_op then calls the implementation directly (with autograd recording it would go
        # through the custom op's dispatcher and autograd wrapper, ~40% more host)
        with torch.no_grad():
            out, lse = tilewright.flash_attention(q, k, v, causal=causal, return_lse=True)

        def bwd():
            with torch.no_grad():
                call_op(ops_attention.flash_attn_bwd_op, do, None, q, k, v, out, lse, causal, False, D ** -0.5, 0.0,
                        None, -1, -1)

        for _ in range(10):
            bwd()
        runs = sorted(per_step_us(bwd, STEPS) for _ in range(5))
        print(f"{row},tw bwd op alone: host us/step {runs[2][0]:.1f}, wall us/step {runs[2][1]:.1f}", flush=True)
        if os.environ["PROFILER"] == "none":
            continue
        from pyinstrument import Profiler

        prof = Profiler(interval=0.0002)
        prof.start()
        for _ in range(4 * STEPS):
            bwd()
        prof.stop()
        torch.cuda.synchronize()
        print(f"--- {row} pyinstrument ({4 * STEPS} steps)\n" + prof.output_text(unicode=False, color=False),
              flush=True)
        continue
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(STEPS):
        tw()
    prof.disable()
    torch.cuda.synchronize()
    for order in ("tottime", "cumulative"):
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats(order).print_stats(28)
        print(f"--- {row} cProfile by {order} ({STEPS} steps)\n" + s.getvalue(), flush=True)
    del step  # (q, k, v, do: rebound by the next row)
