"""ViT-L B8 fwd+bwd: residual GEMMs routed to the sm_90a kernel from K 2048 (A) vs Triton, as committed (B): GPU
time by kernel (torch.profiler) and wall per step, A B A B, then torch eager. NOT RUN yet (session 16 ran out of
device time): PYTHONPATH=src python perf/results/h100/model/vit_residual_route_ab_2026-11-27.py"""
import collections, time, torch
from torch.profiler import profile, ProfilerActivity
from tilewright import router
from tilewright.ops import _fast
from tilewright.cuda_fallback import gemm_sm90
from tilewright.bench import model
case = [c for c in model.SUITES["default"] if c.tag == "vit-prefill"][0]
ref, ours = model.build_blocks(case, "cuda", torch.bfloat16)
x = model.make_input(case, "cuda", torch.bfloat16)
def step(blk):
    blk.zero_grad(set_to_none=True); x.grad = None
    blk(x).sum().backward()
committed = gemm_sm90.preferred


def from_k2048(M, N, K, residual=False, **kw):  # session 16's measured rule: a row residual here from K 2048
    if residual == "rows" and K >= 2048:
        residual = False
    return committed(M, N, K, residual, **kw)


for cfg in ["A", "B", "A", "B", "torch"]:
    if cfg != "torch":
        gemm_sm90.preferred = from_k2048 if cfg == "A" else committed
        gemm_sm90.FAMILY.region = gemm_sm90.preferred
        router.invalidate(); _fast.invalidate()
    blk = ref if cfg == "torch" else ours
    for _ in range(3): step(blk)
    torch.cuda.synchronize(); t0 = time.perf_counter()
    for _ in range(20): step(blk)
    torch.cuda.synchronize(); wall = (time.perf_counter() - t0) / 20 * 1e3
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5): step(blk)
        torch.cuda.synchronize()
    agg = collections.defaultdict(lambda: [0.0, 0])
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            agg[e.name][0] += e.device_time_total; agg[e.name][1] += 1
    total = sum(v[0] for v in agg.values()) / 5 / 1000
    print(f"===== cfg {cfg}: wall {wall:.3f} ms/step, GPU {total:.3f} ms/step", flush=True)
    for k, (t, n) in sorted(agg.items(), key=lambda kv: -kv[1][0])[:14]:
        print(f"   {t / 5 / 1000:7.3f} ms x {n // 5:3d}  {k[:110]}", flush=True)
