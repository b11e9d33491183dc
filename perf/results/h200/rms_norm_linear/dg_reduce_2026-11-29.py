"""dg's last reduction level (triton_kernels/rmsnorm_gemm._dg_reduce_kernel) alone: the (programs x K) fp32 partials
of the norm backward (programs = 4 x SMs = 528 on H200) summed over programs in float64, per (BLOCK_P, BLOCK_K)
tiling, against torch's `part.sum(0, dtype=torch.float64).to(torch.float32)` (what it replaced: a float64 copy of
the partials, the reduction, the conversion). CUDA graphs of 20 calls, interleaved, L2 flushed
(bench.common.graph_ms_alternating); bit-equality of every tiling's result with torch's.
`PYTHONPATH=src python perf/results/h200/rms_norm_linear/dg_reduce_2026-11-29.py`"""
import torch

from tilewright.bench.common import graph_ms_alternating
from tilewright.triton_kernels import rmsnorm_gemm as R

TILINGS = [(32, 128), (64, 64), (128, 32), (256, 16), (128, 64)]
P = 4 * torch.cuda.get_device_properties(0).multi_processor_count
print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, partials {P} x K; us a call", flush=True)
for K in (2048, 4096, 5120):
    part = torch.randn(P, K, device="cuda")
    ref = part.sum(0, dtype=torch.float64).to(torch.float32)

    def with_tiling(bp, bk):
        def run():
            R.DG_REDUCE_BLOCK_P, R.DG_REDUCE_BLOCK_K = bp, bk
            return R._reduce_dg(part)[0]
        return run

    fns = [with_tiling(*t) for t in TILINGS] + [lambda: part.sum(0, dtype=torch.float64).to(torch.float32)]
    same = [torch.equal(f(), ref) for f in fns[:-1]]
    ms = graph_ms_alternating(fns, calls=20, replays=15)
    cells = " ".join(f"{bp}x{bk} {t * 1e3:.1f}{'' if s else ' (DIFFERS)'}" for (bp, bk), t, s in zip(TILINGS, ms, same))
    print(f"K {K}: {cells} | torch {ms[-1] * 1e3:.1f}", flush=True)
