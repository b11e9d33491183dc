"""Host-cost benchmark: the CPU time one eager call of each op costs, beside torch's own op for the same work.

Why it is its own benchmark: a kernel's speed reaches a model only if the Python around it is cheaper than the GPU
work it launches. A decode step or a small training layer launches kernels of 10-30 us; an op whose launch path costs
more than that leaves the GPU idle between kernels however fast each kernel is (do_bench hides this: it flushes L2
between calls, which gives the host time to catch up).

Method (``host_us``): ``CALLS`` calls queued back to back with no synchronisation, wall time / ``CALLS``, median of
``RUNS`` runs (each run starts from an empty queue: synchronise, then time); tilewright's and torch's runs alternate
(``host_us_alternating``), so the host's drifting speed affects both sides alike. The shapes make each kernel run longer
than its launch path (the queue never fills), so the number is the Python + launch cost, not the GPU's. Cases are the
four ops a model calls per layer (matmul/linear with and without epilogues, rms_norm_linear, flash_attention) and a
decode step (flash_attention_with_kvcache, with its default input check - a device-to-host read - and without), with
and without autograd recording (``+grad``: a weight or q/k/v that requires grad, forward only), and a training call
(``fwd+bwd``: forward, then ``backward`` of a fixed output gradient: the host cost of a layer's backward, which is
where a small training step spends its time), each against the torch ops a user would write instead (``F.linear``
+ the epilogue ops, ``F.rms_norm`` + ``F.linear``, SDPA). ``fwd+bwd`` rows queue :data:`CALLS_BWD` calls (each
makes several launches: the CUDA queue must not fill, or the row would time the GPU).

Rows (long format of bench/common.py, ``op = "host"``): ``median_ms`` is the host time per call in ms, ``speedup`` =
torch's host time / tilewright's (>= 0.67 meets the 1.5x budget). Budget: <= 25 us
and <= 1.5x torch per eager call (:data:`BUDGET_US`, :data:`BUDGET_RATIO`).
"""
from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    import pandas as pd

from .common import COLUMNS, add_speedups, on_gpu, require_pandas

BUDGET_US = 25.0
BUDGET_RATIO = 1.5
CALLS = 100
CALLS_BWD = 30
RUNS = 21
# name -> (M, N, K) for the GEMM family, (B, H, S, D) for attention. "default" holds the sizes of the report that
# opened this work (a Llama-ish projection and a 512-token attention); "tiny" runs under the interpreter.
SUITES = {"default": {"gemm": (1000, 3000, 1536), "attention": (2, 16, 512, 128)},
          "tiny": {"gemm": (24, 40, 32), "attention": (1, 2, 32, 16)}}


def cases(gemm_shape: tuple[int, int, int], attention_shape: tuple[int, int, int, int], device,
          dtype) -> dict[str, tuple]:
    """case name (``<op>|<shape>[|causal]``) -> (tilewright callable, torch callable), on fresh random inputs of the
    given (M, N, K) and (B, H, S, D). Building them compiles nothing (bench/first_call.py times the first call)."""
    import tilewright
    import torch.nn.functional as F

    M, N, K = gemm_shape
    B, H, S, D = attention_shape
    x = torch.randn(M, K, device=device, dtype=dtype)
    w = torch.randn(N, K, device=device, dtype=dtype) / K**0.5
    wt = w.t()
    bias = torch.randn(N, device=device, dtype=dtype)
    res = torch.randn(M, N, device=device, dtype=dtype)
    g = torch.rand(K, device=device, dtype=dtype) + 0.5
    wg = w.detach().clone().requires_grad_(True)
    q, k, v = (torch.randn(B, H, S, D, device=device, dtype=dtype) for _ in range(3))
    qg, kg, vg = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    xg, gg, resg = (t.detach().clone().requires_grad_(True) for t in (x, g, res))
    dy = torch.randn(M, N, device=device, dtype=dtype)
    do = torch.randn(B, H, S, D, device=device, dtype=dtype)
    sdpa = F.scaled_dot_product_attention
    # a decode step on the attention shape's cache (S cached tokens, GQA 4 where H allows) against SDPA's choice on
    # (B, H, 1, D) / (B, Hkv, S, D) views
    Hkv = H // 4 if H % 4 == 0 else H
    dq_ = torch.randn(B, 1, H, D, device=device, dtype=dtype)
    dk_, dv_ = (torch.randn(B, S, Hkv, D, device=device, dtype=dtype) for _ in range(2))
    dlen = torch.full((B,), S, dtype=torch.int32, device=device)
    dshape = f"{B}x{H}/{Hkv}x{S}x{D}"
    shape = f"{M}x{N}x{K}"
    ashape = f"{B}x{H}x{S}x{D}"
    return {
        f"matmul|{shape}": (lambda: tilewright.matmul(x, wt), lambda: x @ wt),
        f"linear|{shape}": (lambda: tilewright.linear(x, w), lambda: F.linear(x, w)),
        f"linear+residual|{shape}": (lambda: tilewright.linear(x, w, residual=res), lambda: F.linear(x, w) + res),
        f"linear+bias+gelu|{shape}": (lambda: tilewright.linear(x, w, bias, activation="gelu"),
                                      lambda: F.gelu(F.linear(x, w, bias))),
        f"linear+bias+gelu+residual|{shape}": (lambda: tilewright.linear(x, w, bias, activation="gelu", residual=res),
                                               lambda: F.gelu(F.linear(x, w, bias)) + res),
        f"linear+grad|{shape}": (lambda: tilewright.linear(x, wg), lambda: F.linear(x, wg)),
        f"rms_norm_linear|{shape}": (lambda: tilewright.rms_norm_linear(x, g, w),
                                     lambda: F.linear(F.rms_norm(x, (K,), g), w)),
        f"flash_attention|{ashape}|causal": (lambda: tilewright.flash_attention(q, k, v, causal=True),
                                             lambda: sdpa(q, k, v, is_causal=True)),
        f"flash_attention+grad|{ashape}|causal": (lambda: tilewright.flash_attention(qg, kg, vg, causal=True),
                                                  lambda: sdpa(qg, kg, vg, is_causal=True)),
        f"flash_attention_with_kvcache|{dshape}": (
            lambda: tilewright.flash_attention_with_kvcache(dq_, dk_, dv_, dlen),
            lambda: sdpa(dq_.transpose(1, 2), dk_.transpose(1, 2), dv_.transpose(1, 2), enable_gqa=True)),
        f"flash_attention_with_kvcache validate=False|{dshape}": (
            lambda: tilewright.flash_attention_with_kvcache(dq_, dk_, dv_, dlen, validate=False),
            lambda: sdpa(dq_.transpose(1, 2), dk_.transpose(1, 2), dv_.transpose(1, 2), enable_gqa=True)),
        f"linear+residual fwd+bwd|{shape}": (
            lambda: tilewright.linear(xg, wg, residual=resg).backward(dy),
            lambda: (F.linear(xg, wg) + resg).backward(dy)),
        f"rms_norm_linear fwd+bwd|{shape}": (
            lambda: tilewright.rms_norm_linear(xg, gg, wg).backward(dy),
            lambda: F.linear(F.rms_norm(xg, (K,), gg), wg).backward(dy)),
        f"flash_attention fwd+bwd|{ashape}|causal": (
            lambda: tilewright.flash_attention(qg, kg, vg, causal=True).backward(do),
            lambda: sdpa(qg, kg, vg, is_causal=True).backward(do)),
    }


