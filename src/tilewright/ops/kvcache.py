"""``flash_attention_with_kvcache``: new query tokens against a (paged) KV cache, flash-attn's convention.

Contract (flash-attn's ``flash_attn_with_kvcache``, which inference engines already call):

* q: (B, Sq, Hq, D) - a few new tokens per sequence (decode: Sq = 1; speculative verification or chunked prefill:
  more). k_cache / v_cache: (B, S_cache, Hkv, D), or paged (num_pages, page_size, Hkv, D) with ``block_table``
  (B, max_pages) int32: logical page p of sequence b is physical page ``block_table[b, p]``. Hq % Hkv == 0.
* cache_seqlens: (B,) int32 on q's device (or a Python int for every sequence): the cache length before this call.
  With ``k`` / ``v`` (B, Sq_new, Hkv, D) they are written into the cache at positions cache_seqlens[b] ...
  cache_seqlens[b] + Sq_new - 1, in place, before attending; the sequence then has cache_seqlens[b] + Sq_new keys.
* causal is **bottom-right** aligned (flash-attn's): query token i of a sequence with L keys sits at position
  L - Sq + i and sees keys j <= L - Sq + i; ``window=(left, right)`` keeps keys within [pos - left, pos + right]
  of that position (None: unbounded; with causal the right side must be 0 / None). ``softcap``: scores
  ``softcap * tanh(scale * q k^T / softcap)``. A row that sees no key gives output 0 (and LSE -inf).
* Returns out (B, Sq, Hq, D) in q's dtype, or (out, lse) with lse (B, Hq, Sq) fp32, natural log. Forward only: no
  autograd graph (a q that requires grad under grad mode is refused).
* A ``torch.library`` custom op (``tilewright::flash_attn_kvcache``, mutating the two caches) with a fake
  implementation: torch.compile traces it without a graph break, and a compiled decode step sees the cache writes.

Checks: shapes, dtypes, devices and index dtypes raise naming the argument. The cache lengths and the block table's
entries are checked against the cache's capacity with one device-to-host read (once per tensors: every layer of a
decode step passes the same unmodified lengths and table, and only the first call reads, ``_checks.CheckedValues``;
skipped while a CUDA graph is captured or torch.compile traces); the kernels clamp lengths and page indices besides,
so even an unchecked call never reads or writes outside the cache.
"""
from __future__ import annotations

from typing import Optional

import torch

from .._env import interpreting
from ._checks import (CheckedValues, check_index_tensor, check_same_device, check_same_dtype, check_tensor,
                      values_readable)
from . import _fast
from ._eager import call_op, register_fast_dispatch
# the attention op's own rules for the options both ops take (one definition: same messages, same accepted values)
from .attention import HEAD_DIMS_TEXT, _check_scale, _check_softcap, _check_window, _head_dim_problem, _unit_last


def _check(q, k_cache, v_cache, k, v, block_table) -> None:
    """The tensors' ranks, dtypes, devices and shapes (the options go through the attention op's checks)."""
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        check_tensor(name, t, dims=(4,))
    check_same_dtype("q", q, k_cache=k_cache, v_cache=v_cache)
    check_same_device("q", q, k_cache=k_cache, v_cache=v_cache)
    B, Sq, Hq, D = q.shape
    problem = _head_dim_problem(D)
    if problem:
        raise ValueError(f"q: head dim {D} is not supported: {problem}; the op takes {HEAD_DIMS_TEXT}")
    if k_cache.shape != v_cache.shape:
        raise ValueError(f"v_cache: shape {tuple(v_cache.shape)} must equal k_cache's {tuple(k_cache.shape)}")
    if k_cache.shape[3] != D:
        raise ValueError(f"k_cache: head dim {k_cache.shape[3]} differs from q's {D}")
    Hkv = k_cache.shape[2]
    if Hkv == 0 or Hq % Hkv:
        raise ValueError(f"k_cache: {Hkv} kv heads do not divide q's {Hq} query heads; GQA needs Hq % Hkv == 0")
    if block_table is not None:
        check_index_tensor("block_table", block_table, q.device)
        if block_table.dim() != 2 or block_table.shape[0] != B:
            raise ValueError(f"block_table: expected (B={B}, max_pages), got shape {tuple(block_table.shape)}")
        if k_cache.shape[0] == 0 or k_cache.shape[1] == 0:
            raise ValueError(f"k_cache: a paged cache (num_pages, page_size, Hkv, D) needs pages, got "
                             f"{tuple(k_cache.shape)}")
    elif k_cache.shape[0] != B:
        raise ValueError(f"k_cache: batch {k_cache.shape[0]} differs from q's {B}; expected (B, S_cache, Hkv, D), or "
                         "pass block_table for a paged cache (num_pages, page_size, Hkv, D)")
    if (k is None) != (v is None):
        raise ValueError("k / v: pass both new tensors or neither")
    if k is not None:
        for name, t in (("k", k), ("v", v)):
            check_tensor(name, t, dims=(4,))
            if t.shape[0] != B or t.shape[2] != Hkv or t.shape[3] != D or t.shape != k.shape:
                raise ValueError(f"{name}: expected (B={B}, Sq_new, Hkv={Hkv}, D={D}) like k, got {tuple(t.shape)}")
        check_same_dtype("q", q, k=k, v=v)
        check_same_device("q", q, k=k, v=v)


