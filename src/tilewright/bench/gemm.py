"""GEMM suite, side by side: tilewright vs cuBLAS (``a @ b``), cuBLASLt bias (``addmm``), cuBLAS + separate add.

Providers: ``tilewright`` is the router's pick (what a user gets: a plain GEMM near a measured point where cuBLAS was
faster goes to cuBLAS, see cublas_routes.py), ``tilewright_triton`` / ``tilewright_cuda`` each kernel forced.

Cases per shape (bf16 in, fp32 accumulate, bf16 out; a (M, K) and b (K, N) row-major; the suite is SUITES below):
  gemm      tilewright ``matmul(a, b)``                 vs cuBLAS ``a @ b``
  bias      tilewright ``matmul(a, b, bias=bias)``      vs cuBLASLt ``torch.addmm(bias, a, b)``
  residual  tilewright ``matmul(a, b, residual=r)``     vs cuBLAS ``a @ b`` + a separate ``+ r`` kernel
  pos_embed tilewright ``matmul(x, b, residual=pos)``   vs ``x @ b + pos`` (x: (B, S, K), pos: (S, N); large shapes)
  fp8       tilewright ``scaled_mm`` (e4m3, per-tensor)  vs cuBLASLt ``torch._scaled_mm`` (sm_89+ only; both in the
            accurate accumulation mode, use_fast_accum=False; shapes whose dims are multiples of 16, which
            cuBLASLt requires)
  fp8_fast  the same with use_fast_accum=True on both sides

On the GPU every autotuned Triton config of the suite is compiled up front in parallel threads (compile_only), so
first-use tuning times configs instead of compiling them one by one.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # annotations only: pandas is imported on first use (an optional extra)
    import pandas as pd

from .. import matmul, router, scaled_mm
from .common import COLUMNS, add_speedups, compile_only, on_gpu, require_pandas, time_ms

# tag: (M, N, K)
SUITES = {
    "default": {
        "sq4k": (4096, 4096, 4096),
        "sq8k": (8192, 8192, 8192),
        "l3-8b-qkv": (8192, 6144, 4096),
        "l3-8b-o": (8192, 4096, 4096),
        "l3-8b-gateup": (8192, 28672, 4096),
        "l3-8b-down": (8192, 4096, 14336),
        "l3-70b-qkv": (8192, 10240, 8192),
        "l3-70b-down": (8192, 8192, 28672),
        "decode16": (16, 4096, 4096),
        "decode128": (128, 4096, 4096),
        "odd": (3000, 5000, 4000),
    },
    # CPU interpreter: correctness-sized problems; the numbers say nothing about performance.
    "tiny": {"tiny-sq": (64, 64, 64), "tiny-odd": (37, 53, 45), "tiny-decode": (4, 64, 64)},
}
DECODE_TAGS = ("decode16", "decode128")
POS_EMBED_SEQ = 1024
CUDAGRAPH_MAX_M = 256  # pos_embed case: x viewed as (M / 1024, 1024, K)


def _backends(a, b) -> list[str]:
    """The tilewright backends that can run this problem here (each gets its own column)."""
    found = []
    for backend in ("triton", "cuda"):
        try:
            router.decide("gemm", a, b, backend=backend)
            found.append(backend)
        except ValueError:
            pass
    return found


def _cases(M, N, K, dtype, device):
    # On CPU the peers are torch's CPU kernels, not cuBLAS: name them so.
    blas, lt = ("cublas", "cublaslt_addmm") if device == "cuda" else ("torch_cpu", "torch_cpu_addmm")
    a = torch.randn(M, K, device=device, dtype=dtype)
    b = torch.randn(K, N, device=device, dtype=dtype) / K ** 0.5
    bias = torch.randn(N, device=device, dtype=dtype)
    r = torch.randn(M, N, device=device, dtype=dtype)
    backends = _backends(a, b)

    def ours(x, **kw):
        # "tilewright": the router's pick - what a user gets (a plain GEMM may be cuBLAS where it was measured
        # faster: cublas_routes.py); "tilewright_<backend>": each kernel forced, for the kernels' own standing
        forced = {f"tilewright_{be}": (lambda be=be: matmul(x, b, backend=be, **kw)) for be in backends}
        return {"tilewright": lambda: matmul(x, b, **kw), **forced}

    cases = {
        "gemm": ({**ours(a), blas: lambda: a @ b}, blas),
        "bias": ({**ours(a, bias=bias), lt: lambda: torch.addmm(bias, a, b)}, lt),
        "residual": ({**ours(a, residual=r), f"{blas}+add": lambda: a @ b + r}, f"{blas}+add"),
    }
    if device == "cuda" and torch.cuda.get_device_capability() >= (8, 9) and hasattr(torch, "_scaled_mm") \
            and M % 16 == 0 and N % 16 == 0 and K % 16 == 0:
        # FP8 (e4m3, per-tensor scales, bf16 out) against cuBLASLt's torch._scaled_mm, b K-major as it requires
        a8 = a.to(torch.float8_e4m3fn)
        b8 = b.t().contiguous().to(torch.float8_e4m3fn).t()
        sa = torch.tensor(1.0, device=device)
        sb = torch.tensor(1.0, device=device)
        cases["fp8"] = ({"tilewright_triton": lambda: scaled_mm(a8, b8, sa, sb),
                         "cublaslt_scaled_mm": lambda: torch._scaled_mm(a8, b8, sa, sb, out_dtype=torch.bfloat16)},
                        "cublaslt_scaled_mm")
        cases["fp8_fast"] = ({"tilewright_triton": lambda: scaled_mm(a8, b8, sa, sb, use_fast_accum=True),
                              "cublaslt_scaled_mm_fast": lambda: torch._scaled_mm(a8, b8, sa, sb,
                                                                                   out_dtype=torch.bfloat16,
                                                                                   use_fast_accum=True)},
                             "cublaslt_scaled_mm_fast")
    if M % POS_EMBED_SEQ == 0 and M >= 4 * POS_EMBED_SEQ:
        x = a.view(M // POS_EMBED_SEQ, POS_EMBED_SEQ, K)
        pos = torch.randn(POS_EMBED_SEQ, N, device=device, dtype=dtype)
        cases["pos_embed"] = ({**ours(x, residual=pos), f"{blas}+add": lambda: x @ b + pos}, f"{blas}+add")
    return cases


def run(suite: str = "default", progress=print, cases: tuple[str, ...] | None = None) -> pd.DataFrame:
    """Time every (shape, case, provider) of ``suite``; one row each, with speedup vs the case's peer."""
    if suite not in SUITES:
        raise ValueError(f"suite: unknown {suite!r}; choose from {sorted(SUITES)}")
    gpu = on_gpu()
    device = "cuda" if gpu else "cpu"
    dtype = torch.bfloat16 if gpu else torch.float16
    rows, peers = [], {}
    shapes = SUITES[suite]
    if gpu:
        # Bring the clocks up before anything is tuned or timed (an idle H200 sits at 345 MHz).
        w = torch.randn(4096, 4096, device=device, dtype=dtype)
        time_ms(lambda: w @ w, warmup_ms=500, rep_ms=10)
        progress("compiling every autotuned Triton config of the suite in parallel ...")
        try:
            with compile_only():
                for tag, (M, N, K) in shapes.items():
                    for case, (providers, _) in _cases(M, N, K, dtype, device).items():
                        if (not cases or case in cases) and "tilewright_triton" in providers:
                            providers["tilewright_triton"]()
        except Exception as e:  # a faster start only; the autotuner compiles what is missing
            progress(f"parallel pre-compile skipped: {type(e).__name__}: {e}")
    for i, (tag, (M, N, K)) in enumerate(shapes.items(), 1):
        for case, (providers, peer) in _cases(M, N, K, dtype, device).items():
            if cases and case not in cases:
                continue
            key = f"{tag}/{case}"
            peers[key] = peer
            outputs = {}
            # Decode-sized GEMMs run in microseconds, less than a Python launch: time graph replays for every
            # provider there (as reduce-overhead / CUDA-graph inference does), events elsewhere.
            graphed = gpu and M <= CUDAGRAPH_MAX_M
            for provider, fn in providers.items():
                outputs[provider] = fn()  # first call autotunes (GPU) / compiles; keep it out of the timing
                ms = time_ms(fn, cudagraph=graphed)
                rows.append(dict(op="gemm", case=key, shape=f"{M}x{N}x{K}", dtype=str(dtype).split(".")[-1],
                                 provider=provider, median_ms=ms, tflops=2 * M * N * K / ms / 1e9,
                                 timing="cudagraph" if graphed else "events"))
            # A fast wrong answer is worth nothing: each tuned kernel's output is compared with the peer's.
            ref = outputs[peer].float()
            done = {r["provider"]: r for r in rows if r["case"] == key}
            line = []
            for provider, out in outputs.items():
                rel = ((out.float() - ref).norm() / ref.norm().clamp_min(1e-30)).item()
                done[provider]["rel_err_vs_peer"] = rel
                if not rel < 1e-2:
                    progress(f"WARNING {key}: {provider} output differs from {peer}: relative error {rel:.3g}")
                if provider != peer:
                    ratio = done[peer]["median_ms"] / done[provider]["median_ms"]
                    line.append(f"{provider} {done[provider]['median_ms']:8.4f} ms x{ratio:5.3f}")
            del outputs
            progress(f"[{i}/{len(shapes)}] {key:<22} {peer} {done[peer]['median_ms']:8.4f} ms | " + " | ".join(line))
        if gpu:
            torch.cuda.empty_cache()
    df = add_speedups(require_pandas("tilewright.bench.gemm").DataFrame(rows), peers)
    return df[COLUMNS + ["timing", "rel_err_vs_peer"]]


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    """Per tilewright backend and case kind: geomean of the speedup over the peer on large and decode shapes, min."""
    import numpy as np

    tw = df[df.provider.str.startswith("tilewright")].copy()
    tw["tag"] = tw.case.str.split("/").str[0]
    tw["kind"] = tw.case.str.split("/").str[1]
    tw["group"] = np.where(tw.tag.isin(DECODE_TAGS), "decode", "large")
    out = tw.groupby(["provider", "kind", "group"]).speedup.agg(
        geomean=lambda s: float(np.exp(np.log(s).mean())), min="min", n="count").reset_index()
    return out
