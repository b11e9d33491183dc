"""Issue 14 (the compiled Llama / ViT blocks at 0.95-0.98x torch.compile): the blocks' GEMMs with a residual add
(attention out-projection, MLP down-projection) - tilewright's router pick, its Triton and sm_90a kernels forced, and
cuBLAS with the residual as addmm's C operand (beta = 1: one kernel, fp32 sum, one rounding - what the fused
epilogue computes), beside torch's F.linear + add and the bare F.linear. In the Llama B8 forward's kernel table
(`h200/model/host_and_kernels_2026-11-29/kernels_llama_prefill_fwd_2026-11-29_0618_folded_replay.txt`) the two
residual GEMMs (Triton) took 0.826 ms against cuBLAS's 2 x ~0.34 + 0.06 of adds. CUDA-graph replays interleaved per
row (bench.common.graph_ms_alternating, L2 flushed), bf16, inference (no grad). Checks each provider against the
float64 reference (max |err| printed beside torch's). Run: PYTHONPATH=src python <this file>."""
import math
import time

import torch
import torch.nn.functional as F

import tilewright
from tilewright.bench.common import graph_ms_alternating

torch.manual_seed(0)
print(torch.cuda.get_device_name(), torch.__version__, flush=True)
# (M, N, K, what): Llama B8 x S2048 (d 2048, ff 5632), ViT-L B8 x S2048 (d 1024, mlp 4096), a 4096-wide model
ROWS = [(16384, 2048, 2048, "llama wo"), (16384, 2048, 5632, "llama down"), (16384, 1024, 1024, "vit proj"),
        (16384, 1024, 4096, "vit fc2"), (8192, 4096, 4096, "d4096 wo"), (8192, 4096, 14336, "d4096 down")]
t0 = time.time()
for M, N, K, what in ROWS:
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / math.sqrt(K)
    r = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    fns = {"tw": lambda: tilewright.linear(x, w, residual=r),
           "tw_triton": lambda: tilewright.linear(x, w, residual=r, backend="triton"),
           "tw_cuda": lambda: tilewright.linear(x, w, residual=r, backend="cuda"),
           "addmm": lambda: torch.addmm(r, x, w.t()),
           "linear_add": lambda: F.linear(x, w) + r,
           "linear": lambda: F.linear(x, w)}
    ref = (x.double() @ w.double().t() + r.double())
    errs = {}
    with torch.no_grad():
        for name, fn in fns.items():
            if name != "linear":
                errs[name] = (fn().double() - ref).abs().max().item()
        times = dict(zip(fns, graph_ms_alternating(list(fns.values()), calls=10, replays=9)))
    base = times["addmm"]
    line = f"{what} {M}x{N}x{K}: " + ", ".join(f"{n} {t * 1e3:.1f} us" for n, t in times.items())
    line += " | addmm / provider: " + ", ".join(f"{n} {base / t:.3f}" for n, t in times.items() if n != "addmm")
    line += " | max err: " + ", ".join(f"{n} {e:.3g}" for n, e in errs.items())
    print(line + f"; t={time.time() - t0:.0f}s", flush=True)
