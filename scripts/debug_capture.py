import os
os.environ["TILEWRIGHT_DEBUG"] = "1"
import torch
import tilewright
from tilewright.triton_kernels import gemm as tg
a = torch.randn(1536, 1152, device="cuda", dtype=torch.bfloat16)
b = torch.randn(1152, 2176, device="cuda", dtype=torch.bfloat16)
print("env", os.environ.get("TILEWRIGHT_AUTOTUNE"), "configs", len(tg.gemm_kernel.configs), flush=True)
print(tilewright.explain("gemm", a, b), flush=True)
g = torch.cuda.CUDAGraph()
try:
    with torch.cuda.graph(g):
        out = tilewright.matmul(a, b, activation="relu")
    print("no error; out finite:", torch.isfinite(out).all().item(), flush=True)
except Exception as e:
    print("raised", type(e).__name__, str(e)[:300], flush=True)
