"""Benchmark: RMSNorm -> linear, fused (one tilewright kernel) against the unfused pipelines, side by side.

Forward providers per GEMM-suite shape (x: (M, K), weight: (N, K), bf16, no bias):

* ``tilewright_fused``        - ``tilewright.rms_norm_linear`` (norm weight applied to the A tile in the mainloop)
* ``cuda_fused``              - ``tilewright.rms_norm_linear(..., backend="cuda")``: the hand-written sm_90a
                                register-A WGMMA kernel (cuda_fallback/rmsnorm_gemm_sm90.py); only on sm_90 with a CUDA
                                compiler
* ``tilewright_gemm``         - ``tilewright.linear(x, weight)``: the plain GEMM, the "norm is free" yardstick
* ``eager_unfused``           - ``F.linear(F.rms_norm(x, (K,), g, eps), weight)``: the **peer**
* ``compile_unfused``         - the same under ``torch.compile`` (default mode, static shapes)
* ``cublas_gemm``             - ``F.linear(x, weight)``: bare cuBLAS GEMM of the same shape

Backward (case ``<tag>-bwd``, time of ``autograd.grad`` w.r.t. x, norm weight and weight, forward excluded):
``tilewright_fused`` against ``eager_unfused`` (peer) and ``compile_unfused``.

``run(suite, progress)`` returns the long format of bench/common.py. ``python -m tilewright.bench.rms_norm_linear``
writes ``rms_norm_linear_<date>.csv`` and prints the table and ratios.
"""
from __future__ import annotations

import argparse
import datetime
import math
import os
from pathlib import Path

import torch
import torch.nn.functional as F

from .common import (COLUMNS, add_speedups, card_name, compile_only, environment, on_gpu, require_pandas,
                     time_ms)

# The project's GEMM shape suite (square and Llama-3 8B/70B projections): (tag, M, N, K); x is (M, K), weight (N, K).
GEMM_SUITE = [
    ("sq4k", 4096, 4096, 4096), ("sq8k", 8192, 8192, 8192), ("l3-8b-qkv", 8192, 6144, 4096),
    ("l3-8b-o", 8192, 4096, 4096), ("l3-8b-gateup", 8192, 28672, 4096), ("l3-8b-down", 8192, 4096, 14336),
    ("l3-70b-qkv", 8192, 10240, 8192), ("l3-70b-down", 8192, 8192, 28672), ("decode16", 16, 4096, 4096),
    ("decode128", 128, 4096, 4096), ("odd", 3000, 5000, 4000),
]
SUITES = {
    "default": GEMM_SUITE,
    # CPU / interpreter smoke run: numbers mean nothing, the plumbing is exercised
    "tiny": [("tiny", 64, 48, 80), ("tiny-odd", 33, 40, 72)],
}
# Shapes named by the "norm is 7-15% of the unfused time" target.
NORM_HEAVY = ("sq4k", "l3-8b-qkv", "l3-8b-o", "decode128")
EPS = 1e-6


def _unfused(x, g, w, eps=EPS):
    return F.linear(F.rms_norm(x, (x.shape[-1],), g, eps), w)


def _compiled_unfused():
    import torch._dynamo

    for knob in ("recompile_limit", "cache_size_limit"):  # one static-shape graph per suite shape
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, max(getattr(torch._dynamo.config, knob), 64))
    return torch.compile(_unfused, dynamic=False)


def _inputs(M, N, K, device, dtype, seed=0):
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(M, K, device=device, dtype=dtype, generator=gen)
    g = (1 + 0.1 * torch.randn(K, device=device, generator=gen)).to(dtype)
    w = (torch.randn(N, K, device=device, generator=gen) / math.sqrt(K)).to(dtype)
    return x, g, w


