"""Is the unexplained part of the attention op's fwd + bwd host time Python's garbage collector? (issue 15: a B1 x
16 x 1024 step's host time varied 420-800 us between runs of the same code, ~200-400 us more than its forward, its
backward op and autograd's own cost add up to.) Per row and peer: host us per step of STEPS queued steps (median of 5
runs) with the collector on and off, the collections per generation and the time spent in them per step (gc
callbacks), and the objects a step leaves to the collector (gc.collect() after the steps). Run: PYTHONPATH=src python
bwd_host_gc_2026-11-29.py."""
import gc
import os
import time

os.environ.setdefault("TILEWRIGHT_ATEN_BELOW", "0")
os.environ.setdefault("TILEWRIGHT_CUDA_ATTN_BWD", "1")
import torch
from attention_steps import Step, per_step_us, row_name

ROWS = ((1, 16, 16, 1024, 128, True), (1, 28, 4, 3000, 96, True))
STEPS = 50
print(torch.cuda.get_device_name(), torch.__version__, "gc thresholds", gc.get_threshold(),
      "objects tracked", len(gc.get_objects()), flush=True)
stats = {"n": [0, 0, 0], "t": 0.0, "t0": 0.0}


def on_gc(phase, info):
    if phase == "start":
        stats["t0"] = time.perf_counter()
    else:
        stats["n"][info["generation"]] += 1
        stats["t"] += time.perf_counter() - stats["t0"]


gc.callbacks.append(on_gc)


for (B, Hq, Hkv, S, D, causal) in ROWS:
    row = row_name(B, Hq, Hkv, S, D, causal)
    torch.manual_seed(0)
    step = Step(B, Hq, Hkv, S, D, causal)
    tw, sd = step.tw, step.sd

    for fn in (tw, sd):
        for _ in range(10):
            fn()
    for name, fn in (("tw", tw), ("cudnn", sd)):
        for collector in ("on", "off"):
            (gc.enable if collector == "on" else gc.disable)()
            stats.update(n=[0, 0, 0], t=0.0)
            runs = sorted(per_step_us(fn, STEPS)[0] for _ in range(5))
            listed = ", ".join(f"{r:.0f}" for r in runs)
            print(f"{row},{name},gc {collector}: host us/step {runs[2]:.1f} (runs {listed}); "
                  f"collections gen0/1/2 {stats['n']} in {5 * STEPS} steps, {stats['t'] / (5 * STEPS) * 1e6:.1f} us "
                  f"a step in the collector", flush=True)
        gc.enable()
        gc.collect()
        for _ in range(STEPS):
            fn()
        found = gc.collect()
        print(f"{row},{name}: {found / STEPS:.1f} unreachable objects a step left to the collector", flush=True)
        if found:
            gc.set_debug(gc.DEBUG_SAVEALL)
            fn()
            gc.collect()
            kinds = {}
            for o in gc.garbage:
                kinds[type(o).__name__] = kinds.get(type(o).__name__, 0) + 1
            print(f"{row},{name}: garbage of one step by type: {sorted(kinds.items(), key=lambda x: -x[1])[:12]}",
                  flush=True)
            gc.set_debug(0)
            gc.garbage.clear()
    del step
