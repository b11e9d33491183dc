"""Block-scaled CUDA FP8 (scales a k-block ahead) vs its row-wise build, the Triton block mode and cuBLASLt row-wise."""
import torch
import tilewright
from tilewright.bench.common import graph_ms_alternating
from tilewright.cuda_fallback import fp8_gemm_sm90 as f8
print(torch.cuda.get_device_name(), torch.__version__, flush=True)
for M, N, K in [(8192, 8192, 8192), (8192, 28672, 4096), (4096, 4096, 4096), (2048, 3072, 1536), (1000, 3072, 1536)]:
    a = torch.randn(M, K, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(N, K, device="cuda").to(torch.float8_e4m3fn).t()
    sa, sb = torch.rand(M, 1, device="cuda") + 0.5, torch.rand(1, N, device="cuda") + 0.5
    kb, nb = -(-K // 128), -(-N // 128)
    sa_b, sb_b = torch.rand(M, kb, device="cuda") + 0.5, torch.rand(kb, nb, device="cuda") + 0.5
    out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    fns = {"cublaslt": lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16),
           "cuda_row": lambda: f8.launch_fp8_gemm(a, b, sa, sb, out),
           "cuda_blk": lambda: f8.launch_fp8_gemm(a, b, sa_b, sb_b, out),
           "triton_blk": lambda: tilewright.scaled_mm(a, b, sa_b, sb_b, backend="triton"),
           "op_blk": lambda: tilewright.scaled_mm(a, b, sa_b, sb_b)}
    for f in fns.values():
        f()
    torch.cuda.synchronize()
    ms = dict(zip(fns, graph_ms_alternating(list(fns.values()))))
    fl = 2 * M * N * K
    print(f"{M}x{N}x{K} " + "  ".join(f"{k} {m * 1e3:.1f} us ({fl / m / 1e9:.0f} TF/s)" for k, m in ms.items())
          + f" | blk/row {ms['cuda_row'] / ms['cuda_blk']:.3f}, blk vs cublaslt row {ms['cublaslt'] / ms['cuda_blk']:.3f}"
          f", cuda/triton blk {ms['triton_blk'] / ms['cuda_blk']:.3f}", flush=True)
