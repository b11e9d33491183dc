"""Attention of a few new query tokens against a KV cache (decode, speculative verification, chunked prefill) in
Triton: split-KV ("flash-decoding") with the query heads of one KV group packed into one tile, and a combine pass.

Layout and contract
-------------------
q: (B, Sq, Hq, D); k_cache / v_cache: contiguous per sequence, (B, S_cache, Hkv, D), or paged, (num_pages,
page_size, Hkv, D) with ``block_table`` (B, max_pages) int32 mapping each sequence's logical page to a physical one;
any strides with a unit last dim. ``seqlens`` (B,) int32: the valid cache length of each sequence (the new tokens
already appended). Query token i of a sequence of length L sits at key position ``L - Sq + i`` (flash-attn's
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
int32 load per row; pages of any size work, and an entry outside [0, num_pages) is clamped, never dereferenced out of
bounds (the op layer rejects such tables before launching).
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from .._env import interpreting

INTERPRET = interpreting()
LOG2E = 1.4426950408889634
# the kernels' copies (a @triton.jit function reads only constexpr globals)
_LOG2E = tl.constexpr(LOG2E)
_LN2 = tl.constexpr(0.6931471805599453)


@triton.jit
def _split_kernel(Q, K, V, SEQLENS, TABLE, O_PART, LSE_PART,
                  stride_qb, stride_qs, stride_qh,
                  stride_kp, stride_ks, stride_kh, stride_vp, stride_vs, stride_vh,
                  stride_tb, stride_os, stride_ob, stride_oh, stride_om,
                  B, Hkv, Sq, num_pages, scale_log2, softcap, window_left, window_right,
                  GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, NUM_SPLITS: tl.constexpr,
                  PAGE_SIZE: tl.constexpr, PAGED: tl.constexpr, CAUSAL: tl.constexpr,
                  WINDOW_LEFT: tl.constexpr, WINDOW_RIGHT: tl.constexpr, SOFTCAP: tl.constexpr,
                  UPCAST: tl.constexpr, DOT_PRECISION: tl.constexpr):
    bh = tl.program_id(0)  # (sequence, kv head) on the grid's x: B * Hkv may pass y's 65,535 limit
    split = tl.program_id(1)
    b = bh // Hkv
    hkv = bh % Hkv
    L = tl.load(SEQLENS + b)
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
        lo = tl.maximum(L - Sq - window_left, 0)
    hi = L
    span = tl.maximum(hi - lo, 0)
    chunk = tl.cdiv(tl.cdiv(span, NUM_SPLITS), BLOCK_N) * BLOCK_N
    start = lo + split * chunk
    stop = tl.minimum(start + chunk, hi)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM_PAD], tl.float32)
    keys = tl.arange(0, BLOCK_N)
    for n0 in range(start, stop, BLOCK_N):
        n = n0 + keys
        n_ok = n < stop
        if PAGED:
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
    tl.store(o_ptrs, out, mask=row_ok[:, None] & col_ok[None, :])
    lse_ptrs = LSE_PART + ((split * B + b) * (Hkv * GROUP) + hkv * GROUP + g) * Sq + tok
    tl.store(lse_ptrs, lse, mask=row_ok)


@triton.jit
def _combine_kernel(O_PART, LSE_PART, OUT, LSE, stride_os, stride_ob, stride_oh, stride_om,
                    stride_ob2, stride_os2, stride_oh2, B, H, Sq,
                    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, NUM_SPLITS: tl.constexpr,
                    SPLITS_PAD: tl.constexpr):
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


def _pow2(x: int, lo: int) -> int:
    return max(lo, 1 << max(0, (int(x) - 1).bit_length()))


# Launch shape: 4 warps, 64 keys a step, a 3-deep cp.async ring (2 at head dim 256: shared memory). In AOT sm_90 builds
# with the launch's 16-divisible strides (tests/test_kvcache.py) that is 100-170 registers a thread and no spills;
# without those hints the K / V gathers do not vectorize and every element keeps its own 64-bit address (255
# registers, spills) - the strides of a real cache are multiples of 16 elements. Speed on the device: not measured.
NUM_WARPS = 4


def block_n(interpret: bool = INTERPRET) -> int:
    """Keys per loop step; 16 under the interpreter (each step costs milliseconds there)."""
    return 16 if interpret else 64


def num_stages(head_dim_pad: int) -> int:
    """Depth of the K / V load ring."""
    return 3 if head_dim_pad <= 128 else 2


def default_splits(batch: int, kv_heads: int, capacity: int, device) -> int:
    """How many chunks the key range of each (sequence, KV head) is cut into: enough programs for about two per SM
    (B * Hkv alone leaves most SMs idle at decode batch sizes), never chunks under 256 keys (each split re-reads the
    query tile and adds a combine term), at most 64."""
    sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 4
    want = -(-2 * sms // max(1, batch * kv_heads))
    return int(max(1, min(want, -(-capacity // 256), 64)))


def kvcache_attention(q, k_cache, v_cache, seqlens, block_table=None, *, causal=True, scale=None, softcap=0.0,
                      window=(None, None), num_splits=None):
    """(out, lse) of q against the cache (module docstring). Inputs are the op layer's checked tensors: q (B, Sq, Hq,
    D), caches with a unit last stride, seqlens int32 (B,) on q's device, block_table int32 (B, max_pages) or None."""
    B, Sq, Hq, D = q.shape
    paged = block_table is not None
    Hkv = k_cache.shape[2]
    group = Hq // Hkv
    capacity = block_table.shape[1] * k_cache.shape[1] if paged else k_cache.shape[1]
    splits = num_splits or default_splits(B, Hkv, capacity, q.device)
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    left, right = window
    head_dim_pad = _pow2(D, 16)
    rows = group * Sq
    block_m = min(_pow2(rows, 16), 64 if head_dim_pad <= 128 else 32)  # fp32 output tile in registers
    bn = block_n()
    o_part = torch.empty((splits, B, Hq, Sq, D), device=q.device, dtype=torch.float32)
    lse_part = torch.empty((splits, B, Hq, Sq), device=q.device, dtype=torch.float32)
    table = block_table if paged else seqlens  # an int32 stand-in pointer when unpaged (never read)
    upcast = INTERPRET and q.dtype == torch.bfloat16  # the interpreter's bf16 dot is wrong: fp32 after rounding
    _split_kernel[(B * Hkv, splits, -(-rows // block_m))](
        q, k_cache, v_cache, seqlens, table, o_part, lse_part,
        q.stride(0), q.stride(1), q.stride(2),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), v_cache.stride(0), v_cache.stride(1),
        v_cache.stride(2), table.stride(0) if paged else 0, o_part.stride(0), o_part.stride(1), o_part.stride(2),
        o_part.stride(3), B, Hkv, Sq, k_cache.shape[0], (scale / softcap if softcap else scale) * LOG2E,
        float(softcap), int(left or 0), int(right or 0),
        GROUP=group, HEAD_DIM=D, HEAD_DIM_PAD=head_dim_pad, BLOCK_M=block_m, BLOCK_N=bn, NUM_SPLITS=splits,
        PAGE_SIZE=k_cache.shape[1] if paged else 1, PAGED=paged, CAUSAL=bool(causal),
        WINDOW_LEFT=left is not None, WINDOW_RIGHT=right is not None, SOFTCAP=bool(softcap), UPCAST=upcast,
        DOT_PRECISION="ieee" if (upcast or q.dtype == torch.float32) else "tf32", num_warps=NUM_WARPS,
        num_stages=num_stages(head_dim_pad))
    out = torch.empty_like(q)
    lse = torch.empty((B, Hq, Sq), device=q.device, dtype=torch.float32)
    _combine_kernel[(B * Hq * Sq,)](
        o_part, lse_part, out, lse, o_part.stride(0), o_part.stride(1), o_part.stride(2), o_part.stride(3),
        out.stride(0), out.stride(1), out.stride(2), B, Hq, Sq,
        HEAD_DIM=D, HEAD_DIM_PAD=head_dim_pad, NUM_SPLITS=splits, SPLITS_PAD=_pow2(splits, 2), num_warps=1)
    return out, lse
