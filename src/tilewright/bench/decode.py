"""Decode benchmark: ``flash_attention_with_kvcache`` against SDPA's backends, and against the device's copy bandwidth.

Decode reads the whole KV cache once per new token and computes little, so its measure is memory bandwidth: each row
reports the GB/s of K and V read (``gbps``) and that as a fraction of the device's copy bandwidth measured in the same
run (``bw_frac``: a ``copy_`` of a 1 GiB buffer, bytes read + written). Every provider is timed the way engines run a
decode step - replayed from a CUDA graph, the L2 flushed before each call, the providers of a row interleaved
(:func:`~tilewright.bench.common.graph_ms_alternating`):
the GPU time of the kernels with the cache read cold, no host launch cost (that is ``tilewright bench --op host``).
Providers: ``tilewright`` (contiguous
cache), ``tilewright-paged16`` / ``tilewright-paged256`` (the same cache through a shuffled block table of 16- or
256-token pages), and ``sdpa-flash`` / ``sdpa-cudnn`` / ``sdpa-efficient`` (torch's SDPA on (B, H, S, D) views,
``enable_gqa``; a backend that declines a row is skipped with a note). Peer for ``speedup``: the fastest SDPA backend
of the row. Suite ``tiny`` runs on CPU under the interpreter, against the reference formula (timings meaningless).

Rows: (B, Hq, Hkv, Skv, D) with one new token; the default suite is B in {1, 8, 64} x Skv in {1k, 8k, 32k, 128k} at
GQA 32/8 (and 64/8 for B 8), head dim 128, capped at 2M cached tokens a row (8 GiB of bf16 K + V).
"""
from __future__ import annotations

import os

import torch

from .common import (SDPA_BACKENDS, add_speedups, card_name, environment, graph_ms_alternating, on_gpu,
                     require_pandas, sdpa_on, suite_main, time_ms, with_environment)

_DEFAULT = [(b, 32, 8, s, 128) for b in (1, 8, 64) for s in (1024, 8192, 32768, 131072) if b * s <= 2 ** 21]
SUITES = {
    "default": _DEFAULT + [(8, 32, 8, 4096, 128), (8, 64, 8, 32768, 128)],
    "tiny": [(2, 4, 2, 40, 32), (1, 8, 2, 33, 16)],
}


def copy_bandwidth_gbps() -> float:
    """The device's copy bandwidth (GB/s, read + write bytes) from ``copy_`` of a 1 GiB buffer, median time."""
    src = torch.empty(1 << 29, dtype=torch.float16, device="cuda")  # 1 GiB
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), rep_ms=200)
    return 2 * src.numel() * src.element_size() / (ms * 1e-3) / 1e9


