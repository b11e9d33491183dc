"""Variable-length (packed) prefill benchmark: ``flash_attention_varlen`` against the dense op and SDPA on padding.

Rows (H heads, head dim D, causal, bf16), forward and forward + backward:

* ``equal``: B sequences of one length L packed - the same tokens and FLOPs as the dense (B, H, L, D) batch, so
  ``tilewright-dense`` (``flash_attention`` as a user calls it: the sm_90a CUDA forward on H100 / H200, and for
  forward + backward cuDNN's where it measured faster - ops/_aten.cudnn_faster) is the direct reference for the
  varlen op (the sm_90a kernels' packed builds on Hopper); ``tilewright-dense-triton`` is the Triton kernel the
  varlen op runs elsewhere.
* ``mixed``: lengths drawn between 128 and 8k (seeded, a 4x-64x spread). Peers: ``sdpa-cudnn-padded`` /
  ``sdpa-flash-padded`` - SDPA on the batch padded to the longest sequence (what a user without varlen runs; it
  computes the padding too), and ``tilewright-dense-mean``: the dense op on equal sequences of the mean length and
  about the same total tokens, reported in TFLOP/s (its time is not comparable: other FLOPs).

``tflops`` counts each sequence's own work (causal: half of Sq x Skv; backward 2.5x the forward). ``speedup``: the
peer's time / this provider's; peer ``tilewright-dense`` for ``equal`` rows, ``sdpa-cudnn-padded`` (else the
fastest padded SDPA) for ``mixed`` rows. Suite ``tiny`` runs on CPU under the interpreter (timings meaningless).
The op's default input check (one device-to-host read of the offsets a call) is on: this is the call users make.
"""
from __future__ import annotations

import os

import torch

from .common import (add_speedups, card_name, environment, on_gpu, require_pandas, sdpa_on, suite_main, time_ms,
                     with_environment)

SUITES = {  # name -> list of (kind, H, D, lengths or (B, L))
    "default": [("equal", 16, 128, (8, 2048)), ("equal", 16, 128, (2, 8192)), ("mixed", 16, 128, 32768),
                ("mixed", 16, 128, 65536), ("mixed", 32, 64, 32768)],
    "tiny": [("equal", 2, 32, (2, 40)), ("mixed", 2, 32, 150)],
}


def mixed_lengths(total: int, lo: int, hi: int, seed: int = 0) -> list[int]:
    """Lengths drawn uniformly in [lo, hi] until they sum to about ``total`` (the last one trimmed, kept >= 1)."""
    g = torch.Generator().manual_seed(seed)
    out: list[int] = []
    while sum(out) < total:
        out.append(int(torch.randint(lo, hi + 1, (1,), generator=g)))
    out[-1] = max(1, out[-1] - (sum(out) - total))
    return out


def _flops(lengths, H, D, causal=True) -> float:
    return sum(4.0 * L * L * D * H * (0.5 if causal else 1.0) for L in lengths)


