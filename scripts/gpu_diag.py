"""Device-machine diagnostics for the Triton GEMM launch path and the CUDA RMSNorm-GEMM (one call, phases).

    python scripts/gpu_diag.py host      # per-call host time of each op path (async launches) + cProfile top lines
    python scripts/gpu_diag.py tune      # autotuner timings of every config for the cases that benched slow
    python scripts/gpu_diag.py one-rms   # a few launches of the CUDA RMSNorm-GEMM / plain CUDA GEMM (for ncu)

Why: in `bench --op all` (H200, 2026-11-26 03:30) pos_embed / odd residual / first fp8 cases were 1.2-4.6x slower
than the plain GEMM of the same shape; triton's do_bench flushes L2 with a ~0.1 ms memset between calls, so any host
time per call above that shows up in the measured time. This separates host cost from GPU cost.
"""
from __future__ import annotations

import cProfile
import io
import os
import pstats
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
import tilewright  # noqa: E402
from tilewright.bench.common import time_ms  # noqa: E402

DEV = "cuda"


def _cases(M, N, K):
    a = torch.randn(M, K, device=DEV, dtype=torch.bfloat16)
    b = torch.randn(K, N, device=DEV, dtype=torch.bfloat16) / K ** 0.5
    bias = torch.randn(N, device=DEV, dtype=torch.bfloat16)
    r = torch.randn(M, N, device=DEV, dtype=torch.bfloat16)
    cases = {
        "gemm": lambda: tilewright.matmul(a, b),
        "bias": lambda: tilewright.matmul(a, b, bias=bias),
        "residual": lambda: tilewright.matmul(a, b, residual=r),
        "cublas": lambda: a @ b,
    }
    if M % 1024 == 0:
        x = a.view(M // 1024, 1024, K)
        pos = torch.randn(1024, N, device=DEV, dtype=torch.bfloat16)
        cases["pos_embed"] = lambda: tilewright.matmul(x, b, residual=pos)
    a8 = a.to(torch.float8_e4m3fn)
    b8 = b.t().contiguous().to(torch.float8_e4m3fn).t()
    one = torch.tensor(1.0, device=DEV)
    cases["fp8"] = lambda: tilewright.scaled_mm(a8, b8, one, one)
    cases["scaled_mm_cublaslt"] = lambda: torch._scaled_mm(a8, b8, one, one, out_dtype=torch.bfloat16)
    g = torch.ones(K, device=DEV, dtype=torch.bfloat16)
    w = b.t()
    cases["rms_norm_linear"] = lambda: tilewright.rms_norm_linear(a, g, w)
    return cases


def phase_host(_):
    M, N, K = 4096, 4096, 4096  # tuned shape (events path), then host cost measured with async launches
    for name, fn in _cases(M, N, K).items():
        fn()
        torch.cuda.synchronize()
        n = 200
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        host = (time.perf_counter() - t0) / n * 1e6
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) / n * 1e6
        gpu = time_ms(fn) * 1e3
        gpu_graph = float("nan")
        try:
            gpu_graph = time_ms(fn, cudagraph=True) * 1e3
        except Exception as e:  # noqa: BLE001
            print(f"  {name}: graph timing failed: {type(e).__name__}: {str(e)[:120]}")
        print(f"{name:<20} host {host:8.1f} us/call | wall {wall:8.1f} us/call | do_bench {gpu:8.1f} us | "
              f"graph {gpu_graph:8.1f} us", flush=True)
    for name in ("gemm", "residual", "pos_embed", "fp8", "rms_norm_linear"):
        _profile(name, _cases(256, 512, 384)[name])


def _profile(name, fn, calls=300) -> None:
    """cProfile of ``calls`` launches of ``fn`` (after one warm-up call), the top lines by own time."""
    fn()
    torch.cuda.synchronize()
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(calls):
        fn()
    pr.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(18)
    print(f"\n===== cProfile {name} ({calls} calls, by own time)")
    print("\n".join(ln[:170] for ln in s.getvalue().splitlines()[4:34]), flush=True)


def _per_call_us(fn, n=300) -> float:
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    us = (time.perf_counter() - t0) / n * 1e6
    torch.cuda.synchronize()
    return us


