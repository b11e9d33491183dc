"""Issue 14: where the host goes in the eager calls over budget (session 34's host bench: flash_attention 27.5 us
against SDPA's 19.3, the decode call 37.2 against 23.0, rms_norm_linear 35.3 against 26.5, linear + bias + GELU 30.5
against 22.8; budget <= 1.5x torch and <= 25 us). Per case: the host time a call of tilewright and of torch's op,
their runs interleaved (bench.host.host_us_alternating: calls queued between syncs, no profiler), then cProfile of
tilewright's calls, the top functions by own time (tools.diag.profile_calls) - what a signature cache or a pre-bound
launch could still remove. (The session-34 output beside was made by this script's first form, which timed best of
5 runs of 400 calls and printed 22 lines of the same profile.)

    PYTHONPATH=src python perf/results/h200/host/host_profile_ops_2026-11-29.py > $OUT/host_profile_ops.txt"""
import torch

from tilewright.bench.host import SUITES, cases, host_us_alternating
from tilewright.tools.diag import profile_calls

PICK = ("flash_attention|", "flash_attention_with_kvcache|", "rms_norm_linear|", "linear+bias+gelu|", "linear|")
suite = SUITES["default"]
table = cases(suite["gemm"], suite["attention"], torch.device("cuda"), torch.bfloat16)
print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
for name, (tw, ref) in table.items():
    if not name.startswith(PICK) or "+grad" in name or "fwd+bwd" in name:
        continue
    ours, theirs = host_us_alternating([tw, ref])
    print(f"== {name}: tilewright {ours:.1f} us, torch {theirs:.1f} us (queued calls, median of runs)", flush=True)
    profile_calls(name, tw, calls=400)
