"""Issue 17's last large row: rms_norm_linear with given sums at 3000 x 5120 x 5120 ran 1.077x the bare cuBLAS GEMM
(session 34; the other large rows 0.98-1.005x) - the folded rstd-GEMM takes the plain GEMM's static tile (coop 128 x
256 from M > 256: 24 x 20 = 480 tiles, 3.6 waves on 132 SMs, the last 64% full). Every tile variant of the rstd-GEMM
(rstd_gemm_sm90.VARIANTS, sums given) against cuBLAS's bare GEMM of the folded weight, CUDA-graph replays interleaved
with the L2 flushed, on the issue's large rows and the sums hand-off's; each variant's output checked against the
default's (same sums, same rstd: equal up to the tile's accumulation order, <= 1 bf16 ulp).

    PYTHONPATH=src python perf/results/h200/rms_norm_linear/rstd_tiles_2026-11-29.py > $OUT/rstd_tiles.txt"""
import torch

from tilewright.bench.common import graph_ms_alternating
from tilewright.cuda_fallback import rstd_gemm_sm90 as rg

ROWS = ((8192, 4096, 4096), (8192, 6144, 4096), (3000, 5120, 5120), (2048, 14336, 4096), (16384, 3072, 2048),
        (16384, 11264, 2048), (3000, 4096, 4096), (1000, 3000, 1536))
SMS = torch.cuda.get_device_properties(0).multi_processor_count
print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, {SMS} SMs", flush=True)
for M, N, K in ROWS:
    torch.manual_seed(M + N + K)
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    wt = (torch.randn(N, K, device="cuda") / K ** 0.5).to(torch.bfloat16)  # the folded weight g * W
    ss = x.float().square().sum(1)
    default = rg.pick_variant(M, N, K).name.removesuffix("-rstd")
    outs = {n: torch.empty(M, N, device="cuda", dtype=torch.bfloat16) for n in rg.VARIANTS}
    fns = [lambda n=n: rg.launch_cuda_rstd_gemm(x, wt.t(), outs[n], ss, None, 1e-6, variant=n) for n in rg.VARIANTS]
    xs = x * torch.rsqrt(ss / K + 1e-6)[:, None].to(x.dtype)  # (the bare GEMM's operand; its cost is not timed)
    z = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    fns.append(lambda: torch.mm(xs, wt.t(), out=z))
    for fn in fns:
        fn()
    torch.cuda.synchronize()
    ref = outs[default].float()
    diffs = {n: (o.float() - ref).abs().max().item() for n, o in outs.items()}
    times = graph_ms_alternating(fns, calls=10, replays=15)
    cub = times[-1]
    tiles = {n: -(-M // v.bm) * -(-N // v.bn) for n, v in rg.VARIANTS.items()}
    parts = " ".join(f"{n} {t * 1e3:.1f} ({t / cub:.3f}; {tiles[n]} tiles, diff {diffs[n]:.2g})"
                     for n, t in zip(rg.VARIANTS, times))
    best = min(zip(times, rg.VARIANTS))
    print(f"{M}x{N}x{K}: default {default} | {parts} | cublas {cub * 1e3:.1f} us | best {best[1]} "
          f"{best[0] / cub:.3f}x cublas, default {times[list(rg.VARIANTS).index(default)] / cub:.3f}x", flush=True)
