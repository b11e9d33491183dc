"""Compiled small blocks: torch.compile of the torch block vs torch.compile of the tilewright block traced with the
ATen route off (TILEWRIGHT_ATEN_BELOW=0 at trace time) and on (default), interleaved in one process. Each variant is
its own function (own dynamo cache entry), traced under its setting; a compiled graph keeps the route it was traced
with."""
import copy, os, sys
import torch
from tilewright.bench import model
from tilewright.bench.common import loop_ms_alternating

sizes = sys.argv[1:] or ["small"]
for case in model.SUITES["default"]:
    if case.size not in sizes:
        continue
    ref, ours = model.build_blocks(case, "cuda", torch.bfloat16)
    ours2 = copy.deepcopy(ours)
    x = model.make_input(case, "cuda", torch.bfloat16)
    # distinct code objects: dynamo's cache is per code object, and the two variants must not share a graph
    def kern_fn(x):
        return ours(x)

    def route_fn(x):
        return ours2(x)

    ref_c = torch.compile(ref, dynamic=False)
    kern_c = torch.compile(kern_fn, dynamic=False)
    route_c = torch.compile(route_fn, dynamic=False)
    for kind in ("fwd", "fwd+bwd"):
        def make(m, env):
            def step():
                if kind == "fwd":
                    with torch.no_grad():
                        m(x)
                else:
                    m(x).sum().backward()
            if env is not None:
                os.environ["TILEWRIGHT_ATEN_BELOW"] = env
            else:
                os.environ.pop("TILEWRIGHT_ATEN_BELOW", None)
            for _ in range(3):  # trace + compile under this setting
                step()
            os.environ.pop("TILEWRIGHT_ATEN_BELOW", None)
            return step
        fns = [make(ref, None), make(ref_c, None), make(kern_c, "0"), make(route_c, None)]
        t = loop_ms_alternating(fns, warmup_ms=50, rep_ms=400, repeats=9)
        print(f"{case.block}-{case.size} {kind:8s}: torch eager {t[0]:.3f} ms | torch.compile {t[1]:.3f} | "
              f"tw compiled, kernels {t[2]:.3f} ({t[1] / t[2]:.3f}x torch.compile) | tw compiled, ATen route "
              f"{t[3]:.3f} ({t[1] / t[3]:.3f}x torch.compile, {t[0] / t[3]:.3f}x eager)", flush=True)
