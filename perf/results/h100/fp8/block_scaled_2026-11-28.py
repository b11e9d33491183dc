"""Block-scaled FP8 GEMM vs rowwise (tilewright accurate mode) and cuBLASLt rowwise (torch._scaled_mm), CUDA-graph
timed, interleaved; plus quantize_fp8's time against a bf16 copy of the same tensor.
Argument: shapes MxNxK,... to time instead of the default list (then without the quantize_fp8 timing)."""
import sys
import torch
import tilewright
from tilewright.bench.common import graph_ms_alternating
print(torch.cuda.get_device_name(), torch.__version__, flush=True)
SHAPES = [(8192, 8192, 8192), (8192, 28672, 4096), (4096, 4096, 4096), (16, 4096, 4096), (1000, 3008, 1536)]
if len(sys.argv) > 1:  # e.g. 16x4096x4096,64x8192x8192: these shapes only, no quantize_fp8 timing
    SHAPES = [tuple(int(v) for v in s.split("x")) for s in sys.argv[1].split(",")]
for M, N, K in SHAPES:
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
if len(sys.argv) > 1:
    sys.exit(0)
x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
ms = graph_ms_alternating([lambda: tilewright.quantize_fp8(x, block=(1, 128)),
                           lambda: tilewright.quantize_fp8(x, block=(128, 128)), lambda: x.clone()])
gb = x.numel() * 3 / 1e9
print(f"quantize_fp8 8192x8192 bf16: (1,128) {ms[0]*1e3:.1f} us ({gb / ms[0] * 1e3:.0f} GB/s), (128,128) "
      f"{ms[1]*1e3:.1f} us, bf16 clone {ms[2]*1e3:.1f} us ({x.numel() * 4 / 1e9 / ms[2] * 1e3:.0f} GB/s)", flush=True)
