"""Small-step wall per step (median of 7 runs of 20 steps), torch and tilewright alternating in one process."""
import statistics, sys, time
import torch
from tilewright.bench import model
out = []
for case in model.SUITES["default"]:
    if case.size != "small":
        continue
    ref, ours = model.build_blocks(case, "cuda", torch.bfloat16)
    x = model.make_input(case, "cuda", torch.bfloat16)
    res = {"torch": [], "tilewright": []}
    fns = {"torch": lambda: ref(x).sum().backward(), "tilewright": lambda: ours(x).sum().backward()}
    for f in fns.values():
        for _ in range(5):
            f()
    for _ in range(7):
        for name, f in fns.items():
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(20):
                f()
            torch.cuda.synchronize()
            res[name].append((time.perf_counter() - t0) / 20 * 1e3)
    t, o = statistics.median(res["torch"]), statistics.median(res["tilewright"])
    print(f"{case.block}-small fwd+bwd: torch {t:.3f} ms tilewright {o:.3f} ms ratio {t / o:.3f}", flush=True)