def _providers(x, g, w, compiled):
    import tilewright

    fns = {
        "tilewright_fused": lambda: tilewright.rms_norm_linear(x, g, w, eps=EPS),  # the router's pick
        "tilewright_triton_fused": lambda: tilewright.rms_norm_linear(x, g, w, eps=EPS, backend="triton"),
        "tilewright_gemm": lambda: tilewright.linear(x, w),
        "eager_unfused": lambda: _unfused(x, g, w),
        "compile_unfused": lambda: compiled(x, g, w),
        "cublas_gemm": lambda: F.linear(x, w),
    }
    if compiled is None:
        del fns["compile_unfused"]
    if _cuda_norm_available(x):
        fns["cuda_fused"] = lambda: tilewright.rms_norm_linear(x, g, w, eps=EPS, backend="cuda")
    return fns


def _cuda_norm_available(x) -> bool:
    """Whether the sm_90a CUDA RMSNorm-GEMM column applies: an sm_90 device and a CUDA compiler."""
    if not x.is_cuda or torch.cuda.get_device_capability(x.device)[0] != 9:
        return False
    from ..cuda_fallback.runtime import build

    return build.toolchain() is not None


def _bwd_providers(x, g, w, compiled):
    import tilewright

    dy = None
    fns = {}
    for name, fwd in (("tilewright_fused", lambda a, b, c: tilewright.rms_norm_linear(a, b, c, eps=EPS)),
                      ("eager_unfused", _unfused), ("compile_unfused", compiled)):
        if fwd is None:
            continue
        leaves = [t.detach().clone().requires_grad_() for t in (x, g, w)]
        y = fwd(*leaves)
        if dy is None:
            dy = torch.randn_like(y)
        fns[name] = (lambda y=y, leaves=leaves: torch.autograd.grad(y, leaves, dy, retain_graph=True))
    return fns


def run(suite: str = "default", progress=print, backward: bool | tuple = True, prewarm: bool = True,
        with_compile: bool = True):
    """Time every provider on every shape of ``suite``; returns the long DataFrame of bench/common.py.

    ``backward``: True (every shape), False, or a tuple of case tags to time the backward on. ``with_compile=False``
    leaves out the torch.compile columns (a static-shape compile per shape and direction is most of this benchmark's
    time: `bench --op all` uses it to stay within its 10-minute budget).
    """
    pd = require_pandas("tilewright.bench.rms_norm_linear")

    shapes = SUITES[suite]
    gpu = on_gpu()
    device = "cuda" if gpu else "cpu"
    dtype = torch.bfloat16 if gpu else torch.float16
    compiled = (_compiled_unfused() if gpu else _unfused) if with_compile else None
    bwd_tags = {t for t, *_ in shapes} if backward is True else set(backward or ())

    if gpu and prewarm:
        progress("compiling every Triton config for the suite in parallel ...")
        try:
            with compile_only():
                for tag, M, N, K in shapes:
                    x, g, w = _inputs(M, N, K, device, dtype)
                    fns = _providers(x, g, w, compiled)
                    for name in ("tilewright_fused", "tilewright_gemm"):
                        if name in fns:
                            fns[name]()
                    if tag in bwd_tags:
                        _bwd_providers(x, g, w, _unfused)["tilewright_fused"]()
                    del x, g, w, fns
        except Exception as e:  # a faster start only; the autotuner compiles what is missing
            progress(f"parallel pre-compile skipped: {type(e).__name__}: {e}")

    rows = []
    for tag, M, N, K in shapes:
        x, g, w = _inputs(M, N, K, device, dtype)
        shape = f"x({M},{K}) w({N},{K})"
        flops = 2.0 * M * N * K
        # decode-sized cases: CUDA-graph replays for every provider, so microsecond kernels are timed rather than
        # Python launch overhead (bench/common.py's rule: all providers of a case or none)
        graphs = gpu and M <= 128
        for name, fn in _providers(x, g, w, compiled).items():
            try:
                ms = time_ms(fn, cudagraph=graphs)
            except Exception as e:  # one provider failing (e.g. under graph capture) must not lose the others
                progress(f"{tag} {name}: {type(e).__name__}: {str(e)[:200]}")
                ms = float("nan")
            rows.append(dict(op="rms_norm_linear", case=tag, shape=shape, dtype=str(dtype).replace("torch.", ""),
                             provider=name, median_ms=ms, tflops=flops / ms * 1e-9))
            progress(f"{tag:>13} {name:>24} {ms:9.4f} ms")
        if tag in bwd_tags:
            for name, fn in _bwd_providers(x, g, w, compiled).items():
                ms = time_ms(fn)
                rows.append(dict(op="rms_norm_linear", case=f"{tag}-bwd", shape=shape,
                                 dtype=str(dtype).replace("torch.", ""), provider=name, median_ms=ms,
                                 tflops=2 * flops / ms * 1e-9))
                progress(f"{tag + '-bwd':>13} {name:>24} {ms:9.4f} ms")
        del x, g, w
        if gpu:
            torch.cuda.empty_cache()
    df = pd.DataFrame(rows)
    peers = {c: "eager_unfused" for c in df["case"].unique()}
    return add_speedups(df, peers)[COLUMNS]


