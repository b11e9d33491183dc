"""Issue 14 item 5, third probe: does the epilogue's code size cost the mainloop? A build with a residual compiles
both residual paths (the TMA tile and the element loads, a run-time choice), and the unused one more than doubles
the kernel: pp128x128s5 with a residual 4,680 SASS instructions, 2,120 with the TMA path alone (TW_RES_PATH=1), plain
1,832; with bias + GELU + residual 7,528 vs 3,968 (cuobjdump, nvcc 13.0). epilogue_paths_ab_s39.txt: the pingpong
tile's epilogue costs ~0.6-1.5 us a tile even at K 4096, where it runs under the other consumer's 24 us mainloop -
as if the epilogue's straight-line code slowed the other warps' instruction fetch. Here, per row: each tile with
the residual path chosen at run time (today) and compiled alone (TW_RES_PATH=1 TMA, =2 element loads; the element
rows with residual_map_rows patched to 0, as a residual of any other layout runs). CUDA-graph replays interleaved
(L2 flushed), bf16, no grad; time / cuBLAS's plain GEMM, max |err| against float64. Run: PYTHONPATH=src python
<this file>."""
import dataclasses
import math
import time

import torch

from tilewright.bench.common import graph_ms_alternating
from tilewright.cuda_fallback import gemm_sm90

torch.manual_seed(0)
print(torch.cuda.get_device_name(), torch.__version__, flush=True)
ROWS = [(4096, 4096, 4096), (8192, 4096, 4096), (16384, 2048, 2048), (16384, 4096, 1024), (16384, 2048, 5632),
        (16384, 1024, 1024), (16384, 1024, 4096)]


@dataclasses.dataclass(frozen=True)
class PathVariant(gemm_sm90.Variant):
    """A variant built with TW_RES_PATH = path (its own name, so its own prepared launches)."""
    path: int = 0

    @property
    def name(self) -> str:
        return super().name + f"-path{self.path}"

    def defines(self, *args, **kw) -> dict:
        return {**super().defines(*args, **kw), "TW_RES_PATH": self.path}


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

        def launcher(v, loads):
            out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)

            def fn():
                gemm_sm90.residual_map_rows = (lambda *args: 0) if loads else tma_rows
                try:
                    return gemm_sm90.launch_cuda_gemm(a, b, out, bias=kw.get("bias"), residual=r.unsqueeze(0),
                                                      activation=kw.get("activation") or 0, variant=v)
                finally:
                    gemm_sm90.residual_map_rows = tma_rows
            return fn

        fns = {}
        for vn in ("pp128x128s5", "coop128x256s3"):
            base = gemm_sm90.VARIANTS[vn]
            both, tma, loads = (PathVariant(base.bm, base.bn, base.stages, base.coop, p) for p in (0, 1, 2))
            fns[f"{vn}/tma/both"] = launcher(both, False)
            fns[f"{vn}/tma/alone"] = launcher(tma, False)
            fns[f"{vn}/loads/both"] = launcher(both, True)
            fns[f"{vn}/loads/alone"] = launcher(loads, True)
        fns["cublas_plain"] = lambda: a @ b
        errs = {}
        with torch.no_grad():
            for name, fn in fns.items():
                if name != "cublas_plain":
                    errs[name] = (fn().double() - ref).abs().max().item()
            times = dict(zip(fns, graph_ms_alternating(list(fns.values()), calls=10, replays=9)))
        cub = times["cublas_plain"]
        print(f"{M}x{N}x{K} {epi}: cublas plain {cub * 1e3:.1f} us; t={time.time() - t0:.0f}s", flush=True)
        for name, t in times.items():
            if name != "cublas_plain":
                print(f"    {name:28s} {t * 1e3:8.1f} us  /cublas {t / cub:6.3f}  err {errs[name]:.3g}", flush=True)
