"""Issue 14: where the host goes in the eager calls over budget (session 34's host bench: flash_attention 27.5 us
against SDPA's 19.3, the decode call 37.2 against 23.0, rms_norm_linear 35.3 against 26.5, linear + bias + GELU 30.5
against 22.8; budget <= 1.5x torch and <= 25 us). Per case: the host time a call (CALLS calls queued between syncs,
no profiler), then cProfile of the same calls, the top functions by own time - what a signature cache or a pre-bound
launch could still remove.

    PYTHONPATH=src python perf/results/h200/host/host_profile_ops_2026-11-29.py > $OUT/host_profile_ops.txt"""
import cProfile
import io
import pstats
import time

import torch

from tilewright.bench.host import SUITES, cases

CALLS = 400
PICK = ("flash_attention|", "flash_attention_with_kvcache|", "rms_norm_linear|", "linear+bias+gelu|", "linear|")
suite = SUITES["default"]
table = cases(suite["gemm"], suite["attention"], torch.device("cuda"), torch.bfloat16)
print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
for name, (tw, ref) in table.items():
    if not name.startswith(PICK) or "+grad" in name or "fwd+bwd" in name:
        continue
    for fn in (tw, ref):
        for _ in range(50):
            fn()
    torch.cuda.synchronize()
    per = {}
    for label, fn in (("tilewright", tw), ("torch", ref)):
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(CALLS):
                fn()
            best = min(best, (time.perf_counter() - t0) / CALLS * 1e6)
            torch.cuda.synchronize()
        per[label] = best
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(CALLS):
        tw()
    pr.disable()
    torch.cuda.synchronize()
    buf = io.StringIO()
    pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(22)
    body = buf.getvalue()
    body = body[body.find("ncalls"):]
    print(f"== {name}: tilewright {per['tilewright']:.1f} us, torch {per['torch']:.1f} us (best of 5 x {CALLS} "
          f"queued calls)\n{body}", flush=True)
