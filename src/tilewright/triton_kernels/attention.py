"""Flash attention (FlashAttention-2 algorithm) in Triton: forward and backward.

Layout and contract
-------------------
q: (B, Hq, Sq, D), k/v: (B, Hkv, Skv, D), any strides with a unit last dim (a (B, S, H, D) tensor viewed as
(B, H, S, D) is read in place). GQA/MQA: query head h reads kv head ``h // (Hq // Hkv)`` - the kv head is indexed,
never copied. D is any multiple of 8 from 8 to 256 (``supported_head_dim``). The kernels work on a power-of-two
register tile of ``HEAD_DIM_PAD = head_dim_pad(D)`` columns (next power of two, at least 16: 8 -> 16, 24 -> 32,
40 -> 64, 72..120 -> 128, 136..248 -> 256); the extra columns are masked on load (zero) and on store (pointer
path) or zero-filled / clipped by TMA (descriptor path) - q/k/v are never copied to a padded buffer. Sq != Skv and
lengths that are not block multiples are fine.

Causal masking: query i sees key j iff ``j <= i + CAUSAL_OFFSET``. Offset 0 is top-left, exactly like
``torch.nn.functional.scaled_dot_product_attention(is_causal=True)`` whatever Sq and Skv are; Skv - Sq is flash-attn's
bottom-right alignment. The offset is a runtime argument (one build for every shift), never specialized. With offset
0 every query row sees key 0, so a row is fully masked only when Skv == 0; a negative offset leaves the first rows
without keys. The kernels guard every row: a row with no visible key gets output 0 and LSE -inf, and its gradients
are 0 - never NaN.

Forward
-------
One program per (query block, head, batch); the query tile stays in registers while K/V blocks stream through.
Online softmax in base 2 with the scale folded into one multiplier (``sm_scale * log2(e)``), fp32 statistics and
fp32 accumulator. The key range is split into *unmasked* blocks (no mask arithmetic at all) and *masked* blocks:
the causal diagonal blocks and the ragged Skv tail. Causal programs run heaviest-first (last query block first) so
the short blocks fill the tail of the wave. The stored LSE is the natural-log LSE (like SDPA's), fp32, (B, Hq, Sq).
On sm_90 the autotuner may pick the TMA variant (``USE_TMA``): device-side tensor descriptors over each (batch,
head) slice, whose out-of-bounds boxes zero-fill ragged tails and padded head-dim columns and clip stores.

Backward
--------
1. preprocess: ``delta = rowsum(dO * O)`` (minus dLSE when the LSE itself receives a gradient), fp32.
2. dK/dV pass: one program per (key block, kv head, batch) loops over all query heads of its GQA group and all
   query blocks, accumulating dK and dV in fp32 registers - deterministic, no atomics, no per-head copies.
3. dQ pass: one program per (query block, head, batch) loops over the key blocks, like the forward.
Both passes recompute P from the saved LSE and use the same unmasked/masked split as the forward.

Under the interpreter (TRITON_INTERPRET=1) each kernel runs one small config; bf16 operands are upcast to fp32
before ``tl.dot`` there (the interpreter's bf16 dot is wrong, triton#11584), after the same bf16 rounding of P/dS
that the GPU path performs. fp32 inputs are supported (IEEE fp32 dots - correct, not fast).
"""
from __future__ import annotations

import functools
import math

import torch
import triton
import triton.language as tl

# the head-dim contract (one definition, shared with the op layer); re-exported for the launchers' callers
from .._codes import (HEAD_DIM_MULTIPLE, MAX_HEAD_DIM, MIN_HEAD_DIM, SUPPORTED_HEAD_DIMS,  # noqa: F401
                      Varlen, supported_head_dim)
from .._env import full_autotune, interpreting
from .._record import is_recording, record, tensor_signature
from ._runtime import bind, ensure_allocator, is_tuned, retry_after_oom, store_bound
from .dot import dot_accumulate

INTERPRET = interpreting()  # read once: @triton.jit decided at import whether it interprets
# The head-dim tile is at least 16 columns wide: tl.dot on NVIDIA needs K >= 16 for 16-bit operands (one
# m16n8k16 / wgmma k16 step; triton.backends.nvidia min_dot_size) and the head dim is the K of the q k^T and dO v^T
# dots. 16 rather than 32: the smaller tile halves the wasted MMA work at D = 8 and the class-64 configs (below) fit it
# as they fit 32 (less shared memory and fewer registers than the 64-column tile they were cut for).
MIN_HEAD_DIM_PAD = 16
LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


# ----------------------------------------------------------------------------------------------------------------
# tile loads / stores shared by the kernels
# ----------------------------------------------------------------------------------------------------------------
@triton.jit
def _load_rows(desc, base, row0, n_rows, stride_row,
               BLOCK: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
               MASK_ROWS: tl.constexpr, USE_TMA: tl.constexpr):
    """Rows [row0, row0 + BLOCK) x all head-dim columns of one (batch, head) slice; out-of-range rows/cols -> 0."""
    if USE_TMA:
        x = desc.load([row0, 0])
    else:
        rows = tl.arange(0, BLOCK)
        cols = tl.arange(0, HEAD_DIM_PAD)
        ptrs = base + tl.cast(row0, tl.int64) * stride_row + (rows[:, None] * stride_row + cols[None, :])
        if MASK_ROWS:
            mask = (row0 + rows)[:, None] < n_rows
            if HEAD_DIM != HEAD_DIM_PAD:
                mask = mask & (cols[None, :] < HEAD_DIM)
            x = tl.load(ptrs, mask=mask, other=0.0)
        elif HEAD_DIM != HEAD_DIM_PAD:
            x = tl.load(ptrs, mask=cols[None, :] < HEAD_DIM, other=0.0)
        else:
            x = tl.load(ptrs)
    return x


@triton.jit
def _store_rows(desc, base, row0, n_rows, stride_row, x,
                BLOCK: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, USE_TMA: tl.constexpr):
    if USE_TMA:
        desc.store([row0, 0], x)
    else:
        rows = tl.arange(0, BLOCK)
        cols = tl.arange(0, HEAD_DIM_PAD)
        ptrs = base + tl.cast(row0, tl.int64) * stride_row + (rows[:, None] * stride_row + cols[None, :])
        mask = ((row0 + rows)[:, None] < n_rows) & (cols[None, :] < HEAD_DIM)
        tl.store(ptrs, x, mask=mask)


@triton.jit
def _operand(x, DTYPE: tl.constexpr, UPCAST: tl.constexpr):
    """Round to the MMA input dtype; under the interpreter with bf16, continue in fp32 (exact products)."""
    x = x.to(DTYPE)
    if UPCAST:
        x = x.to(tl.float32)
    return x


@triton.jit
def _make_desc(base, n_rows, stride_row, BLOCK: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr):
    return tl.make_tensor_descriptor(base, shape=[n_rows, HEAD_DIM], strides=[stride_row, 1],
                                     block_shape=[BLOCK, HEAD_DIM_PAD])


@triton.jit
def _tile_desc(base, n_rows, stride_row, BLOCK: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
               USE_TMA: tl.constexpr):
    """The TMA descriptor of one (batch, head) slice when ``USE_TMA``, else None (the pointer path ignores it)."""
    desc = None
    if USE_TMA:
        desc = _make_desc(base, n_rows, stride_row, BLOCK, HEAD_DIM, HEAD_DIM_PAD)
    return desc


@triton.jit
def _head_base(X, off_b, off_h, stride_b, stride_h):
    """Base pointer of the (batch ``off_b`` (int64), head ``off_h``) slice of a (B, H, S, D) tensor, int64 offsets."""
    return X + off_b * stride_b + off_h.to(tl.int64) * stride_h


@triton.jit
def _load_operand(desc, base, row0, n_rows, stride_row,
                  BLOCK: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
                  MASK_ROWS: tl.constexpr, USE_TMA: tl.constexpr, UPCAST: tl.constexpr):
    """``_load_rows`` of an MMA operand, upcast to fp32 under the interpreter with bf16 (``UPCAST``)."""
    x = _load_rows(desc, base, row0, n_rows, stride_row, BLOCK, HEAD_DIM, HEAD_DIM_PAD, MASK_ROWS, USE_TMA)
    if UPCAST:
        x = x.to(tl.float32)
    return x


@triton.jit
def _query_program(GROUP, CAUSAL: tl.constexpr):
    """(query block index, query head, batch (int64), kv head) of a program of a per-query-block grid."""
    pid_m = tl.program_id(0)
    if CAUSAL:
        pid_m = tl.num_programs(0) - 1 - pid_m  # heaviest query blocks first
    off_h = tl.program_id(1)
    off_b = tl.program_id(2).to(tl.int64)
    off_hk = off_h // GROUP
    return pid_m, off_h, off_b, off_hk


@triton.jit
def _sequence(CU_Q, CU_K, off_b, Sq, Skv, CAUSAL_OFFSET, WINDOW_OFFSET, VARLEN: tl.constexpr):
    """(batch offset of q rows, of k rows, query length, key length, causal offset, window offset) of the program's
    sequence ``off_b``. Dense: (off_b, off_b, Sq, Skv, the offsets as given); the host's batch strides apply.
    VARLEN (packed (total, H, D) tensors viewed as (1, H, total, D)): the sequence's first rows and lengths from
    ``cu_seqlens``, its offsets shifted by its own Skv - Sq (bottom-right alignment per sequence); the host passes the
    row stride as the batch stride, so ``_head_base`` lands on the sequence's first row."""
    if VARLEN:
        q0 = tl.load(CU_Q + off_b)
        k0 = tl.load(CU_K + off_b)
        seq_q = tl.load(CU_Q + off_b + 1) - q0
        seq_kv = tl.load(CU_K + off_b + 1) - k0
        shift = seq_kv - seq_q
        return q0.to(tl.int64), k0.to(tl.int64), seq_q, seq_kv, CAUSAL_OFFSET + shift, WINDOW_OFFSET + shift
    else:
        return off_b, off_b, Sq, Skv, CAUSAL_OFFSET, WINDOW_OFFSET


