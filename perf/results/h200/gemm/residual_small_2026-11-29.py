"""Residual GEMMs (``linear(x, w, residual=r)``, inference, bf16) at small and mid M: the router's pick through the
public op against cuBLAS + torch's add (``F.linear(x, w) + r``) and cuBLAS with the residual as its C operand
(``torch.addmm(r, x, w.t())``), CUDA-graph replays interleaved with the L2 flushed; whether cuBLAS is preferred for the
plain GEMM of each row (cublas_routes). Found in session 32: ViT-L B1 x S512's three residual GEMMs (M 512, N 1024) took
50 us on the Triton kernel against 26 for cuBLAS + add.

    PYTHONPATH=src python perf/results/h200/gemm/residual_small_2026-11-29.py > $OUT/residual_small.txt"""
import warnings

import torch
import torch.nn.functional as F

import tilewright
from tilewright.bench.common import graph_ms_alternating
from tilewright.cublas_routes import cublas_preferred

warnings.filterwarnings("ignore")
print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
NK = ((1024, 768), (1024, 1024), (1024, 4096), (2048, 2048), (2048, 5632), (4096, 4096))
with torch.no_grad():
    for M in (256, 512, 1024, 2048, 4096):
        for N, K in NK:
            torch.manual_seed(M + N + K)
            x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5
            r = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
            ours = tilewright.linear(x, w, residual=r)
            ref = F.linear(x.float(), w.float()) + r.float()
            err = ((ours.float() - ref).norm() / ref.norm()).item()
            terr = ((F.linear(x, w) + r).float() - ref).norm().item() / ref.norm().item()
            fns = [lambda: tilewright.linear(x, w, residual=r), lambda: F.linear(x, w) + r,
                   lambda: torch.addmm(r, x, w.t())]
            ms = graph_ms_alternating(fns, calls=20, replays=11)
            pref = cublas_preferred(x, w.t())[0]
            print(f"{M}x{N}x{K}: op {ms[0] * 1e3:7.2f} us | cublas+add {ms[1] * 1e3:7.2f} ({ms[1] / ms[0]:.3f}x) | "
                  f"addmm {ms[2] * 1e3:7.2f} ({ms[2] / ms[0]:.3f}x) | plain to cuBLAS: {pref} | rel err op "
                  f"{err:.1e} torch {terr:.1e}", flush=True)
