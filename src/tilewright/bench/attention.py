"""Attention benchmark: tilewright's Triton flash attention side by side with torch's SDPA backends.

``run(suite)`` returns the long format of :data:`tilewright.bench.common.COLUMNS`: one row per (case, provider),
case = ``"<B>x<Hq>/<Hkv>x<S>x<D>|<causal|full>|<fwd|bwd>"``. Providers on GPU: ``tilewright-triton``,
``tilewright-cuda`` (the sm_90a CUDA forward, on Hopper; forward rows only), ``sdpa-flash`` (FlashAttention-2),
``sdpa-cudnn``, ``sdpa-efficient`` (each forced with
``torch.nn.attention.sdpa_kernel``) and ``flex`` (``torch.compile(flex_attention)``; skipped with a note when it does
not compile). The peer for ``speedup`` is cuDNN. Suite ``tiny`` runs on CPU under the interpreter with providers
tilewright + torch math (numbers say nothing about speed there).

Option rows (:data:`OPTION_SUITES`: sliding window, soft cap; case ``"<shape>|causal+window<l>:<r>|<mode>"`` /
``"...|causal+softcap<c>|..."``) compare tilewright with FlexAttention given the same mask / score_mod, their peer.

FLOPs = 4 * B * Hq * S^2 * D, x0.5 causal (a window: the pairs it leaves visible), x2.5 backward. The backward is
timed as ``torch.autograd.grad`` of a forward output that was computed once (so it includes the preprocess, dK/dV
and dQ kernels, nothing of the forward). The providers of one case (both modes) are timed together in rotated rounds
(:func:`~.common.time_ms_alternating`), so a clock drift after a heavy row falls on all of them alike.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # annotations only: pandas is imported on first use (an optional extra)
    import pandas as pd

from .common import (COLUMNS, SDPA_BACKENDS, add_speedups, card_name, environment, on_gpu, require_pandas, sdpa_on,
                     time_ms_alternating, with_environment)

# (B, Hq, Hkv, S, D[, Skv]) - the attention suite: head dims 64/96/128/256, GQA 4:1 and 7:1, S from 512 to 16k, and
# a short query block against a long cache (Skv given: S queries, Skv keys; timed without a causal mask, since the
# default top-left alignment would hide most keys). The last two rows are the issue-15 cases the router got wrong.
SUITES = {
    "default": [(4, 16, 16, 512, 64), (2, 8, 8, 8192, 64), (8, 16, 16, 2048, 128), (4, 32, 32, 4096, 128),
                (2, 16, 16, 8192, 128), (1, 16, 16, 16384, 128), (4, 32, 8, 4096, 128), (4, 16, 16, 4096, 256),
                (1, 28, 4, 3000, 96), (2, 16, 16, 512, 128, 4096)],
    "tiny": [(1, 2, 2, 64, 64), (1, 2, 1, 96, 32), (1, 2, 2, 48, 32, 80)],
    "options": [],  # the default suite's option rows alone (below)
}
PEER = "sdpa-cudnn"
# Masks and options SDPA's backends cannot express (issue 15's rows), timed causal: (entry, option, value) with option
# "window" ((left, right), Mistral-style: query i sees keys i - left .. i) or "softcap" (Gemma 2's logit cap). Their
# providers are tilewright's (router's pick, forced Triton, forced CUDA) and the peer FlexAttention, compiled with
# the same block mask / score_mod (GPU), or the reference formula (CPU).
OPTION_SUITES = {
    "default": [((1, 16, 8, 16384, 128), "window", (4095, 0)), ((2, 16, 16, 8192, 128), "window", (1023, 0)),
                ((2, 16, 16, 4096, 128), "softcap", 50.0), ((4, 16, 16, 2048, 256), "softcap", 50.0)],
    "tiny": [((1, 2, 1, 64, 32), "window", (15, 0)), ((1, 1, 1, 32, 32), "softcap", 20.0)],
}
OPTION_SUITES["options"] = OPTION_SUITES["default"]
OPTION_PEER = "flex"


def shape_tag(B, Hq, Hkv, S, D, Skv=None) -> str:
    """A case's shape as it appears in the results: ``BxHq/HkvxSxD``, or ``BxHq/HkvxSq:SkvxD`` with a key length of
    its own."""
    return f"{B}x{Hq}/{Hkv}x{S}x{D}" if Skv is None or Skv == S else f"{B}x{Hq}/{Hkv}x{S}:{Skv}x{D}"


def flops(B, Hq, S, D, causal: bool, mode: str, Skv=None, window=None) -> float:
    """FLOPs of one call: 4 B Hq Sq Skv D for the forward, 2.5x that for mode "bwd" (5 matmuls against 2); causal
    counts the visible half of the scores; a causal ``window`` (left, 0) with Sq == Skv the (query, key) pairs it
    leaves visible, sum over i of min(i, left) + 1."""
    f = 4.0 * B * Hq * S * (S if Skv is None else Skv) * D
    if causal:
        f *= 0.5
    if window is not None and causal:
        left = window[0]
        visible = S * (left + 1) - left * (left + 1) // 2 if left < S else S * (S + 1) // 2
        f = 4.0 * B * Hq * D * visible
    if mode == "bwd":
        f *= 2.5
    return f


def option_tag(option: str, value) -> str:
    """The mask part of an option row's case: ``causal+window4095:0`` or ``causal+softcap50``."""
    if option == "window":
        return f"causal+window{value[0]}:{value[1]}"
    return f"causal+softcap{value:g}"