def run(suite: str = "default", progress=print, dtype=torch.bfloat16, csv_path: str | None = None):
    """Run a suite; the long-format DataFrame of :data:`tilewright.bench.common.COLUMNS` plus ``direction``."""
    import tilewright

    pd = require_pandas("tilewright.bench.varlen")
    gpu = on_gpu()
    if not gpu:
        dtype = torch.float16
        if suite != "tiny":
            progress("no GPU: running the tiny suite under the interpreter (timings are not performance)")
            suite = "tiny"
    device = "cuda" if gpu else "cpu"
    only = os.environ.get("TILEWRIGHT_BENCH_ONLY")
    progress(f"varlen bench, suite={suite}, card={card_name()}, dtype={dtype}")
    env = environment()
    rows = []
    for kind, H, D, spec in SUITES[suite]:
        if kind == "equal":
            B, L = spec
            lengths = [L] * B
        else:
            lo, hi = (128, 8192) if gpu else (8, 64)
            lengths = mixed_lengths(spec, lo, hi, seed=spec + H)
        T, Lmax = sum(lengths), max(lengths)
        g = torch.Generator(device=device).manual_seed(T)
        q, k, v = (torch.randn(T, H, D, generator=g, device=device, dtype=dtype) for _ in range(3))
        cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=device)
        tag = f"{kind}-{len(lengths)}seq-T{T}-max{Lmax}-H{H}-D{D}"
        provs = {"tilewright-varlen": (lambda q, k, v: tilewright.flash_attention_varlen(
            q, k, v, cu, cu, Lmax, Lmax, causal=True), (q, k, v), _flops(lengths, H, D))}
        if kind == "equal":
            B, L = spec
            dense = tuple(t.view(B, L, H, D).transpose(1, 2) for t in (q, k, v))
            provs["tilewright-dense"] = (lambda q, k, v: tilewright.flash_attention(q, k, v, causal=True), dense,
                                         _flops(lengths, H, D))
            provs["tilewright-dense-triton"] = (
                lambda q, k, v: tilewright.flash_attention(q, k, v, causal=True, backend="triton"), dense,
                _flops(lengths, H, D))
            if gpu:
                provs["sdpa-cudnn"] = (_sdpa("sdpa-cudnn"), dense, _flops(lengths, H, D))
        else:
            mean = max(1, round(T / len(lengths)))
            n = max(1, round(T / mean))
            eq = tuple(torch.randn(n, H, mean, D, generator=g, device=device, dtype=dtype) for _ in range(3))
            provs["tilewright-dense-mean"] = (lambda q, k, v: tilewright.flash_attention(q, k, v, causal=True), eq,
                                              _flops([mean] * n, H, D))
            if gpu:
                padded = tuple(_pad(t, lengths, Lmax) for t in (q, k, v))
                provs["sdpa-cudnn-padded"] = (_sdpa("sdpa-cudnn"), padded, _flops([Lmax] * len(lengths), H, D))
                provs["sdpa-flash-padded"] = (_sdpa("sdpa-flash"), padded, _flops([Lmax] * len(lengths), H, D))
        if only:
            provs = {n: p for n, p in provs.items() if n in only.split(",") or n.startswith("tilewright-varlen")}
        for direction in ("fwd", "fwd+bwd"):
            for name, (fn, inputs, flops) in provs.items():
                work = flops if direction == "fwd" else 3.5 * flops
                if name.endswith("-padded"):
                    work = _flops(lengths, H, D) * (1 if direction == "fwd" else 3.5)  # count useful work only
                try:
                    call = _direction(fn, inputs, direction)
                    call()
                    ms = time_ms(call, rep_ms=200 if gpu else 0, cpu_runs=1)
                except Exception as e:  # a peer that declines the row
                    why = f"{type(e).__name__}: {str(e).splitlines()[0][:100]}"
                    progress(f"  {tag} {direction} {name}: skipped ({why})")
                    continue
                rows.append(dict(op="varlen", case=f"{tag}|{direction}", shape=tag, dtype=str(dtype).split(".")[-1],
                                 provider=name, direction=direction, median_ms=ms, tflops=work / (ms * 1e-3) / 1e12))
                progress(f"  {tag:44s} {direction:8s} {name:22s} {ms:9.3f} ms {work / (ms * 1e-3) / 1e12:7.1f} TFLOP/s")
        q = k = v = provs = None
        if gpu:
            torch.cuda.empty_cache()
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    peers = {}
    for c, grp in df.groupby("case"):
        names = set(grp.provider)
        for want in ("tilewright-dense", "sdpa-cudnn-padded", "sdpa-flash-padded", "tilewright-dense-mean"):
            if want in names:
                peers[c] = want
                break
        else:
            peers[c] = grp.provider.iloc[0]
    df = with_environment(add_speedups(df, peers), env)
    if csv_path:
        df.to_csv(csv_path, index=False)
    return df


def _pad(t: torch.Tensor, lengths, Lmax: int) -> torch.Tensor:
    """Packed (T, H, D) -> padded (B, H, Lmax, D), zeros after each sequence."""
    out = t.new_zeros((len(lengths), Lmax, *t.shape[1:]))
    start = 0
    for b, n in enumerate(lengths):
        out[b, :n] = t[start:start + n]
        start += n
    return out.transpose(1, 2)


def _sdpa(provider: str):
    on = sdpa_on(provider)
    return lambda q, k, v: on(q, k, v, is_causal=True)


def _direction(fn, inputs, direction: str):
    if direction == "fwd":
        return lambda: fn(*inputs)
    leaves = [t.detach().requires_grad_() for t in inputs]
    out = fn(*leaves)
    grad = torch.randn_like(out)

    def fwd_bwd():
        o = fn(*leaves)
        torch.autograd.grad(o, leaves, grad)
    return fwd_bwd


if __name__ == "__main__":  # python -m tilewright.bench.varlen [suite] [csv]
    suite_main(run, "tilewright.bench.varlen")
