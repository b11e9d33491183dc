"""sm_90a CUDA FP8 GEMM (fp8_gemm_sm90) vs cuBLASLt (torch._scaled_mm) and the Triton scaled_mm, row-wise scales,
bf16 output, accurate (promotion every k-block, and every 2: cuda_p2) and fast accumulation; CUDA-graph timed,
providers interleaved (bench.common); block scales (1 x 128 / 128 x 128) in both kernels. Argument: MxNxK,...
shapes. (The 0725 run had neither cuda_p2, triton nor the block columns.)"""
import sys
import torch
import tilewright
from tilewright.bench.common import graph_ms_alternating
from tilewright.cuda_fallback import fp8_gemm_sm90 as f8
print(torch.cuda.get_device_name(), torch.__version__, flush=True)
SHAPES = [(8192, 8192, 8192), (8192, 28672, 4096), (4096, 4096, 4096), (1000, 3008, 1536), (16, 4096, 4096)]
if len(sys.argv) > 1:
    SHAPES = [tuple(int(v) for v in s.split("x")) for s in sys.argv[1].split(",")]
for M, N, K in SHAPES:
    a = torch.randn(M, K, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(N, K, device="cuda").to(torch.float8_e4m3fn).t()
    sa, sb = torch.rand(M, 1, device="cuda") + 0.5, torch.rand(1, N, device="cuda") + 0.5
    out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    fns = {"cublaslt": lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16),
           "cuda": lambda: f8.launch_fp8_gemm(a, b, sa, sb, out),
           "cuda_p2": lambda: f8.launch_fp8_gemm(a, b, sa, sb, out, variant=f8.PROMOTE2_VARIANT),
           "triton": lambda: tilewright.scaled_mm(a, b, sa, sb, backend="triton"),
           "cublaslt_fast": lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True),
           "cuda_fast": lambda: f8.launch_fp8_gemm(a, b, sa, sb, out, use_fast_accum=True)}
    kb, nb = -(-K // 128), -(-N // 128)
    sa_b, sb_b = torch.rand(M, kb, device="cuda") + 0.5, torch.rand(kb, nb, device="cuda") + 0.5
    if N % 128 == 0:
        fns["cuda_blk"] = lambda: f8.launch_fp8_gemm(a, b, sa_b, sb_b, out)
    fns["triton_blk"] = lambda: tilewright.scaled_mm(a, b, sa_b, sb_b, backend="triton")
    for f in fns.values():
        f()
    torch.cuda.synchronize()
    ms = dict(zip(fns, graph_ms_alternating(list(fns.values()))))
    fl = 2 * M * N * K
    print(f"{M}x{N}x{K} " + "  ".join(f"{k} {m * 1e3:.1f} us ({fl / m / 1e9:.0f} TF/s)" for k, m in ms.items())
          + f" | cuda/cublaslt {ms['cublaslt'] / ms['cuda']:.3f}, p2 {ms['cublaslt'] / ms['cuda_p2']:.3f}, "
          f"triton {ms['cublaslt'] / ms['triton']:.3f}, fast {ms['cublaslt_fast'] / ms['cuda_fast']:.3f}, "
          f"block cuda / triton {ms['triton_blk'] / ms.get('cuda_blk', float('nan')):.3f}",
          flush=True)
