"""Issue 14 item 4's `odd` row (3000 x 5000 x 4000: the sm_90a kernel 1.10x cuBLAS's time with either tile in
session 35's wave A/B, where 3000 x 5120 x 5120 ran 0.99x on the 192-column tile): which dimension costs it - K = 4000
(rows of 8000 bytes: every 128-byte TMA box row straddles two 128-byte lines; a partial last k-block), N = 5000 (a
partial last tile column) or the waves. The plain GEMM (K-major weight, as nn.Linear's) on both tiles and cuBLAS,
graph replays interleaved with the L2 flushed, on the row and its neighbours with each dimension rounded up.

    PYTHONPATH=src python perf/results/h200/gemm/odd_shape_probe_2026-11-29.py > $OUT/odd_shape_probe.txt"""
import torch

from tilewright.bench.common import graph_ms_alternating
from tilewright.cuda_fallback import gemm_sm90 as cg

TILES = ("coop128x256s3", "coop128x192s4")
ROWS = ((3000, 5000, 4000), (3000, 5000, 4096), (3000, 5120, 4000), (3000, 5120, 4096), (3072, 5120, 4096),
        (3072, 5000, 4000))
print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
for M, N, K in ROWS:
    torch.manual_seed(M + N + K)
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(N, K, device="cuda") / K ** 0.5).to(torch.bfloat16)
    outs = {t: torch.empty(M, N, device="cuda", dtype=torch.bfloat16) for t in TILES}
    z = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    fns = {t: (lambda t=t: cg.launch_cuda_gemm(x, w.t(), outs[t], variant=t)) for t in TILES}
    fns["cublas"] = lambda: torch.mm(x, w.t(), out=z)
    for fn in fns.values():
        fn()
    torch.cuda.synchronize()
    err = max((outs[t].float() - z.float()).abs().max().item() for t in TILES)
    ms = dict(zip(fns, graph_ms_alternating(list(fns.values()), calls=10, replays=15)))
    print(f"{M}x{N}x{K} [pick {cg.pick_variant(M, N, K).name}]: "
          + " | ".join(f"{k} {v * 1e3:.1f} us ({v / ms['cublas']:.3f}x cuBLAS time)" for k, v in ms.items())
          + f" | max |ours - cuBLAS| {err:.3g}", flush=True)