def host_us(fn, calls: int = CALLS, runs: int = RUNS) -> float:
    """Median over ``runs`` of the wall time per call of ``calls`` queued calls (no synchronisation inside a run)."""
    return host_us_alternating([fn], calls, runs)[0]


def host_us_alternating(fns, calls: int = CALLS, runs: int = RUNS) -> list[float]:
    """:func:`host_us` of each of ``fns``, their runs interleaved (run r of every function, then run r + 1): the
    device's host CPU speed drifts by 30% and more within seconds (several lent machines), so timing one side's runs
    after the other's compared two different machines; interleaved, the drift falls on both medians alike."""
    gpu = on_gpu()
    for fn in fns:
        for _ in range(3):
            fn()
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(runs):
        for fn, out in zip(fns, samples):
            if gpu:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            out.append((time.perf_counter() - t0) / calls * 1e6)
    if gpu:
        torch.cuda.synchronize()
    return [statistics.median(s) for s in samples]


def run(suite: str = "default", progress=print) -> pd.DataFrame:
    """Host time per eager call of every case, tilewright beside torch; see the module docstring."""
    pd = require_pandas("tilewright bench --op host")
    if suite not in SUITES:
        raise ValueError(f"suite: unknown {suite!r}; choose from {sorted(SUITES)}")
    gpu = on_gpu()
    device, dtype = ("cuda", torch.bfloat16) if gpu else ("cpu", torch.float16)
    if not gpu:
        progress("no GPU: interpreter timings of the Python path only (they say nothing about the GPU budget)")
    else:
        from .. import _native

        _native.load(block=True)  # (a first run on a machine builds the C replay key: time what users get after)
        progress(f"replay key in C: {_native.status()}")
    runs = RUNS if gpu else 3
    rows, peers = [], {}
    for case, (ours, peer) in cases(SUITES[suite]["gemm"], SUITES[suite]["attention"], device, dtype).items():
        op, shape = case.split("|", 1)
        peers[case] = "torch"
        calls = (CALLS_BWD if "fwd+bwd" in case else CALLS) if gpu else 2
        for provider, us in zip(("tilewright", "torch"), host_us_alternating([ours, peer], calls, runs)):
            rows.append(dict(op="host", case=case, shape=shape, dtype=str(dtype).replace("torch.", ""),
                             provider=provider, median_ms=us / 1e3, tflops=float("nan"), host_us=us))
        ratio = rows[-2]["host_us"] / rows[-1]["host_us"]
        ok = rows[-2]["host_us"] <= BUDGET_US and ratio <= BUDGET_RATIO
        progress(f"{case:<42} tilewright {rows[-2]['host_us']:7.1f} us | torch {rows[-1]['host_us']:7.1f} us | "
                 f"{ratio:5.2f}x torch" + (f" | {'within' if ok else 'OVER'} budget" if gpu else ""))
    df = pd.DataFrame(rows)
    return add_speedups(df, peers)[COLUMNS]