def _paged(k_cache, v_cache, page: int, seed: int = 0):
    """The contiguous (B, S, Hkv, D) cache as pages of ``page`` tokens in a shuffled order, plus the block table."""
    B, S, Hkv, D = k_cache.shape
    per = -(-S // page)
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(B * per, generator=g)
    table = order.reshape(B, per).to(torch.int32).to(k_cache.device)
    pad = per * page - S

    def pages(c):
        c = torch.nn.functional.pad(c, (0, 0, 0, 0, 0, pad)).reshape(B * per, page, Hkv, D)
        out = torch.empty_like(c)
        out[order.to(c.device)] = c
        return out
    return pages(k_cache), pages(v_cache), table


def _providers(gpu: bool):
    import tilewright

    def ours(table_key):
        def run(q, caches, seqlens):
            kc, vc, table = caches[table_key]
            return tilewright.flash_attention_with_kvcache(q, kc, vc, seqlens, block_table=table)
        return run

    provs = {"tilewright": ours(None)}
    if not gpu:
        from ..reference import kvcache_attention_reference

        provs["torch-math"] = lambda q, caches, seqlens: kvcache_attention_reference(q, *caches[None][:2], seqlens)[0]
        return provs
    provs["tilewright-paged16"] = ours(16)
    provs["tilewright-paged256"] = ours(256)
    for name in SDPA_BACKENDS:  # on (B, H, S, D) views of the contiguous cache
        def sdpa(q, caches, seqlens, on=sdpa_on(name)):
            kc, vc, _ = caches[None]
            return on(q.transpose(1, 2), kc.transpose(1, 2), vc.transpose(1, 2), enable_gqa=True).transpose(1, 2)
        provs[name] = sdpa
    return provs


def run(suite: str = "default", progress=print, dtype=torch.bfloat16, csv_path: str | None = None):
    """Run a suite; the long-format DataFrame of :data:`tilewright.bench.common.COLUMNS` plus ``gbps`` and
    ``bw_frac`` (see the module docstring)."""
    pd = require_pandas("tilewright.bench.decode")
    gpu = on_gpu()
    if not gpu:
        dtype = torch.float16  # the interpreter's bf16 dot is wrong
        if suite != "tiny":
            progress("no GPU: running the tiny suite under the interpreter (timings are not performance)")
            suite = "tiny"
    device = "cuda" if gpu else "cpu"
    provs = _providers(gpu)
    only = os.environ.get("TILEWRIGHT_BENCH_ONLY")
    if only:
        provs = {k: v for k, v in provs.items() if k in only.split(",")}
    copy_bw = copy_bandwidth_gbps() if gpu else float("nan")
    progress(f"decode bench, suite={suite}, card={card_name()}, dtype={dtype}, copy bandwidth {copy_bw:.0f} GB/s, "
             f"providers={list(provs)}")
    env = environment()
    rows = []
    for B, Hq, Hkv, S, D in SUITES[suite]:
        g = torch.Generator(device=device).manual_seed(B * 7 + S)
        q = torch.randn(B, 1, Hq, D, generator=g, device=device, dtype=dtype)
        kc = torch.randn(B, S, Hkv, D, generator=g, device=device, dtype=dtype)
        vc = torch.randn(B, S, Hkv, D, generator=g, device=device, dtype=dtype)
        seqlens = torch.full((B,), S, dtype=torch.int32, device=device)
        caches = {None: (kc, vc, None)}
        if gpu:
            caches[16] = _paged(kc, vc, 16)
            caches[256] = _paged(kc, vc, 256)
        kv_bytes = 2 * B * S * Hkv * D * kc.element_size()
        tag = f"{B}x{Hq}/{Hkv}x{S}x{D}"
        case = f"{tag}|decode"
        ref = None
        ready = {}
        for name, fn in provs.items():
            try:
                out = fn(q, caches, seqlens)
            except Exception as e:  # a peer that declines the row
                progress(f"  {case} {name}: skipped ({type(e).__name__}: {str(e).splitlines()[0][:120]})")
                continue
            if ref is None:
                ref = out
            elif not name.startswith("sdpa"):
                err = (out.float() - ref.float()).abs().max().item()
                if err > 2e-2:
                    progress(f"  {case} {name}: max |diff| vs {list(provs)[0]} = {err:.3e} (!)")
            ready[name] = (lambda fn=fn: fn(q, caches, seqlens))
        times = graph_ms_alternating(list(ready.values())) if ready else []
        for name, ms in zip(ready, times):
            gbps = kv_bytes / (ms * 1e-3) / 1e9
            flops = 4 * B * Hq * S * D
            rows.append(dict(op="decode", case=case, shape=tag, dtype=str(dtype).split(".")[-1], provider=name,
                             median_ms=ms, tflops=flops / (ms * 1e-3) / 1e12, gbps=gbps, bw_frac=gbps / copy_bw))
            progress(f"  {case:28s} {name:20s} {ms * 1e3:9.1f} us {gbps:8.0f} GB/s ({gbps / copy_bw:.2f} of copy)")
        kc = vc = caches = None  # free the row's caches before the next row allocates its own
        if gpu:
            torch.cuda.empty_cache()
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    peers = {}
    for c, grp in df.groupby("case"):
        sdpa = grp[grp.provider.isin(SDPA_BACKENDS)]
        peers[c] = sdpa.loc[sdpa.median_ms.idxmin(), "provider"] if len(sdpa) else (
            "torch-math" if "torch-math" in set(grp.provider) else grp.provider.iloc[0])
    df = with_environment(add_speedups(df, peers), env)
    if csv_path:
        df.to_csv(csv_path, index=False)
    return df


if __name__ == "__main__":  # python -m tilewright.bench.decode [suite] [csv]
    suite_main(run, "tilewright.bench.decode")
