"""Folded forward: the sum of squares in-kernel - read-only transform warps gating the consumers (-ro) and overlapping them (-roov, the readers in the stage release) - vs the pre-pass + rstd GEMM vs bare GEMMs. (Not yet run.)"""
import torch, torch.nn.functional as F
import tilewright
from tilewright.bench.common import graph_ms_alternating
from tilewright.cuda_fallback import gemm_sm90, rstd_gemm_sm90, rmsnorm_gemm_sm90 as rn
from tilewright.triton_kernels.rmsnorm_gemm import launch_row_sumsq
EPS = 1e-6
print(torch.cuda.get_device_name(), torch.__version__, flush=True)
pair = lambda x, g, w: F.linear(F.rms_norm(x, (x.shape[-1],), g, EPS), w)
for M, N, K in [(8192, 4096, 4096), (8192, 6144, 4096), (2048, 14336, 4096), (16384, 3072, 2048), (16384, 11264, 2048)]:
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    g = (1 + 0.1 * torch.randn(K, device="cuda")).bfloat16()
    w = (torch.randn(N, K, device="cuda") / K ** 0.5).bfloat16()
    wg = w * g
    out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    ss, rstd = torch.empty(M, device="cuda"), torch.empty(M, device="cuda")
    def pre():
        launch_row_sumsq(x, ss)
        rstd_gemm_sm90.launch_cuda_rstd_gemm(x, wg.t(), out, ss, rstd, EPS)
    fns = {"op": lambda: tilewright.rms_norm_linear(x, g, w, eps=EPS), "prepass": pre,
           "ro_coop": lambda: rn.launch_cuda_rmsnorm_gemm(x, g, wg.t(), out, rstd, EPS, variant="coop128x256s3-xf-ro"),
           "ro_pp": lambda: rn.launch_cuda_rmsnorm_gemm(x, g, wg.t(), out, rstd, EPS, variant="pp128x128s5-xf-ro"),
           "roov_coop": lambda: rn.launch_cuda_rmsnorm_gemm(x, g, wg.t(), out, rstd, EPS, variant="coop128x256s3-xf-roov"),
           "roov_pp": lambda: rn.launch_cuda_rmsnorm_gemm(x, g, wg.t(), out, rstd, EPS, variant="pp128x128s5-xf-roov"),
           "bare_cuda": lambda: gemm_sm90.launch_cuda_gemm(x, w.t(), out), "bare_cublas": lambda: F.linear(x, w),
           "eager": lambda: pair(x, g, w)}
    with torch.no_grad():
        ms = dict(zip(fns, graph_ms_alternating(list(fns.values()))))
    bare = min(ms["bare_cuda"], ms["bare_cublas"])
    print(f"{M}x{N}x{K}: " + "  ".join(f"{k} {v * 1e3:.1f}us" for k, v in ms.items()) + " | /bare " +
          " ".join(f"{k} {ms[k] / bare:.3f}" for k in ("op", "prepass", "ro_coop", "ro_pp", "roov_coop", "roov_pp", "eager")) +
          f" | roov_coop vs eager {ms['eager'] / ms['roov_coop']:.3f}x", flush=True)
