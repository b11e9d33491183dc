"""In-process A/B of the eager swiglu route at the small Llama layer: torch eager, tilewright (swiglu -> torch's
formula, the new route), tilewright (swiglu kernel), alternating runs of ~100 ms of queued steps; fwd (no grad) and
fwd+bwd. Then the compiled blocks' per-call CPU split (dynamo cache lookup / guards, compiled region) by profiler."""
import sys, torch
from torch.profiler import profile, ProfilerActivity
from tilewright.bench import model
from tilewright.bench.common import loop_ms_alternating
from tilewright.ops import _aten

orig = _aten.swiglu_formula_eager
case = [c for c in model.SUITES["default"] if c.tag == "llama-small"][0]
ref, ours = model.build_blocks(case, "cuda", torch.bfloat16)
x = model.make_input(case, "cuda", torch.bfloat16).requires_grad_(True)

def with_route(on, fn):
    def run():
        _aten.swiglu_formula_eager = orig if on else (lambda t: False)
        try:
            fn()
        finally:
            _aten.swiglu_formula_eager = orig
    return run

def fwd(blk):
    def f():
        with torch.no_grad():
            blk(x)
    return f

def step(blk):
    def f():
        blk(x).sum().backward()
    return f

names = ["torch", "tw formula", "tw kernel"]
for r in range(3):
    fw = loop_ms_alternating([fwd(ref), with_route(True, fwd(ours)), with_route(False, fwd(ours))], warmup_ms=100, rep_ms=700)
    st = loop_ms_alternating([step(ref), with_route(True, step(ours)), with_route(False, step(ours))], warmup_ms=100, rep_ms=700)
    print(f"round {r} fwd  " + "  ".join(f"{n} {v:.4f}" for n, v in zip(names, fw)) + f"  | ratio torch/formula {fw[0]/fw[1]:.3f} torch/kernel {fw[0]/fw[2]:.3f}")
    print(f"round {r} step " + "  ".join(f"{n} {v:.4f}" for n, v in zip(names, st)) + f"  | ratio torch/formula {st[0]/st[1]:.3f} torch/kernel {st[0]/st[2]:.3f}", flush=True)

# compiled: where the per-call host goes
cref, cours = torch.compile(ref), torch.compile(ours)
for name, blk in (("torch_compile", cref), ("tilewright_compile", cours)):
    for _ in range(5):
        blk(x).sum().backward()
    with torch.no_grad():
        for _ in range(5): blk(x)
    torch.cuda.synchronize()
    for mode in ("fwd", "step"):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(20):
                if mode == "fwd":
                    with torch.no_grad():
                        blk(x)
                else:
                    blk(x).sum().backward()
            torch.cuda.synchronize()
        ka = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:14]
        print(f"===== {name} {mode}: top self-CPU per call")
        for e in ka:
            print(f"   {e.self_cpu_time_total / 20:8.1f} us x{e.count / 20:5.1f}  {e.key[:90]}")
st = loop_ms_alternating([fwd(cref), fwd(cours)], warmup_ms=100, rep_ms=700)
print(f"compiled fwd torch {st[0]:.4f} tilewright {st[1]:.4f} ratio {st[0]/st[1]:.3f}")
