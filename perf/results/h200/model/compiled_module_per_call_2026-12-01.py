"""Issue 14 item 3's per-call row, measured as the issue measured it: ``torch.compile`` (default and
``mode="reduce-overhead"``) of ``tilewright.nn.Linear(1536, 3000, activation="gelu")`` against the same module in torch
ops (``nn.Linear`` + ``nn.GELU``), x (1000, 1536) bf16, with and without autograd (with: forward, then backward of
the output against a fixed gradient), default tuning (no sweep at a new shape). Per call: steady-state loops of
calls queued back to back, the four providers of a row timed interleaved (bench.common.loop_ms_alternating);
``reduce-overhead`` calls ``torch.compiler.cudagraph_mark_step_begin()`` before each step, as its documentation asks
for a training loop. Target: tilewright <= 1.1x torch's per-call time.

    PYTHONPATH=src python perf/results/h200/model/compiled_module_per_call_2026-12-01.py > $OUT/compiled_per_call.txt"""
import warnings

import torch
import torch.nn as nn

import tilewright
from tilewright.bench.common import loop_ms_alternating

warnings.filterwarnings("ignore")
print(torch.cuda.get_device_name(), torch.__version__, flush=True)
torch.manual_seed(0)
dev, dt = "cuda", torch.bfloat16
ours = tilewright.nn.Linear(1536, 3000, activation="gelu", device=dev, dtype=dt)
ref = nn.Sequential(nn.Linear(1536, 3000, device=dev, dtype=dt), nn.GELU())
with torch.no_grad():
    ref[0].weight.copy_(ours.weight)
    ref[0].bias.copy_(ours.bias)
x = torch.randn(1000, 1536, device=dev, dtype=dt)
xg = x.clone().requires_grad_(True)
dy = torch.randn(1000, 3000, device=dev, dtype=dt)


def step_fn(module, mode, grad):
    fn = torch.compile(module, mode=mode)
    mark = torch.compiler.cudagraph_mark_step_begin if mode == "reduce-overhead" else (lambda: None)
    if grad:
        def step():
            mark()
            y = fn(xg)
            y.backward(dy)
            return y
        return step

    def step():
        mark()
        with torch.no_grad():
            return fn(x)
    return step


for grad in (False, True):
    steps = {}
    for mode in ("default", "reduce-overhead"):
        for name, module in (("torch", ref), ("tilewright", ours)):
            steps[(mode, name)] = step_fn(module, mode, grad)
            for _ in range(3):
                steps[(mode, name)]()  # compile, warm up (and the cudagraph recording)
    torch.cuda.synchronize()
    with torch.no_grad():
        want = ref(x).float()
        err = (ours(x).float() - want).abs().max().item()
    for r in range(3):
        ms = dict(zip(steps, loop_ms_alternating(list(steps.values()), rep_ms=200)))
        print(f"grad={grad} round {r}: " + " | ".join(
            f"{mode}: torch {ms[(mode, 'torch')] * 1e3:.1f} us, tilewright {ms[(mode, 'tilewright')] * 1e3:.1f} us "
            f"({ms[(mode, 'tilewright')] / ms[(mode, 'torch')]:.3f}x)" for mode in ("default", "reduce-overhead"))
            + f" | eager max |diff| {err:.3g}", flush=True)
