"""Where fwd + bwd time goes on the GQA rows that trail cuDNN (issue 15): per (row, heads-per-CTA setting), the
public op's fwd + bwd wall time (triton do_bench median, settings interleaved over ROUNDS rounds: the spread between
rounds is part of the answer) and a torch.profiler breakdown of one warm fwd + bwd step into its kernels (mean GPU us
per kernel name over STEPS steps) beside the step's wall time - so host time (wall - sum of kernels, on a step that
is not overlapped) and each kernel's share are separate. cuDNN (K / V repeated) in the same process.
Run: PYTHONPATH=src python bwd_breakdown_2026-11-29.py > out.csv (lines: kind,row,setting,name,value)."""
import os
import statistics
import time

os.environ["TILEWRIGHT_ATEN_BELOW"] = "0"
os.environ["TILEWRIGHT_CUDA_ATTN_BWD"] = "1"
import torch
import triton
from attention_steps import Step, row_name
from torch.profiler import ProfilerActivity, profile

from tilewright.cuda_fallback import attention_bwd_sm90 as cb
from tilewright.ops import attention as ops_attention

ROWS = ((1, 28, 4, 3000, 96, True), (1, 28, 4, 3000, 128, True), (1, 32, 8, 2048, 128, True),
        (2, 32, 8, 1024, 128, True), (1, 32, 8, 1024, 128, True))
ROUNDS, STEPS = int(os.environ.get("ROUNDS", 3)), 10
torch.manual_seed(0)
print(torch.cuda.get_device_name(), torch.__version__, flush=True)


def median_ms(fn) -> float:
    return triton.testing.do_bench(fn, warmup=30, rep=200, return_mode="median")


for (B, Hq, Hkv, S, D, causal) in ROWS:
    row = row_name(B, Hq, Hkv, S, D, causal)
    step = Step(B, Hq, Hkv, S, D, causal)
    tw, sd = step.tw, step.sd
    group = Hq // Hkv
    settings = ["rule"] + [str(h) for h in sorted({group, 4, 3, 2, 1} & set(range(1, group + 1)), reverse=True)]

    def use(setting):
        if setting == "rule":
            os.environ.pop(cb.SPLIT_ENV, None)
        else:
            os.environ[cb.SPLIT_ENV] = setting
        ops_attention._cuda_plans.clear()

    for r in range(ROUNDS):
        for s in settings:
            use(s)
            print(f"bench,{row},{s},round{r},{median_ms(tw):.4f}", flush=True)
        print(f"bench,{row},cudnn,round{r},{median_ms(sd):.4f}", flush=True)
    for s in settings + ["cudnn"]:
        if s != "cudnn":
            use(s)
        fn = sd if s == "cudnn" else tw
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
        walls = []
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(STEPS):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                fn()
                torch.cuda.synchronize()
                walls.append((time.perf_counter() - t0) * 1e6)
        print(f"wall,{row},{s},step_us,{statistics.median(walls):.1f}", flush=True)
        total = 0.0
        for e in prof.key_averages():
            if e.device_type == torch.autograd.DeviceType.CUDA and e.count:
                us = e.device_time_total / STEPS
                total += us
                print(f"kernel,{row},{s},{e.key[:90].replace(',', ';')},{us:.1f}", flush=True)
        print(f"kernels,{row},{s},sum_us,{total:.1f}", flush=True)
    os.environ.pop(cb.SPLIT_ENV, None)
    del step