def summary(df) -> str:
    """Ratios the issue's targets are stated in (geomeans over the suite)."""
    import numpy as np

    fwd = df[~df["case"].str.endswith("-bwd")].pivot(index="case", columns="provider", values="median_ms")
    lines = ["fused time / other provider's time (< 1: fused faster):"]
    table = 1.0 / fwd.div(fwd["tilewright_fused"], axis=0)  # fused time / other time
    lines.append(table.round(3).to_string())
    geo = lambda s: float(np.exp(np.log(s).mean()))  # noqa: E731
    lines.append(f"geomean fused / tilewright_gemm: {geo(table['tilewright_gemm']):.3f} (target <= 1.05)")
    lines.append(f"geomean fused / cublas_gemm:     {geo(table['cublas_gemm']):.3f}")
    if "cuda_fused" in fwd.columns:
        big = [c for c in ("sq4k", "sq8k", "l3-8b-qkv", "l3-8b-o", "l3-8b-gateup", "l3-8b-down", "l3-70b-qkv",
                           "l3-70b-down") if c in fwd.index]
        cu = (fwd["cuda_fused"] / fwd["cublas_gemm"]).loc[big].dropna()
        if len(cu):
            lines.append(f"geomean cuda_fused / cublas_gemm on the large shapes: {geo(cu):.3f} (target <= 1.02)")
    speed = fwd.div(fwd["tilewright_fused"], axis=0)  # other time / fused time = speedup of fused
    heavy = [c for c in NORM_HEAVY if c in speed.index]
    if heavy:
        lines.append(f"geomean speedup vs eager on {heavy}: {geo(speed.loc[heavy, 'eager_unfused']):.3f} "
                     "(target >= 1.08)")
    compiled = (f"; than compiled: {bool((speed['compile_unfused'] > 1).all())}" if "compile_unfused" in speed.columns
                else "")
    lines.append(f"faster than eager on every shape: {bool((speed['eager_unfused'] > 1).all())}{compiled}")
    bwd = df[df["case"].str.endswith("-bwd")]
    if len(bwd):
        b = bwd.pivot(index="case", columns="provider", values="median_ms")
        ratio = b["tilewright_fused"] / b["eager_unfused"]
        lines.append("backward time fused / eager unfused (target <= 1.2):\n" + ratio.round(3).to_string())
        lines.append(f"geomean backward ratio: {geo(ratio):.3f}")
    return "\n".join(lines)


def main(argv=None) -> None:
    """Command line: ``python -m tilewright.bench.rms_norm_linear [--suite ...] [--out ...]``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite", default="default", choices=sorted(SUITES))
    p.add_argument("--out", default=None, help="folder for the CSV (default: perf/results/<card>/)")
    p.add_argument("--bwd", default="all", help="'all', 'none' or comma-separated case tags for the backward")
    args = p.parse_args(argv)
    bwd = True if args.bwd == "all" else (False if args.bwd == "none" else tuple(args.bwd.split(",")))
    print(environment())
    df = run(args.suite, backward=bwd)
    out_dir = Path(args.out) if args.out else Path("perf") / "results" / card_name()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"rms_norm_linear_{datetime.date.today().isoformat()}.csv"
    df.to_csv(path, index=False)
    print(f"wrote {path}")
    print(df.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    print(summary(df))


if __name__ == "__main__":
    main()
    os._exit(0)  # skip slow interpreter/compile-worker teardown
