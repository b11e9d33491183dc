"""Attention of a few new query tokens against a KV cache (decode, speculative verification, chunked prefill) in
Triton: split-KV ("flash-decoding") with the query heads of one KV group packed into one tile, and a combine pass.

Layout and contract
-------------------
q: (B, Sq, Hq, D); k_cache / v_cache: contiguous per sequence, (B, S_cache, Hkv, D), or paged, (num_pages,
page_size, Hkv, D) with ``block_table`` (B, max_pages) int32 mapping each sequence's logical page to a physical one;
any strides with a unit last dim. ``seqlens`` (B,) int32, contiguous: the cached length of each sequence before
this call; a call that appended ``new_tokens`` (``append_to_cache``, a launch before) attends to L = seqlens[b] +
new_tokens keys. Query token i of a sequence of L keys sits at key position ``L - Sq + i`` (flash-attn's
bottom-right alignment): with ``causal`` it sees keys ``j <= L - Sq + i``; a window (left, right) keeps keys
``pos - left <= j <= pos + right`` of that position (right only without causal). A row that sees no key gets output 0
and LSE -inf. Output (B, Sq, Hq, D) in q's dtype; LSE (B, Hq, Sq) fp32, natural log.

Why this shape of kernel
------------------------
Decode reads the whole cache once per step and computes little: it is bound by memory bandwidth, and one query row
per program cannot fill the GPU. So (1) all ``Hq / Hkv * Sq`` query rows that read one KV head form one tile
(GQA packing: the K / V rows are loaded once for the whole group, and the tile is tall enough for ``tl.dot``), and
(2) the key range of each (sequence, KV head) is cut into ``num_splits`` chunks, one program each, so B * Hkv *
num_splits programs fill the SMs; each writes its chunk's normalised output and LSE in fp32, and a second kernel
combines the chunks with weights ``exp(lse_chunk - lse)``. A page-table lookup per key row (paged caches) costs one
int32 load per row (one per step when the page size is a multiple of the key block); pages of any size work, and an
entry outside [0, num_pages) or a length past the capacity is clamped, never dereferenced out of bounds (the op layer
reports such tables and lengths unless told not to check). Each step's entries are loaded a step ahead, so that the
K / V loads keep the contiguous kernel's ring (:data:`PAGE_PREFETCH`).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from .._env import interpreting
from ..autotune.space import SPLIT_K_MAX_TILES
from .._record import tensor_signature
from ._runtime import bind, store_bound

INTERPRET = interpreting()
LOG2E = 1.4426950408889634
# the kernels' copies (a @triton.jit function reads only constexpr globals)
_LOG2E = tl.constexpr(LOG2E)
_LN2 = tl.constexpr(0.6931471805599453)


# sizes that vary per call and gain nothing from Triton's value specialization (1 / multiple-of-16): no recompiles
@triton.jit(do_not_specialize=["num_pages", "capacity", "num_splits", "new_tokens", "window_left", "window_right"])
def _split_kernel(Q, K, V, SEQLENS, TABLE, O_PART, LSE_PART, OUT, LSE, ARRIVALS,
                  stride_qb, stride_qs, stride_qh,
                  stride_kp, stride_ks, stride_kh, stride_vp, stride_vs, stride_vh,
                  stride_tb, stride_os, stride_ob, stride_oh, stride_om, stride_ob2, stride_os2, stride_oh2,
                  B, Hkv, Sq, num_pages, capacity, num_splits, new_tokens, scale_log2, softcap, window_left,
                  window_right,
                  GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  PAGE_SIZE: tl.constexpr, PAGED: tl.constexpr, CAUSAL: tl.constexpr,
                  WINDOW_LEFT: tl.constexpr, WINDOW_RIGHT: tl.constexpr, SOFTCAP: tl.constexpr,
                  UPCAST: tl.constexpr, DOT_PRECISION: tl.constexpr, FUSED_COMBINE: tl.constexpr = False,
                  PAGE_PREFETCH: tl.constexpr = False, LAUNCH_DEPENDENTS: tl.constexpr = False,
                  TABLE_ROW_PAGES: tl.constexpr = 0):
    if TABLE_ROW_PAGES:
        # (PAGE_PREFETCH with TABLE_ROW_PREFETCH) the sequence's whole table row, loaded before its length: no step's
        # entries wait on a load after the length's - each is picked from these registers
        row_pages = tl.arange(0, TABLE_ROW_PAGES)
        row_entries = tl.load(TABLE + (tl.program_id(0) // Hkv).to(tl.int64) * stride_tb + row_pages,
                              mask=row_pages * PAGE_SIZE < capacity, other=0)
    if LAUNCH_DEPENDENTS:
        # (PDL_COMBINE) the combine launch behind this one may start now: its programs wait in griddepcontrol.wait
        # until this grid has finished and its partials are visible, so its launch latency hides under this kernel
        tl.extra.cuda.gdc_launch_dependents()
    bh = tl.program_id(0)  # (sequence, kv head) on the grid's x: B * Hkv may pass y's 65,535 limit
    split = tl.program_id(1)
    b = bh // Hkv
    hkv = bh % Hkv
    # the cached length plus the tokens appended by this call, clamped to the cache: whatever the lengths say, no
    # read outside it (the op layer reports bad lengths)
    L = tl.minimum(tl.maximum(tl.load(SEQLENS + b) + new_tokens, 0), capacity)
    # This program's rows: BLOCK_M of the GROUP query heads x Sq tokens; row r is head hkv * GROUP + r // Sq, token
    # r % Sq (more than BLOCK_M rows - long chunks of queries - take more row blocks, program_id 2).
    rows = tl.program_id(2) * BLOCK_M + tl.arange(0, BLOCK_M)
    g = rows // Sq
    tok = rows % Sq
    row_ok = rows < GROUP * Sq
    cols = tl.arange(0, HEAD_DIM_PAD)
    col_ok = cols < HEAD_DIM
    q_ptrs = Q + b.to(tl.int64) * stride_qb + tok[:, None] * stride_qs + (hkv * GROUP + g)[:, None] * stride_qh \
        + cols[None, :]
    q = tl.load(q_ptrs, mask=row_ok[:, None] & col_ok[None, :], other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    pos = L - Sq + tok  # each row's key position (bottom-right alignment)

    # The keys any row may see (from the first token's window edge; the last token sits at L - 1, so up to L), then
    # this split's share of them, in BLOCK_N-aligned chunks.
    lo = 0
    if WINDOW_LEFT:
        # aligned down to a key block (the window mask drops the extra keys): every step's keys then lie in one page
        # when pages are multiples of BLOCK_N, which the page lookup below relies on
        lo = tl.maximum(L - Sq - window_left, 0) // BLOCK_N * BLOCK_N
    hi = L
    span = tl.maximum(hi - lo, 0)
    chunk = tl.cdiv(tl.cdiv(span, num_splits), BLOCK_N) * BLOCK_N
    start = lo + split * chunk
    stop = tl.minimum(start + chunk, hi)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM_PAD], tl.float32)
    keys = tl.arange(0, BLOCK_N)
    if PAGE_PREFETCH:
        # the first step's table entries; each step then loads the next one's (below)
        table_row = TABLE + b.to(tl.int64) * stride_tb
        if TABLE_ROW_PAGES:
            entries = _row_step_entries(row_entries, start, stop, PAGE_SIZE, BLOCK_N, TABLE_ROW_PAGES)
        else:
            entries = _step_entries(table_row, start, stop, PAGE_SIZE, BLOCK_N)
    for n0 in range(start, stop, BLOCK_N):
        n = n0 + keys
        n_ok = n < stop
        if PAGE_PREFETCH:
            # this step's entries came in the previous step: no K / V address waits on a load of its own step, so
            # the pipeliner rings K / V num_stages - 1 steps deep (PAGE_PREFETCH, below: in the step, one buffer)
            page = tl.minimum(tl.maximum(entries, 0), num_pages - 1)  # never out of bounds, whatever the table says
            if TABLE_ROW_PAGES:
                entries = _row_step_entries(row_entries, n0 + BLOCK_N, stop, PAGE_SIZE, BLOCK_N, TABLE_ROW_PAGES)
            else:
                entries = _step_entries(table_row, n0 + BLOCK_N, stop, PAGE_SIZE, BLOCK_N)
            if PAGE_SIZE < BLOCK_N:
                page = tl.gather(page, keys // PAGE_SIZE, 0)  # each key row's page (n0 is block-aligned)
            k_row = page.to(tl.int64) * stride_kp + (n % PAGE_SIZE) * stride_ks
            v_row = page.to(tl.int64) * stride_vp + (n % PAGE_SIZE) * stride_vs
        elif PAGED:
            if PAGE_SIZE % BLOCK_N == 0:
                # the step's keys share one page (n0 is block-aligned): one scalar table load, and the rows' addresses
                # stay affine in n, which keeps the gather's index math to one add a row
                page = tl.load(TABLE + b.to(tl.int64) * stride_tb + n0 // PAGE_SIZE)
            else:
                page = tl.load(TABLE + b.to(tl.int64) * stride_tb + n // PAGE_SIZE, mask=n_ok, other=0)
            page = tl.minimum(tl.maximum(page, 0), num_pages - 1)  # never out of bounds, whatever the table says
            k_row = page.to(tl.int64) * stride_kp + (n % PAGE_SIZE) * stride_ks
            v_row = page.to(tl.int64) * stride_vp + (n % PAGE_SIZE) * stride_vs
        else:
            k_row = b.to(tl.int64) * stride_kp + n.to(tl.int64) * stride_ks
            v_row = b.to(tl.int64) * stride_vp + n.to(tl.int64) * stride_vs
        kv_mask = n_ok[:, None] & col_ok[None, :]
        k = tl.load(K + (k_row + hkv * stride_kh)[:, None] + cols[None, :], mask=kv_mask, other=0.0)
        v = tl.load(V + (v_row + hkv * stride_vh)[:, None] + cols[None, :], mask=kv_mask, other=0.0)
        if UPCAST:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)
        if SOFTCAP:
            # cap * tanh(y), y = scale * s / cap, in base 2: scale_log2 here is scale / cap * log2 e, so x = y log2 e
            # and tanh(y) = 1 - 2 / (2^(2x) + 1) (exact at the infinities: +-1)
            x = s * scale_log2
            t = 1.0 - 2.0 / (tl.exp2(2.0 * x) + 1.0)
            s = t * (softcap * _LOG2E)
        else:
            s = s * scale_log2
        visible = n_ok[None, :] & row_ok[:, None]
        if CAUSAL:
            visible = visible & (n[None, :] <= pos[:, None])
        if WINDOW_LEFT:
            visible = visible & (n[None, :] >= pos[:, None] - window_left)
        if WINDOW_RIGHT:
            visible = visible & (n[None, :] <= pos[:, None] + window_right)
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row without a visible key so far: exp2 gives 0
        alpha = tl.exp2(m_i - m_use)
        p = tl.exp2(s - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        p_op = p.to(v.dtype) if not UPCAST else p.to(Q.dtype.element_ty).to(tl.float32)
        acc = acc * alpha[:, None] + tl.dot(p_op, v, input_precision=DOT_PRECISION)
        m_i = m_new

    # This split's normalised output and natural-log LSE (rows without a visible key: 0 and -inf).
    has = l_i > 0.0
    out = acc / tl.where(has, l_i, 1.0)[:, None]
    lse = tl.where(has, (m_i + tl.log2(tl.where(has, l_i, 1.0))) * _LN2, float("-inf"))
    o_ptrs = O_PART + split.to(tl.int64) * stride_os + b.to(tl.int64) * stride_ob \
        + (hkv * GROUP + g)[:, None] * stride_oh + tok[:, None] * stride_om + cols[None, :]
    # fp32 partials, or (one split) the output itself in q's dtype
    tl.store(o_ptrs, out.to(O_PART.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])
    lse_ptrs = LSE_PART + ((split * B + b) * (Hkv * GROUP) + hkv * GROUP + g) * Sq + tok
    tl.store(lse_ptrs, lse, mask=row_ok)
    if FUSED_COMBINE:
        _combine_on_last_arrival(O_PART, LSE_PART, OUT, LSE, ARRIVALS, bh, b, hkv, g, tok, row_ok, cols, col_ok,
                                 stride_os, stride_ob, stride_oh, stride_om, stride_ob2, stride_os2, stride_oh2, B,
                                 Hkv, Sq, num_splits, GROUP, BLOCK_M, HEAD_DIM_PAD)


@triton.jit
def _step_entries(table_row, n0, stop, PAGE_SIZE: tl.constexpr, BLOCK_N: tl.constexpr):
    """The page-table entries of the key step at block-aligned ``n0`` (PAGE_PREFETCH): its BLOCK_N // PAGE_SIZE
    whole pages when pages are smaller than a step (a small vector, not an entry a key row), else the one page holding
    the step; entries of pages with no key before ``stop`` are not read (0)."""
    if PAGE_SIZE < BLOCK_N:
        pages = n0 // PAGE_SIZE + tl.arange(0, BLOCK_N // PAGE_SIZE)
        entries = tl.load(table_row + pages, mask=pages * PAGE_SIZE < stop, other=0)
    else:
        entries = tl.load(table_row + n0 // PAGE_SIZE, mask=n0 < stop, other=0)
    return entries


@triton.jit
def _row_step_entries(row_entries, n0, stop, PAGE_SIZE: tl.constexpr, BLOCK_N: tl.constexpr,
                      TABLE_ROW_PAGES: tl.constexpr):
    """:func:`_step_entries` picked from the sequence's preloaded table row (TABLE_ROW_PREFETCH) instead of loaded:
    the same values (0 for pages with no key before ``stop``)."""
    row_pages = tl.arange(0, TABLE_ROW_PAGES)
    if PAGE_SIZE < BLOCK_N:
        pages = n0 // PAGE_SIZE + tl.arange(0, BLOCK_N // PAGE_SIZE)
        picked = tl.gather(row_entries, tl.minimum(pages, TABLE_ROW_PAGES - 1), 0)
        entries = tl.where(pages * PAGE_SIZE < stop, picked, 0)
    else:
        entries = tl.sum(tl.where(row_pages == n0 // PAGE_SIZE, row_entries, 0), axis=0)
        entries = tl.where(n0 < stop, entries, 0)
    return entries


@triton.jit
def _combine_on_last_arrival(O_PART, LSE_PART, OUT, LSE, ARRIVALS, bh, b, hkv, g, tok, row_ok, cols, col_ok,
                             stride_os, stride_ob, stride_oh, stride_om, stride_ob2, stride_os2, stride_oh2, B, Hkv,
                             Sq, num_splits, GROUP: tl.constexpr, BLOCK_M: tl.constexpr,
                             HEAD_DIM_PAD: tl.constexpr):
    """The combine inside the split kernel: each program counts its arrival on its (sequence, KV head, row block);
    the last of the num_splits to arrive merges every split's partial rows into out / lse, so no second launch runs
    (a launch and its first DRAM round trip are most of a short decode step: 7 us at B 1 x 1k, 1.4 us of bytes).

    * Ordering, as split-K's in triton_kernels/gemm.py: every thread's partial stores, a CTA barrier, then one
      acq_rel atomic at GPU scope (the release is cumulative over the CTA's stores); the last arrival's acquire
      orders its reloads after every other split's release, and the reloads bypass L1 (.cg), which is not coherent
      across SMs.
    * Deterministic: the splits are merged in order 0, 1, ... whichever arrived last.
    * The counter is reset by the last arrival, so the next launch on this stream finds zeros (kernels on one stream
      run in order; the counters are split-K's per-stream arrivals, shared the same way).
    * Four splits' partials are loaded before any of them is merged, so their loads are in flight together: merged
      one split per loop step, each step waited out a round trip to L2 of its own, and the whole merge sat behind the
      slowest split (measured at B 1 x 1k: 10.3 us against 7.4 with the second launch; four at a time: not yet).
    """
    tl.debug_barrier()  # every thread's partial stores before the one releasing atomic below
    counter = ARRIVALS + bh * tl.num_programs(2) + tl.program_id(2)
    # acq_rel at GPU scope: releases this CTA's partials; the last arrival acquires every other split's
    arrived = tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu")
    if arrived == num_splits - 1:
        h = hkv * GROUP + g
        m = tl.full([BLOCK_M], float("-inf"), tl.float32)
        total = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM_PAD], tl.float32)
        for s0 in range(0, num_splits, 4):  # online merge: m the running max LSE, total and acc scaled to it
            lse0, o0 = _split_partial(O_PART, LSE_PART, s0, num_splits, b, h, tok, row_ok, cols, col_ok, stride_os,
                                      stride_ob, stride_oh, stride_om, B, Hkv * GROUP, Sq)
            lse1, o1 = _split_partial(O_PART, LSE_PART, s0 + 1, num_splits, b, h, tok, row_ok, cols, col_ok,
                                      stride_os, stride_ob, stride_oh, stride_om, B, Hkv * GROUP, Sq)
            lse2, o2 = _split_partial(O_PART, LSE_PART, s0 + 2, num_splits, b, h, tok, row_ok, cols, col_ok,
                                      stride_os, stride_ob, stride_oh, stride_om, B, Hkv * GROUP, Sq)
            lse3, o3 = _split_partial(O_PART, LSE_PART, s0 + 3, num_splits, b, h, tok, row_ok, cols, col_ok,
                                      stride_os, stride_ob, stride_oh, stride_om, B, Hkv * GROUP, Sq)
            m, total, acc = _merge_split(m, total, acc, lse0, o0)
            m, total, acc = _merge_split(m, total, acc, lse1, o1)
            m, total, acc = _merge_split(m, total, acc, lse2, o2)
            m, total, acc = _merge_split(m, total, acc, lse3, o3)
        has = total > 0.0
        out = acc / tl.where(has, total, 1.0)[:, None]
        lse = tl.where(has, tl.where(m == float("-inf"), 0.0, m) + tl.log(tl.where(has, total, 1.0)),
                       float("-inf"))
        tl.store(OUT + b.to(tl.int64) * stride_ob2 + tok[:, None] * stride_os2 + h[:, None] * stride_oh2
                 + cols[None, :], out.to(OUT.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])
        tl.store(LSE + (b * (Hkv * GROUP) + h) * Sq + tok, lse, mask=row_ok)
        tl.store(counter, 0)


@triton.jit
def _split_partial(O_PART, LSE_PART, s, num_splits, b, h, tok, row_ok, cols, col_ok, stride_os, stride_ob, stride_oh,
                   stride_om, B, H, Sq):
    """Split ``s``'s fp32 partial rows and their LSE, reloaded past L1 (.cg: not coherent across SMs); a split past
    ``num_splits`` reads as LSE -inf and zeros, which :func:`_merge_split` leaves without effect (weight 0, scale 1:
    the merge's result is bit for bit the one without it)."""
    ok = row_ok & (s < num_splits)
    lse_s = tl.load(LSE_PART + ((s * B + b) * H + h) * Sq + tok, mask=ok, other=float("-inf"), cache_modifier=".cg")
    o_s = tl.load(O_PART + tl.cast(s, tl.int64) * stride_os + b.to(tl.int64) * stride_ob + h[:, None] * stride_oh
                  + tok[:, None] * stride_om + cols[None, :], mask=ok[:, None] & col_ok[None, :], other=0.0,
                  cache_modifier=".cg")
    return lse_s, o_s


@triton.jit
def _merge_split(m, total, acc, lse_s, o_s):
    """One split into the online merge: m the running max LSE, total and acc scaled to it."""
    m_new = tl.maximum(m, lse_s)
    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # no split with a visible key yet: weights 0
    alpha = tl.exp(m - m_use)
    w = tl.exp(lse_s - m_use)
    return m_new, total * alpha + w, acc * alpha[:, None] + o_s * w[:, None]


@triton.jit
def _combine_kernel(O_PART, LSE_PART, OUT, LSE, stride_os, stride_ob, stride_oh, stride_om,
                    stride_ob2, stride_os2, stride_oh2, B, H, Sq,
                    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, NUM_SPLITS: tl.constexpr,
                    SPLITS_PAD: tl.constexpr, WAIT_PRIOR: tl.constexpr = False):
    if WAIT_PRIOR:
        # launched as a programmatic dependent of the split kernel (PDL_COMBINE): nothing of its output is read
        # before that grid has completed and its writes are visible
        tl.extra.cuda.gdc_wait()
    row = tl.program_id(0)  # (b, h, i) flattened, i fastest
    i = row % Sq
    h = (row // Sq) % H
    b = row // (Sq * H)
    splits = tl.arange(0, SPLITS_PAD)
    s_ok = splits < NUM_SPLITS
    lse_s = tl.load(LSE_PART + ((splits * B + b) * H + h) * Sq + i, mask=s_ok, other=float("-inf"))
    m = tl.max(lse_s, 0)
    m_use = tl.where(m == float("-inf"), 0.0, m)
    w = tl.exp(lse_s - m_use)
    total = tl.sum(w, 0)
    cols = tl.arange(0, HEAD_DIM_PAD)
    o = tl.load(O_PART + splits.to(tl.int64)[:, None] * stride_os + b.to(tl.int64) * stride_ob + h * stride_oh
                + i * stride_om + cols[None, :], mask=s_ok[:, None] & (cols[None, :] < HEAD_DIM), other=0.0)
    out = tl.sum(o * w[:, None], 0) / tl.where(total > 0.0, total, 1.0)
    tl.store(OUT + b.to(tl.int64) * stride_ob2 + i * stride_os2 + h * stride_oh2 + cols, out.to(OUT.dtype.element_ty),
             mask=cols < HEAD_DIM)
    tl.store(LSE + row, tl.where(total > 0.0, m_use + tl.log(tl.where(total > 0.0, total, 1.0)), float("-inf")))


@triton.jit
def _append_kernel(K_NEW, V_NEW, K_CACHE, V_CACHE, SEQLENS, TABLE,
                   stride_knb, stride_kns, stride_knh, stride_vnb, stride_vns, stride_vnh,
                   stride_kp, stride_ks, stride_kh, stride_vp, stride_vs, stride_vh, stride_tb,
                   new, Hkv, num_pages, capacity,
                   HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, HEADS_PAD: tl.constexpr,
                   PAGE_SIZE: tl.constexpr, PAGED: tl.constexpr):
    """Write new token t of sequence b (all its KV heads) into the caches at position seqlens[b] + t: one program per
    (b, t). A position outside [0, capacity) is not written (the op layer reports such lengths before launching);
    page-table entries are clamped like the attention kernel's."""
    pid = tl.program_id(0)
    b = pid // new
    t = pid % new
    pos = tl.load(SEQLENS + b) + t
    ok = (pos >= 0) & (pos < capacity)
    pos = tl.minimum(tl.maximum(pos, 0), capacity - 1)
    if PAGED:
        page = tl.load(TABLE + b.to(tl.int64) * stride_tb + pos // PAGE_SIZE)
        page = tl.minimum(tl.maximum(page, 0), num_pages - 1)
        k_row = page.to(tl.int64) * stride_kp + (pos % PAGE_SIZE) * stride_ks
        v_row = page.to(tl.int64) * stride_vp + (pos % PAGE_SIZE) * stride_vs
    else:
        k_row = b.to(tl.int64) * stride_kp + pos.to(tl.int64) * stride_ks
        v_row = b.to(tl.int64) * stride_vp + pos.to(tl.int64) * stride_vs
    heads = tl.arange(0, HEADS_PAD)
    cols = tl.arange(0, HEAD_DIM_PAD)
    mask = (heads[:, None] < Hkv) & (cols[None, :] < HEAD_DIM)
    src = b.to(tl.int64) * stride_knb + t * stride_kns + heads[:, None] * stride_knh + cols[None, :]
    k = tl.load(K_NEW + src, mask=mask)
    src = b.to(tl.int64) * stride_vnb + t * stride_vns + heads[:, None] * stride_vnh + cols[None, :]
    v = tl.load(V_NEW + src, mask=mask)
    tl.store(K_CACHE + k_row + heads[:, None] * stride_kh + cols[None, :], k, mask=mask & ok)
    tl.store(V_CACHE + v_row + heads[:, None] * stride_vh + cols[None, :], v, mask=mask & ok)


def append_to_cache(k_cache, v_cache, k, v, seqlens, block_table=None) -> None:
    """Write ``k`` / ``v`` (B, new, Hkv, D) into the caches at positions ``seqlens[b] + t``, in place, in one launch
    (the op layer's checked tensors; caches with a unit last stride)."""
    B, new, Hkv, D = k.shape
    if B == 0 or new == 0:
        return
    paged = block_table is not None
    table = block_table if paged else seqlens
    key = None
    if k.is_cuda and not INTERPRET and not torch.cuda.is_current_stream_capturing():
        key = _append_key(k, v, k_cache, v_cache, seqlens, block_table)
        hit = _bound.get(key)
        if hit is not None:  # bound at this signature's first call (see _bound)
            hit(*(t.data_ptr() for t in (k, v, k_cache, v_cache, seqlens, table)))
            return
    capacity = _capacity(k_cache, block_table)
    args = dict(K_NEW=k, V_NEW=v, K_CACHE=k_cache, V_CACHE=v_cache, SEQLENS=seqlens, TABLE=table,
                stride_knb=k.stride(0), stride_kns=k.stride(1), stride_knh=k.stride(2), stride_vnb=v.stride(0),
                stride_vns=v.stride(1), stride_vnh=v.stride(2), stride_kp=k_cache.stride(0),
                stride_ks=k_cache.stride(1), stride_kh=k_cache.stride(2), stride_vp=v_cache.stride(0),
                stride_vs=v_cache.stride(1), stride_vh=v_cache.stride(2), stride_tb=table.stride(0) if paged else 0,
                new=new, Hkv=Hkv, num_pages=k_cache.shape[0], capacity=capacity, HEAD_DIM=D,
                HEAD_DIM_PAD=_pow2(D, 16), HEADS_PAD=_pow2(Hkv, 1), PAGE_SIZE=k_cache.shape[1] if paged else 1,
                PAGED=paged, num_warps=4)
    grid = (B * new,)
    compiled = _append_kernel[grid](**args)
    if key is not None:
        roles = ("K_NEW", "V_NEW", "K_CACHE", "V_CACHE", "SEQLENS", "TABLE")
        bound = bind(_append_kernel, compiled, grid, args, {r: args[r] for r in roles})
        if bound is not None:
            store_bound(_bound, key, bound, _BOUND_MAX)


def _capacity(k_cache, block_table) -> int:
    """Tokens the cache holds per sequence (ops/kvcache.py has the same rule; the op layer must not import Triton)."""
    return block_table.shape[1] * k_cache.shape[1] if block_table is not None else k_cache.shape[1]


def _pow2(x: int, lo: int) -> int:
    return max(lo, 1 << max(0, (int(x) - 1).bit_length()))


# Launch shape and split count, from two sweeps on H100 (perf/LOG.md, session 14: device time with a cold L2; 13
# decode rows x 6 shapes x 4-7 split counts, then 7 rows x 4 shapes x 3 split counts x 3 cache layouts):
# * contiguous cache, B * Hkv below the SM count: split the keys so that B * Hkv * splits is about one program per SM,
#   64 keys a step, 4 warps, a 3-deep ring (96 KB of shared memory). One program per SM keeps enough bytes in
#   flight; a split count that spills past the first wave (5 at B * Hkv = 64: 320 programs) cost 4-7%.
# * contiguous, B * Hkv at or above it: no split (each program already streams a whole sequence), 128 keys a step
#   (192 KB ring): 1-2% over 64-key steps on the longest rows.
# * paged, the in-step lookup (page sizes :data:`PAGE_PREFETCH` does not take; the others take the contiguous rules):
#   each step's rows wait on a page-table load before their K / V loads can issue, so one program per SM
#   leaves the memory system idle (B 8 x S 32k: 526 us with pages of 16 against 354 contiguous). About three programs
#   per SM with a 4-deep ring of 64-key steps hide it: 366 us (pages of 16), 364 (of 256).
# * H200 (perf/LOG.md, session 22: 10 rows x 16 shapes, SDPA interleaved): its ~1.3x the H100's bandwidth wants
#   more bytes in flight per program; in the split regime the 64-key steps ran 0.94-0.99x SDPA's best on the long
#   rows, 128-key steps with the same 3-deep ring (192 KB) and split count 1.00-1.06x on every split row whose splits
#   hold >= 128 keys. :func:`wide_split_steps` names the cards that take them; elsewhere the H100's 64.
# * H200, whole waves with short sequences (perf/LOG.md, session 25: 48 shapes x 4 rows, cuDNN interleaved): at B 64 x
#   1k the 192 KB ring holds one program per SM, and each program's ~16 steps are mostly its ring's fill and drain:
#   64-key steps with a 2-deep ring (64 KB, three programs per SM) ran 72.5 us against 76.4 (cuDNN 74.3); at 8k and
#   32k the 128-key ring stays ahead (485.9 vs 490.8 us). :data:`SHORT_WAVE_KEYS` bounds the rule. A confirming A/B
#   (3 rounds): 0.94-0.95x the 128-key time at B 64 x 1k (32 and 64 query heads), 0.98x at B 64 x 2k, level at B 32
#   and B 128 x 1k and at 4k - and 1.09x at B 17 x 2k, whose 136 programs are one wave and four: the rule takes
#   launches of more than two programs per SM (the bands below take the rest). These rules and the bands were
#   measured at head dim 128 only, and apply there.
# * H200, B * Hkv from one to two waves of programs, unsplit (session 25's sweep of 9 such rows, 6 split counts x 3
#   shapes, cuDNN interleaved): one full wave and a few programs ran 0.66-0.93x cuDNN (B 17 x 8 heads x 8k: 212 us
#   against 140.5); three splits a program with the short ring - ~3 programs per SM - ran 141.5, and 1.04-1.5x the
#   unsplit time on the five rows of the band (:func:`boundary_band`). Its A/B (3 rounds; band_ab_2026-11-28_2236):
#   B 17 x 2k / 8k / 32k 0.75 / 0.67 / 0.64x the unsplit time (0.97-1.01x cuDNN, was 0.65-0.73), B 20 x 4k 0.78x
#   (1.005x cuDNN); from ~1.4 waves on, the split no longer paid (B 24: 0.91-0.96x, B 32: 1.00x) where the unsplit
#   launch with 64-key steps and the 3-deep ring (96 KB: two programs per SM, so the launch is resident at once) ran
#   best: B 24 x 1k / 8k 34.8 / 191.0 us against 38.3 / 217.5, B 32 x 1k 42.3 against 44.1, B 33 x 2k 72.8
#   against 75.7 (79.2 with the short ring, which the short-wave rule had given it): :func:`mid_band`.
# Head dim 256 keeps 64 keys and a 2-deep ring (shared memory). In AOT sm_90 builds with the launch's 16-divisible
# strides (tests/test_kvcache.py) these shapes take 100-170 registers a thread and no spills; without those hints the
# K / V gathers do not vectorize and every element keeps its own 64-bit address (255 registers, spills) - the strides
# of a real cache are multiples of 16 elements.
NUM_WARPS = 4
SHORT_WAVE_KEYS = 2048  # whole-wave programs streaming at most this many keys take the short ring (H200, above)
MID_BAND_WAVES = 1.4  # B x Hkv from this many waves of programs to two: unsplit, 64-key steps (H200, above)
# The short split rows (issue 16: decode of a short cache at small batch, where a launch's fill and drain are most of
# its time): head dim 128, B x Hkv at most half the SMs, at most SHORT_SPLIT_KEYS keys, one 16-row query
# tile (GQA groups up to 16 at one token) take twice the split count - about two programs an SM - in 32-key steps with
# 2 warps and the 3-deep ring: each program's steps are fewer and shorter, so the wave's tail is shorter, and two
# resident programs an SM overlap one's fill with the other's stream. H200 (perf/LOG.md, session 34; GQA 32/8, D 128,
# split count x keys a step x warps x ring around the default, cuDNN interleaved, graph replays with the L2
# flushed): the setting was the best or within 1% of it on every row - B 1 x 1k / 2k / 4k 6.56 -> 6.11, 8.65 -> 8.15,
# 11.57 -> 11.10 us, B 2 1.13 / 1.13 / 1.11x cuDNN (was 1.10 / 1.09 / 1.07), B 8 x 1k / 2k 16.18 -> 15.88, 26.14 ->
# 25.57 us, B 8 x 4k level; the rule's confirming run: B 1 x 1k / 2k / 4k 1.180 / 1.163 / 1.172x cuDNN (was 1.139 /
# 1.125 / 1.116). A paged cache whose entries are prefetched takes the contiguous launch's shape, this one included:
# pages of 16 in the same runs 7.07 -> 6.78, 9.45 -> 9.33, 12.75 -> 11.53 us at B 1, 0.5-8% faster at B 2, level at
# B 8. Longer caches were not swept: they keep the split regime's shape. At most SHORT_SPLIT_MAX splits (the sweep's
# rows ran up to 32; more would widen the combine's one-warp tile past 64 partials a row).
SHORT_SPLIT_KEYS = 4096
SHORT_SPLIT_MAX = 64
SHORT_SPLIT_ROWS = 16  # query rows of a program (GQA group x tokens) the 2-warp tile was measured at
SHORT_SPLIT_SHAPE = (32, 3, 2)  # (keys a step, ring depth, warps)
# The combine of the splits inside the split kernel (_combine_on_last_arrival) instead of a second launch; off until
# measured on the device (config={"fused_combine": True} runs it: the A/B of perf/LOG.md session 22's next steps).
# Its arrival counters are split-K's per-stream ones (triton_kernels/gemm.split_k_workspace): a launch needing more
# than that buffer holds keeps the second launch.
FUSED_COMBINE = False
FUSED_COMBINE_MAX_COUNTERS = SPLIT_K_MAX_TILES
# Paged steps with the next step's page-table entries loaded a step ahead, at the contiguous launch's shape (issue 16:
# paged decode within 5% of contiguous). With the lookup inside the step, a K / V address waits on a table load of
# its own step, and Triton 3.6's pipeliner splits the ring between the two loads: at num_stages 3 or 4 the table load
# gets one stage and K / V a single buffer, waited out (wait 0) at the top of every step - each step pays a whole K / V
# round trip (AOT sm_90 TTGIR). Carried in the loop, the entries are an ordinary loop value, and K / V get the
# contiguous kernel's ring; the launch then takes the contiguous one's split count, key step and ring depth too (the
# paged rules above - three programs an SM, a 4-deep ring of 64-key steps - were there to hide the round trip).
# Pages smaller than a step load the step's BLOCK_N // PAGE_SIZE entries (a small vector, spread to the rows with
# tl.gather: a reshape there makes the pipeliner leave K / V in plain loads), pages a multiple of it one entry; other
# page sizes keep the lookup in the step at the paged shape. H200 (perf/LOG.md, session 29; GQA 32/8, D 128, B 1 / 8 /
# 64 x 1k / 8k / 32k, graph replays interleaved): paged / contiguous geomean 1.045 (pages of 16; max 1.11 at B 1 x 8k)
# and 1.021 (of 256; max 1.049) against the in-step lookup's 1.061 / 1.037; the prefetch at the paged shape ran
# 1.110 / 1.098, at 4 stages 1.161 / 1.128. ``config={"page_prefetch": False}`` runs the in-step lookup.
PAGE_PREFETCH = True
# With PAGE_PREFETCH, the sequence's whole page-table row loaded at the program's start, beside (not after) its
# length, and every step's entries picked from it (``config={"table_row_prefetch": True}``; rows of at most
# TABLE_ROW_MAX_PAGES pages). Why: on the short paged rows a split has one or two steps, and its first step's K / V
# loads wait on two dependent round trips - the length (it places the split), then the entries - where the contiguous
# kernel waits on one: pages of 16 ran 1.04-1.12x contiguous there (issue 16 wants <= 1.05). Taken where it was
# measured faster (:func:`table_row_pays`); TABLE_ROW_PREFETCH = True takes it on every row that fits (A/B).
# H200, GQA 32/8, D 128, pages of 16, the short split band's rows (B 1 / 2 / 8 x 1k / 2k / 4k), graph replays
# interleaved with the contiguous kernel and cuDNN (perf/results/h200/decode/paged_short_rows_2026-11-29_s35.txt),
# paged / contiguous with the step prefetch -> with the row: on rows of 2k and 4k keys (128 / 256 pages) 1.093 ->
# 1.039, 1.071 -> 1.039, 1.070 -> 1.056, 1.067 -> 1.029, 1.045 -> 1.034, 1.054 -> 1.039 (all six faster); on 1k
# (64 pages) 1.102 -> 1.092 but 1.064 -> 1.083 and 1.070 -> 1.093 (two of three slower).
TABLE_ROW_PREFETCH = False
TABLE_ROW_MAX_PAGES = 256  # 1 KB of int32 a program (4 registers a thread at 2 warps)
TABLE_ROW_MIN_PAGES = 128  # where it measured faster (above)
TABLE_ROW_PAGE_SIZE = 16   # the only page size measured
# The combine launched as a programmatic dependent of the split kernel (PDL, sm_90+): the split kernel's programs
# signal griddepcontrol.launch_dependents at their start, the combine is launched with the programmatic
# stream-serialization attribute and its programs wait (griddepcontrol.wait) for the split grid's completion before
# reading a partial - so the second launch's latency runs under the first kernel instead of after it. Why: the short
# decode rows are launch- and latency-bound (B 1 x 1k: 7.2 us where its bytes take ~1.4 us; the combine launch is
# ~1.5-2 us of it) and issue 16 asks 1.2x SDPA there (1.12x now); the combine fused into the split kernel ran slower
# (9.5 us, FUSED_COMBINE). H200, GQA 32/8, D 128, graph replays
# (perf/results/h200/decode/pdl_combine_ab_2026-11-29_1541.*):
# B 1 x 1k 6.46 -> 6.36 us (1.14 -> 1.16x cuDNN; 6 us was predicted: the launch was less of the row than thought),
# B 8 x 1k 16.92 -> 16.21, B 8 x 8k 74.4 -> 73.4, the other eight rows level or up to 0.3% faster, pages of 16 the
# same; none slower. ``config={"pdl_combine": False}`` runs the ordinary second launch.
PDL_COMBINE = True


def pdl_supported(device) -> bool:
    """Whether launches on ``device`` may use programmatic dependent launch: a CUDA device of compute capability 9.0
    or newer (griddepcontrol), not the interpreter (it runs no inline PTX)."""
    return device.type == "cuda" and not INTERPRET and torch.cuda.get_device_capability(device)[0] >= 9


def block_n(head_dim_pad: int = 128, whole_waves: bool = False, paged: bool = False,
            interpret: bool = INTERPRET, wide_splits: bool = False, split_keys: int = 0, narrow: bool = False) -> int:
    """Keys per loop step (16 under the interpreter, where each step costs milliseconds); ``whole_waves``: B * Hkv
    fills the SMs without splitting (the second regime above); ``wide_splits``: the card takes 128-key steps in the
    split regime too (:func:`wide_split_steps`), where each split holds ``split_keys`` >= 128 keys; ``narrow``: the
    launch takes 64-key steps (the short ring, :func:`short_waves`, and the :func:`mid_band`)."""
    if interpret:
        return 16
    if paged or head_dim_pad > 128 or narrow:
        return 64
    return 128 if whole_waves or (wide_splits and split_keys >= 128) else 64


def short_waves(programs: int, sms: int, wide_splits: bool, split_keys: int) -> bool:
    """Whether a launch of ``programs`` (sequence, KV head) programs, more than two per SM, on a card of the H200's
    tuning, streams few enough keys a program to take the short ring (64-key steps, 2 stages; see above)."""
    return programs > 2 * sms and wide_splits and split_keys <= SHORT_WAVE_KEYS


def wide_split_steps(device) -> bool:
    """Whether ``device`` is a card measured faster with 128-key steps in the split regime (the H200; see above)."""
    return device.type == "cuda" and _card(device)[1]


def num_stages(head_dim_pad: int, paged: bool = False, short: bool = False) -> int:
    """Depth of the K / V load ring (``short``: :func:`short_waves`)."""
    if head_dim_pad > 128 or short:
        return 2
    return 4 if paged else 3


def num_sms(device) -> int:
    """Streaming multiprocessors of ``device`` (4 for the CPU interpreter), cached: read on every call."""
    return _card(device)[0] if device.type == "cuda" else 4


def _card(device) -> tuple[int, bool]:
    """(SM count, takes wide split steps) of a CUDA ``device``, read once per device index."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    facts = _CARDS.get(index)
    if facts is None:
        props = torch.cuda.get_device_properties(index)
        facts = _CARDS[index] = (props.multi_processor_count, "H200" in props.name)
    return facts


_CARDS: dict = {}


def default_splits(batch: int, kv_heads: int, capacity: int, device, paged: bool = False,
                   head_dim_pad: int = 128) -> int:
    """How many chunks the key range of each (sequence, KV head) is cut into: about one program per SM in all (three
    for a paged cache with the in-step lookup, see above; B * Hkv alone leaves most SMs idle at decode batch sizes),
    never chunks under 64 keys (each split re-reads the query tile and adds a combine term); in the
    :func:`boundary_band`, about three programs per SM in chunks of at least 128 keys."""
    programs, sms = max(1, batch * kv_heads), num_sms(device)
    if not paged and head_dim_pad == 128 and boundary_band(programs, sms, wide_split_steps(device)):
        return int(max(1, min(-(-3 * sms // programs), capacity // 128)))
    per_sm = 3 if paged else 1
    return int(max(1, min(per_sm * sms // programs, -(-capacity // 64))))


class LaunchShape(NamedTuple):
    """A split-kernel launch's shape (:func:`launch_shape`)."""
    splits: int
    block_n: int
    stages: int
    warps: int


def short_split_band(programs: int, sms: int, measured: bool, capacity: int, rows: int | None) -> bool:
    """Whether a contiguous launch of ``programs`` (B x Hkv) over a cache of ``capacity`` keys, ``rows`` query rows a
    program, is a short split row on a card of the H200's tuning at head dim 128 (``measured``): it takes twice the
    default split count with :data:`SHORT_SPLIT_SHAPE` (see :data:`SHORT_SPLIT_KEYS`). ``rows`` None: unknown, no."""
    return (measured and rows is not None and rows <= SHORT_SPLIT_ROWS and capacity <= SHORT_SPLIT_KEYS
            and 2 * programs <= sms)


def takes_short_split(B: int, Hkv: int, capacity: int, head_dim_pad: int, device, num_splits: int | None,
                      rows: int | None) -> bool:
    """Whether a contiguous launch (or a paged one with the step prefetch, which takes its shape) is a short split row
    (:func:`short_split_band` on this device, the default split count): what :func:`launch_shape` and the table-row
    prefetch (:func:`table_row_pays`) both decide by."""
    measured = wide_split_steps(device) and head_dim_pad == 128
    return num_splits is None and short_split_band(B * Hkv, num_sms(device), measured, capacity, rows)


def table_row_pays(short_band: bool, page_size: int, row_pages: int) -> bool:
    """Whether a paged launch with the step prefetch takes the whole table row too (:data:`TABLE_ROW_PREFETCH`'s
    measured region): a short split row (:func:`short_split_band`) of TABLE_ROW_MIN_PAGES to TABLE_ROW_MAX_PAGES pages
    of TABLE_ROW_PAGE_SIZE tokens."""
    return (short_band and page_size == TABLE_ROW_PAGE_SIZE
            and TABLE_ROW_MIN_PAGES <= row_pages <= TABLE_ROW_MAX_PAGES)


def launch_shape(B: int, Hkv: int, capacity: int, head_dim_pad: int, device, paged: bool = False,
                 num_splits: int | None = None, interpret: bool = INTERPRET, rows: int | None = None) -> LaunchShape:
    """(split count, keys a step, ring depth, warps) of a launch (``num_splits``: the caller's count, else
    :func:`default_splits`; ``rows``: query rows a program, GQA group x tokens), by the rules above; the short ring,
    the bands and the short split rows only at head dim 128, where they were measured (``interpret``:
    :func:`block_n`'s)."""
    splits = num_splits or default_splits(B, Hkv, capacity, device, paged, head_dim_pad)
    sms, wide = num_sms(device), wide_split_steps(device)
    measured = wide and head_dim_pad == 128
    if not paged and takes_short_split(B, Hkv, capacity, head_dim_pad, device, num_splits, rows):
        block, stages, warps = SHORT_SPLIT_SHAPE
        splits = int(max(1, min(2 * splits, capacity // block, max(splits, SHORT_SPLIT_MAX))))
        return LaunchShape(splits, 16 if interpret else block, stages, warps)
    banded = num_splits is None and not paged  # (the bands choose the split count too: defaults only)
    short = not paged and (short_waves(B * Hkv * splits, sms, measured, capacity // splits)
                           or (banded and boundary_band(B * Hkv, sms, measured)))
    narrow = short or (banded and mid_band(B * Hkv, sms, measured))
    bn = block_n(head_dim_pad, whole_waves=B * Hkv >= sms, paged=paged, interpret=interpret, wide_splits=wide,
                 split_keys=capacity // splits, narrow=narrow)
    return LaunchShape(splits, bn, num_stages(head_dim_pad, paged, short), NUM_WARPS)


def boundary_band(programs: int, sms: int, wide_splits: bool) -> bool:
    """Whether an unsplit contiguous launch of ``programs`` (B x Hkv) is one wave and a few programs (SMs <= programs
    < 1.4 x SMs) on a card of the H200's tuning: such launches split into ~three programs per SM and take the short
    ring (see above)."""
    return wide_splits and sms <= programs < MID_BAND_WAVES * sms


def mid_band(programs: int, sms: int, wide_splits: bool) -> bool:
    """Whether an unsplit contiguous launch of ``programs`` (B x Hkv) spans 1.4 to 2 waves on a card of the H200's
    tuning: it stays unsplit with 64-key steps and the 3-deep ring, two programs resident per SM (see above)."""
    return wide_splits and MID_BAND_WAVES * sms <= programs <= 2 * sms


# Bound launches per call signature: a decode step calls the op with the same shapes every time, and the split
# kernel's ~35 arguments make Triton's JIT dispatch cost tens of microseconds a launch - more than the kernel of a
# short cache. A hit allocates the outputs and hands the pointers to the two compiled kernels (triton_kernels/_runtime).
_BOUND_MAX = 256
_bound: dict = {}


def _signature(q, k_cache, v_cache, seqlens, table, options) -> tuple:
    return (tensor_signature(q), tensor_signature(k_cache), tensor_signature(v_cache), tensor_signature(seqlens),
            tensor_signature(table), options, torch.cuda.current_device())


def bound_replay(q, k_cache, v_cache, seqlens, block_table=None, *, causal=True, scale=None, softcap=0.0,
                 window=(None, None), num_splits=None, new_tokens=0):
    """The bound launches a :func:`kvcache_attention` call with these arguments recorded (a callable taking the same
    tensors, returning (out, lse)), or None. The op layer keeps it under its own key to skip its checks too."""
    options = (bool(causal), scale, float(softcap), window, num_splits, int(new_tokens), ())
    return _bound.get(_signature(q, k_cache, v_cache, seqlens, block_table, options))


def bound_append(k, v, k_cache, v_cache, seqlens, block_table=None):
    """The bound launch an :func:`append_to_cache` call with these tensors' signatures recorded (called with their
    six pointers: k, v, the caches, seqlens, the table or seqlens again), or None."""
    return _bound.get(_append_key(k, v, k_cache, v_cache, seqlens, block_table))


def _append_key(k, v, k_cache, v_cache, seqlens, block_table) -> tuple:
    return ("append", *(tensor_signature(t) for t in (k, v, k_cache, v_cache, seqlens, block_table)),
            torch.cuda.current_device())


def kvcache_attention(q, k_cache, v_cache, seqlens, block_table=None, *, causal=True, scale=None, softcap=0.0,
                      window=(None, None), num_splits=None, config=None, new_tokens=0):
    """(out, lse) of q against the cache (module docstring). Inputs are the op layer's checked tensors: q (B, Sq, Hq,
    D), caches with a unit last stride, seqlens int32 (B,) on q's device, block_table int32 (B, max_pages) or None;
    ``new_tokens``: tokens this call appended after seqlens (each sequence has seqlens[b] + new_tokens keys).
    ``config``: a dict overriding the launch shape (``block_n``, ``num_warps``, ``num_stages``, ``block_m``), for
    measuring variants (``skip_combine``: launch the split kernel only, leaving out / lse unwritten;
    ``fused_combine`` / ``page_prefetch`` / ``table_row_prefetch``: :data:`FUSED_COMBINE` / :data:`PAGE_PREFETCH` /
    :data:`TABLE_ROW_PREFETCH` for this call)."""
    B, Sq, Hq, D = q.shape
    paged = block_table is not None
    options = (bool(causal), scale, float(softcap), window, num_splits, int(new_tokens),
               tuple(sorted((config or {}).items())))
    key = None
    if q.is_cuda and not INTERPRET and not torch.cuda.is_current_stream_capturing():
        key = _signature(q, k_cache, v_cache, seqlens, block_table, options)
        hit = _bound.get(key)
        if hit is not None:
            return hit(q, k_cache, v_cache, seqlens, block_table)
    Hkv = k_cache.shape[2]
    group = Hq // Hkv
    capacity = _capacity(k_cache, block_table)
    head_dim_pad = _pow2(D, 16)
    page_size = k_cache.shape[1] if paged else 1
    rows = group * Sq
    prefetch = paged and bool((config or {}).get("page_prefetch", PAGE_PREFETCH))
    if prefetch:
        # the contiguous launch's shape (split count, keys a step, ring; see PAGE_PREFETCH), where the page size
        # fits its steps: whole pages in a step, or a step in one page (n0 is block-aligned), so that the step's
        # entries can be loaded ahead
        splits, bn, stages, warps = launch_shape(B, Hkv, capacity, head_dim_pad, q.device, False, num_splits,
                                                 rows=rows)
        bn = (config or {}).get("block_n", bn)
        prefetch = bn % page_size == 0 or page_size % bn == 0
    if not prefetch:
        splits, bn, stages, warps = launch_shape(B, Hkv, capacity, head_dim_pad, q.device, paged, num_splits,
                                                 rows=rows)
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    left, right = window
    block_m = min(_pow2(rows, 16), 64 if head_dim_pad <= 128 else 32)  # fp32 output tile in registers
    if config:
        bn = config.get("block_n", bn)
        warps = config.get("num_warps", warps)
        stages = config.get("num_stages", stages)
        block_m = config.get("block_m", block_m)
    out = torch.empty(q.shape, device=q.device, dtype=q.dtype)
    direct = splits == 1
    if direct:
        # one split: the kernel's normalised rows are the answer; it writes them into out (viewed with a zero split
        # stride, in (b, h, token) order) and lse directly, and no combine pass runs (3 us at B 64 x S 1k on H100)
        lse = torch.empty((B, Hq, Sq), device=q.device, dtype=torch.float32)
        o_part = out.permute(0, 2, 1, 3).unsqueeze(0)
        lse_part = lse
    else:
        layout = _PartialLayout(splits, B, Hq, Sq, D)
        parts = torch.empty(layout.numel, device=q.device, dtype=torch.float32)
        o_part, lse_part, lse = layout.views(parts)
    table = block_table if paged else seqlens  # an int32 stand-in pointer when unpaged (never read)
    # TABLE_ROW_PREFETCH: the table row's pages, padded to a power of two (0: off)
    row_pages = 0
    if prefetch:
        width = capacity // page_size
        asked = (config or {}).get("table_row_prefetch")
        short = takes_short_split(B, Hkv, capacity, head_dim_pad, q.device, num_splits, rows)
        take = bool(asked) if asked is not None else TABLE_ROW_PREFETCH or table_row_pays(short, page_size, width)
        row_pages = _pow2(width, 2) if take and width <= TABLE_ROW_MAX_PAGES else 0
    upcast = INTERPRET and q.dtype == torch.bfloat16  # the interpreter's bf16 dot is wrong: fp32 after rounding
    row_blocks = -(-rows // block_m)
    fused = not direct and bool((config or {}).get("fused_combine", FUSED_COMBINE)) and \
        B * Hkv * row_blocks <= FUSED_COMBINE_MAX_COUNTERS
    # the combine as a programmatic dependent launch (PDL_COMBINE): only with a combine launch to make
    pdl = not direct and not fused and bool((config or {}).get("pdl_combine", PDL_COMBINE)) and \
        pdl_supported(q.device)
    arrivals = seqlens  # an int32 stand-in pointer without the fused combine (never read)
    if fused:
        from .gemm import split_k_workspace

        arrivals = split_k_workspace(q.device)[1]
    split_args = dict(
        Q=q, K=k_cache, V=v_cache, SEQLENS=seqlens, TABLE=table, O_PART=o_part, LSE_PART=lse_part, OUT=out, LSE=lse,
        ARRIVALS=arrivals, stride_qb=q.stride(0), stride_qs=q.stride(1), stride_qh=q.stride(2),
        stride_kp=k_cache.stride(0), stride_ks=k_cache.stride(1), stride_kh=k_cache.stride(2),
        stride_vp=v_cache.stride(0), stride_vs=v_cache.stride(1), stride_vh=v_cache.stride(2),
        stride_tb=table.stride(0) if paged else 0, stride_os=o_part.stride(0), stride_ob=o_part.stride(1),
        stride_oh=o_part.stride(2), stride_om=o_part.stride(3), stride_ob2=out.stride(0), stride_os2=out.stride(1),
        stride_oh2=out.stride(2), B=B, Hkv=Hkv, Sq=Sq, num_pages=k_cache.shape[0],
        capacity=capacity, num_splits=splits, new_tokens=int(new_tokens),
        scale_log2=(scale / softcap if softcap else scale) * LOG2E, softcap=float(softcap),
        window_left=int(left or 0), window_right=int(right or 0),
        GROUP=group, HEAD_DIM=D, HEAD_DIM_PAD=head_dim_pad, BLOCK_M=block_m, BLOCK_N=bn,
        PAGE_SIZE=page_size, PAGED=paged, CAUSAL=bool(causal),
        WINDOW_LEFT=left is not None, WINDOW_RIGHT=right is not None, SOFTCAP=bool(softcap), UPCAST=upcast,
        DOT_PRECISION="ieee" if (upcast or q.dtype == torch.float32) else "tf32", FUSED_COMBINE=fused,
        PAGE_PREFETCH=prefetch, LAUNCH_DEPENDENTS=pdl, TABLE_ROW_PAGES=row_pages, num_warps=warps,
        num_stages=stages)
    split_grid = (B * Hkv, splits, row_blocks)
    split_compiled = _split_kernel[split_grid](**split_args)
    split_roles = ("Q", "K", "V", "SEQLENS", "TABLE", "O_PART", "LSE_PART") + (("OUT", "LSE") if fused else ())
    if direct or fused:
        if key is not None:
            from .gemm import _arrivals_pointer

            split = bind(_split_kernel, split_compiled, split_grid, split_args, {r: split_args[r] for r in split_roles},
                         per_stream={"ARRIVALS": _arrivals_pointer} if fused else None)
            if split is not None:
                store_bound(_bound, key, _Replay(split, None, layout if fused else None, lse.shape), _BOUND_MAX)
        return out, lse
    combine_args = dict(
        O_PART=o_part, LSE_PART=lse_part, OUT=out, LSE=lse, stride_os=o_part.stride(0), stride_ob=o_part.stride(1),
        stride_oh=o_part.stride(2), stride_om=o_part.stride(3), stride_ob2=out.stride(0), stride_os2=out.stride(1),
        stride_oh2=out.stride(2), B=B, H=Hq, Sq=Sq, HEAD_DIM=D, HEAD_DIM_PAD=head_dim_pad, NUM_SPLITS=splits,
        SPLITS_PAD=_pow2(splits, 2), WAIT_PRIOR=pdl, num_warps=1)
    if pdl:  # (the launch attribute is a compile option in Triton: the bound replay of this launch keeps it)
        combine_args["launch_pdl"] = True
    combine_grid = (B * Hq * Sq,)
    if config and config.get("skip_combine"):  # measuring the split kernel alone (out / lse left unwritten)
        return out, lse
    combine_compiled = _combine_kernel[combine_grid](**combine_args)
    if key is not None:
        split = bind(_split_kernel, split_compiled, split_grid, split_args, {r: split_args[r] for r in split_roles})
        combine = bind(_combine_kernel, combine_compiled, combine_grid, combine_args,
                       {r: combine_args[r] for r in ("O_PART", "LSE_PART", "OUT", "LSE")})
        if split is not None and combine is not None:
            store_bound(_bound, key, _Replay(split, combine, layout, lse.shape), _BOUND_MAX)
    return out, lse


def _align128(elements: int) -> int:
    """``elements`` fp32 rounded up to a multiple of 128 bytes (a cache line: the partials' rows stay line-aligned,
    as at the buffer's own base; Triton needs 16)."""
    return -(-elements // 32) * 32


class _PartialLayout:
    """The split kernel's fp32 partials, (splits, B, Hq, Sq, D) outputs and (splits, B, Hq, Sq) LSEs, in one buffer - at
    one token a sequence (a decode step) preceded by the call's own (B, Hq, Sq) LSE output: one allocation a call
    where two would do (an allocation costs the host about as much as a launch: ~4 us under cProfile on the H200's
    host, perf/results/h200/host/host_profile_ops_2026-11-29_s34.txt). Each part 128-byte aligned (Triton
    specializes pointers on 16; the bound launches must see what the first launch saw). The LSE output is then the
    buffer's head - a view at storage offset 0, as a fresh tensor would be (the custom op's fake says so) - which
    keeps the partials alive while it lives: splits x Hq x D x 4 bytes a sequence, well under a MB at decode's split
    counts. A chunk of Sq tokens would keep Sq times that for an LSE Sq times smaller than its partials' D-th part
    (at B 1 x 512 tokens, 134 MB held by a 64 KB LSE): such calls allocate their LSE apart."""

    __slots__ = ("holds_lse", "lse_offset", "lse_shape", "numel", "o_offset", "o_shape", "out_lse_shape")

    def __init__(self, splits: int, B: int, Hq: int, Sq: int, D: int):
        self.o_shape, self.lse_shape, self.out_lse_shape = (splits, B, Hq, Sq, D), (splits, B, Hq, Sq), (B, Hq, Sq)
        self.holds_lse = Sq == 1
        self.o_offset = _align128(B * Hq * Sq) if self.holds_lse else 0
        self.lse_offset = _align128(self.o_offset + math.prod(self.o_shape))
        self.numel = self.lse_offset + math.prod(self.lse_shape)

    def views(self, parts: torch.Tensor):
        """(o_part, lse_part, lse) views of a buffer of ``numel`` fp32 (lse: a new tensor where the buffer has none)."""
        o_part = parts[self.o_offset:self.o_offset + math.prod(self.o_shape)].view(self.o_shape)
        return o_part, parts[self.lse_offset:].view(self.lse_shape), self.out_lse(parts)

    def out_lse(self, parts: torch.Tensor) -> torch.Tensor:
        """The call's LSE output: the head of ``parts``, or a new tensor where the buffer holds none."""
        if self.holds_lse:
            return parts[:math.prod(self.out_lse_shape)].view(self.out_lse_shape)
        return torch.empty(self.out_lse_shape, device=parts.device, dtype=torch.float32)


class _Replay:
    """The bound launches of one call signature (the split kernel, and the combine unless one split writes the
    output directly); called with that signature's tensors."""

    __slots__ = ("_combine", "_layout", "_lse_shape", "_split")

    def __init__(self, split, combine, layout: _PartialLayout | None, lse_shape):
        self._split, self._combine, self._layout, self._lse_shape = split, combine, layout, lse_shape

    def __call__(self, q, k_cache, v_cache, seqlens, block_table, want_lse: bool = True):
        """(out, lse) on new tensors; ``want_lse`` False (the caller of the op did not ask for it): the LSE of a split
        launch at one token a sequence is written into the partials' buffer and no tensor is made for it (None)."""
        dev = q.device
        out = torch.empty(q.shape, device=dev, dtype=q.dtype)
        table = block_table if block_table is not None else seqlens
        if self._layout is None:  # one split: the kernel writes out / lse itself
            lse = torch.empty(self._lse_shape, device=dev, dtype=torch.float32)
            self._split(q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), seqlens.data_ptr(), table.data_ptr(),
                        out.data_ptr(), lse.data_ptr())
            return out, lse
        layout = self._layout
        parts = torch.empty(layout.numel, device=dev, dtype=torch.float32)
        base = parts.data_ptr()
        o_part, lse_part = base + 4 * layout.o_offset, base + 4 * layout.lse_offset
        lse = None if layout.holds_lse else layout.out_lse(parts)
        lse_ptr = base if lse is None else lse.data_ptr()
        if self._combine is None:  # the combine fused into the split kernel
            self._split(q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), seqlens.data_ptr(), table.data_ptr(),
                        o_part, lse_part, out.data_ptr(), lse_ptr)
        else:
            self._split(q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), seqlens.data_ptr(), table.data_ptr(),
                        o_part, lse_part)
            self._combine(o_part, lse_part, out.data_ptr(), lse_ptr)
        if lse is None and want_lse:
            lse = layout.out_lse(parts)
        return out, lse
