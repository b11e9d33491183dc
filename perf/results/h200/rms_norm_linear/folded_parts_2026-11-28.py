"""Where the folded forward's time goes (sum-of-squares pass, rstd GEMM, bare GEMM) and a profile of fwd+bwd."""
import os, torch, torch.nn.functional as F
import tilewright
from tilewright.bench.common import graph_ms_alternating
from tilewright.cuda_fallback import gemm_sm90, rstd_gemm_sm90
from tilewright.triton_kernels.rmsnorm_gemm import launch_row_sumsq, launch_rmsnorm_fwd
EPS = 1e-6
for M, N, K in [(8192, 4096, 4096), (2048, 14336, 4096), (3000, 5120, 5120)]:
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    g = (1 + 0.1 * torch.randn(K, device="cuda")).bfloat16()
    w = (torch.randn(N, K, device="cuda") / K ** 0.5).bfloat16()
    wg = w * g
    out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    ss = torch.empty(M, device="cuda")
    rstd = torch.empty(M, device="cuda")
    launch_row_sumsq(x, ss)
    fns = {"sumsq": lambda: launch_row_sumsq(x, ss), "norm_pass": lambda: launch_rmsnorm_fwd(x, g, rstd, EPS),
           "rstd_gemm": lambda: rstd_gemm_sm90.launch_cuda_rstd_gemm(x, wg.t(), out, ss, rstd, EPS),
           "bare_cuda": lambda: gemm_sm90.launch_cuda_gemm(x, w.t(), out), "bare_cublas": lambda: F.linear(x, w),
           "fold": lambda: torch.mul(w, g), "x_copy": lambda: x.clone()}
    ms = dict(zip(fns, graph_ms_alternating(list(fns.values()))))
    print(f"{M}x{N}x{K}: " + "  ".join(f"{k} {v * 1e3:.1f}us" for k, v in ms.items()) +
          f" | sumsq GB/s {M * K * 2 / ms['sumsq'] / 1e6:.0f}, copy GB/s {2 * M * K * 2 / ms['x_copy'] / 1e6:.0f}",
          flush=True)
import sys
if len(sys.argv) < 2: sys.exit(0)
from torch.profiler import profile, ProfilerActivity
M, N, K = 8192, 4096, 4096
x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, requires_grad=True)
g = (1 + 0.1 * torch.randn(K, device="cuda")).bfloat16().requires_grad_()
w = (torch.randn(N, K, device="cuda") / K ** 0.5).bfloat16().requires_grad_()
dy = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
for mode in ("nocache", "0"):
    os.environ["TILEWRIGHT_RMS_FOLDED"] = mode
    for _ in range(3):
        torch.autograd.backward(tilewright.rms_norm_linear(x, g, w, eps=EPS), dy)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            torch.autograd.backward(tilewright.rms_norm_linear(x, g, w, eps=EPS), dy)
        torch.cuda.synchronize()
    print(f"==== mode {mode}", flush=True)
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=14, max_name_column_width=60), flush=True)
