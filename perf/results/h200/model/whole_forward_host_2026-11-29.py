"""Why the Llama / ViT B1 x S512 tilewright forward costs ~1 ms of wall a step when its ops, timed alone, sum to
~0.32 ms (perf/results/h200/model/kernels_llama-small_fwd_*: GPU 0.135 ms/step): queued loops of 20 forwards
(no_grad, no sleep ahead, so the launch queue never fills), cProfile of 200 forwards synchronised every 20, and the
CPU-side op times of torch.profiler. `PYTHONPATH=src python perf/results/h200/model/whole_forward_host_2026-11-29.py`"""
import cProfile
import io
import pstats
import statistics
import sys
import time
import warnings

import torch
from torch.profiler import ProfilerActivity, profile

from tilewright.bench import model

warnings.filterwarnings("ignore")
tags = sys.argv[1].split(",") if len(sys.argv) > 1 else ["llama-small", "vit-small"]
print(torch.cuda.get_device_name(), torch.__version__, flush=True)


def wall_ms(fn, steps=20, loops=7):
    out = []
    for _ in range(loops):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) / steps * 1e3)
    return statistics.median(out)


with torch.no_grad():
    for tag in tags:
        case = [c for c in model.SUITES["default"] if c.tag == tag][0]
        ref, ours = model.build_blocks(case, "cuda", torch.bfloat16)
        x = model.make_input(case, "cuda", torch.bfloat16)
        for _ in range(5):
            ref(x), ours(x)
        for r in range(3):
            print(f"{tag} wall/step: torch {wall_ms(lambda: ref(x)):.3f} ms, tilewright {wall_ms(lambda: ours(x)):.3f} ms",
                  flush=True)
        pr = cProfile.Profile()
        torch.cuda.synchronize()
        pr.enable()
        for i in range(200):
            ours(x)
            if i % 20 == 19:
                torch.cuda.synchronize()
        pr.disable()
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(25)
        print(f"----- cProfile {tag} tilewright forward x200 (tottime; synced every 20)\n" + s.getvalue(), flush=True)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(20):
                ours(x)
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25), flush=True)
        del ref, ours, x
        torch.cuda.empty_cache()
