"""Why does the small blocks' training step take longer than its host time? Step host time (GPU held by a sleep
kernel), loop wall, gc off, allocator counters, CUDA runtime calls by the profiler - torch vs tilewright."""
import gc, statistics, sys, time
import torch
from torch.profiler import profile, ProfilerActivity
from tilewright.bench import model

def step_fn(blk, x):
    def step():
        blk(x).sum().backward()
    return step

def host_ms(fn, n=10, reps=7):
    out = []
    for _ in range(reps):
        torch.cuda.synchronize(); torch.cuda._sleep(int(100e6))
        t0 = time.perf_counter()
        for _ in range(n): fn()
        out.append((time.perf_counter() - t0) / n * 1e3)
    torch.cuda.synchronize()
    return statistics.median(out)

def wall_ms(fn, n=50, reps=5):
    out = []
    for _ in range(reps):
        torch.cuda.synchronize(); t0 = time.perf_counter()
        for _ in range(n): fn()
        torch.cuda.synchronize(); out.append((time.perf_counter() - t0) / n * 1e3)
    return statistics.median(out)

for tag in sys.argv[1].split(","):
    case = [c for c in model.SUITES["default"] if c.tag == tag][0]
    ref, ours = model.build_blocks(case, "cuda", torch.bfloat16)
    x = model.make_input(case, "cuda", torch.bfloat16).requires_grad_(True)
    steps = {"torch": step_fn(ref, x), "tilewright": step_fn(ours, x)}
    for f in steps.values():
        for _ in range(10): f()
    for r in range(2):
        for name, f in steps.items():
            h = host_ms(f); w = wall_ms(f)
            gc.disable(); wg = wall_ms(f); gc.enable()
            s0 = torch.cuda.memory_stats()
            for _ in range(50): f()
            torch.cuda.synchronize(); s1 = torch.cuda.memory_stats()
            d = {k: s1.get(k, 0) - s0.get(k, 0) for k in ("num_alloc_retries", "num_device_alloc", "num_device_free",
                                                          "allocation.all.allocated")}
            print(f"{tag} {name:10s} step host {h:.3f} ms | wall {w:.3f} | wall gc off {wg:.3f} | 50 steps: {d}",
                  flush=True)
    for name, f in steps.items():
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(10): f()
            torch.cuda.synchronize()
        ka = prof.key_averages()
        rows = sorted(ka, key=lambda e: -e.self_cpu_time_total)[:25]
        print(f"===== {tag} {name}: top self-CPU events over 10 steps (us per step, calls per step)")
        for e in rows:
            print(f"   {e.self_cpu_time_total / 10:9.1f} us  x{e.count / 10:6.1f}  {e.key[:100]}")
        cuda_rt = [e for e in ka if e.key.startswith(("cuda", "cu"))]
        print("   runtime calls:", ", ".join(f"{e.key} x{e.count/10:.0f} {e.self_cpu_time_total/10:.0f}us" for e in sorted(cuda_rt, key=lambda e: -e.self_cpu_time_total)[:10]))
        prof.export_chrome_trace(f"/tmp/trace_{tag}_{name}.json")
