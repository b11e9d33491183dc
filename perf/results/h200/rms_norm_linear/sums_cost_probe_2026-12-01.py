"""Issue 17: what the folded forward's in-kernel sums of squares cost, apart from the -xf build they run in. Session 36's
fold paths (wave_fold_paths_s36.txt): 3000 x 5120 x 5120 on the 192-column in-kernel build 1.089x bare cuBLAS against
1.016x for the plain rstd GEMM with the sums given (1.022 vs 1.001x on the 256 tile at 8192 x 4096 x 4096). The
difference has two parts: the transform warps' reads of every x stage, and the -xf build itself (registers split
with three transform warps, their barrier arrivals). The "-noread" debug builds keep the second and drop the first
(wrong outputs: timing only). If -noread runs near the sums-given time, the reads are the cost and summing once per
row block (perf/LOG.md session 36) pays; if near the in-kernel time, the build's structure is.
Graph replays interleaved, L2 flushed, bf16.

    PYTHONPATH=src python perf/results/h200/rms_norm_linear/sums_cost_probe_2026-12-01.py > $OUT/sums_cost_probe.txt

``--once`` adds the in-kernel build summing once a row block (``row_counts``: what the op now launches) and checks
its output bit-equal to the every-tile build's."""
import sys

import torch
import torch.nn.functional as F

from tilewright.bench.common import graph_ms_alternating
from tilewright.cuda_fallback import rmsnorm_gemm_sm90 as rn
from tilewright.cuda_fallback import rstd_gemm_sm90 as rg

EPS = 1e-6
print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
for M, N, K, tile in ((3000, 5120, 5120, "coop128x192s4"), (6000, 5120, 5120, "coop128x192s4"),
                      (8192, 4096, 4096, "coop128x256s3"), (2048, 14336, 4096, "coop128x256s3")):
    torch.manual_seed(M + N)
    x = torch.randn(M, K, device="cuda").bfloat16()
    w = (torch.randn(N, K, device="cuda") / K ** 0.5).bfloat16()
    wg = (w.float() * (1 + 0.1 * torch.randn(K, device="cuda"))).bfloat16()
    ss_given = x.float().square().sum(1)
    bufs = {}

    def out(name):
        return bufs.setdefault(name, (torch.empty(M, N, device="cuda", dtype=torch.bfloat16),
                                      torch.empty(M, device="cuda")))

    def in_kernel(variant, once=False):
        y, rstd = out(variant + (" once" if once else ""))
        v = {**rn.READ_ONLY_VARIANTS, **rn.DEBUG_VARIANTS}[variant]
        counts = torch.empty(-(-M // v.bm), device="cuda", dtype=torch.int32) if once else None
        return lambda: rn.launch_cuda_rmsnorm_gemm(x, wg[0], wg.t(), y, rstd, EPS, variant=v, row_counts=counts)

    def given(variant):
        y, rstd = out("given " + variant)
        return lambda: rg.launch_cuda_rstd_gemm(x, wg.t(), y, ss_given, rstd, EPS, variant=variant)

    fns = {"in-kernel": in_kernel(f"{tile}-xf-roov"), "in-kernel -noread": in_kernel(f"{tile}-xf-roov-noread"),
           "rstd (sums given)": given(tile), "cublas": lambda: F.linear(x, w)}
    if "--once" in sys.argv:
        fns["in-kernel once"] = in_kernel(f"{tile}-xf-roov", once=True)
    for fn in fns.values():
        fn()
    torch.cuda.synchronize()
    err = (bufs[f"{tile}-xf-roov"][0].float() - bufs["given " + tile][0].float()).abs().max().item()
    if "--once" in sys.argv:
        every, once = bufs[f"{tile}-xf-roov"], bufs[f"{tile}-xf-roov once"]
        assert torch.equal(every[0], once[0]) and torch.equal(every[1], once[1]), "once != every tile"
    with torch.no_grad():
        ms = dict(zip(fns, graph_ms_alternating(list(fns.values()), calls=10, replays=15)))
    print(f"{M}x{N}x{K} [{tile}]: " + " | ".join(f"{k} {v * 1e3:.1f} us ({v / ms['cublas']:.3f}x)"
                                               for k, v in ms.items())
          + f" | max |in-kernel - given| {err:.3g}", flush=True)