def phase_layers(_):
    """Host cost of each layer of the launch path on a small problem (TILEWRIGHT_AUTOTUNE=0: no tuning)."""
    from tilewright import router
    from tilewright.autotune.space import default_gemm_config
    from tilewright.cuda_fallback import gemm_sm90 as cg
    from tilewright.triton_kernels import gemm as tg

    M, N, K = 512, 512, 512
    a = torch.randn(M, K, device=DEV, dtype=torch.bfloat16)
    b = torch.randn(K, N, device=DEV, dtype=torch.bfloat16)
    r = torch.randn(M, N, device=DEV, dtype=torch.bfloat16)
    out = torch.empty(M, N, device=DEV, dtype=torch.bfloat16)
    cfg = default_gemm_config(M, N, K)
    layers = {
        "torch a @ b": lambda: a @ b,
        "router.decide auto": lambda: router.decide("gemm", a, b, None, None),
        "router.decide triton": lambda: router.decide("gemm", a, b, None, None, backend="triton"),
        "router.decide auto +res": lambda: router.decide("gemm", a, b, None, r),
        "launch_gemm(config=)": lambda: tg.launch_gemm(a, b, out, config=cfg),
        "launch_gemm(autotune=0)": lambda: tg.launch_gemm(a, b, out),
        "_gemm_kernel raw launch": None,
        "launch_cuda_gemm": lambda: cg.launch_cuda_gemm(a, b, out),
        "matmul triton": lambda: tilewright.matmul(a, b, backend="triton"),
        "matmul cuda": lambda: tilewright.matmul(a, b, backend="cuda"),
        "matmul auto": lambda: tilewright.matmul(a, b),
        "matmul triton +res": lambda: tilewright.matmul(a, b, residual=r, backend="triton"),
        "torch.ops.tilewright.gemm direct": None,
    }
    for name, fn in layers.items():
        if fn is None:
            continue
        try:
            print(f"{name:<34} {_per_call_us(fn):8.1f} us/call", flush=True)
        except Exception as e:  # noqa: BLE001
            print(f"{name:<34} failed: {type(e).__name__}: {str(e)[:150]}", flush=True)
    for name in ("matmul triton", "matmul cuda", "matmul triton +res"):
        _profile(name, layers[name])


def phase_tune(_):
    from tilewright.triton_kernels import gemm as tg

    for tag, (M, N, K), case in (("sq4k", (4096, 4096, 4096), "pos_embed"), ("sq4k", (4096, 4096, 4096), "fp8"),
                                  ("odd", (3000, 5000, 4000), "residual"), ("odd", (3000, 5000, 4000), "gemm"),
                                  ("l3-8b-o", (8192, 4096, 4096), "pos_embed")):
        fn = _cases(M, N, K)[case]
        fn()
        torch.cuda.synchronize()
        timings = getattr(tg.gemm_kernel, "configs_timings", None) or {}
        best = getattr(tg.gemm_kernel, "best_config", None)
        print(f"\n== {tag}/{case}: best {best} | bench {time_ms(fn) * 1e3:.1f} us | graph "
              f"{time_ms(fn, cudagraph=True) * 1e3:.1f} us")
        for cfg, t in sorted(timings.items(), key=lambda kv: kv[1][0] if isinstance(kv[1], (list, tuple)) else kv[1]):
            print(f"   {t}  {cfg}")
    # decode128: default config vs alternatives, graph timing
    M, N, K = 128, 4096, 4096
    a = torch.randn(M, K, device=DEV, dtype=torch.bfloat16)
    b = torch.randn(K, N, device=DEV, dtype=torch.bfloat16) / 64
    out = torch.empty(M, N, device=DEV, dtype=torch.bfloat16)
    print(f"\n== decode128 cublas graph {time_ms(lambda: a @ b, cudagraph=True) * 1e3:.1f} us")
    from tilewright.autotune.space import _config
    for bm, bn, bk, w, s, pers, tma in ((64, 64, 128, 4, 4, True, False), (64, 64, 128, 4, 4, False, False),
                                        (64, 64, 128, 4, 3, False, False), (64, 64, 256, 4, 3, False, False),
                                        (64, 32, 256, 4, 4, False, False), (128, 64, 128, 8, 4, False, False),
                                        (64, 64, 128, 4, 4, False, True), (32, 64, 256, 4, 4, False, False)):
        cfg = _config(bm, bn, bk, w, s, persistent=pers, tma=tma)
        fn = lambda: tg.launch_gemm(a, b, out, config=cfg)  # noqa: E731
        fn()
        print(f"   {bm}x{bn}x{bk} w{w} s{s} persistent={pers} tma={tma}: graph {time_ms(fn, cudagraph=True) * 1e3:.1f}"
              f" us | do_bench {time_ms(fn) * 1e3:.1f} us")


def phase_one_rms(_):
    from tilewright.cuda_fallback import gemm_sm90 as cg
    from tilewright.cuda_fallback import rmsnorm_gemm_sm90 as crg

    M = N = K = 8192
    x = torch.randn(M, K, device=DEV, dtype=torch.bfloat16)
    g = torch.ones(K, device=DEV, dtype=torch.bfloat16)
    w = torch.randn(N, K, device=DEV, dtype=torch.bfloat16) / 90
    out = torch.empty(M, N, device=DEV, dtype=torch.bfloat16)
    rstd = torch.empty(M, device=DEV, dtype=torch.float32)
    for _ in range(4):
        crg.launch_cuda_rmsnorm_gemm(x, g, w.t(), out, rstd, 1e-6)
        cg.launch_cuda_gemm(x, w.t(), out)
    torch.cuda.synchronize()
    print("one-rms done")


if __name__ == "__main__":
    globals()[f"phase_{sys.argv[1].replace('-', '_')}"](sys.argv[2:])