def _capacity(k_cache, block_table) -> int:
    """Tokens the cache holds per sequence (a paged one: its table's width x the page size)."""
    return block_table.shape[1] * k_cache.shape[1] if block_table is not None else k_cache.shape[1]


def _check_values(seqlens, new: int, capacity: int, block_table, num_pages: int) -> None:
    """cache_seqlens in [0, capacity - new] and the pages the sequences use in [0, num_pages): one host read."""
    if not values_readable(seqlens) or seqlens.numel() == 0:
        return
    extra = (new, capacity, num_pages)
    if _checked.seen((seqlens, block_table), extra):
        return
    lo, hi = seqlens.min(), seqlens.max()
    stats = [lo, hi]
    if block_table is not None:
        page_size = capacity // max(1, block_table.shape[1])
        used = (torch.arange(block_table.shape[1], device=seqlens.device)[None, :] * page_size
                < (seqlens + new)[:, None])
        pages = torch.where(used, block_table, 0)
        stats += [pages.min(), pages.max()]
    values = torch.stack(stats).tolist()
    if values[0] < 0:
        raise ValueError(f"cache_seqlens: entries must be >= 0, found {values[0]}")
    if values[1] + new > capacity:
        raise ValueError(f"cache_seqlens: a sequence of {values[1]} cached tokens + {new} new ones exceeds the cache's "
                         f"capacity of {capacity} tokens")
    if block_table is not None and (values[2] < 0 or values[3] >= num_pages):
        raise ValueError(f"block_table: entries in use must lie in [0, {num_pages}) (the cache's pages), found "
                         f"{values[2] if values[2] < 0 else values[3]}")
    _checked.add((seqlens, block_table), extra)


_checked = CheckedValues()


