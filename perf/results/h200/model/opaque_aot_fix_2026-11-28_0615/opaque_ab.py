"""A/B: compiled small blocks with the public ops opaque to dynamo (allow_in_graph) vs traced through."""
import sys, torch
import tilewright
import tilewright.ops._opaque as o
mode = sys.argv[1]
if mode == "traced":
    o._pending.clear()
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, o._AfterDynamoImport)]
import torch._dynamo
from torch._dynamo.utils import counters
from tilewright.bench import model
from tilewright.bench.common import loop_ms_alternating
model._raise_recompile_limit()
for tag in ("llama-small", "vit-small"):
    torch._dynamo.reset(); counters.clear()
    case = [c for c in model.SUITES["default"] if c.tag == tag][0]
    ref, ours = model.build_blocks(case, "cuda", torch.bfloat16)
    x = model.make_input(case, "cuda", torch.bfloat16).requires_grad_(True)
    cr, co = torch.compile(ref, dynamic=False), torch.compile(ours, dynamic=False)
    def fwd(b):
        def f():
            with torch.no_grad():
                b(x)
        return f
    def step(b):
        return lambda: b(x).sum().backward()
    fns = [fwd(cr), fwd(co), step(cr), step(co)]
    for f in fns:
        f(); f()
    torch.cuda.synchronize()
    ms = loop_ms_alternating(fns, warmup_ms=25, rep_ms=700)
    print(f"{mode} {tag}: fwd torch_compile {ms[0]:.3f} tw_compile {ms[1]:.3f} | fwd+bwd torch_compile {ms[2]:.3f} "
          f"tw_compile {ms[3]:.3f}", flush=True)
    print("  stats", dict(counters["stats"]), "graph_break", sum(counters["graph_break"].values()),
          "recompiles", dict(counters.get("recompiles", {})), flush=True)
    if tag == "vit-small":
        from torch.profiler import profile, ProfilerActivity
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
            for _ in range(10):
                fns[1]()
            torch.cuda.synchronize()
        print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=25), flush=True)
