"""Issue 14 (wins inside a model): the gate/up projection + SwiGLU in one GEMM (sm_90a TW_GLU) against the pair.

Floor: the pair writes the (M, 2F) projection, reads it back and writes (M, F) - 5 x M x F x 2 bytes where the fused
GEMM writes M x F x 2 (at 16384 x 5632: 0.74 GB more, ~0.15 ms of HBM at ~4.8 TB/s); the GEMM itself (2 x M x 2F x K
FLOPs) is the same.
Rows: Llama layer of the model bench at B8 x S2048 (16384 x F 5632 x K 2048), B2 (4096), and Llama-3-8B's MLP at
8192 tokens (F 14336, K 4096). Providers, CUDA-graph replays interleaved (bench.common.graph_ms_alternating, L2
flushed), bf16, no grad: the fused kernel on three tiles (launch_cuda_swiglu), the public op (its pick), the pair
through tilewright (linear, then swiglu), torch eager (F.linear, F.silu(gate) * up), torch.compile of that formula
(inductor: cuBLAS GEMM + one fused pointwise kernel), and cuBLAS's plain (M, 2F) GEMM alone (the mainloop's floor).
Printed: time, time / torch eager, time / the torch.compile formula, time / cuBLAS plain, max |err| against float64
beside torch's. Run: PYTHONPATH=src python <this file>."""
import time

import torch
import torch.nn.functional as F

import tilewright
from tilewright.bench.common import graph_ms_alternating
from tilewright.cuda_fallback import gemm_sm90
from tilewright.ops.swiglu_linear import fused_applies

torch.manual_seed(0)
print(torch.cuda.get_device_name(), torch.__version__, flush=True)
ROWS = [(16384, 5632, 2048), (4096, 5632, 2048), (8192, 14336, 4096)]
VARIANTS = ["coop128x256s3", "pp128x128s5", "pp64x256s4"]


def formula(x, w):
    gate, up = F.linear(x, w).chunk(2, dim=-1)
    return F.silu(gate) * up


compiled_formula = torch.compile(formula, dynamic=False)
t0 = time.time()
with torch.no_grad():
    for M, F_, K in ROWS:
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        w = (torch.randn(2 * F_, K, device="cuda") / K ** 0.5).to(torch.bfloat16)
        outs = {v: torch.empty(M, F_, device="cuda", dtype=torch.bfloat16) for v in VARIANTS}
        fns = {f"fused_{v}": (lambda v=v: gemm_sm90.launch_cuda_swiglu(x, w.t(), outs[v], variant=v))
               for v in VARIANTS}
        fns["tw_swiglu_linear"] = lambda: tilewright.swiglu_linear(x, w)
        fns["tw_pair"] = lambda: tilewright.swiglu(tilewright.linear(x, w))
        fns["torch_eager"] = lambda: formula(x, w)
        fns["torch_compile"] = lambda: compiled_formula(x, w)
        fns["cublas_plain_2F"] = lambda: F.linear(x, w)
        h = x.double() @ w.double().t()
        ref = F.silu(h[:, :F_]) * h[:, F_:]
        del h
        errs = {n: (fn().double() - ref).abs().max().item() for n, fn in fns.items() if n != "cublas_plain_2F"}
        del ref
        times = dict(zip(fns, graph_ms_alternating(list(fns.values()), calls=10, replays=11)))
        print(f"{M} x F {F_} x K {K}: t={time.time() - t0:.0f}s; the op's fused path: {fused_applies(x, w)}",
              flush=True)
        for n, t in times.items():
            print(f"    {n:20s} {t * 1e3:8.1f} us  /eager {t / times['torch_eager']:6.3f}  /compile "
                  f"{t / times['torch_compile']:6.3f}  /cublas2F {t / times['cublas_plain_2F']:6.3f}  "
                  f"err {errs.get(n, float('nan')):.3g} (torch {errs['torch_eager']:.3g})", flush=True)
