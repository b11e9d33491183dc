"""Where the Llama B1 forward's host time goes (session 41): the compiled tilewright block ran 0.333 ms a forward
against torch.compile's 0.261 with the same 12 kernels (prof_b1_fwd_s41.txt), the eager one 0.643 ms on 0.135 ms
of kernels. Prints dynamo's graph / break count for both builds, then cProfile's top functions (by own time and by
cumulative time) over 300 forwards of: the compiled torch block, the compiled tilewright block, the tilewright block
eager, torch eager.

    python host_b1_diag_s41.py [grad]
"""
import cProfile
import pstats
import sys
import time

import torch

from tilewright.bench import model

grad = len(sys.argv) > 1 and sys.argv[1] == "grad"
model._raise_recompile_limit()
case = [c for c in model.SUITES["default"] if c.tag == "llama-small"][0]
ref, ours = model.build_blocks(case, "cuda", torch.bfloat16)
x = model.make_input(case, "cuda", torch.bfloat16)
print(torch.cuda.get_device_name(), torch.__version__, "grad" if grad else "no_grad", flush=True)

ctx = torch.enable_grad if grad else torch.no_grad
for name, blk in (("torch", ref), ("tilewright", ours)):
    torch._dynamo.reset()
    with ctx():
        ex = torch._dynamo.explain(blk)(x)
    print(f"explain {name}: graphs {ex.graph_count}, breaks {ex.graph_break_count}, ops {ex.op_count}")
    for r in ex.break_reasons[:5]:
        print("   break:", str(r.reason)[:200])
torch._dynamo.reset()

builds = {"torch_compile": torch.compile(ref, dynamic=False), "tw_compile": torch.compile(ours, dynamic=False),
          "tw_eager": ours, "torch_eager": ref}


def run(blk, n):
    with ctx():
        for _ in range(n):
            y = blk(x)
            if grad:
                y.sum().backward()


for name, blk in builds.items():
    run(blk, 5)
    torch.cuda.synchronize()
    t = time.perf_counter()
    run(blk, 300)
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t) / 300 * 1e6
    prof = cProfile.Profile()
    prof.enable()
    run(blk, 300)
    torch.cuda.synchronize()
    prof.disable()
    print(f"\n===== {name}: {wall:.1f} us a call (unprofiled)")
    st = pstats.Stats(prof)
    st.sort_stats("tottime").print_stats(18)
    st.sort_stats("cumulative").print_stats(28)
