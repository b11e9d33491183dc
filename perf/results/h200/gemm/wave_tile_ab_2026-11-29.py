"""The 192-column tile (gemm_sm90 coop128x192s4, written in session 34 on a CPU, not yet run) against the default
128 x 256 and cuBLAS, for the wave-quantization rule it was built for: per row the tile counts and the last wave's
fill on the card's SMs, then the plain GEMM (K-major weight, as nn.Linear's) and the folded-RMSNorm rstd-GEMM (sums
given) with each tile, cuBLAS's GEMM beside, CUDA-graph replays interleaved with the L2 flushed; outputs of the two
tiles compared (the same K order per element: expected bit-equal).

    PYTHONPATH=src python perf/results/h200/gemm/wave_tile_ab_2026-11-29.py > $OUT/wave_tile_ab.txt

Rows: issue 17's 3000 x 5120 x 5120 (480 tiles of 128 x 256 = 3.64 waves on 132 SMs; 648 of 128 x 192 = 4.91) and
rows where 128 x 256 fills its waves (8192 x 4096 x 4096: 7.76) or 128 x 192 does worse (2048 x 14336 x 4096: 6.79
against 9.09), the model benches' shapes. A rule (gemm_sm90.pick_variant) should follow only from these numbers."""
import torch

from tilewright.bench.common import graph_ms_alternating
from tilewright.cuda_fallback import gemm_sm90 as cg
from tilewright.cuda_fallback import rstd_gemm_sm90 as rg

TILES = ("coop128x256s3", "coop128x192s4")
ROWS = ((3000, 5120, 5120), (3000, 4096, 4096), (8192, 4096, 4096), (8192, 6144, 4096), (2048, 14336, 4096),
        (16384, 3072, 2048), (16384, 11264, 2048), (16384, 2048, 5632), (4096, 4096, 4096), (3000, 5000, 4000),
        (6000, 5120, 5120), (16384, 1024, 1024))
SMS = torch.cuda.get_device_properties(0).multi_processor_count
print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, {SMS} SMs", flush=True)


def waves(M, N, name):
    v = cg.VARIANTS[name]
    tiles = -(-M // v.bm) * -(-N // v.bn)
    return tiles, tiles / SMS


for M, N, K in ROWS:
    torch.manual_seed(M + N + K)
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(N, K, device="cuda") / K ** 0.5).to(torch.bfloat16)
    ss = x.float().square().sum(1)
    outs = {f"{kind} {t}": torch.empty(M, N, device="cuda", dtype=torch.bfloat16) for kind in ("gemm", "rstd")
            for t in TILES}
    fns = {}
    for t in TILES:
        fns[f"gemm {t}"] = lambda t=t: cg.launch_cuda_gemm(x, w.t(), outs[f"gemm {t}"], variant=t)
        fns[f"rstd {t}"] = lambda t=t: rg.launch_cuda_rstd_gemm(x, w.t(), outs[f"rstd {t}"], ss, None, 1e-6,
                                                              variant=t)
    z = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    fns["cublas"] = lambda: torch.mm(x, w.t(), out=z)
    for fn in fns.values():
        fn()
    torch.cuda.synchronize()
    ref = x.float() @ w.float().t()
    equal = {kind: torch.equal(outs[f"{kind} {TILES[0]}"], outs[f"{kind} {TILES[1]}"]) for kind in ("gemm", "rstd")}
    err = (outs[f"gemm {TILES[1]}"].float() - ref).abs().max().item()
    err_cublas = (z.float() - ref).abs().max().item()
    times = dict(zip(fns, graph_ms_alternating(list(fns.values()), calls=10, replays=15)))
    cub = times["cublas"]
    wave = " ".join(f"{t} {waves(M, N, t)[0]} tiles {waves(M, N, t)[1]:.2f} waves" for t in TILES)
    cols = " ".join(f"{k} {v * 1e3:.1f} ({v / cub:.3f})" for k, v in times.items() if k != "cublas")
    print(f"{M}x{N}x{K}: {wave} | {cols} | cublas {cub * 1e3:.1f} us | 192/256 gemm "
          f"{times['gemm ' + TILES[0]] / times['gemm ' + TILES[1]]:.3f} rstd "
          f"{times['rstd ' + TILES[0]] / times['rstd ' + TILES[1]]:.3f} (>1: 192 faster) | equal {equal} | max err "
          f"{err:.3g} (cublas {err_cublas:.3g})", flush=True)
