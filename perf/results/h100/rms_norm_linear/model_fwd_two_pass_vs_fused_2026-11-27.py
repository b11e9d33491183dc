"""Llama B8 x S2048 forward (no grad): kernel times and wall per step, two-pass (default) vs fused (env 0)."""
import os, sys, time, collections, torch
from torch.profiler import profile, ProfilerActivity
from tilewright.bench import model
case = [c for c in model.SUITES["default"] if c.tag == sys.argv[1]][0]
ref, ours = model.build_blocks(case, "cuda", torch.bfloat16)
x = model.make_input(case, "cuda", torch.bfloat16)
for env in (None, "0", None, "0"):
    if env is None:
        os.environ.pop("TILEWRIGHT_RMS_TWO_PASS", None)
    else:
        os.environ["TILEWRIGHT_RMS_TWO_PASS"] = env
    with torch.no_grad():
        for _ in range(3):
            ours(x)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(20):
            ours(x)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                ours(x)
            torch.cuda.synchronize()
    agg = collections.defaultdict(float)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            agg[e.name[:60]] += e.device_time_total / 5 / 1000
    print(f"env={env}: host {(t1-t0)/20*1000:.3f} ms/step (launch only), wall {(t2-t0)/20*1000:.3f}, GPU {sum(agg.values()):.3f}")
    for k, v in sorted(agg.items(), key=lambda kv: -kv[1])[:8]:
        print(f"    {v:.3f} {k}")
