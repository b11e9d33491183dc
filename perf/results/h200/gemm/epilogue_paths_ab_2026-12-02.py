"""Issue 14 item 5, second probe: with a residual, which sm_90a tile and which residual path.

epilogue_floor_s39.txt put the pingpong 128 x 128 tile (pp128x128s5) ahead of the cooperative default on every
residual row with bias + GELU (1.06-1.27x cuBLAS's plain GEMM against 1.16-1.57x). Here, per row and variant, the
residual read two ways: by TMA into the staging tile during the mainloop (the launcher's default where the rows are
evenly strided) and by the epilogue's batched element loads (``residual_map_rows`` patched to 0, the path a residual
of any other layout takes). Rows: the first probe's, plus the ViT-L block's N = 1024 GEMMs (proj, fc2) and a row
with M not a multiple of 128. CUDA-graph replays interleaved per row (L2 flushed), bf16, no grad; time / cuBLAS's
plain GEMM and max |err| against float64. Run: PYTHONPATH=src python <this file>."""
import math
import time

import torch

from tilewright.bench.common import graph_ms_alternating
from tilewright.cuda_fallback import gemm_sm90

torch.manual_seed(0)
print(torch.cuda.get_device_name(), torch.__version__, flush=True)
ROWS = [(4096, 4096, 4096), (8192, 4096, 4096), (16384, 2048, 2048), (16384, 4096, 1024), (16384, 2048, 5632),
        (16384, 1024, 1024), (16384, 1024, 4096), (8000, 4096, 4096)]
VARIANTS = ["coop128x256s3", "coop128x192s4", "pp128x128s5", "pp128x128s4"]
tma_rows = gemm_sm90.residual_map_rows
t0 = time.time()
for M, N, K in ROWS:
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16) / math.sqrt(K)
    bias = torch.randn(N, device="cuda", dtype=torch.bfloat16)
    r = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    for epi in ("residual", "bias+gelu+residual"):
        kw = {"bias": bias, "activation": "gelu"} if "gelu" in epi else {}
        ref = a.double() @ b.double()
        if kw:
            ref = torch.nn.functional.gelu(ref + bias.double())
        ref = ref + r.double()

        def launcher(v, path):
            out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)

            def fn():
                gemm_sm90.residual_map_rows = tma_rows if path == "tma" else (lambda *args: 0)
                try:
                    return gemm_sm90.launch_cuda_gemm(a, b, out, bias=kw.get("bias"), residual=r.unsqueeze(0),
                                                      activation=kw.get("activation") or 0, variant=v)
                finally:
                    gemm_sm90.residual_map_rows = tma_rows
            return fn

        fns = {f"{v}/{path}": launcher(v, path) for v in VARIANTS for path in ("tma", "loads")}
        fns["cublas_plain"] = lambda: a @ b
        errs = {}
        with torch.no_grad():
            for name, fn in fns.items():
                if name != "cublas_plain":
                    errs[name] = (fn().double() - ref).abs().max().item()
            times = dict(zip(fns, graph_ms_alternating(list(fns.values()), calls=10, replays=9)))
        cub = times["cublas_plain"]
        best = min((t, n) for n, t in times.items() if n != "cublas_plain")
        print(f"{M}x{N}x{K} {epi}: cublas plain {cub * 1e3:.1f} us; best {best[1]} {best[0] / cub:.3f}; "
              f"t={time.time() - t0:.0f}s", flush=True)
        for name, t in times.items():
            if name != "cublas_plain":
                print(f"    {name:22s} {t * 1e3:8.1f} us  /cublas {t / cub:6.3f}  err {errs[name]:.3g}", flush=True)
