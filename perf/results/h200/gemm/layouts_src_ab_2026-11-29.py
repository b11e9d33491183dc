"""The sm_90a 16-bit GEMM (backend "cuda", the router's kernel on these shapes) in the three layouts a training step
runs - NT (forward: x @ W^T), NN (input gradient: dY @ W), TN (weight gradient: dY^T @ X) - at the model benches'
shapes, against torch.mm (cuBLAS) in the same process: run once with PYTHONPATH=src and once with another source tree
to compare two versions of gemm_sm90.cu by their ratio to cuBLAS (session 29: the wgmma descriptors formed once a
stage). CUDA-graph replays interleaved, L2 flushed, bf16. Run: PYTHONPATH=<tree> python <this file>."""
import torch

import tilewright
from tilewright.bench.common import graph_ms_alternating

torch.manual_seed(0)
print(torch.cuda.get_device_name(), torch.__version__, flush=True)
ROWS = [(16384, 2048, 2048), (16384, 5632, 2048), (16384, 2048, 5632), (16384, 4096, 1024), (16384, 1024, 4096),
        (2048, 5632, 16384), (1024, 4096, 16384)]
for M, N, K in ROWS:
    for layout in ("NT", "NN", "TN"):
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16) if layout[0] == "N" else \
            torch.randn(K, M, device="cuda", dtype=torch.bfloat16).t()
        b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16).t() if layout[1] == "T" else \
            torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
        b = b / K ** 0.5
        fns = [lambda: tilewright.matmul(a, b, backend="cuda"), lambda: torch.mm(a, b)]
        with torch.no_grad():
            err = (fns[0]().float() - fns[1]().float()).abs().max().item()
            ours, cublas = graph_ms_alternating(fns, calls=10, replays=9)
        print(f"{layout} {M}x{N}x{K}: cuda {ours * 1e3:.1f} us, cublas {cublas * 1e3:.1f} us, "
              f"cublas / cuda {cublas / ours:.3f}, max |diff| {err:.3g}", flush=True)