@triton.jit
def _stats_row(off_b, q_row0, off_h, Hq, Sq, VARLEN: tl.constexpr):
    """Index of the sequence's first row in the (B, Hq, Sq) LSE / delta, or in the packed (Hq, total) ones (VARLEN:
    ``Sq`` is the total query rows)."""
    if VARLEN:
        return off_h.to(tl.int64) * Sq + q_row0
    else:
        return (off_b * Hq + off_h) * Sq


@triton.jit
def _key_ranges(start_m, Skv, CAUSAL_OFFSET, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """Key range of a query block, split as ``[0, hi_full)`` unmasked blocks and ``[hi_full, hi)`` masked ones
    (causal diagonal and ragged Skv tail). Causal: query i sees key j iff ``j <= i + CAUSAL_OFFSET`` (0: top-left,
    Skv - Sq: bottom-right)."""
    skv_full = (Skv // BLOCK_N) * BLOCK_N
    if CAUSAL:
        # keys <= start_m + offset are visible to every row of the block: whole blocks below that are unmasked
        # (offset 0: start_m is a block boundary, since BLOCK_M % BLOCK_N == 0, and hi_full = start_m as always)
        first_row_sees = tl.maximum(start_m + CAUSAL_OFFSET + 1, 0)
        hi_full = tl.minimum((first_row_sees // BLOCK_N) * BLOCK_N, skv_full)
        hi = tl.minimum(start_m + BLOCK_M + CAUSAL_OFFSET, Skv)
    else:
        hi_full = skv_full
        hi = Skv
    return hi_full, hi


@triton.jit
def _key_mask(offs_m, offs_n0, start_n, Skv, CAUSAL_OFFSET, WINDOW_OFFSET, CAUSAL: tl.constexpr,
              WINDOW: tl.constexpr):
    """(BLOCK_M, BLOCK_N) visibility of keys ``start_n + offs_n0`` to queries ``offs_m``: in range, causal (upper
    band edge) and inside the window's lower edge (``j >= i + WINDOW_OFFSET``)."""
    offs_n = start_n + offs_n0
    mask = offs_n[None, :] < Skv
    if CAUSAL:
        mask = mask & (offs_n[None, :] <= offs_m[:, None] + CAUSAL_OFFSET)
    if WINDOW:
        mask = mask & (offs_n[None, :] >= offs_m[:, None] + WINDOW_OFFSET)
    return mask


@triton.jit
def _window_ranges(start_m, WINDOW_OFFSET, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Lower end of a query block's key range under a window (query i sees key j only if ``j >= i + WINDOW_OFFSET``):
    ``lo``, the first key block any row sees, and ``lo_full``, the first key block every row's lower edge lets
    through whole (blocks in ``[lo, lo_full)`` need the mask)."""
    lo = (tl.maximum(start_m + WINDOW_OFFSET, 0) // BLOCK_N) * BLOCK_N
    lo_full = tl.cdiv(tl.maximum(start_m + BLOCK_M - 1 + WINDOW_OFFSET, 0), BLOCK_N) * BLOCK_N
    return lo, lo_full


# ----------------------------------------------------------------------------------------------------------------
# forward
# ----------------------------------------------------------------------------------------------------------------
@triton.jit
def _max_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _row_max(x):
    """Row max that is NaN when any entry is (tl.max drops NaNs: with a +inf score beside a NaN one the row's LSE came
    out +inf where torch's logsumexp is NaN - GPU fuzz). Same reduction with max.NaN: the sm_90 forward's SASS has
    FMNMX.NAN where it had FMNMX, and no spills (AOT build at D = 128)."""
    return tl.reduce(x, 1, _max_nan)


@triton.jit
def _softcap_tanh(qk, softcap_inv):
    """tanh(qk * scale / softcap) for raw q.k scores, ``softcap_inv`` = 2 * scale * log2(e) / softcap: written as
    1 - 2 / (exp(2x) + 1), whose exp2 saturates to inf or 0 for large |x| and gives exactly +-1 there (no inf / inf)."""
    return 1.0 - 2.0 / (tl.math.exp2(qk * softcap_inv) + 1.0)


@triton.jit
def _softcap_constants(sm_scale, SOFTCAP, HAS_SOFTCAP: tl.constexpr):
    """(c * log2(e), 2 * scale * log2(e) / c) for a soft cap c: the capped score in the log2 domain is
    ``tanh * c * log2(e)``; (0, 0) without one (unused)."""
    if HAS_SOFTCAP:
        return SOFTCAP * 1.4426950408889634, 2.0 * sm_scale * 1.4426950408889634 / SOFTCAP
    return sm_scale * 0.0, sm_scale * 0.0


@triton.jit
def _fwd_inner(acc, l_i, m_i, q, k_desc, v_desc, k_base, v_base, stride_kn, stride_vn,
               start_m, lo, hi, Skv, CAUSAL_OFFSET, WINDOW_OFFSET, qk_scale, softcap_log2, softcap_inv,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
               MASKED: tl.constexpr, CAUSAL: tl.constexpr, USE_TMA: tl.constexpr, UPCAST: tl.constexpr,
               DOT_PRECISION: tl.constexpr, HAS_SOFTCAP: tl.constexpr, WINDOW: tl.constexpr,
               HEAD_DIM_V: tl.constexpr, HEAD_DIM_V_PAD: tl.constexpr):
    DTYPE: tl.constexpr = k_base.dtype.element_ty
    if HAS_SOFTCAP:  # the scores below arrive capped and in the log2 domain already
        qk_scale = 1.0
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n0 = tl.arange(0, BLOCK_N)
    zero = tl.cast(Skv, tl.float32) * 0.0  # dot_accumulate's runtime 0.0
    for start_n in tl.range(lo, hi, BLOCK_N):
        k = _load_operand(k_desc, k_base, start_n, Skv, stride_kn, BLOCK_N, HEAD_DIM, HEAD_DIM_PAD, MASKED, USE_TMA,
                          UPCAST)
        qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)
        if HAS_SOFTCAP:
            qk = _softcap_tanh(qk, softcap_inv) * softcap_log2
        if MASKED:
            mask = _key_mask(offs_m, offs_n0, start_n, Skv, CAUSAL_OFFSET, WINDOW_OFFSET, CAUSAL, WINDOW)
            qk = tl.where(mask, qk * qk_scale, float("-inf"))
            m_ij = tl.maximum(m_i, _row_max(qk), propagate_nan=tl.PropagateNan.ALL)
            # a row with no visible key so far keeps m = -inf; subtract 0 instead so exp2 gives 0, not NaN
            m_sub = tl.where(m_ij == float("-inf"), 0.0, m_ij)
            qk = qk - m_sub[:, None]
        else:
            m_ij = tl.maximum(m_i, _row_max(qk) * qk_scale, propagate_nan=tl.PropagateNan.ALL)
            m_sub = m_ij
            qk = qk * qk_scale - m_sub[:, None]
        p = tl.math.exp2(qk)
        alpha = tl.math.exp2(m_i - m_sub)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = _load_operand(v_desc, v_base, start_n, Skv, stride_vn, BLOCK_N, HEAD_DIM_V, HEAD_DIM_V_PAD, MASKED, USE_TMA,
                          UPCAST)
        acc = dot_accumulate(_operand(p, DTYPE, UPCAST), v, acc, zero, DOT_PRECISION)
        m_i = m_ij
    return acc, l_i, m_i


# CAUSAL_OFFSET is never specialized (one build serves every Sq / Skv difference; an argument equal to 1 would
# otherwise become a constant, which is how Sq == 1 once broke the dK/dV kernel's sm_90 build)
@triton.jit(do_not_specialize=["CAUSAL_OFFSET", "WINDOW_OFFSET"])
def _attn_fwd_kernel(
    Q, K, V, O, LSE, CU_Q, CU_K, sm_scale,
    stride_qb, stride_qh, stride_qs, stride_kb, stride_kh, stride_ks,
    stride_vb, stride_vh, stride_vs, stride_ob, stride_oh, stride_os,
    Hq, Sq, Skv, GROUP,
    SQ_BUCKET, SKV_BUCKET,  # autotune key only
    CAUSAL_OFFSET,  # causal: query i sees key j iff j <= i + CAUSAL_OFFSET (0: top-left, Skv - Sq: bottom-right)
    SOFTCAP,  # logit soft cap c (HAS_SOFTCAP): score = c * tanh(scale * q.k / c), before the mask
    WINDOW_OFFSET,  # window (WINDOW): query i sees key j only if j >= i + WINDOW_OFFSET (the band's lower edge)
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr,
    DOT_PRECISION: tl.constexpr, USE_TMA: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr = False, WINDOW: tl.constexpr = False,
    HEAD_DIM_V: tl.constexpr = 0, HEAD_DIM_V_PAD: tl.constexpr = 0,  # value / output head dim (0: HEAD_DIM's)
    VARLEN: tl.constexpr = False,  # packed sequences (CU_Q / CU_K: int32 cu_seqlens), see _sequence
):
    V_DIM: tl.constexpr = HEAD_DIM if HEAD_DIM_V == 0 else HEAD_DIM_V
    V_DIM_PAD: tl.constexpr = HEAD_DIM_PAD if HEAD_DIM_V_PAD == 0 else HEAD_DIM_V_PAD
    pid_m, off_h, off_b, off_hk = _query_program(GROUP, CAUSAL)
    q_b, k_b, seq_q, seq_kv, causal_offset, window_offset = _sequence(CU_Q, CU_K, off_b, Sq, Skv, CAUSAL_OFFSET,
                                                                      WINDOW_OFFSET, VARLEN)
    start_m = pid_m * BLOCK_M
    if VARLEN:
        if start_m >= seq_q:  # the grid covers the longest sequence
            return
    q_base = _head_base(Q, q_b, off_h, stride_qb, stride_qh)
    k_base = _head_base(K, k_b, off_hk, stride_kb, stride_kh)
    v_base = _head_base(V, k_b, off_hk, stride_vb, stride_vh)
    o_base = _head_base(O, q_b, off_h, stride_ob, stride_oh)
    q_desc = _tile_desc(q_base, seq_q, stride_qs, BLOCK_M, HEAD_DIM, HEAD_DIM_PAD, USE_TMA)
    k_desc = _tile_desc(k_base, seq_kv, stride_ks, BLOCK_N, HEAD_DIM, HEAD_DIM_PAD, USE_TMA)
    v_desc = _tile_desc(v_base, seq_kv, stride_vs, BLOCK_N, V_DIM, V_DIM_PAD, USE_TMA)
    o_desc = _tile_desc(o_base, seq_q, stride_os, BLOCK_M, V_DIM, V_DIM_PAD, USE_TMA)

    q = _load_operand(q_desc, q_base, start_m, seq_q, stride_qs, BLOCK_M, HEAD_DIM, HEAD_DIM_PAD, True, USE_TMA, UPCAST)
    qk_scale = sm_scale * 1.4426950408889634
    softcap_log2, softcap_inv = _softcap_constants(sm_scale, SOFTCAP, HAS_SOFTCAP)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, V_DIM_PAD], dtype=tl.float32)
    hi_full, hi = _key_ranges(start_m, seq_kv, causal_offset, BLOCK_M, BLOCK_N, CAUSAL)
    if WINDOW:
        # key blocks below the window's lower edge are never loaded; [lo, lo_full) straddle it (masked), then the
        # unmasked middle, then the upper edge as without a window
        lo, lo_full = _window_ranges(start_m, window_offset, BLOCK_M, BLOCK_N)
        acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, q, k_desc, v_desc, k_base, v_base, stride_ks, stride_vs,
                                   start_m, lo, tl.minimum(lo_full, hi), seq_kv, causal_offset, window_offset, qk_scale,
                                   softcap_log2, softcap_inv, BLOCK_M, BLOCK_N, HEAD_DIM, HEAD_DIM_PAD, True, CAUSAL,
                                   USE_TMA, UPCAST, DOT_PRECISION, HAS_SOFTCAP, WINDOW, V_DIM,
                                   V_DIM_PAD)
        acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, q, k_desc, v_desc, k_base, v_base, stride_ks, stride_vs,
                                   start_m, lo_full, hi_full, seq_kv, causal_offset, window_offset, qk_scale,
                                   softcap_log2, softcap_inv, BLOCK_M, BLOCK_N, HEAD_DIM, HEAD_DIM_PAD, False, CAUSAL,
                                   USE_TMA, UPCAST, DOT_PRECISION, HAS_SOFTCAP, WINDOW, V_DIM,
                                   V_DIM_PAD)
        acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, q, k_desc, v_desc, k_base, v_base, stride_ks, stride_vs,
                                   start_m, tl.maximum(hi_full, lo_full), hi, seq_kv, causal_offset, window_offset,
                                   qk_scale, softcap_log2, softcap_inv, BLOCK_M, BLOCK_N, HEAD_DIM, HEAD_DIM_PAD, True,
                                   CAUSAL, USE_TMA, UPCAST, DOT_PRECISION, HAS_SOFTCAP, WINDOW, V_DIM,
                                   V_DIM_PAD)
    else:
        acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, q, k_desc, v_desc, k_base, v_base, stride_ks, stride_vs,
                                   start_m, 0, hi_full, seq_kv, causal_offset, window_offset, qk_scale, softcap_log2,
                                   softcap_inv, BLOCK_M, BLOCK_N, HEAD_DIM, HEAD_DIM_PAD, False, CAUSAL, USE_TMA,
                                   UPCAST, DOT_PRECISION, HAS_SOFTCAP, WINDOW, V_DIM,
                                   V_DIM_PAD)
        acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, q, k_desc, v_desc, k_base, v_base, stride_ks, stride_vs,
                                   start_m, hi_full, hi, seq_kv, causal_offset, window_offset, qk_scale, softcap_log2,
                                   softcap_inv, BLOCK_M, BLOCK_N, HEAD_DIM, HEAD_DIM_PAD, True, CAUSAL, USE_TMA,
                                   UPCAST, DOT_PRECISION, HAS_SOFTCAP, WINDOW, V_DIM,
                                   V_DIM_PAD)
    # l_i == 0: every visible score is -inf, or no key is visible (bottom-right causal with seq_q > seq_kv: the
    # first seq_q - seq_kv rows): output 0 and LSE -inf, as SDPA's fused kernels give. A NaN score makes l_i NaN,
    # which propagates.
    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    acc = acc / l_safe[:, None]
    lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(l_safe)) * 0.6931471805599453)
    lse = tl.where(m_i == float("inf"), float("inf"), lse)  # a +inf score: logsumexp is +inf (m - m would be NaN)
    offs_m = start_m + tl.arange(0, BLOCK_M)
    lse_ptrs = LSE + _stats_row(off_b, q_b, off_h, Hq, Sq, VARLEN) + offs_m
    tl.store(lse_ptrs, lse, mask=offs_m < seq_q)
    _store_rows(o_desc, o_base, start_m, seq_q, stride_os, acc.to(O.dtype.element_ty),
                BLOCK_M, V_DIM, V_DIM_PAD, USE_TMA)


# ----------------------------------------------------------------------------------------------------------------
# backward
# ----------------------------------------------------------------------------------------------------------------
@triton.jit
def _attn_bwd_preprocess(
    O, DO, DLSE, DELTA, LSE, STATS,
    stride_ob, stride_oh, stride_os, stride_dob, stride_doh, stride_dos,
    Hq, Sq,
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, HAS_DLSE: tl.constexpr, BLOCK_M: tl.constexpr,
    PACK_STATS: tl.constexpr, STAT_ROWS: tl.constexpr,
):
    """delta[b, h, i] = sum_d dO[i, d] * O[i, d]  (- dLSE[i]: dLSE/dS = P folds into the same term).

    PACK_STATS: also the sm_90a dK / dV kernel's row statistics, (B, Hq, ceil(Sq / STAT_ROWS), 2, STAT_ROWS) fp32 -
    per block of STAT_ROWS query rows their base-2 LSEs (+inf for LSE -inf and for the padding rows past Sq, so P is
    0 there) then their deltas (0 on the padding) - which that kernel's producer copies with each query block's Q and
    dO in one bulk copy (cuda_fallback/attention_bwd_sm90.pack_statistics is the same layout in torch)."""
    start_m = tl.program_id(0) * BLOCK_M
    off_h = tl.program_id(1)
    off_b = tl.program_id(2).to(tl.int64)
    o_base = _head_base(O, off_b, off_h, stride_ob, stride_oh)
    do_base = _head_base(DO, off_b, off_h, stride_dob, stride_doh)
    o = _load_rows(None, o_base, start_m, Sq, stride_os, BLOCK_M, HEAD_DIM, HEAD_DIM_PAD, True, False)
    do = _load_rows(None, do_base, start_m, Sq, stride_dos, BLOCK_M, HEAD_DIM, HEAD_DIM_PAD, True, False)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    offs_m = start_m + tl.arange(0, BLOCK_M)
    row = (off_b * Hq + off_h) * Sq + offs_m
    if HAS_DLSE:
        delta = delta - tl.load(DLSE + row, mask=offs_m < Sq, other=0.0)
    tl.store(DELTA + row, delta, mask=offs_m < Sq)
    if PACK_STATS:
        lse = tl.load(LSE + row, mask=offs_m < Sq, other=float("-inf"))
        m = tl.where(lse == float("-inf"), float("inf"), lse * 1.4426950408889634)
        blocks = tl.cdiv(Sq, STAT_ROWS)
        at = ((off_b * Hq + off_h) * blocks + offs_m // STAT_ROWS) * (2 * STAT_ROWS) + offs_m % STAT_ROWS
        padded = offs_m < blocks * STAT_ROWS
        tl.store(STATS + at, m, mask=padded)
        tl.store(STATS + at + STAT_ROWS, tl.where(offs_m < Sq, delta, 0.0), mask=padded)


@triton.jit
def _load_stats(LSE, DELTA, row_base, start_m, Sq, BLOCK_M: tl.constexpr, MASK_ROWS: tl.constexpr):
    """Base-2 row statistic m (= LSE * log2 e, +inf for rows without a visible key so P = 0) and delta."""
    offs_m = start_m + tl.arange(0, BLOCK_M)
    if MASK_ROWS:
        lse = tl.load(LSE + row_base + offs_m, mask=offs_m < Sq, other=0.0)
        delta = tl.load(DELTA + row_base + offs_m, mask=offs_m < Sq, other=0.0)
    else:
        lse = tl.load(LSE + row_base + offs_m)
        delta = tl.load(DELTA + row_base + offs_m)
    m = tl.where(lse == float("-inf"), float("inf"), lse * 1.4426950408889634)
    return m, delta


@triton.jit
def _dkdv_block(dk, dv, k, v, q_desc, do_desc, q_base, do_base, stride_qs, stride_dos, LSE, DELTA, row_base,
                start_m, start_n, Sq, CAUSAL_OFFSET, WINDOW_OFFSET, qk_scale, softcap_log2, softcap_inv,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
                MASK_ROWS: tl.constexpr, CAUSAL_MASK: tl.constexpr, USE_TMA: tl.constexpr, UPCAST: tl.constexpr,
                DOT_PRECISION: tl.constexpr, HAS_SOFTCAP: tl.constexpr, WINDOW_MASK: tl.constexpr,
                HEAD_DIM_V: tl.constexpr, HEAD_DIM_V_PAD: tl.constexpr):
    DTYPE: tl.constexpr = q_base.dtype.element_ty
    q = _load_operand(q_desc, q_base, start_m, Sq, stride_qs, BLOCK_M, HEAD_DIM, HEAD_DIM_PAD, MASK_ROWS, USE_TMA,
                      UPCAST)
    do = _load_operand(do_desc, do_base, start_m, Sq, stride_dos, BLOCK_M, HEAD_DIM_V, HEAD_DIM_V_PAD, MASK_ROWS,
                       USE_TMA, UPCAST)
    m, delta = _load_stats(LSE, DELTA, row_base, start_m, Sq, BLOCK_M, MASK_ROWS)
    qkT = tl.dot(k, tl.trans(q), input_precision=DOT_PRECISION)  # (BLOCK_N, BLOCK_M)
    if HAS_SOFTCAP:
        tT = _softcap_tanh(qkT, softcap_inv)
        pT = tl.math.exp2(tT * softcap_log2 - m[None, :])
    else:
        pT = tl.math.exp2(qkT * qk_scale - m[None, :])
    if CAUSAL_MASK:
        offs_m = start_m + tl.arange(0, BLOCK_M)
        offs_n = start_n + tl.arange(0, BLOCK_N)
        pT = tl.where(offs_m[None, :] + CAUSAL_OFFSET >= offs_n[:, None], pT, 0.0)
    if WINDOW_MASK:
        offs_m = start_m + tl.arange(0, BLOCK_M)
        offs_n = start_n + tl.arange(0, BLOCK_N)
        pT = tl.where(offs_n[:, None] >= offs_m[None, :] + WINDOW_OFFSET, pT, 0.0)
    zero = tl.cast(Sq, tl.float32) * 0.0  # dot_accumulate's runtime 0.0
    dv = dot_accumulate(_operand(pT, DTYPE, UPCAST), do, dv, zero, DOT_PRECISION)
    dpT = tl.dot(v, tl.trans(do), input_precision=DOT_PRECISION)
    dsT = pT * (dpT - delta[None, :])
    if HAS_SOFTCAP:  # d(c tanh(x / c)) / dx = 1 - tanh^2; the scale is applied to dK at the end
        dsT = dsT * (1.0 - tT * tT)
    dk = dot_accumulate(_operand(dsT, DTYPE, UPCAST), q, dk, zero, DOT_PRECISION)
    return dk, dv


# Sq is never specialized: Triton turns an int argument equal to 1 into a constant, and with Sq == 1 (one query row,
# e.g. a decode step's backward) the TMA build of this kernel failed in Triton 3.6's sm_90 pipeliner ("PassManager::run
# failed", found by the GPU fuzzer; reproduced by tests/test_attention.py's AOT compile).
@triton.jit(do_not_specialize=["Sq", "CAUSAL_OFFSET", "WINDOW_OFFSET"])
def _attn_bwd_dkdv_kernel(
    Q, K, V, DO, DK, DV, LSE, DELTA, CU_Q, CU_K, sm_scale,
    stride_qb, stride_qh, stride_qs, stride_kb, stride_kh, stride_ks, stride_vb, stride_vh, stride_vs,
    stride_dob, stride_doh, stride_dos, stride_dkb, stride_dkh, stride_dks, stride_dvb, stride_dvh, stride_dvs,
    Hq, Sq, Skv, GROUP,
    SQ_BUCKET, SKV_BUCKET,  # autotune key only
    CAUSAL_OFFSET,  # as in the forward
    SOFTCAP,  # as in the forward
    WINDOW_OFFSET,  # as in the forward
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr,
    DOT_PRECISION: tl.constexpr, USE_TMA: tl.constexpr,
    BLOCK_M1: tl.constexpr, BLOCK_N1: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr = False, WINDOW: tl.constexpr = False,
    HEAD_DIM_V: tl.constexpr = 0, HEAD_DIM_V_PAD: tl.constexpr = 0,  # as in the forward
    VARLEN: tl.constexpr = False,  # as in the forward
):
    V_DIM: tl.constexpr = HEAD_DIM if HEAD_DIM_V == 0 else HEAD_DIM_V
    V_DIM_PAD: tl.constexpr = HEAD_DIM_PAD if HEAD_DIM_V_PAD == 0 else HEAD_DIM_V_PAD
    start_n = tl.program_id(0) * BLOCK_N1
    off_hk = tl.program_id(1)
    off_b = tl.program_id(2).to(tl.int64)
    q_b, k_b, seq_q, seq_kv, causal_offset, window_offset = _sequence(CU_Q, CU_K, off_b, Sq, Skv, CAUSAL_OFFSET,
                                                                      WINDOW_OFFSET, VARLEN)
    if VARLEN:
        if start_n >= seq_kv:  # the grid covers the longest sequence
            return
    k_base = _head_base(K, k_b, off_hk, stride_kb, stride_kh)
    v_base = _head_base(V, k_b, off_hk, stride_vb, stride_vh)
    dk_base = _head_base(DK, k_b, off_hk, stride_dkb, stride_dkh)
    dv_base = _head_base(DV, k_b, off_hk, stride_dvb, stride_dvh)
    k_desc = _tile_desc(k_base, seq_kv, stride_ks, BLOCK_N1, HEAD_DIM, HEAD_DIM_PAD, USE_TMA)
    v_desc = _tile_desc(v_base, seq_kv, stride_vs, BLOCK_N1, V_DIM, V_DIM_PAD, USE_TMA)
    dk_desc = _tile_desc(dk_base, seq_kv, stride_dks, BLOCK_N1, HEAD_DIM, HEAD_DIM_PAD, USE_TMA)
    dv_desc = _tile_desc(dv_base, seq_kv, stride_dvs, BLOCK_N1, V_DIM, V_DIM_PAD, USE_TMA)
    k = _load_operand(k_desc, k_base, start_n, seq_kv, stride_ks, BLOCK_N1, HEAD_DIM, HEAD_DIM_PAD, True, USE_TMA,
                      UPCAST)
    v = _load_operand(v_desc, v_base, start_n, seq_kv, stride_vs, BLOCK_N1, V_DIM, V_DIM_PAD, True, USE_TMA, UPCAST)
    qk_scale = sm_scale * 1.4426950408889634
    softcap_log2, softcap_inv = _softcap_constants(sm_scale, SOFTCAP, HAS_SOFTCAP)
    dk = tl.zeros([BLOCK_N1, HEAD_DIM_PAD], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N1, V_DIM_PAD], dtype=tl.float32)

    sq_full = (seq_q // BLOCK_M1) * BLOCK_M1
    if CAUSAL:
        # rows < start_n - offset see none of these keys; rows from start_n + BLOCK_N1 - offset on see all of them;
        # the query blocks between straddle the diagonal (offset 0: [start_n, start_n + BLOCK_N1), block-aligned
        # because BLOCK_N1 % BLOCK_M1 == 0)
        diag_lo = (tl.maximum(start_n - causal_offset, 0) // BLOCK_M1) * BLOCK_M1
        full_lo = tl.cdiv(tl.maximum(start_n + BLOCK_N1 - causal_offset, 0), BLOCK_M1) * BLOCK_M1
        diag_hi = tl.minimum(full_lo, seq_q)
    else:
        diag_lo = 0
        diag_hi = 0
        full_lo = 0
    tail_lo = tl.maximum(full_lo, sq_full)
    if WINDOW:
        # the window's lower edge (query i sees key j only if j >= i + window_offset): rows from q_hi on see none of
        # these keys, rows below win_lo see all of them; the rows between are masked, and no query block beyond q_hi
        # is loaded. The unmasked range stops at win_lo; [c_lo, q_hi) takes every row past it, ragged tail included.
        q_hi = tl.minimum(tl.maximum(start_n + BLOCK_N1 - window_offset, 0), seq_q)
        win_lo = (tl.maximum(start_n - window_offset + 1, 0) // BLOCK_M1) * BLOCK_M1
        b_hi = tl.minimum(sq_full, tl.maximum(win_lo, full_lo))
        c_lo = tl.maximum(b_hi, diag_hi)
        diag_hi = tl.minimum(diag_hi, q_hi)
    else:
        q_hi = seq_q
        b_hi = sq_full
        c_lo = seq_q

    for g in range(GROUP):
        off_h = off_hk * GROUP + g
        q_base = _head_base(Q, q_b, off_h, stride_qb, stride_qh)
        do_base = _head_base(DO, q_b, off_h, stride_dob, stride_doh)
        row_base = _stats_row(off_b, q_b, off_h, Hq, Sq, VARLEN)
        q_desc = _tile_desc(q_base, seq_q, stride_qs, BLOCK_M1, HEAD_DIM, HEAD_DIM_PAD, USE_TMA)
        do_desc = _tile_desc(do_base, seq_q, stride_dos, BLOCK_M1, V_DIM, V_DIM_PAD, USE_TMA)
        for start_m in range(diag_lo, diag_hi, BLOCK_M1):
            dk, dv = _dkdv_block(dk, dv, k, v, q_desc, do_desc, q_base, do_base, stride_qs, stride_dos, LSE, DELTA,
                                 row_base, start_m, start_n, seq_q, causal_offset, window_offset, qk_scale,
                                 softcap_log2, softcap_inv, BLOCK_M1, BLOCK_N1, HEAD_DIM, HEAD_DIM_PAD, True, True,
                                 USE_TMA, UPCAST, DOT_PRECISION, HAS_SOFTCAP, WINDOW, V_DIM, V_DIM_PAD)
        for start_m in tl.range(full_lo, b_hi, BLOCK_M1):
            dk, dv = _dkdv_block(dk, dv, k, v, q_desc, do_desc, q_base, do_base, stride_qs, stride_dos, LSE, DELTA,
                                 row_base, start_m, start_n, seq_q, causal_offset, window_offset, qk_scale,
                                 softcap_log2, softcap_inv, BLOCK_M1, BLOCK_N1, HEAD_DIM, HEAD_DIM_PAD, False, False,
                                 USE_TMA, UPCAST, DOT_PRECISION, HAS_SOFTCAP, False, V_DIM, V_DIM_PAD)
        if WINDOW:
            for start_m in range(c_lo, q_hi, BLOCK_M1):
                dk, dv = _dkdv_block(dk, dv, k, v, q_desc, do_desc, q_base, do_base, stride_qs, stride_dos, LSE,
                                     DELTA, row_base, start_m, start_n, seq_q, causal_offset, window_offset, qk_scale,
                                     softcap_log2, softcap_inv, BLOCK_M1, BLOCK_N1, HEAD_DIM, HEAD_DIM_PAD, True,
                                     CAUSAL, USE_TMA, UPCAST, DOT_PRECISION, HAS_SOFTCAP, True, V_DIM, V_DIM_PAD)
        elif tail_lo < seq_q:
            dk, dv = _dkdv_block(dk, dv, k, v, q_desc, do_desc, q_base, do_base, stride_qs, stride_dos, LSE, DELTA,
                                 row_base, tail_lo, start_n, seq_q, causal_offset, window_offset, qk_scale,
                                 softcap_log2, softcap_inv, BLOCK_M1, BLOCK_N1, HEAD_DIM, HEAD_DIM_PAD, True, False,
                                 USE_TMA, UPCAST, DOT_PRECISION, HAS_SOFTCAP, False, V_DIM, V_DIM_PAD)

    dk = dk * sm_scale
    _store_rows(dk_desc, dk_base, start_n, seq_kv, stride_dks, dk.to(DK.dtype.element_ty),
                BLOCK_N1, HEAD_DIM, HEAD_DIM_PAD, USE_TMA)
    _store_rows(dv_desc, dv_base, start_n, seq_kv, stride_dvs, dv.to(DV.dtype.element_ty),
                BLOCK_N1, V_DIM, V_DIM_PAD, USE_TMA)


@triton.jit
def _dq_inner(dq, q, do, m, delta, k_desc, v_desc, k_base, v_base, stride_ks, stride_vs, start_m, lo, hi, Skv,
              CAUSAL_OFFSET, WINDOW_OFFSET, qk_scale, softcap_log2, softcap_inv,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
              MASKED: tl.constexpr, CAUSAL: tl.constexpr, USE_TMA: tl.constexpr, UPCAST: tl.constexpr,
              DOT_PRECISION: tl.constexpr, HAS_SOFTCAP: tl.constexpr, WINDOW: tl.constexpr,
              HEAD_DIM_V: tl.constexpr, HEAD_DIM_V_PAD: tl.constexpr):
    DTYPE: tl.constexpr = k_base.dtype.element_ty
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n0 = tl.arange(0, BLOCK_N)
    zero = tl.cast(Skv, tl.float32) * 0.0  # dot_accumulate's runtime 0.0
    for start_n in tl.range(lo, hi, BLOCK_N):
        k = _load_operand(k_desc, k_base, start_n, Skv, stride_ks, BLOCK_N, HEAD_DIM, HEAD_DIM_PAD, MASKED, USE_TMA,
                          UPCAST)
        v = _load_operand(v_desc, v_base, start_n, Skv, stride_vs, BLOCK_N, HEAD_DIM_V, HEAD_DIM_V_PAD, MASKED, USE_TMA,
                          UPCAST)
        qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)
        if HAS_SOFTCAP:
            t = _softcap_tanh(qk, softcap_inv)
            p = tl.math.exp2(t * softcap_log2 - m[:, None])
        else:
            p = tl.math.exp2(qk * qk_scale - m[:, None])
        if MASKED:
            mask = _key_mask(offs_m, offs_n0, start_n, Skv, CAUSAL_OFFSET, WINDOW_OFFSET, CAUSAL, WINDOW)
            p = tl.where(mask, p, 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=DOT_PRECISION)
        ds = p * (dp - delta[:, None])
        if HAS_SOFTCAP:
            ds = ds * (1.0 - t * t)
        dq = dot_accumulate(_operand(ds, DTYPE, UPCAST), k, dq, zero, DOT_PRECISION)
    return dq


@triton.jit(do_not_specialize=["CAUSAL_OFFSET", "WINDOW_OFFSET"])
def _attn_bwd_dq_kernel(
    Q, K, V, DO, DQ, LSE, DELTA, CU_Q, CU_K, sm_scale,
    stride_qb, stride_qh, stride_qs, stride_kb, stride_kh, stride_ks, stride_vb, stride_vh, stride_vs,
    stride_dob, stride_doh, stride_dos, stride_dqb, stride_dqh, stride_dqs,
    Hq, Sq, Skv, GROUP,
    SQ_BUCKET, SKV_BUCKET,  # autotune key only
    CAUSAL_OFFSET,  # as in the forward
    SOFTCAP,  # as in the forward
    WINDOW_OFFSET,  # as in the forward
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr,
    DOT_PRECISION: tl.constexpr, USE_TMA: tl.constexpr,
    BLOCK_M2: tl.constexpr, BLOCK_N2: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr = False, WINDOW: tl.constexpr = False,
    HEAD_DIM_V: tl.constexpr = 0, HEAD_DIM_V_PAD: tl.constexpr = 0,  # as in the forward
    VARLEN: tl.constexpr = False,  # as in the forward
):
    V_DIM: tl.constexpr = HEAD_DIM if HEAD_DIM_V == 0 else HEAD_DIM_V
    V_DIM_PAD: tl.constexpr = HEAD_DIM_PAD if HEAD_DIM_V_PAD == 0 else HEAD_DIM_V_PAD
    pid_m, off_h, off_b, off_hk = _query_program(GROUP, CAUSAL)
    start_m = pid_m * BLOCK_M2
    q_b, k_b, seq_q, seq_kv, causal_offset, window_offset = _sequence(CU_Q, CU_K, off_b, Sq, Skv, CAUSAL_OFFSET,
                                                                      WINDOW_OFFSET, VARLEN)
    if VARLEN:
        if start_m >= seq_q:  # the grid covers the longest sequence
            return
    q_base = _head_base(Q, q_b, off_h, stride_qb, stride_qh)
    do_base = _head_base(DO, q_b, off_h, stride_dob, stride_doh)
    k_base = _head_base(K, k_b, off_hk, stride_kb, stride_kh)
    v_base = _head_base(V, k_b, off_hk, stride_vb, stride_vh)
    dq_base = _head_base(DQ, q_b, off_h, stride_dqb, stride_dqh)
    q_desc = _tile_desc(q_base, seq_q, stride_qs, BLOCK_M2, HEAD_DIM, HEAD_DIM_PAD, USE_TMA)
    do_desc = _tile_desc(do_base, seq_q, stride_dos, BLOCK_M2, V_DIM, V_DIM_PAD, USE_TMA)
    k_desc = _tile_desc(k_base, seq_kv, stride_ks, BLOCK_N2, HEAD_DIM, HEAD_DIM_PAD, USE_TMA)
    v_desc = _tile_desc(v_base, seq_kv, stride_vs, BLOCK_N2, V_DIM, V_DIM_PAD, USE_TMA)
    dq_desc = _tile_desc(dq_base, seq_q, stride_dqs, BLOCK_M2, HEAD_DIM, HEAD_DIM_PAD, USE_TMA)
    q = _load_operand(q_desc, q_base, start_m, seq_q, stride_qs, BLOCK_M2, HEAD_DIM, HEAD_DIM_PAD, True, USE_TMA,
                      UPCAST)
    do = _load_operand(do_desc, do_base, start_m, seq_q, stride_dos, BLOCK_M2, V_DIM, V_DIM_PAD, True, USE_TMA, UPCAST)
    m, delta = _load_stats(LSE, DELTA, _stats_row(off_b, q_b, off_h, Hq, Sq, VARLEN), start_m, seq_q, BLOCK_M2, True)
    qk_scale = sm_scale * 1.4426950408889634
    softcap_log2, softcap_inv = _softcap_constants(sm_scale, SOFTCAP, HAS_SOFTCAP)
    dq = tl.zeros([BLOCK_M2, HEAD_DIM_PAD], dtype=tl.float32)
    hi_full, hi = _key_ranges(start_m, seq_kv, causal_offset, BLOCK_M2, BLOCK_N2, CAUSAL)
    if WINDOW:  # the forward's three key ranges (see _attn_fwd_kernel)
        lo, lo_full = _window_ranges(start_m, window_offset, BLOCK_M2, BLOCK_N2)
        dq = _dq_inner(dq, q, do, m, delta, k_desc, v_desc, k_base, v_base, stride_ks, stride_vs, start_m, lo,
                       tl.minimum(lo_full, hi), seq_kv, causal_offset, window_offset, qk_scale, softcap_log2,
                       softcap_inv, BLOCK_M2, BLOCK_N2, HEAD_DIM, HEAD_DIM_PAD, True, CAUSAL, USE_TMA, UPCAST,
                       DOT_PRECISION, HAS_SOFTCAP, WINDOW, V_DIM,
                       V_DIM_PAD)
        dq = _dq_inner(dq, q, do, m, delta, k_desc, v_desc, k_base, v_base, stride_ks, stride_vs, start_m, lo_full,
                       hi_full, seq_kv, causal_offset, window_offset, qk_scale, softcap_log2, softcap_inv, BLOCK_M2,
                       BLOCK_N2, HEAD_DIM, HEAD_DIM_PAD, False, CAUSAL, USE_TMA, UPCAST, DOT_PRECISION, HAS_SOFTCAP,
                       WINDOW, V_DIM, V_DIM_PAD)
        dq = _dq_inner(dq, q, do, m, delta, k_desc, v_desc, k_base, v_base, stride_ks, stride_vs, start_m,
                       tl.maximum(hi_full, lo_full), hi, seq_kv, causal_offset, window_offset, qk_scale, softcap_log2,
                       softcap_inv, BLOCK_M2, BLOCK_N2, HEAD_DIM, HEAD_DIM_PAD, True, CAUSAL, USE_TMA, UPCAST,
                       DOT_PRECISION, HAS_SOFTCAP, WINDOW, V_DIM,
                       V_DIM_PAD)
    else:
        dq = _dq_inner(dq, q, do, m, delta, k_desc, v_desc, k_base, v_base, stride_ks, stride_vs, start_m, 0,
                       hi_full, seq_kv, causal_offset, window_offset, qk_scale, softcap_log2, softcap_inv, BLOCK_M2,
                       BLOCK_N2, HEAD_DIM, HEAD_DIM_PAD, False, CAUSAL, USE_TMA, UPCAST, DOT_PRECISION, HAS_SOFTCAP,
                       WINDOW, V_DIM, V_DIM_PAD)
        dq = _dq_inner(dq, q, do, m, delta, k_desc, v_desc, k_base, v_base, stride_ks, stride_vs, start_m, hi_full,
                       hi, seq_kv, causal_offset, window_offset, qk_scale, softcap_log2, softcap_inv, BLOCK_M2,
                       BLOCK_N2, HEAD_DIM, HEAD_DIM_PAD, True, CAUSAL, USE_TMA, UPCAST, DOT_PRECISION, HAS_SOFTCAP,
                       WINDOW, V_DIM, V_DIM_PAD)
    dq = dq * sm_scale
    _store_rows(dq_desc, dq_base, start_m, seq_q, stride_dqs, dq.to(DQ.dtype.element_ty),
                BLOCK_M2, HEAD_DIM, HEAD_DIM_PAD, USE_TMA)


# ----------------------------------------------------------------------------------------------------------------
# configs and autotuning
# ----------------------------------------------------------------------------------------------------------------
# Under the interpreter: one config per kernel, tiles big enough to keep the (program x step) count low, with
# BLOCK_M != BLOCK_N so the multi-block causal diagonal logic is exercised.
INTERP_FWD = triton.Config({"BLOCK_M": 64, "BLOCK_N": 32}, num_warps=4, num_stages=2)
INTERP_DKDV = triton.Config({"BLOCK_M1": 32, "BLOCK_N1": 64}, num_warps=4, num_stages=2)
INTERP_DQ = triton.Config({"BLOCK_M2": 64, "BLOCK_N2": 32}, num_warps=4, num_stages=2)

# (BLOCK_M, BLOCK_N, num_warps, num_stages) per padded head dim, for the TMA (sm_90+) path. Lists were cut to the
# configs that compile for sm_90a without register spills (ptxas -v on the AOT-compiled kernels, see perf/LOG.md).
_FWD_TILES = {
    64: [(128, 128, 8, 3), (128, 64, 4, 3), (128, 128, 4, 3), (128, 64, 8, 4)],
    128: [(128, 128, 8, 3), (128, 64, 8, 3), (128, 128, 8, 2), (128, 64, 8, 4)],
    256: [(128, 64, 8, 2), (64, 64, 4, 2), (128, 32, 8, 2), (64, 32, 4, 3)],
}
# dK/dV pass: (BLOCK_M1, BLOCK_N1, warps, stages); BLOCK_N1 % BLOCK_M1 == 0 (causal diagonal alignment).
# Class 128 leads with ONE warpgroup over a 64-key tile: with two (8 warps) the 64 x BLOCK_M1 score tiles split
# their N across the warpgroups (wgmma m64n16) and the kernel ran at half speed - the whole backward of a Llama layer
# (B 8, 16/4 heads, S 2048, causal) took 2.44 ms with (32, 64, 8, 2) and 1.29 ms with (32, 64, 4, 3), cuDNN 0.85
# (H100 sweep of every config, perf/results/h100/attention/attn_bwd_sweep_2026-11-26_2150.log). Every class-128
# config spills (64-270 bytes, the dK and dV accumulators hold 128 registers a thread); the CUDA backward is the fix.
_DKDV_TILES = {
    64: [(32, 128, 8, 3), (64, 64, 8, 3), (32, 64, 4, 3), (64, 128, 8, 3)],
    128: [(32, 64, 4, 3), (32, 64, 4, 2), (32, 128, 8, 3), (16, 64, 4, 3)],
    256: [(16, 64, 8, 2), (32, 64, 8, 1), (32, 64, 8, 2)],
}
# dQ pass: (BLOCK_M2, BLOCK_N2, warps, stages); BLOCK_M2 % BLOCK_N2 == 0. Class 256 leads with a third stage: the
# whole backward of B 2 x 16 heads x S 4096, hdim 256, causal took 5.37 ms with (64, 32, 4, 2) and 4.91 with
# (64, 32, 4, 3), both spill-free; its dK/dV default (16, 64, 8, 2) was the fastest of 14 (H100,
# perf/results/h100/attention/attn_bwd_sweep_d256_2026-11-27_0215.log; cuDNN 1.85 ms there).
_DQ_TILES = {
    64: [(128, 32, 4, 3), (128, 64, 8, 3), (64, 64, 4, 3), (128, 32, 8, 3)],
    128: [(128, 64, 8, 3), (64, 64, 4, 3), (128, 32, 8, 3), (64, 32, 4, 3)],
    256: [(64, 32, 4, 3), (64, 32, 4, 2), (64, 64, 8, 2), (128, 32, 8, 2), (64, 16, 4, 2)],
}
# Without TMA (pre-Hopper cards, unaligned strides) the 2-D pointer tensors cost registers: smaller tiles.
_FWD_TILES_PTR = {64: [(128, 64, 8, 3), (64, 64, 4, 3)], 128: [(128, 64, 8, 3), (64, 64, 4, 3)],
                  256: [(64, 32, 4, 2), (128, 32, 8, 2)]}
_DKDV_TILES_PTR = {64: [(32, 64, 4, 3), (64, 64, 8, 3)], 128: [(32, 64, 4, 3), (32, 64, 8, 2)],
                   256: [(16, 32, 4, 2), (32, 32, 8, 2)]}
_DQ_TILES_PTR = {64: [(64, 32, 4, 3), (64, 64, 8, 3)], 128: [(64, 32, 4, 3), (64, 32, 8, 2)],
                 256: [(32, 32, 4, 2), (32, 16, 4, 2)]}


# fp32 inputs (IEEE fp32 dots, 4-byte tiles): small tiles so shared memory fits on every card.
_FP32_TILES = {"BLOCK_M": (64, 32, 4, 2), "BLOCK_M1": (16, 32, 4, 2), "BLOCK_M2": (32, 16, 4, 2)}


def _tile_class(head_dim_pad: int) -> int:
    """The tile table a padded head dim uses: the smallest class at least as wide. Pads 16 and 32 use the class-64
    configs (cut for a 64-column tile: a narrower tile takes less shared memory and fewer registers, so they fit);
    every pad ``head_dim_pad`` returns (16, 32, 64, 128, 256) has a class."""
    if head_dim_pad > 256:
        raise ValueError(f"attention: padded head dim {head_dim_pad} has no tile configs (largest: 256)")
    return 64 if head_dim_pad <= 64 else (128 if head_dim_pad <= 128 else 256)


def _configs(tables, names) -> list[triton.Config]:
    seen, out = set(), []
    for table in tables:
        for tiles in table.values():
            for bm, bn, w, s in tiles:
                if (bm, bn, w, s) not in seen:
                    seen.add((bm, bn, w, s))
                    out.append(triton.Config({names[0]: bm, names[1]: bn}, num_warps=w, num_stages=s))
    return out


def _pruner(tma_table, ptr_table, names):
    def prune(configs, named_args, **kwargs):
        # the launchers pass every argument by keyword, so they arrive in kwargs (named_args: positional ones)
        args = {**named_args, **kwargs}
        if args["DOT_PRECISION"] == "ieee":
            bm, bn, w, st = _FP32_TILES[names[0]]
            return [triton.Config({names[0]: bm, names[1]: bn}, num_warps=w, num_stages=st)]
        table = tma_table if args["USE_TMA"] else ptr_table
        # the wider of the two head dims picks the tiles (a value head dim of its own: q k^T's and P V's widths)
        wanted = table[_tile_class(max(args["HEAD_DIM_PAD"], args.get("HEAD_DIM_V_PAD", 0)))]
        kept = [c for c in configs if (c.kwargs[names[0]], c.kwargs[names[1]], c.num_warps, c.num_stages) in wanted]
        kept = kept or configs[:1]
        if not full_autotune():
            kept = kept[:1]  # the table's first (default) config: one compile at a new shape, no sweep
        return kept
    return prune


_KEY = ["HEAD_DIM", "HEAD_DIM_PAD", "CAUSAL", "SQ_BUCKET", "SKV_BUCKET", "DOT_PRECISION", "USE_TMA", "HAS_SOFTCAP",
        "WINDOW", "VARLEN"]
_FWD_NAMES = ("BLOCK_M", "BLOCK_N")
_DKDV_NAMES = ("BLOCK_M1", "BLOCK_N1")
_DQ_NAMES = ("BLOCK_M2", "BLOCK_N2")

attn_fwd = triton.autotune(
    configs=[INTERP_FWD] if INTERPRET else _configs((_FWD_TILES, _FWD_TILES_PTR), _FWD_NAMES), key=_KEY,
    prune_configs_by={"early_config_prune": _pruner(_FWD_TILES, _FWD_TILES_PTR, _FWD_NAMES)},
    cache_results=True)(_attn_fwd_kernel)
attn_bwd_dkdv = triton.autotune(
    configs=[INTERP_DKDV] if INTERPRET else _configs((_DKDV_TILES, _DKDV_TILES_PTR), _DKDV_NAMES), key=_KEY,
    prune_configs_by={"early_config_prune": _pruner(_DKDV_TILES, _DKDV_TILES_PTR, _DKDV_NAMES)},
    cache_results=True)(_attn_bwd_dkdv_kernel)
attn_bwd_dq = triton.autotune(
    configs=[INTERP_DQ] if INTERPRET else _configs((_DQ_TILES, _DQ_TILES_PTR), _DQ_NAMES), key=_KEY,
    prune_configs_by={"early_config_prune": _pruner(_DQ_TILES, _DQ_TILES_PTR, _DQ_NAMES)},
    cache_results=True)(_attn_bwd_dq_kernel)


# ----------------------------------------------------------------------------------------------------------------
# launchers
# ----------------------------------------------------------------------------------------------------------------
def head_dim_pad(d: int) -> int:
    """The power-of-two block width a head dimension is padded to inside the kernels (masked beyond d): the next
    power of two, at least MIN_HEAD_DIM_PAD (16). The head dims of the original list keep their tiles (32 -> 32,
    64 -> 64, 96 -> 128, 128 -> 128, 192 -> 256, 256 -> 256)."""
    if not supported_head_dim(d):
        raise ValueError(f"attention: head dim {d} is not supported (multiples of {HEAD_DIM_MULTIPLE} from "
                         f"{MIN_HEAD_DIM} to {MAX_HEAD_DIM})")
    return max(MIN_HEAD_DIM_PAD, triton.next_power_of_2(d))


def _bucket(n: int) -> int:
    return max(64, triton.next_power_of_2(max(n, 1)))


@functools.lru_cache(maxsize=None)
def _major(index: int) -> int:
    return torch.cuda.get_device_capability(index)[0]


def tma_ok(*tensors: torch.Tensor) -> bool:
    """Every (batch, head) slice of these (B, H, S, D) tensors is a legal TMA global tensor on an sm_90+ device:
    16-byte aligned base and strides (the unit last dim is checked by the op)."""
    for t in tensors:
        es = t.element_size()
        if not (t.is_cuda and _major(t.device.index if t.device.index is not None else torch.cuda.current_device()) >= 9
                and t.data_ptr() % 16 == 0
                and all((st * es) % 16 == 0 for st in t.stride()[:3])):
            return False
    return True


def _launch(kernel, plain, grid, kernel_args, config, what, roles=()):
    """Launch with ``config`` or the autotuner's pick; while an op records (ops/_fast.py), report the launch bound
    to its pointer arguments ``roles`` (kernel argument names). Returns (compiled kernel, config)."""
    if kernel_args["USE_TMA"]:
        ensure_allocator()
    if config is not None:
        compiled = retry_after_oom(lambda: plain[grid](**kernel_args, **config.all_kwargs()))
    else:
        q = kernel_args["Q"]
        if q.is_cuda and torch.cuda.is_current_stream_capturing() and not is_tuned(kernel, kernel_args):
            raise RuntimeError(
                f"tilewright attention ({what}): this head dim / causal / dtype / length bucket has not been "
                "autotuned yet and autotuning cannot run during CUDA-graph capture. Run the same call once before "
                "capturing.")
        compiled = retry_after_oom(lambda: kernel[grid](**kernel_args))
        config = kernel.best_config
    if is_recording():
        # the config's constexprs join the arguments (the autotuner passed them); the grid is evaluated on both
        full = {**kernel_args, **config.all_kwargs()}
        bound_roles = {name: kernel_args[name] for name in roles}
        record(bind(plain, compiled, grid(full), full, bound_roles) if roles else None, bound_roles)
    return compiled, config


def _common(q, k, causal, use_tma, causal_offset=0, softcap=0.0, window_offset=None, head_dim_v=None,
            varlen: Varlen | None = None):
    D = q.shape[-1]
    Dv = D if head_dim_v is None else head_dim_v
    return dict(HEAD_DIM=D, HEAD_DIM_PAD=head_dim_pad(D), HEAD_DIM_V=Dv, HEAD_DIM_V_PAD=head_dim_pad(Dv),
                CAUSAL=bool(causal), CAUSAL_OFFSET=int(causal_offset),
                SOFTCAP=float(softcap), HAS_SOFTCAP=softcap > 0,
                WINDOW=window_offset is not None, WINDOW_OFFSET=int(window_offset or 0),
                UPCAST=INTERPRET and q.dtype == torch.bfloat16,
                DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32", USE_TMA=bool(use_tma),
                SQ_BUCKET=_bucket(varlen.max_q if varlen else q.shape[2]),
                SKV_BUCKET=_bucket(varlen.max_k if varlen else k.shape[2]), VARLEN=varlen is not None)


def _strides(varlen: Varlen | None, **tensors) -> dict:
    """``stride_<name>{b,h,s}`` of (B, H, S, D) tensors; with ``varlen`` the batch stride is the row stride (the
    kernels' batch index is then a sequence's first packed row, see ``_sequence``)."""
    out = {}
    for name, t in tensors.items():
        out[f"stride_{name}b"] = t.stride(2) if varlen else t.stride(0)
        out[f"stride_{name}h"] = t.stride(1)
        out[f"stride_{name}s"] = t.stride(2)
    return out


def _cu(varlen: Varlen | None, stand_in: torch.Tensor) -> dict:
    """CU_Q / CU_K: the cu_seqlens, or (dense) a stand-in pointer the kernels never read."""
    return dict(CU_Q=varlen.cu_q if varlen else stand_in, CU_K=varlen.cu_k if varlen else stand_in)


def _fwd_args(q, k, v, out, lse, causal, sm_scale, use_tma, causal_offset=0, softcap=0.0, window_offset=None,
              varlen: Varlen | None = None):
    Hq, Sq = q.shape[1], q.shape[2]
    Hkv, Skv = k.shape[1], k.shape[2]
    if use_tma is None:
        use_tma = tma_ok(q, k, v, out)
    return dict(Q=q, K=k, V=v, O=out, LSE=lse, **_cu(varlen, lse), sm_scale=float(sm_scale),
                **_strides(varlen, q=q, k=k, v=v, o=out), Hq=Hq, Sq=Sq, Skv=Skv, GROUP=Hq // Hkv,
                **_common(q, k, causal, use_tma, causal_offset, softcap, window_offset, v.shape[-1], varlen))


def _bwd_args(do, q, k, v, lse, delta, dq, dk, dv, causal, sm_scale, use_tma, causal_offset=0, softcap=0.0,
              window_offset=None, varlen: Varlen | None = None):
    Hq, Sq = q.shape[1], q.shape[2]
    Hkv, Skv = k.shape[1], k.shape[2]
    if use_tma is None:
        use_tma = tma_ok(q, k, v, do, dq, dk, dv)
    common = _common(q, k, causal, use_tma, causal_offset, softcap, window_offset, v.shape[-1], varlen)
    base = dict(Q=q, K=k, V=v, DO=do, **_cu(varlen, lse))
    strides = _strides(varlen, q=q, k=k, v=v, do=do)
    dims = dict(Hq=Hq, Sq=Sq, Skv=Skv, GROUP=Hq // Hkv)
    args_dkdv = dict(**base, DK=dk, DV=dv, LSE=lse, DELTA=delta, sm_scale=float(sm_scale), **strides,
                     **_strides(varlen, dk=dk, dv=dv), **dims, **common)
    args_dq = dict(**base, DQ=dq, LSE=lse, DELTA=delta, sm_scale=float(sm_scale), **strides,
                   **_strides(varlen, dq=dq), **dims, **common)
    return args_dkdv, args_dq


def default_scale(head_dim: int) -> float:
    """The softmax scale SDPA uses when none is given: 1 / sqrt(head_dim)."""
    return 1.0 / math.sqrt(head_dim)


def warmup(which: str, q, k, v, causal: bool) -> int:
    """Compile (without running) every config the autotuner would try for these inputs; returns how many.
    ``which``: "fwd", "dkdv" or "dq". Used to compile in parallel processes before a benchmark."""
    scale = default_scale(q.shape[-1])
    B, Hq, Sq, _ = q.shape
    lse = torch.empty((B, Hq, Sq), device=q.device, dtype=torch.float32)
    if which == "fwd":
        tuner, plain = attn_fwd, _attn_fwd_kernel
        args = _fwd_args(q, k, v, torch.empty_like(q), lse, causal, scale, None)
    else:
        dkdv, dq = _bwd_args(torch.empty_like(q), q, k, v, lse, torch.empty_like(lse), torch.empty_like(q),
                             torch.empty_like(k), torch.empty_like(v), causal, scale, None)
        tuner, plain, args = ((attn_bwd_dkdv, _attn_bwd_dkdv_kernel, dkdv) if which == "dkdv"
                              else (attn_bwd_dq, _attn_bwd_dq_kernel, dq))
    configs = tuner.early_config_prune(tuner.configs, {}, **args) if len(tuner.configs) > 1 else tuner.configs
    n = 0
    for cfg in configs:
        try:
            plain.warmup(**args, **cfg.all_kwargs(), grid=(1,))
            n += 1
        except Exception:  # out of resources etc.: the autotuner skips such a config the same way
            pass
    return n


def attention_forward(q, k, v, out, lse, causal: bool, sm_scale: float, config: triton.Config | None = None,
                      use_tma: bool | None = None, causal_offset: int = 0, softcap: float = 0.0,
                      window_offset: int | None = None, varlen: Varlen | None = None):
    """out (like q) and lse (B, Hq, Sq) fp32, natural log, are written in place. Shapes are checked by the op.
    ``varlen``: packed sequences (:class:`Varlen`; q / k / v / out (1, H, total, D) views, lse (Hq, total_q)), each
    sequence's offsets taken relative to its own bottom-right diagonal (``causal_offset`` 0: bottom-right causal).
    ``config`` bypasses the autotuner; ``use_tma`` forces the descriptor path on or off (tests); ``causal_offset``:
    with ``causal``, query i sees key j iff ``j <= i + causal_offset`` (0: top-left, Skv - Sq: bottom-right; a
    sliding window's right edge is the same upper band edge); ``window_offset`` (not None): query i sees key j only if
    ``j >= i + window_offset`` as well (a sliding window's left edge; key blocks below it are skipped, not masked);
    ``softcap`` > 0: scores are ``softcap * tanh(scale * q.k / softcap)`` (Gemma 2's logit soft-capping)."""
    B, Hq, Sq, D = q.shape
    Skv = k.shape[2]
    if B == 0 or Hq == 0 or Sq == 0 or (varlen and varlen.batch == 0):
        return out, lse
    if Skv == 0:
        out.zero_()
        lse.fill_(float("-inf"))
        return out, lse
    key = None
    if varlen is not None and config is None and use_tma is None and q.is_cuda and not INTERPRET \
            and not full_autotune():
        key = (*(tensor_signature(t) for t in (q, k, v, out, lse, varlen.cu_q, varlen.cu_k)), bool(causal),
               float(sm_scale), int(causal_offset), float(softcap), window_offset, varlen.max_q, varlen.max_k,
               torch.cuda.current_device())
        bound = _varlen_fwd_bound.get(key)
        if bound is not None:
            bound(*(t.data_ptr() for t in (q, k, v, out, lse, varlen.cu_q, varlen.cu_k)))
            return out, lse
    args = _fwd_args(q, k, v, out, lse, causal, sm_scale, use_tma, causal_offset, softcap, window_offset, varlen)
    rows, batch = (varlen.max_q, varlen.batch) if varlen else (Sq, B)

    def grid(meta):
        return (triton.cdiv(rows, meta["BLOCK_M"]), Hq, batch)

    compiled, config = _launch(attn_fwd, _attn_fwd_kernel, grid, args, config, "forward",
                               roles=("Q", "K", "V", "O", "LSE"))
    if key is not None:
        full = {**args, **config.all_kwargs()}
        bound = bind(_attn_fwd_kernel, compiled, grid(full), full, {r: full[r] for r in _VARLEN_FWD_ROLES})
        if bound is not None:
            store_bound(_varlen_fwd_bound, key, bound)
    return out, lse


# Varlen forward launches bound per signature (like the backward's below): the dense forward's eager replay lives in
# the op layer (ops/_fast.py), which maps pointers to the op's inputs and outputs only - the cu_seqlens are extra
# pointer arguments, bound here with the rest.
_VARLEN_FWD_ROLES = ("Q", "K", "V", "O", "LSE", "CU_Q", "CU_K")
_varlen_fwd_bound: dict = {}


# The backward's three launches (delta, dK/dV, dQ) bound per signature: Triton's JIT and autotuner dispatch cost
# ~0.1 ms of host a launch, and nothing records this launcher for an op-level replay (three launches and a scratch
# buffer). Key: everything the launches read besides pointers - every tensor's shape, strides, dtype, device and
# 16 / 128-byte alignment (which decide TMA use and Triton's specialization), the options, the current device.
_BWD_ROLES_PRE = ("O", "DO", "DLSE", "DELTA", "LSE", "STATS")
# The preprocess's warps without / with the packed statistics: at 4 the latter's hdim-128 sm_90a build spilled 32
# bytes (72 registers), at 8 none (tests/test_attention.py compiles both)
PREPROCESS_WARPS = {False: 4, True: 8}
_BWD_ROLES_DKDV = ("Q", "K", "V", "DO", "DK", "DV", "LSE", "DELTA")
_BWD_ROLES_DQ = ("Q", "K", "V", "DO", "DQ", "LSE", "DELTA")
_bwd_bound: dict = {}


def _bwd_bound_key(do, q, k, v, out, lse, dq, dk, dv, causal, sm_scale, dlse, causal_offset, softcap, window_offset,
                   own_dkdv: bool, own_dq: bool, varlen, stats) -> tuple:
    """The signature :func:`attention_backward` keeps its bound launches under (own_dkdv / own_dq: the caller passes
    its own dK / dV or dQ launch)."""
    return (*(tensor_signature(t) for t in (do, q, k, v, out, lse, dq, dk, dv, dlse)), bool(causal),
            float(sm_scale), int(causal_offset), float(softcap), window_offset, torch.cuda.current_device(),
            own_dkdv, own_dq, tensor_signature(stats),
            None if varlen is None else (tensor_signature(varlen.cu_q), tensor_signature(varlen.cu_k),
                                         varlen.max_q, varlen.max_k))


def bound_preprocess(do, q, k, v, out, lse, dq, dk, dv, causal, sm_scale, causal_offset, softcap, window_offset,
                     stats):
    """The preprocess launch :func:`attention_backward` bound for a dense call without an LSE gradient whose dK / dV
    and dQ launches are the caller's (its arguments as given there, after such a call), or None: called with the
    addresses of (out, do, delta, delta, lse, stats) it fills delta and the packed statistics as that call did.
    The op layer's backward replay (ops/attention.py) launches it with the caller's own dK / dV and dQ launches."""
    if INTERPRET or full_autotune():
        return None
    bound = _bwd_bound.get(_bwd_bound_key(do, q, k, v, out, lse, dq, dk, dv, causal, sm_scale, None, causal_offset,
                                          softcap, window_offset, True, True, None, stats))
    return None if bound is None else bound[0]


def attention_backward(do, q, k, v, out, lse, dq, dk, dv, causal: bool, sm_scale: float, dlse=None,
                       configs: tuple | None = None, use_tma: bool | None = None, causal_offset: int = 0,
                       softcap: float = 0.0, window_offset: int | None = None, dkdv_launch=None, dq_launch=None,
                       varlen: Varlen | None = None, stats: torch.Tensor | None = None):
    """Gradients into dq/dk/dv (shaped like q/k/v). ``dlse``: optional gradient of the LSE output (fp32,
    contiguous (B, Hq, Sq)). ``configs``: (dkdv_config, dq_config) to bypass the autotuner; ``causal_offset``,
    ``window_offset`` and ``softcap`` as in :func:`attention_forward`. A call with the default configs at a
    signature seen before launches the three kernels bound at its first call (``_runtime.BoundLaunch``) instead of
    through Triton's dispatch. ``dkdv_launch``: a callable ``(delta) -> None`` that writes dk / dv in place of the
    Triton dK / dV kernel (the sm_90a kernel, which ops/attention.py passes when it takes the call); ``dq_launch``
    likewise for dq. ``varlen``: packed sequences as in :func:`attention_forward` (their cu_seqlens join the bound
    launches' pointer arguments). ``stats``: a contiguous fp32 (B, Hq, ceil(Sq / R), 2, R) buffer the preprocess
    fills with the sm_90a dK / dV kernel's packed row statistics (``_attn_bwd_preprocess``; R = its last dim) before
    ``dkdv_launch``, which reads it, runs."""
    B, Hq, Sq, D = q.shape
    Hkv, Skv = k.shape[1], k.shape[2]
    if B == 0 or Hq == 0 or (varlen and varlen.batch == 0):
        dq.zero_()
        dk.zero_()
        dv.zero_()
        return dq, dk, dv
    if Sq == 0 or Skv == 0:
        dq.zero_()
        dk.zero_()
        dv.zero_()
        return dq, dk, dv
    key = None
    cu_roles = ("CU_Q", "CU_K") if varlen is not None else ()
    roles_dkdv, roles_dq = _BWD_ROLES_DKDV + cu_roles, _BWD_ROLES_DQ + cu_roles
    if configs is None and use_tma is None and q.is_cuda and not INTERPRET and not full_autotune():
        key = _bwd_bound_key(do, q, k, v, out, lse, dq, dk, dv, causal, sm_scale, dlse, causal_offset, softcap,
                             window_offset, dkdv_launch is not None, dq_launch is not None, varlen, stats)
        bound = _bwd_bound.get(key)
        if bound is not None:
            delta = torch.empty((B, Hq, Sq), device=q.device, dtype=torch.float32)
            pre, dkdv, dqk = bound
            pre(out.data_ptr(), do.data_ptr(), (dlse if dlse is not None else delta).data_ptr(), delta.data_ptr(),
                lse.data_ptr(), (stats if stats is not None else delta).data_ptr())
            ptr = {"Q": q, "K": k, "V": v, "DO": do, "DK": dk, "DV": dv, "DQ": dq, "LSE": lse, "DELTA": delta}
            if varlen is not None:
                ptr.update(CU_Q=varlen.cu_q, CU_K=varlen.cu_k)
            if dkdv_launch is not None:
                dkdv_launch(delta)
            else:
                dkdv(*[ptr[r].data_ptr() for r in roles_dkdv])
            if dq_launch is not None:
                dq_launch(delta)
            else:
                dqk(*[ptr[r].data_ptr() for r in roles_dq])
            if is_recording():
                record(None, {})  # as the full path reports: these launches are not an op's single replayable one
            return dq, dk, dv
    delta = torch.empty((B, Hq, Sq), device=q.device, dtype=torch.float32)
    pre_block = 64 if INTERPRET else 128
    pre_grid = (triton.cdiv(Sq, pre_block), Hq, B)
    pre_args = dict(O=out, DO=do, DLSE=dlse if dlse is not None else delta, DELTA=delta, LSE=lse,
                    STATS=stats if stats is not None else delta,
                    stride_ob=out.stride(0), stride_oh=out.stride(1), stride_os=out.stride(2),
                    stride_dob=do.stride(0), stride_doh=do.stride(1), stride_dos=do.stride(2),
                    Hq=Hq, Sq=Sq, HEAD_DIM=do.shape[-1], HEAD_DIM_PAD=head_dim_pad(do.shape[-1]),
                    HAS_DLSE=dlse is not None,
                    BLOCK_M=pre_block, PACK_STATS=stats is not None,
                    STAT_ROWS=stats.shape[-1] if stats is not None else 64)
    pre_compiled = _attn_bwd_preprocess[pre_grid](**pre_args, num_warps=PREPROCESS_WARPS[stats is not None])
    args_dkdv, args_dq = _bwd_args(do, q, k, v, lse, delta, dq, dk, dv, causal, sm_scale, use_tma, causal_offset,
                                   softcap, window_offset, varlen)
    cfg_dkdv, cfg_dq = configs if configs is not None else (None, None)
    rows_q, rows_k, batch = (varlen.max_q, varlen.max_k, varlen.batch) if varlen else (Sq, Skv, B)
    grid_dkdv = lambda m: (triton.cdiv(rows_k, m["BLOCK_N1"]), Hkv, batch)  # noqa: E731
    grid_dq = lambda m: (triton.cdiv(rows_q, m["BLOCK_M2"]), Hq, batch)  # noqa: E731
    if dkdv_launch is not None:
        dkdv_launch(delta)
    else:
        c_dkdv, cfg_dkdv = _launch(attn_bwd_dkdv, _attn_bwd_dkdv_kernel, grid_dkdv, args_dkdv, cfg_dkdv,
                                   "backward dK/dV")
    if dq_launch is not None:
        dq_launch(delta)
    else:
        c_dq, cfg_dq = _launch(attn_bwd_dq, _attn_bwd_dq_kernel, grid_dq, args_dq, cfg_dq, "backward dQ")
    if key is not None:
        if dq_launch is not None:
            bound_dq = True  # the caller's launch runs at every call
        else:
            full_dq = {**args_dq, **cfg_dq.all_kwargs()}
            bound_dq = bind(_attn_bwd_dq_kernel, c_dq, grid_dq(full_dq), full_dq, {r: full_dq[r] for r in roles_dq})
        if dkdv_launch is not None:
            bound_dkdv = True  # the caller's launch runs at every call; nothing to bind
        else:
            full_dkdv = {**args_dkdv, **cfg_dkdv.all_kwargs()}
            bound_dkdv = bind(_attn_bwd_dkdv_kernel, c_dkdv, grid_dkdv(full_dkdv), full_dkdv,
                              {r: full_dkdv[r] for r in roles_dkdv})
        bound = (bind(_attn_bwd_preprocess, pre_compiled, pre_grid, pre_args,
                      {r: pre_args[r] for r in _BWD_ROLES_PRE}),
                 bound_dkdv, bound_dq)
        if all(b is not None for b in bound):
            store_bound(_bwd_bound, key, bound)
    return dq, dk, dv
