"""Odd mid-size GEMMs: the router's pick (TILEWRIGHT_CUBLAS=0: tilewright's own kernels) vs torch.mm (cuBLAS), bf16,
CUDA-graph timed, interleaved, cold L2 - points for cublas_routes.TABLE."""
import os, sys, torch
import tilewright
from tilewright.bench.common import graph_ms_alternating
os.environ["TILEWRIGHT_CUBLAS"] = "0"
out = []
for lay, M, N, K in (("NT", 3000, 5120, 5120), ("NN", 3000, 5120, 5120), ("NT", 3000, 5000, 4000), ("NN", 3000, 5000, 4000),
                     ("NT", 2048, 5120, 5120), ("NT", 4096, 5120, 5120)):
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16).t() if lay[1] == "T" else torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    pick = tilewright.router.explain("gemm", a, b, None, None, None).splitlines()[0]
    ms = graph_ms_alternating([lambda: torch.mm(a, b), lambda: tilewright.matmul(a, b)])
    print(f"{lay} {M} {N} {K} {ms[0]/ms[1]:.2f}  cublas {ms[0]*1000:.1f} us  tilewright {ms[1]*1000:.1f} us  ({pick})", flush=True)
