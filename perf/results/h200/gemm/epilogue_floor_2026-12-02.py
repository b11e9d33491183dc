"""Issue 14 item 5 (epilogues at their floor): where each fused epilogue stands on this card, per kernel and tile.

Rows: the issue's large shapes (4096^3, 8192 x 4096 x 4096, 16384 x 2048 x 2048) and the model benches' epilogue
GEMMs (ViT-L fc1 16384 x 4096 x 1024 with bias + GELU, Llama down 16384 x 2048 x 5632 with a residual). Epilogues:
none, bias, bias + GELU, residual, bias + GELU + residual, pos_embed (a (2048, N) residual repeated over the batch).
Providers: the router's pick (`tilewright.matmul`, its kernel named from one profiled call), the Triton kernel
forced, the sm_90a kernel forced with each tile variant (`launch_cuda_gemm(variant=...)`), cuBLAS's plain GEMM
(`a @ b`, the floor's base) and torch's unfused equivalent. CUDA-graph replays interleaved per row
(bench.common.graph_ms_alternating, L2 flushed), bf16 in / out, no grad. Printed per provider: time, time / cuBLAS
plain, time / the same provider's plain GEMM (the epilogue's own cost: the item's <= 1.05 target), max |err| against
a float64 reference beside torch's own bf16 error. Run: PYTHONPATH=src python <this file> [--quick]."""
import math
import sys
import time

import torch
import torch.nn.functional as F

import tilewright
from tilewright.bench.common import graph_ms_alternating
from tilewright.cuda_fallback import gemm_sm90
from tilewright.cuda_fallback.runtime.build import prebuild

torch.manual_seed(0)
print(torch.cuda.get_device_name(), torch.__version__, flush=True)
QUICK = "--quick" in sys.argv
ROWS = [(4096, 4096, 4096), (8192, 4096, 4096), (16384, 2048, 2048), (16384, 4096, 1024), (16384, 2048, 5632)]
EPILOGUES = ["none", "bias", "bias+gelu", "residual", "bias+gelu+residual", "pos_embed"]
VARIANTS = ["coop128x256s3", "coop128x192s4", "pp128x128s5", "pp64x256s4"]
SEQ = 2048


def kernel_names(fn) -> str:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = sorted({e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA})
    return "+".join(n[:28] for n in names)


t0 = time.time()
for M, N, K in ROWS[:2] if QUICK else ROWS:
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16) / math.sqrt(K)
    bias = torch.randn(N, device="cuda", dtype=torch.bfloat16)
    r = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    pos = torch.randn(SEQ, N, device="cuda", dtype=torch.bfloat16)
    base = {}
    for epi in EPILOGUES:
        kw = {}
        if "bias" in epi:
            kw["bias"] = bias
        if "gelu" in epi:
            kw["activation"] = "gelu"
        if "residual" in epi:
            kw["residual"] = r
        x = a
        if epi == "pos_embed":
            x = a.view(M // SEQ, SEQ, K)
            kw["residual"] = pos

        def torch_ref(x=x, kw=kw, w=b):
            y = x @ w
            if "bias" in kw:
                y = y + kw["bias"]
            if "activation" in kw:
                y = F.gelu(y)
            if "residual" in kw:
                y = y + kw["residual"]
            return y

        res3 = None
        if "residual" in kw:
            res3 = (pos.unsqueeze(0).expand(M // SEQ, SEQ, N) if epi == "pos_embed" else r.unsqueeze(0))

        def cuda_fn(v, kw=kw, res3=res3):
            out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
            return lambda: gemm_sm90.launch_cuda_gemm(a, b, out, bias=kw.get("bias"), residual=res3,
                                                      activation=kw.get("activation") or 0, variant=v)

        fns = {"tw": lambda x=x, kw=kw: tilewright.matmul(x, b, **kw),
               "tw_triton": lambda x=x, kw=kw: tilewright.matmul(x, b, backend="triton", **kw)}
        for v in VARIANTS:
            fns[f"cuda_{v}"] = cuda_fn(v)
        fns["cublas_plain"] = lambda: a @ b
        fns["torch_unfused"] = torch_ref
        with torch.no_grad():
            # A fresh machine compiles each tile's build for this epilogue: at once, on parallel nvcc processes.
            prebuild([fn for name, fn in fns.items() if name.startswith("cuda_") or name == "tw"])
            ref = torch_ref(x.double(), {k: (t.double() if torch.is_tensor(t) else t) for k, t in kw.items()},
                            b.double())
            ref = ref.reshape(M, N)
            errs = {}
            for name, fn in fns.items():
                if name != "cublas_plain":
                    errs[name] = (fn().double().reshape(M, N) - ref).abs().max().item()
            picked = kernel_names(fns["tw"])
            times = dict(zip(fns, graph_ms_alternating(list(fns.values()), calls=10, replays=9)))
        if epi == "none":
            base = dict(times)
        cub = times["cublas_plain"]
        print(f"{M}x{N}x{K} {epi}: router ran [{picked}]; t={time.time() - t0:.0f}s", flush=True)
        for name, t in times.items():
            if name == "cublas_plain" and epi != "none":
                continue
            own = base.get(name if name != "torch_unfused" else "cublas_plain")
            print(f"    {name:22s} {t * 1e3:8.1f} us  /cublas {t / cub:6.3f}  /own-plain "
                  f"{t / own if own else float('nan'):6.3f}  err {errs.get(name, float('nan')):.3g} "
                  f"(torch {errs['torch_unfused']:.3g})", flush=True)
