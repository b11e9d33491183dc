"""One sm_90a FP8 GEMM launch at 4096^3 with row-wise or block scales (argv[1]: row | block), after two warm-up
launches, for ncu (issue 19: the block-scaled build ran 0.61-0.83x the row-wise one; the stall reasons decide the
next change). Run under `ncu -k regex:tw_fp8 --launch-skip 2 --launch-count 1 ...`."""
import sys
import torch
from tilewright.cuda_fallback import fp8_gemm_sm90 as f8
M = N = K = 4096
a = torch.randn(M, K, device="cuda").to(torch.float8_e4m3fn)
b = torch.randn(N, K, device="cuda").to(torch.float8_e4m3fn).t()
out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
if sys.argv[1] == "row":
    sa, sb = torch.rand(M, 1, device="cuda") + 0.5, torch.rand(1, N, device="cuda") + 0.5
else:
    sa, sb = torch.rand(M, K // 128, device="cuda") + 0.5, torch.rand(K // 128, N // 128, device="cuda") + 0.5
for _ in range(3):
    f8.launch_fp8_gemm(a, b, sa, sb, out)
torch.cuda.synchronize()
print("done", sys.argv[1])
