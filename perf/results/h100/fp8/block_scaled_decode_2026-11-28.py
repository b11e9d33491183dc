"""Block-scaled FP8 GEMM vs rowwise (tilewright accurate mode) and cuBLASLt rowwise (torch._scaled_mm), CUDA-graph
timed, interleaved; plus quantize_fp8's time against a bf16 copy of the same tensor."""
import torch
import tilewright
from tilewright.bench.common import graph_ms_alternating
print(torch.cuda.get_device_name(), torch.__version__, flush=True)
for M, N, K in [(16, 4096, 4096), (64, 8192, 8192), (128, 4096, 4096), (4096, 4096, 4096)]:
    a = (torch.randn(M, K, device="cuda")).to(torch.float8_e4m3fn)
    b = torch.randn(N, K, device="cuda").to(torch.float8_e4m3fn).t()
    sa_r, sb_r = torch.rand(M, 1, device="cuda") + 0.5, torch.rand(1, N, device="cuda") + 0.5
    kb, nb = -(-K // 128), -(-N // 128)
    sa_b, sb_b = torch.rand(M, kb, device="cuda") + 0.5, torch.rand(kb, nb, device="cuda") + 0.5
    fns = {"cublaslt_rowwise": lambda: torch._scaled_mm(a, b, sa_r, sb_r, out_dtype=torch.bfloat16),
           "tw_rowwise": lambda: tilewright.scaled_mm(a, b, sa_r, sb_r),
           "tw_block": lambda: tilewright.scaled_mm(a, b, sa_b, sb_b)}
    for f in fns.values():
        f()
    ms = graph_ms_alternating(list(fns.values()))
    fl = 2 * M * N * K
    print(f"{M}x{N}x{K} " + "  ".join(f"{k} {m*1e3:.1f} us ({fl / m / 1e9:.0f} TF/s)" for k, m in zip(fns, ms))
          + f" | block/rowwise speed {ms[1] / ms[2]:.3f}, block/cublaslt {ms[0] / ms[2]:.3f}", flush=True)