def _flex_runner():
    """``run(q, k, v, mask_key, mask_mod, score_mod=None)``: FlexAttention compiled once (static shapes), its block
    mask built once per (Sq, Skv, mask_key) (``mask_key`` None: no mask); None where flex_attention is unavailable."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except Exception as e:  # pragma: no cover - depends on the torch build
        print(f"flex_attention unavailable: {type(e).__name__}: {e}")
        return None
    compiled = torch.compile(flex_attention, dynamic=False)
    masks = {}

    def run(q, k, v, mask_key, mask_mod, score_mod=None):
        block_mask = None
        if mask_key is not None:
            key = (q.shape[2], k.shape[2], mask_key)
            if key not in masks:
                masks[key] = create_block_mask(mask_mod, None, None, q.shape[2], k.shape[2], device=q.device)
            block_mask = masks[key]
        return compiled(q, k, v, score_mod=score_mod, block_mask=block_mask, enable_gqa=q.shape[1] != k.shape[1])
    return run


def _thunk(fn, q, k, v, mode: str, *args):
    """What one row times: ``fn(q, k, v, *args)`` (mode "fwd") or the gradient of one such output (mode "bwd": the
    backward alone, the forward computed once, here)."""
    if mode == "fwd":
        return lambda: fn(q, k, v, *args)
    qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
    out = fn(qg, kg, vg, *args)
    dout = torch.randn_like(out)
    return lambda: torch.autograd.grad(out, (qg, kg, vg), dout, retain_graph=True)


def _time_rows(rows: dict, progress) -> dict:
    """{row key: median ms} of ``rows`` ({key: (label, thunk builder)}), all of one case timed interleaved
    (:func:`~.common.time_ms_alternating`); a row whose thunk fails to build or run is reported and left out."""
    thunks = {}
    for key, (label, build) in rows.items():
        try:
            thunk = build()
            thunk()  # compile / autotune outside the timed rounds, and fail here rather than mid-round
            thunks[key] = thunk
        except Exception as e:
            progress(f"  {label}: skipped ({type(e).__name__}: {str(e).splitlines()[0][:160]})")
    try:
        return dict(zip(thunks, time_ms_alternating(list(thunks.values()))))
    except Exception as e:  # one provider failing mid-round (e.g. out of memory): time the rest, each on its own
        progress(f"  interleaved timing failed ({type(e).__name__}: {str(e).splitlines()[0][:160]}); "
                 "timing each row alone")
    times = {}
    for key, thunk in thunks.items():
        try:
            times[key] = time_ms_alternating([thunk])[0]
        except Exception as e:
            progress(f"  {rows[key][0]}: skipped ({type(e).__name__}: {str(e).splitlines()[0][:160]})")
    return times


def _option_providers(gpu: bool, with_flex: bool) -> dict:
    """Providers of the option rows: ``fn(q, k, v, option, value)``."""
    import tilewright

    def kwargs(option, value):
        return {"window": value} if option == "window" else {"softcap": value}

    provs = {"tilewright-triton": lambda q, k, v, o, x: tilewright.flash_attention(q, k, v, causal=True,
                                                                                    backend="triton", **kwargs(o, x))}
    if not gpu:
        from ..reference import attention_reference

        def reference(q, k, v, option, value):
            return attention_reference(q, k, v, True, **{"window": value} if option == "window" else
                                       {"softcap": value})[0]
        provs["torch-math"] = reference
        return provs
    provs["tilewright"] = lambda q, k, v, o, x: tilewright.flash_attention(q, k, v, causal=True, **kwargs(o, x))
    # the sm_90a forward forced (its backward where the op layer enables it; the soft cap's is Triton's)
    provs["tilewright-cuda"] = lambda q, k, v, o, x: tilewright.flash_attention(q, k, v, causal=True, backend="cuda",
                                                                               **kwargs(o, x))
    run_flex = _flex_runner() if with_flex else None
    if run_flex is not None:
        def flex(q, k, v, option, value):
            if option == "window":
                left = value[0]
                return run_flex(q, k, v, ("window", left), lambda b, h, qi, kv: (qi >= kv) & (qi - kv <= left))
            return run_flex(q, k, v, ("causal",), lambda b, h, qi, kv: qi >= kv,
                            lambda score, b, h, qi, kv: value * torch.tanh(score / value))
        provs["flex"] = flex
    return provs


def _providers(gpu: bool, with_flex: bool):
    import tilewright

    def ours(q, k, v, causal):
        return tilewright.flash_attention(q, k, v, causal=causal, backend="triton")

    def ours_routed(q, k, v, causal):  # what a user gets: the router's pick per call
        return tilewright.flash_attention(q, k, v, causal=causal)

    if not gpu:
        def math_ref(q, k, v, causal):
            return torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=causal, enable_gqa=q.shape[1] != k.shape[1])
        return {"tilewright-triton": ours, "torch-math": math_ref}

    def sdpa(provider):
        on = sdpa_on(provider)

        def fn(q, k, v, causal):
            return on(q, k, v, is_causal=causal, enable_gqa=q.shape[1] != k.shape[1])
        return fn

    provs = {"tilewright-triton": ours, "tilewright": ours_routed, **{name: sdpa(name) for name in SDPA_BACKENDS}}
    if torch.cuda.get_device_capability()[0] == 9:
        # sm_90a CUDA forward (its backward is the Triton one, so only its fwd rows say anything new)
        def ours_cuda(q, k, v, causal):
            return tilewright.flash_attention(q, k, v, causal=causal, backend="cuda")
        provs["tilewright-cuda"] = ours_cuda
    run_flex = _flex_runner() if with_flex else None
    if run_flex is not None:
        def flex(q, k, v, causal):
            if causal:
                return run_flex(q, k, v, ("causal",), lambda b, h, qi, kv: qi >= kv)
            return run_flex(q, k, v, None, None)
        provs["flex"] = flex
    return provs


def _make(B, Hq, Hkv, S, D, dtype, device, Skv=None):
    g = torch.Generator(device=device).manual_seed(0)
    Skv = S if Skv is None else Skv
    q = torch.randn(B, Hq, S, D, device=device, dtype=dtype, generator=g)
    k = torch.randn(B, Hkv, Skv, D, device=device, dtype=dtype, generator=g)
    v = torch.randn(B, Hkv, Skv, D, device=device, dtype=dtype, generator=g)
    return q, k, v


def _unpack(case) -> tuple:
    """(B, Hq, Hkv, S, D, Skv) of a suite entry (Skv = S unless given)."""
    B, Hq, Hkv, S, D, *rest = case
    return B, Hq, Hkv, S, D, (rest[0] if rest else S)


def _masks(case) -> tuple:
    """The causal settings an unpacked entry is timed with: both, or none with a key length of its own (the default
    top-left alignment would hide most keys)."""
    return (False, True) if case[3] == case[5] else (False,)


def precompile(shapes, dtype=torch.bfloat16, workers: int | None = None, progress=print) -> None:
    """Compile every Triton config the autotuner will try for ``shapes`` in parallel worker processes (fills the
    on-disk kernel cache), so autotuning in this process only benchmarks. GPU only; a no-op elsewhere."""
    if not on_gpu():
        return
    import concurrent.futures as cf
    import multiprocessing as mp
    import time

    tasks = sorted({(*case, causal, str(dtype).split(".")[-1]) for case in map(_unpack, shapes)
                    for causal in _masks(case)})
    if not tasks:
        return
    workers = workers or min(len(tasks) * 3, os.cpu_count() or 4, 16)
    t0 = time.time()
    jobs = [(t, kern) for t in tasks for kern in ("fwd", "dkdv", "dq")]
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as ex:
        done = list(ex.map(_precompile_one, jobs))
    progress(f"precompiled {sum(done)} kernel variants with {workers} processes in {time.time() - t0:.1f}s")


def _precompile_one(job) -> int:
    (B, Hq, Hkv, S, D, Skv, causal, dtype_name), kern = job
    from ..triton_kernels import attention as A

    try:
        dtype = getattr(torch, dtype_name)
        q, k, v = _make(B, Hq, Hkv, S, D, dtype, "cuda", Skv)
        return A.warmup(kern, q, k, v, causal)
    except Exception as e:
        print(f"precompile {job}: {type(e).__name__}: {e}")
        return 0


def run(suite: str = "default", progress=print, dtype=torch.bfloat16, with_flex: bool | None = None,
        csv_path: str | None = None) -> pd.DataFrame:
    """Benchmark ``suite`` ("default" = the attention suite above, on GPU, "tiny" = CPU interpreter smoke run).

    with_flex: include FlexAttention (default: on, unless TILEWRIGHT_BENCH_FLEX=0). csv_path: rewrite this CSV after
    every row (a run cut short still leaves its rows).
    """
    if suite not in SUITES:
        raise ValueError(f"suite: unknown {suite!r}; expected one of {sorted(SUITES)}")
    gpu = on_gpu()
    device = "cuda" if gpu else "cpu"
    if not gpu:
        dtype = torch.float32
    if with_flex is None:
        with_flex = os.environ.get("TILEWRIGHT_BENCH_FLEX", "1") != "0"
    provs = _providers(gpu, with_flex and gpu)
    only = os.environ.get("TILEWRIGHT_BENCH_ONLY")  # e.g. "flex": run a subset (a separate, slow-compiling pass)
    if only:
        provs = {k: v for k, v in provs.items() if k in only.split(",")}
    peer = PEER if gpu else "torch-math"
    env = environment()
    progress(f"attention bench, suite={suite}, card={card_name()}, dtype={dtype}, providers={list(provs)}")
    if gpu and "tilewright-triton" in provs:
        try:
            precompile(SUITES[suite], dtype, progress=progress)
        except Exception as e:  # compiling in this process later is slower, never wrong
            progress(f"precompile failed ({type(e).__name__}: {e}); compiling serially instead")
    rows = []
    option_peer = OPTION_PEER if gpu else "torch-math"

    def add_row(case, tag, name, ms, case_flops):
        tf = case_flops / (ms * 1e-3) / 1e12
        rows.append(dict(op="attention", case=case, shape=tag, dtype=str(dtype).split(".")[-1], provider=name,
                         median_ms=ms, tflops=tf))
        progress(f"  {case:40s} {name:18s} {ms:9.4f} ms {tf:8.1f} TFLOP/s")
        if csv_path:
            _frame(rows, peer, env, option_peer).to_csv(csv_path, index=False)

    for entry in SUITES[suite]:
        B, Hq, Hkv, S, D, Skv = _unpack(entry)
        q, k, v = _make(B, Hq, Hkv, S, D, dtype, device, Skv)
        tag = shape_tag(B, Hq, Hkv, S, D, Skv)
        for causal in _masks((B, Hq, Hkv, S, D, Skv)):
            mask = "causal" if causal else "full"
            try:  # a check beside the times: tilewright's Triton forward against SDPA's flash / the math path
                ref_out = provs["tilewright-triton"](q, k, v, causal) if "tilewright-triton" in provs else None
            except Exception:
                ref_out = None  # (its timed row reports why)
            for name in sorted({"sdpa-flash", "torch-math"} & set(provs)) if ref_out is not None else ():
                try:
                    err = (ref_out.float() - provs[name](q, k, v, causal).float()).abs().max().item()
                except Exception:
                    continue
                progress(f"  {tag}|{mask}: max |tilewright - {name}| = {err:.3e}")
            timed = {(name, mode): (f"{tag}|{mask}|{mode} {name}",
                                    lambda fn=fn, mode=mode, qkv=(q, k, v): _thunk(fn, *qkv, mode, causal))
                     for name, fn in provs.items()
                     for mode in (("fwd",) if name == "tilewright-cuda" else ("fwd", "bwd"))}
            for (name, mode), ms in _time_rows(timed, progress).items():
                add_row(f"{tag}|{mask}|{mode}", tag, name, ms, flops(B, Hq, S, D, causal, mode, Skv))
            del timed  # (its thunk builders hold the inputs)
        del q, k, v
        if gpu:
            torch.cuda.empty_cache()
    option_provs = _option_providers(gpu, with_flex and gpu)
    if only:
        option_provs = {k: v for k, v in option_provs.items() if k in only.split(",")}
    for entry, option, value in OPTION_SUITES.get(suite, ()):
        B, Hq, Hkv, S, D, Skv = _unpack(entry)
        q, k, v = _make(B, Hq, Hkv, S, D, dtype, device, Skv)
        tag = shape_tag(B, Hq, Hkv, S, D, Skv)
        timed = {(name, mode): (f"{tag}|{option_tag(option, value)}|{mode} {name}",
                                lambda fn=fn, mode=mode, qkv=(q, k, v): _thunk(fn, *qkv, mode, option, value))
                 for name, fn in option_provs.items() for mode in ("fwd", "bwd")}
        for (name, mode), ms in _time_rows(timed, progress).items():
            add_row(f"{tag}|{option_tag(option, value)}|{mode}", tag, name, ms,
                    flops(B, Hq, S, D, True, mode, Skv, value if option == "window" else None))
        del q, k, v, timed
        if gpu:
            torch.cuda.empty_cache()
    return _frame(rows, peer, env, option_peer)


def _frame(rows, peer, env, option_peer=None) -> pd.DataFrame:
    pd = require_pandas("tilewright.bench.attention")
    df = pd.DataFrame(rows, columns=[c for c in COLUMNS if c not in ("peer", "speedup")])
    # an option row's peer is the one provider that expresses its mask (SDPA's backends cannot)
    df = add_speedups(df, {c: (option_peer or peer) if "+" in c.split("|")[1] else peer for c in df["case"].unique()})
    return with_environment(df, env)


def ratio_table(df: pd.DataFrame) -> pd.DataFrame:
    """One line per case: tilewright TFLOP/s and its ratios to cuDNN and FA2 (sdpa-flash); ``auto_vs_*`` are the
    router's pick (provider "tilewright", what a user gets) against the same peers."""
    pd = require_pandas("tilewright.bench.attention")
    piv = df.pivot_table(index="case", columns="provider", values="median_ms")
    out = pd.DataFrame(index=piv.index)
    tf = df[df.provider == "tilewright-triton"].set_index("case")["tflops"]
    out["tw_tflops"] = tf
    for peer in ("sdpa-cudnn", "sdpa-flash", "flex"):
        if peer in piv and "tilewright-triton" in piv:
            out[f"vs_{peer}"] = piv[peer] / piv["tilewright-triton"]
        if peer in piv and "tilewright" in piv:
            out[f"auto_vs_{peer}"] = piv[peer] / piv["tilewright"]
    return out.reset_index()


def main() -> None:  # python -m tilewright.bench.attention [suite] [csv]
    """Command line: run a suite and print (or write) the long-format results."""
    import sys

    suite = sys.argv[1] if len(sys.argv) > 1 else "default"
    path = sys.argv[2] if len(sys.argv) > 2 else None
    df = run(suite, csv_path=path)
    if path:
        df.to_csv(path, index=False)
    require_pandas("tilewright.bench.attention").set_option("display.width", 200)
    print(ratio_table(df).to_string(index=False, float_format=lambda x: f"{x:.3f}"))


if __name__ == "__main__":
    main()
