"""Kernel-time breakdown of one Llama prefill (B8 S2048) fwd+bwd step: torch eager, torch.compile, tilewright eager
(torch.profiler, CUDA time per kernel name, summed over 5 steps / 5)."""
import sys, collections, torch
from torch.profiler import profile, ProfilerActivity
from tilewright.bench import model
case = [c for c in model.SUITES["default"] if c.tag == sys.argv[1]][0]
ref, ours = model.build_blocks(case, "cuda", torch.bfloat16)
x = model.make_input(case, "cuda", torch.bfloat16)
allp = {"torch_eager": lambda: ref, "torch_compile": lambda: torch.compile(ref), "tilewright_eager": lambda: ours,
        "tilewright_compile": lambda: torch.compile(ours)}
provs = {k: allp[k]() for k in (sys.argv[2].split(",") if len(sys.argv) > 2 else allp)}
for name, blk in provs.items():
    def step():
        blk.zero_grad(set_to_none=True); x.grad = None
        blk(x).sum().backward()
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            step()
        torch.cuda.synchronize()
    agg = collections.defaultdict(lambda: [0.0, 0])
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            agg[e.name][0] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
            agg[e.name][1] += 1
    total = sum(v[0] for v in agg.values()) / 5 / 1000
    print(f"===== {case.tag} {name}: GPU {total:.3f} ms/step")
    for k, (t, n) in sorted(agg.items(), key=lambda kv: -kv[1][0])[:22]:
        print(f"  {t/5/1000:8.3f} ms x {n//5:3d}  {k[:110]}")
