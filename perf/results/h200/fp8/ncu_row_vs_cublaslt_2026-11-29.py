"""One sm_90a FP8 GEMM launch, row-wise scales in accurate mode (tilewright's CUDA kernel: argv[1] == "tw"), or
torch._scaled_mm's cuBLASLt kernel (argv[1] == "cublaslt"), after warm-up launches, for ncu (issue 19: accurate mode
runs 0.91-0.94x cuBLASLt; its kernel name gives cuBLASLt's tile and cluster shape, its sections the L2 and tensor pipe
load beside ours). argv[2]: M=N=K (default 8192). Run under `ncu --launch-skip 3 --launch-count 1 ...`."""
import sys

import torch

from tilewright.cuda_fallback import fp8_gemm_sm90 as f8

M = N = K = int(sys.argv[2]) if len(sys.argv) > 2 else 8192
a = torch.randn(M, K, device="cuda").to(torch.float8_e4m3fn)
b = torch.randn(N, K, device="cuda").to(torch.float8_e4m3fn).t()
sa, sb = torch.rand(M, 1, device="cuda") + 0.5, torch.rand(1, N, device="cuda") + 0.5
out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
for _ in range(4):
    if sys.argv[1] == "tw":
        f8.launch_fp8_gemm(a, b, sa, sb, out)
    else:
        torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=False)
torch.cuda.synchronize()
print("done", sys.argv[1], M)