def _append(k_cache, v_cache, k, v, seqlens, block_table) -> None:
    """Write the new tokens into the cache in place at positions seqlens[b] + t: one Triton launch on CUDA (and under
    the interpreter), torch indexing otherwise."""
    if k.is_cuda or interpreting():
        from ..triton_kernels.kvcache_attention import append_to_cache

        append_to_cache(k_cache, v_cache, _unit_last(k), _unit_last(v), seqlens, block_table)
        return
    B, new = k.shape[0], k.shape[1]
    pos = seqlens.long()[:, None] + torch.arange(new, device=k.device)[None, :]  # (B, new)
    if block_table is None:
        rows = torch.arange(B, device=k.device)[:, None].expand(B, new)
        k_cache[rows, pos] = k
        v_cache[rows, pos] = v
    else:
        page_size = k_cache.shape[1]
        pages = torch.gather(block_table.long(), 1, pos // page_size)
        k_cache[pages, pos % page_size] = k
        v_cache[pages, pos % page_size] = v


@torch.library.custom_op("tilewright::flash_attn_kvcache", mutates_args=("k_cache", "v_cache"))
def flash_attn_kvcache_op(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, seqlens: torch.Tensor,
                          k: Optional[torch.Tensor], v: Optional[torch.Tensor], block_table: Optional[torch.Tensor],
                          causal: bool, scale: float, window_left: int, window_right: int, softcap: float,
                          num_splits: int, validate: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) for checked inputs (the public function checks): appends k / v (if given) in place, then attends.
    ``window_left`` / ``window_right`` -1: unbounded; ``num_splits`` 0: chosen from the shapes."""
    new = 0 if k is None else k.shape[1]
    if validate:
        _check_values(seqlens, new, _capacity(k_cache, block_table), block_table, k_cache.shape[0])
    # the kernels index the lengths and the table's rows as dense arrays; the attention kernel adds the appended
    # tokens to the lengths itself (new_tokens)
    lengths = seqlens.contiguous()
    table = None if block_table is None else block_table.contiguous()
    if k is not None:
        _append(k_cache, v_cache, k, v, lengths, table)
    q_in = _unit_last(q)
    window = (None if window_left < 0 else window_left, None if window_right < 0 else window_right)
    if q.is_cuda or interpreting():
        from ..triton_kernels.kvcache_attention import kvcache_attention

        return kvcache_attention(q_in, k_cache, v_cache, lengths, table, causal=causal, scale=scale, softcap=softcap,
                                 window=window, num_splits=num_splits or None, new_tokens=new)
    from ..reference import kvcache_attention_reference

    out, lse = kvcache_attention_reference(q_in, k_cache, v_cache, lengths + new, table, causal, scale, softcap,
                                           window)
    return out.to(q.dtype), lse.float()


@flash_attn_kvcache_op.register_fake
def _(q, k_cache, v_cache, seqlens, k, v, block_table, causal, scale, window_left, window_right, softcap, num_splits,
      validate=True):
    B, Sq, Hq, _ = q.shape
    return torch.empty_like(q, memory_format=torch.contiguous_format), q.new_empty((B, Hq, Sq), dtype=torch.float32)


register_fast_dispatch(flash_attn_kvcache_op)  # what a compiled graph's call pays (ops/_eager.py)


def flash_attention_with_kvcache(q, k_cache, v_cache, cache_seqlens, *, k=None, v=None, block_table=None,
                                 causal: bool = True, scale: float | None = None, window=None,
                                 softcap: float | None = None, return_lse: bool = False, num_splits: int | None = None,
                                 validate: bool = True):
    """Attention of ``q`` (B, Sq, Hq, D) against a KV cache, appending ``k`` / ``v`` first (module docstring).

    Args:
        q: (B, Sq, Hq, D) new queries; float16 / bfloat16 (float32 is supported, slower).
        k_cache, v_cache: (B, S_cache, Hkv, D), or (num_pages, page_size, Hkv, D) with ``block_table``; written in
            place when ``k`` / ``v`` are given.
        cache_seqlens: (B,) int32 on q's device, or an int: cached tokens per sequence before this call.
        k, v: optional (B, Sq_new, Hkv, D) new keys / values, appended at ``cache_seqlens``.
        block_table: (B, max_pages) int32 for a paged cache.
        causal: bottom-right aligned causal mask (flash-attn's; default True).
        scale: score scale, default 1/sqrt(D) (any real number, as flash_attention takes).
        window: (left, right) sliding window around each query's position; None sides unbounded.
        softcap: logit soft cap (Gemma 2), None / 0 for none.
        return_lse: also return the natural-log LSE (B, Hq, Sq), fp32.
        num_splits: chunks of the key range per (sequence, kv head); None picks from the shapes and SM count.
        validate: check cache_seqlens and the block table's entries in use against the cache: one device-to-host
            read, which waits for the GPU, once per unmodified tensors (the other layers of a decode step skip it);
            an int cache_seqlens without a block table is checked on the host for free. A decode loop run eagerly
            may pass False to keep the host ahead of the GPU; the kernel then clamps out-of-range lengths and pages
            (never a read outside the cache, but a wrong answer for a wrong table). Skipped anyway while a CUDA
            graph is captured or torch.compile traces.
    Returns:
        out (B, Sq, Hq, D), or (out, lse).

    Runs the Triton split-KV kernels (triton_kernels/kvcache_attention.py) on CUDA tensors and on CPU under
    ``TRITON_INTERPRET=1``; CPU tensors otherwise take the reference formula (correct, slow)."""
    key = _replay_key(q, k_cache, v_cache, cache_seqlens, k, v, block_table, causal, scale, window, softcap,
                      num_splits)
    replay = _replays.get(key) if key is not None else None
    if replay is not None:  # a signature whose checks passed and whose launches are bound: skip to the launches
        attend, append = replay
        if validate:
            _check_values(cache_seqlens, 0 if k is None else k.shape[1], _capacity(k_cache, block_table),
                          block_table, k_cache.shape[0])
        if append is not None:
            table = block_table if block_table is not None else cache_seqlens
            append(*(t.data_ptr() for t in (k, v, k_cache, v_cache, cache_seqlens, table)))
        out, lse = attend(q, k_cache, v_cache, cache_seqlens, block_table, want_lse=return_lse)
        return (out, lse) if return_lse else out
    _check(q, k_cache, v_cache, k, v, block_table)
    scale = _check_scale(scale, q.shape[-1])
    softcap = _check_softcap(softcap)
    left, right = _check_window(window, causal)
    if torch.is_grad_enabled() and q.requires_grad:
        raise ValueError("q: flash_attention_with_kvcache is forward only (no autograd graph); call it under "
                         "torch.no_grad() or pass a q that does not require grad")
    B = q.shape[0]
    if isinstance(cache_seqlens, int) and not isinstance(cache_seqlens, bool):
        new, capacity = (0 if k is None else k.shape[1]), _capacity(k_cache, block_table)
        if validate and not 0 <= cache_seqlens <= capacity - new:
            raise ValueError(f"cache_seqlens: {cache_seqlens} cached tokens + {new} new ones do not fit the cache's "
                             f"capacity of {capacity} tokens (and must be >= 0)")
        validate = validate and block_table is not None  # checked here, unless the table's entries need a read
        cache_seqlens = torch.full((B,), cache_seqlens, dtype=torch.int32, device=q.device)
    seqlens = check_index_tensor("cache_seqlens", cache_seqlens, q.device)
    if seqlens.shape != (B,):
        raise ValueError(f"cache_seqlens: expected shape ({B},), got {tuple(seqlens.shape)}")
    if num_splits is not None and (isinstance(num_splits, bool) or not isinstance(num_splits, int)
                                   or not 1 <= num_splits <= 256):
        raise ValueError(f"num_splits: expected an int from 1 to 256 or None, got {num_splits!r}")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if t.stride(-1) != 1:
            raise ValueError(f"{name}: the head dim must be unit-stride (the cache is read and written in place)")
    # untraced eager calls skip the custom-op dispatcher (ops/_eager.call_op: tens of microseconds a call)
    out, lse = call_op(flash_attn_kvcache_op, q, k_cache, v_cache, seqlens, k, v, block_table, bool(causal), scale,
                       left, right, softcap, int(num_splits or 0), bool(validate))
    if key is not None and seqlens is cache_seqlens and seqlens.is_contiguous() and q.stride(-1) == 1 \
            and (block_table is None or block_table.is_contiguous()) \
            and (k is None or (k.stride(-1) == 1 and v.stride(-1) == 1)):
        # the launches read the caller's own tensors (no copy was made): later calls may go straight to them
        from ..triton_kernels.kvcache_attention import bound_append, bound_replay

        attend = bound_replay(q, k_cache, v_cache, seqlens, block_table, causal=bool(causal), scale=scale,
                              softcap=softcap, window=(None if left < 0 else left, None if right < 0 else right),
                              num_splits=num_splits or None, new_tokens=0 if k is None else k.shape[1])
        append = None if k is None else bound_append(k, v, k_cache, v_cache, seqlens, block_table)
        if attend is not None and (k is None or append is not None):
            _fast.store(_replays, key, (attend, append))
    return (out, lse) if return_lse else out


_replays = _fast.new_cache()


def _replay_key(q, k_cache, v_cache, cache_seqlens, k, v, block_table, causal, scale, window, softcap, num_splits):
    """The eager replay key of a call (ops/_fast.py), or None when it may not replay: a length given as an int, only
    one of k / v, a q that requires grad under grad mode (refused by the full path), tracing, a tensor subclass, a CPU
    tensor, or an option the full path must judge (an unhashable window, a non-bool causal)."""
    if torch.compiler.is_compiling():
        return None  # traced: nothing replays, and reading no further keeps the machinery out of the guards (_fast)
    if not isinstance(cache_seqlens, torch.Tensor) or type(causal) is not bool or (k is None) != (v is None):
        return None
    if (torch.is_grad_enabled() and q.requires_grad) or not _fast.eligible(q, k_cache, v_cache, cache_seqlens,
                                                                            block_table, k, v):
        return None
    sig = _fast.sig
    key = (sig(q), sig(k_cache), sig(v_cache), sig(cache_seqlens), sig(block_table), sig(k), sig(v), causal, scale,
           window, softcap, num_splits, torch.cuda.current_device())
    try:
        hash(key)
    except TypeError:  # e.g. a window given as a list
        return None
    return key
