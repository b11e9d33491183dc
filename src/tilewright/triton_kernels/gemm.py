"""Persistent Triton GEMM with a fused epilogue: ``out = activation(a @ b + bias) + residual``.

Design
------
* **Persistent**: the grid is ``min(#SMs, #tiles)`` programs; program p computes tiles p, p+P, p+2P, ... in the tile
  order chosen by the tuner (``tile_order.py``). One launch, no tail wave of half-empty CTAs, and the tile order
  controls L2 reuse.
* **TMA** (``USE_TMA``): on sm_90+ when every operand's base and row stride is 16-byte aligned, operands are loaded
  through device-side tensor descriptors (``tl.make_tensor_descriptor``; no host pre-hook, so Triton's on-disk
  autotune cache works). The descriptor is built over the operand's *memory* layout: an A stored K-major is
  described as (M, K), one stored M-major as (K, M) and transposed in registers-free fashion by ``.T`` (wgmma reads
  either smem layout for 16-bit types). TMA zero-fills out-of-bounds boxes, so M/N/K tails need no masks.
  Otherwise (``USE_TMA=False``) the pointer path uses masked loads with int64 offsets, so tensors with more than
  2^31 elements index correctly.
* **Epilogue** in fp32 on the accumulator: + bias (N,), optional store of the pre-activation (autograd needs it for
  the activation's derivative), activation, + residual, one rounding to the output dtype. The residual is addressed
  as (R0, P, N) with arbitrary strides: output row r reads residual row ``(r // P, r % P)``, which covers a full
  (M, N) residual (R0 = 1, P = M), a bias-like (N,) row (row stride 0) and a pos_embed (S, N) broadcast over the
  batch of a (B, S, K) input (P = S, outer stride 0) without materialising the broadcast.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .._codes import FP8_SCALE_BLOCK
from .._env import SMEM_OPTIN_BYTES, full_autotune, interpreting
from ..autotune.space import (INTERPRETER_CONFIG, SPLIT_K_MAX_TILES, SPLIT_K_WORKSPACE_BYTES, default_gemm_config,
                              fit_shared_memory, gemm_configs, prune_gemm_configs, split_k_fits)
from .activation import apply_activation
from .dot import dot_accumulate
from .._record import is_recording, record
from ._runtime import bind, ensure_allocator, is_tuned, retry_after_oom
from .tile_order import tile_coords

INTERPRET = interpreting()  # read once: @triton.jit decided at import whether it interprets


@dataclass(frozen=True)
class NormPrologue:
    """The RMSNorm prologue of the fused GEMM (``rmsnorm_gemm.py``): x's row sums of squares are gathered from the
    A tiles, A is scaled by ``weight`` before the dot and the accumulator by ``rstd`` before the bias.

    weight: (K,) unit-stride norm weight g. rstd: (M,) fp32 output that receives ``1/sqrt(mean(x^2) + eps)`` for the
    backward, or None. eps: > 0. g_scale: for fp16 inputs, (2,) fp32 ``[2^-e, 2^e]`` with max|g| < 2^e
    (``rmsnorm_gemm.g_pow2_scale``): the mainloop forms ``x * (g * 2^-e)``, which cannot overflow fp16, and the
    accumulator takes 2^e back with rstd; None for bf16 / fp32.
    """

    weight: torch.Tensor
    rstd: torch.Tensor | None
    eps: float
    g_scale: torch.Tensor | None = None


@dataclass(frozen=True)
class Dequant:
    """FP8 inputs (``ops/scaled_mm.py``): dequantisation scales applied to the fp32 accumulator before the bias.

    scale_a, scale_b: fp32, one element each (per tensor) or (M,) and (N,) unit-stride (rowwise), or block-scaled:
    contiguous (M, ceil(K / 128)) and (ceil(K / 128), ceil(N / 128)) - one scale per row of a and 128-wide K block,
    one per 128 x 128 block of b - applied in the mainloop as each BLOCK_K slice (<= 128, dividing 128) is added to
    the fp32 accumulator. fast_accum: keep the tensor cores' reduced-precision FP8 accumulator across K
    (``torch._scaled_mm(use_fast_accum=True)``) instead of promoting every BLOCK_K slice to fp32 (block-scaled mode
    always promotes: the scales change from block to block).
    """

    scale_a: torch.Tensor
    scale_b: torch.Tensor
    fast_accum: bool = False
    block_scaled: bool = False  # said, never guessed from the shapes: (M, 1) is a rowwise scale_a and a block one


@triton.jit
def _mma(a, b, acc, zero, DOT_PRECISION: tl.constexpr, UPCAST_DOT: tl.constexpr, PRECISE_ACC: tl.constexpr):
    if UPCAST_DOT:
        # The interpreter multiplies raw bf16 bit patterns in tl.dot (triton#11584); fp32 is exact there.
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    if PRECISE_ACC:
        # FP8 on sm_90: the tensor cores add FP8 products into the accumulator with reduced precision (Triton's
        # sm_90 default never promotes; the DeepSeek-V3 report measures ~14 bits kept), which cost 2.7x cuBLASLt's
        # max error at K = 8192 on H200. Each BLOCK_K slice is accumulated from zero and added to the fp32
        # accumulator on the CUDA cores - cuBLASLt's default (torch._scaled_mm use_fast_accum=False). It holds a
        # second accumulator, so the pruner keeps <= 64 accumulator values per thread for it.
        return acc + tl.dot(a, b)
    return dot_accumulate(a, b, acc, zero, DOT_PRECISION)  # fp32: tile sums added apart (dot.py)


_SCALE_BLOCK = tl.constexpr(FP8_SCALE_BLOCK)


@triton.jit
def _block_scaled_mma(a, b, acc, scale_a_ptr, scale_b_ptr, offs_m, offs_n, k, M, N, K, UPCAST_DOT: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """acc + (a @ b) * scale_a[rows, k // 128] * scale_b[k // 128, cols // 128] for the BLOCK_K slice at ``k``: the
    block-scaled FP8 recipe (1 x 128 activation blocks, 128 x 128 weight blocks), each slice accumulated from zero
    and promoted to fp32 with its blocks' scales. The slice lies inside one 128-wide K block (BLOCK_K divides 128,
    the launcher's plan makes sure). Scales are contiguous: (M, ceil(K / 128)) and (ceil(K / 128), ceil(N / 128))."""
    if UPCAST_DOT:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    kb = k // _SCALE_BLOCK
    k_blocks = tl.cdiv(K, _SCALE_BLOCK)
    rows = offs_m + tl.arange(0, BLOCK_M)
    sa = tl.load(scale_a_ptr + rows.to(tl.int64) * k_blocks + kb, mask=rows < M, other=0.0)
    if BLOCK_N <= _SCALE_BLOCK:
        # the tile's columns lie in one 128-wide block of b (BLOCK_N divides 128, offs_n is a multiple of it): one
        # scale, folded into the row scales - one multiply-add per accumulator element
        sb = tl.load(scale_b_ptr + kb * tl.cdiv(N, _SCALE_BLOCK) + offs_n // _SCALE_BLOCK)
        return acc + tl.dot(a, b) * (sa * sb)[:, None]
    cols = offs_n + tl.arange(0, BLOCK_N)
    sb = tl.load(scale_b_ptr + kb * tl.cdiv(N, _SCALE_BLOCK) + cols // _SCALE_BLOCK, mask=cols < N, other=0.0)
    return acc + tl.dot(a, b) * sa[:, None] * sb[None, :]


@triton.jit
def operand_descriptors(a_ptr, b_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, A_K_CONTIG: tl.constexpr,
                        B_K_CONTIG: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Device-side TMA descriptors over each operand's memory layout: a K-major A is (M, K), an M-major one (K, M);
    a K-major B is (N, K), an N-major one (K, N). The mainloop transposes the loaded box back where needed."""
    if A_K_CONTIG:
        a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K])
    else:
        a_desc = tl.make_tensor_descriptor(a_ptr, shape=[K, M], strides=[stride_ak, 1], block_shape=[BLOCK_K, BLOCK_M])
    if B_K_CONTIG:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[stride_bn, 1], block_shape=[BLOCK_N, BLOCK_K])
    else:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_bk, 1], block_shape=[BLOCK_K, BLOCK_N])
    return a_desc, b_desc


@triton.jit
def _norm_step(a, ss, g_ptr, g_shift, offs_k, K, RESCALE_G: tl.constexpr, BLOCK_K: tl.constexpr):
    """RMSNorm prologue for one A tile: add its rows' fp32 sums of squares to ``ss``; return the tile scaled by g
    (and by the power of two ``g_shift`` when RESCALE_G, see :class:`NormPrologue`), rounded once to its dtype.

    The tile always passes through this register transform before the dot: feeding the TMA/cp.async-loaded tile to
    the dot unchanged while also reading it for ``ss`` (a "g folded into W" variant this kernel had) gave wrong
    products on sm_90 for 128x256 tiles and the pointer path (Triton 3.6; found by the GPU fuzzer, output off by
    O(1) with rstd exact), so that variant was removed."""
    af = a.to(tl.float32)
    ss += tl.sum(af * af, axis=1)
    rk = offs_k + tl.arange(0, BLOCK_K)
    g = tl.load(g_ptr + rk, mask=rk < K, other=0.0).to(tl.float32)
    if RESCALE_G:
        g = g * g_shift
    a = (af * g[None, :]).to(a.dtype)
    return a, ss


@triton.jit
def mainloop(a_desc, b_desc, a_ptr, b_ptr, g_ptr, g_shift, scale_a_ptr, scale_b_ptr, offs_m, offs_n, M, N, K, k_first,
             k_tiles, stride_am, stride_ak, stride_bk, stride_bn, A_K_CONTIG: tl.constexpr, B_K_CONTIG: tl.constexpr,
             LOAD_DESC: tl.constexpr,
             NORM: tl.constexpr, RESCALE_G: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST_DOT: tl.constexpr,
             PRECISE_ACC: tl.constexpr, BLOCK_SCALED: tl.constexpr,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """One output tile's K loop over the ``k_tiles`` BLOCK_K steps from step ``k_first`` (all of K, or one split of
    it): returns the fp32 accumulator and, with NORM (the RMSNorm-fused GEMM), the fp32 row sums of squares of A
    gathered from the very tiles the loop loads (A scaled by g before the dot). BLOCK_SCALED (FP8 with block scales):
    each slice is promoted with its blocks' scales (:func:`_block_scaled_mma`).

    Descriptor loads need no masks (TMA zero-fills out-of-bounds boxes, so tail rows add 0 to the sums); the pointer
    path masks all three dims. (Wrapping rows/columns with `% M` would save the M/N masks but hides the unit-stride
    dim's contiguity from the compiler: loads went scalar and ran 10x slower.) Its row/column offsets are int64
    (tensors over 2^31 elements) and pointers advance by a 64-bit step.
    """
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    ss = tl.zeros((BLOCK_M,), dtype=tl.float32)
    zero = tl.cast(K, tl.float32) * 0.0  # 0.0 for _mma's fp32 path, not a compile-time constant
    if LOAD_DESC:
        for ki in range(k_tiles):
            offs_k = (k_first + ki) * BLOCK_K
            if A_K_CONTIG:
                a = a_desc.load([offs_m, offs_k])
            else:
                a = a_desc.load([offs_k, offs_m]).T
            if B_K_CONTIG:
                b = b_desc.load([offs_n, offs_k]).T
            else:
                b = b_desc.load([offs_k, offs_n])
            if NORM:
                a, ss = _norm_step(a, ss, g_ptr, g_shift, offs_k, K, RESCALE_G, BLOCK_K)
            if BLOCK_SCALED:
                acc = _block_scaled_mma(a, b, acc, scale_a_ptr, scale_b_ptr, offs_m, offs_n, offs_k, M, N, K,
                                        UPCAST_DOT, BLOCK_M, BLOCK_N)
            else:
                acc = _mma(a, b, acc, zero, DOT_PRECISION, UPCAST_DOT, PRECISE_ACC)
    else:
        rm = offs_m + tl.arange(0, BLOCK_M)
        rn = offs_n + tl.arange(0, BLOCK_N)
        rk = tl.arange(0, BLOCK_K)
        k0 = tl.cast(k_first, tl.int64) * BLOCK_K
        a_ptrs = a_ptr + rm[:, None].to(tl.int64) * stride_am + (k0 + rk[None, :]) * stride_ak
        b_ptrs = b_ptr + (k0 + rk[:, None]) * stride_bk + rn[None, :].to(tl.int64) * stride_bn
        a_step = tl.cast(stride_ak, tl.int64) * BLOCK_K
        b_step = tl.cast(stride_bk, tl.int64) * BLOCK_K
        mask_m = rm[:, None] < M
        mask_n = rn[None, :] < N
        for ki in range(k_tiles):
            k_left = K - (k_first + ki) * BLOCK_K
            a = tl.load(a_ptrs, mask=mask_m & (rk[None, :] < k_left), other=0.0)
            b = tl.load(b_ptrs, mask=(rk[:, None] < k_left) & mask_n, other=0.0)
            if NORM:
                a, ss = _norm_step(a, ss, g_ptr, g_shift, (k_first + ki) * BLOCK_K, K, RESCALE_G, BLOCK_K)
            if BLOCK_SCALED:
                acc = _block_scaled_mma(a, b, acc, scale_a_ptr, scale_b_ptr, offs_m, offs_n, (k_first + ki) * BLOCK_K,
                                        M, N, K, UPCAST_DOT, BLOCK_M, BLOCK_N)
            else:
                acc = _mma(a, b, acc, zero, DOT_PRECISION, UPCAST_DOT, PRECISE_ACC)
            a_ptrs += a_step
            b_ptrs += b_step
    return acc, ss


@triton.jit
def residual_rows(res_ptr, offs_m, stride_res0, stride_res1, RES_PERIOD, BLOCK_M: tl.constexpr,
                  HAS_RESIDUAL: tl.constexpr, RES_PERIODIC: tl.constexpr, INDEX_64: tl.constexpr):
    """Row addresses of the residual for one tile, computed once per tile (BLOCK_M values, not per element). Output
    row r reads residual[r // P, r % P]; only a broadcast (periodic) residual pays for the integer division."""
    res_rows = res_ptr
    if HAS_RESIDUAL:
        rows = offs_m + tl.arange(0, BLOCK_M)
        if INDEX_64:
            rows = rows.to(tl.int64)
        if RES_PERIODIC:
            res_rows = res_ptr + (rows // RES_PERIOD) * stride_res0 + (rows % RES_PERIOD) * stride_res1
        else:
            res_rows = res_ptr + rows * stride_res1
    return res_rows


@triton.jit
def _gemm_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr, res_ptr, preact_ptr, g_ptr, rstd_ptr, gscale_ptr, scale_a_ptr, scale_b_ptr,
    ws_ptr, arrivals_ptr,  # split-K only: fp32 partial tiles, one arrival counter per tile (split_k_workspace)
    M, N, K, eps,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    stride_res0, stride_res1, stride_res2, RES_PERIOD,
    M_BUCKET,  # autotune key only: M rounded up to a power of two, so varying batch sizes reuse one tuning
    # layout / epilogue switches (part of the autotune key)
    A_K_CONTIG: tl.constexpr, B_K_CONTIG: tl.constexpr, USE_TMA: tl.constexpr, TMA_STORE: tl.constexpr,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, HAS_RESIDUAL: tl.constexpr, RES_PERIODIC: tl.constexpr,
    STORE_PREACT: tl.constexpr,
    # RMSNorm-fused GEMM (rmsnorm_gemm.py): x's row sums of squares from the A tiles, A * g before the dot, the
    # accumulator scaled by rstd before the bias, rstd stored for the backward. RESCALE_G (fp16): g is scaled by
    # the power of two gscale_ptr[0] and the accumulator by gscale_ptr[1] so x * g cannot overflow (NormPrologue).
    NORM: tl.constexpr, RESCALE_G: tl.constexpr, STORE_RSTD: tl.constexpr,
    # FP8 inputs (scaled_mm): dequantization scales applied to the fp32 accumulator before the bias;
    # 0: none, 1: one scale per tensor, 2: rowwise (scale_a (M,), scale_b (N,)), 3: block-scaled, applied in the
    # mainloop (Dequant says the layout). PRECISE_ACC: FP8 slices accumulated from zero and added in fp32 (see _mma);
    # off = "fast accumulation".
    SCALE_MODE: tl.constexpr, PRECISE_ACC: tl.constexpr,
    DOT_PRECISION: tl.constexpr, UPCAST_DOT: tl.constexpr, INDEX_64: tl.constexpr,
    # tuned
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP: tl.constexpr, TILE_ORDER: tl.constexpr, EPI_SPLIT: tl.constexpr,
    TMA_LOADS: tl.constexpr,  # tuned: load through descriptors (when USE_TMA allows) or through pointers
    PERSISTENT: tl.constexpr,  # read by the launcher's grid: #SMs programs (True) or one program per tile (False)
    FLATTEN: tl.constexpr,  # fuse the tile and K loops into one software pipeline (next tile's loads overlap this
                            # tile's epilogue)
    SPLIT_K: tl.constexpr = 1,  # tuned: programs sharing one tile's K loop (1: none; see _split_k_combine)
):
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n

    LOAD_DESC: tl.constexpr = USE_TMA and TMA_LOADS
    a_desc = None  # the compiler drops unused (None) descriptors; a jit helper cannot return None, so set them here
    b_desc = None
    c_desc = None
    if LOAD_DESC:
        a_desc, b_desc = operand_descriptors(a_ptr, b_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                                             A_K_CONTIG, B_K_CONTIG, BLOCK_M, BLOCK_N, BLOCK_K)
    if TMA_STORE:  # the output box is one epilogue chunk
        c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[stride_cm, 1],
                                           block_shape=[BLOCK_M, BLOCK_N // EPI_SPLIT])
    g_shift = 1.0
    g_unshift = 1.0
    if RESCALE_G:  # two scalars computed by the launcher (rmsnorm_gemm.g_pow2_scale), the same for every program
        g_shift = tl.load(gscale_ptr)
        g_unshift = tl.load(gscale_ptr + 1)

    k_steps = tl.cdiv(K, BLOCK_K)
    # A work unit is one tile, or with split-K one (tile, split): the splits of a tile are neighbouring units, so
    # they run at the same time and its partial tiles meet while they are still in L2.
    for unit in tl.range(pid, num_tiles * SPLIT_K, num_programs, flatten=FLATTEN):
        if SPLIT_K == 1:
            tile_id = unit
            k_first = 0
            k_count = k_steps
        else:
            tile_id = unit // SPLIT_K
            split = unit % SPLIT_K
            steps_per_split = tl.cdiv(k_steps, SPLIT_K)
            k_first = split * steps_per_split
            k_count = tl.minimum(steps_per_split, k_steps - k_first)
        pid_m, pid_n = tile_coords(tile_id, num_pid_m, num_pid_n, TILE_ORDER, GROUP)
        offs_m = pid_m * BLOCK_M
        offs_n = pid_n * BLOCK_N
        acc, ss = mainloop(a_desc, b_desc, a_ptr, b_ptr, g_ptr, g_shift, scale_a_ptr, scale_b_ptr, offs_m, offs_n, M, N,
                           K, k_first, k_count, stride_am, stride_ak, stride_bk, stride_bn, A_K_CONTIG, B_K_CONTIG,
                           LOAD_DESC, NORM, RESCALE_G, DOT_PRECISION, UPCAST_DOT, PRECISE_ACC, SCALE_MODE == 3,
                           BLOCK_M, BLOCK_N, BLOCK_K)
        if SPLIT_K == 1:
            _tile_epilogue(acc, ss, offs_m, offs_n, pid_n, M, N, K, eps, c_desc, c_ptr, stride_cm, stride_cn, bias_ptr,
                           res_ptr, stride_res0, stride_res1, stride_res2, RES_PERIOD, preact_ptr, rstd_ptr,
                           g_unshift, scale_a_ptr, scale_b_ptr, BLOCK_M, BLOCK_N, EPI_SPLIT, TMA_STORE, HAS_BIAS,
                           ACTIVATION, HAS_RESIDUAL, RES_PERIODIC, STORE_PREACT, NORM, RESCALE_G, STORE_RSTD,
                           SCALE_MODE, INDEX_64)
        else:
            acc, last = _split_k_combine(acc, ws_ptr, arrivals_ptr, tile_id, split, SPLIT_K, BLOCK_M, BLOCK_N)
            if last:
                _tile_epilogue(acc, ss, offs_m, offs_n, pid_n, M, N, K, eps, c_desc, c_ptr, stride_cm, stride_cn,
                               bias_ptr, res_ptr, stride_res0, stride_res1, stride_res2, RES_PERIOD, preact_ptr,
                               rstd_ptr, g_unshift, scale_a_ptr, scale_b_ptr, BLOCK_M, BLOCK_N, EPI_SPLIT, TMA_STORE,
                               HAS_BIAS, ACTIVATION, HAS_RESIDUAL, RES_PERIODIC, STORE_PREACT, NORM, RESCALE_G,
                               STORE_RSTD, SCALE_MODE, INDEX_64)


@triton.jit
def _split_k_combine(acc, ws_ptr, arrivals_ptr, tile_id, split, SPLIT_K: tl.constexpr, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr):
    """Split-K in one launch: store this split's fp32 partial tile, count the arrival; the last split of the tile to
    arrive gets (sum of the partials, True) and runs the epilogue, the others (acc, False).

    * Deterministic: the last arrival adds the partials in split order 0, 1, ... (its own reloaded too), so the sum's
      rounding does not depend on which split finished last - the same bits every run, unlike atomic adds.
    * Ordering: every thread's partial stores, then a CTA barrier, then one acq_rel atomic at GPU scope - the barrier
      orders the stores before the releasing atomic (the release is cumulative), and the last arrival's acquire
      orders its reloads after every other split's release. The reloads bypass L1 (.cg: L1 is not coherent across
      SMs; L2 is where the other splits' stores landed).
    * The counter is reset by the last arrival, so the next launch on this stream finds zeros without a memset
      (kernels on one stream run in order): one launch, which an eager replay or a CUDA graph can hold.
    """
    tile_elems: tl.constexpr = BLOCK_M * BLOCK_N
    offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    tile_ws = ws_ptr + tl.cast(tile_id, tl.int64) * (SPLIT_K * tile_elems)
    tl.store(tile_ws + split * tile_elems + offs, acc)
    tl.debug_barrier()
    arrived = tl.atomic_add(arrivals_ptr + tile_id, 1, sem="acq_rel", scope="gpu")
    last = arrived == SPLIT_K - 1
    if last:
        acc = tl.load(tile_ws + offs, cache_modifier=".cg")
        for s in tl.static_range(1, SPLIT_K):
            acc += tl.load(tile_ws + s * tile_elems + offs, cache_modifier=".cg")
        tl.store(arrivals_ptr + tile_id, 0)
    return acc, last


@triton.jit
def _tile_epilogue(acc, ss, offs_m, offs_n, pid_n, M, N, K, eps, c_desc, c_ptr, stride_cm, stride_cn, bias_ptr,
                   res_ptr, stride_res0, stride_res1, stride_res2, RES_PERIOD, preact_ptr, rstd_ptr, g_unshift,
                   scale_a_ptr, scale_b_ptr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EPI_SPLIT: tl.constexpr,
                   TMA_STORE: tl.constexpr, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
                   HAS_RESIDUAL: tl.constexpr, RES_PERIODIC: tl.constexpr, STORE_PREACT: tl.constexpr,
                   NORM: tl.constexpr, RESCALE_G: tl.constexpr, STORE_RSTD: tl.constexpr, SCALE_MODE: tl.constexpr,
                   INDEX_64: tl.constexpr):
    """One finished tile's accumulator to the output: the norm's rstd, the FP8 scales, then the chunked epilogue."""
    if NORM:
        # rstd in fp32 with an IEEE sqrt; stored once per row (by the tiles of the first column) for backward.
        rstd = 1.0 / tl.sqrt_rn(ss / K + eps)
        if STORE_RSTD:
            rows = offs_m + tl.arange(0, BLOCK_M)
            tl.store(rstd_ptr + rows, rstd, mask=(rows < M) & (pid_n == 0))
        if RESCALE_G:
            acc = acc * (rstd * g_unshift)[:, None]
        else:
            acc = acc * rstd[:, None]
    if SCALE_MODE == 1:
        acc = acc * (tl.load(scale_a_ptr) * tl.load(scale_b_ptr))
    elif SCALE_MODE == 2:
        rows = offs_m + tl.arange(0, BLOCK_M)
        cols = offs_n + tl.arange(0, BLOCK_N)
        sa = tl.load(scale_a_ptr + rows, mask=rows < M, other=0.0)
        sb = tl.load(scale_b_ptr + cols, mask=cols < N, other=0.0)
        acc = acc * sa[:, None] * sb[None, :]
    res_rows = residual_rows(res_ptr, offs_m, stride_res0, stride_res1, RES_PERIOD, BLOCK_M, HAS_RESIDUAL,
                             RES_PERIODIC, INDEX_64)
    _epilogue_chunks(acc, offs_m, offs_n, M, N, c_desc, c_ptr, stride_cm, stride_cn, bias_ptr, res_rows,
                     stride_res2, preact_ptr, BLOCK_M, BLOCK_N, EPI_SPLIT, TMA_STORE, HAS_BIAS, ACTIVATION,
                     HAS_RESIDUAL, STORE_PREACT, INDEX_64)


@triton.jit
def _epilogue_chunks(acc, offs_m, offs_n, M, N, c_desc, c_ptr, stride_cm, stride_cn, bias_ptr, res_rows, stride_res2,
                     preact_ptr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT: tl.constexpr,
                     TMA_STORE: tl.constexpr, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
                     HAS_RESIDUAL: tl.constexpr, STORE_PREACT: tl.constexpr, INDEX_64: tl.constexpr):
    """Run the epilogue on ``acc`` in SPLIT column chunks (1, 2 or 4), one after the other.

    Chunking keeps the epilogue's temporaries (bias, residual, addresses, activation) small beside a 128-register
    accumulator (128x256 tile, 8 warps) so nothing spills, and shrinks the TMA-store staging buffer to one chunk,
    which leaves shared memory for another pipeline stage.
    """
    if SPLIT == 1:
        _epilogue(acc, offs_m, offs_n, M, N, c_desc, c_ptr, stride_cm, stride_cn, bias_ptr, res_rows, stride_res2,
                  preact_ptr, BLOCK_M, BLOCK_N, TMA_STORE, HAS_BIAS, ACTIVATION, HAS_RESIDUAL, STORE_PREACT,
                  INDEX_64)
    else:
        HALF: tl.constexpr = BLOCK_N // 2
        left, right = tl.split(tl.permute(tl.reshape(acc, (BLOCK_M, 2, HALF)), (0, 2, 1)))
        _epilogue_chunks(left, offs_m, offs_n, M, N, c_desc, c_ptr, stride_cm, stride_cn, bias_ptr, res_rows,
                         stride_res2, preact_ptr, BLOCK_M, HALF, SPLIT // 2, TMA_STORE, HAS_BIAS, ACTIVATION,
                         HAS_RESIDUAL, STORE_PREACT, INDEX_64)
        _epilogue_chunks(right, offs_m, offs_n + HALF, M, N, c_desc, c_ptr, stride_cm, stride_cn, bias_ptr, res_rows,
                         stride_res2, preact_ptr, BLOCK_M, HALF, SPLIT // 2, TMA_STORE, HAS_BIAS, ACTIVATION,
                         HAS_RESIDUAL, STORE_PREACT, INDEX_64)


@triton.jit
def _epilogue(acc, offs_m, offs_n, M, N, c_desc, c_ptr, stride_cm, stride_cn, bias_ptr, res_rows, stride_res2,
              preact_ptr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, TMA_STORE: tl.constexpr,
              HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, HAS_RESIDUAL: tl.constexpr,
              STORE_PREACT: tl.constexpr, INDEX_64: tl.constexpr):
    """+ bias, [store pre-activation], activation, + residual, one rounding, store - for one chunk."""
    rm = offs_m + tl.arange(0, BLOCK_M)
    rn = offs_n + tl.arange(0, BLOCK_N)
    mask_n = rn < N
    mask = (rm < M)[:, None] & mask_n[None, :]
    if INDEX_64:
        rm = rm.to(tl.int64)
        rn = rn.to(tl.int64)
    if HAS_BIAS:
        bias = tl.load(bias_ptr + rn, mask=mask_n, other=0.0)
        acc = acc + bias.to(tl.float32)[None, :]
    if STORE_PREACT:
        tl.store(preact_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc.to(preact_ptr.dtype.element_ty),
                 mask=mask)
    # a 16-bit output takes the erf-free GELU (triton_kernels/activation.gelu_fast): its error never shows there
    acc = apply_activation(acc, ACTIVATION, c_ptr.dtype.element_ty == tl.float32)
    if HAS_RESIDUAL:
        res = tl.load(res_rows[:, None] + rn[None, :] * stride_res2, mask=mask, other=0.0)
        acc = acc + res.to(tl.float32)
    out = acc.to(c_ptr.dtype.element_ty)
    if TMA_STORE:
        c_desc.store([offs_m, offs_n], out)
    else:
        tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, out, mask=mask)


# Bias and activation are not in the key: one tuning per shape and layout serves them (vector loads and elementwise
# math in the epilogue; every kept config compiles spill-free with them - test_gemm_aot.py). A residual or a saved
# pre-activation is keyed: their epilogue tiles change shared-memory needs (H200: a config tuned without the residual
# asked 245,792 bytes of 232,448 with it on the odd shape) and the pruned space (periodic residual). The RMSNorm
# prologue is keyed too: the A tile passes through registers (x * g), which changes the best tile.
_TUNING_KEY = ["M_BUCKET", "N", "K", "A_K_CONTIG", "B_K_CONTIG", "USE_TMA", "TMA_STORE", "SCALE_MODE", "PRECISE_ACC",
               "HAS_RESIDUAL", "RES_PERIODIC", "STORE_PREACT", "DOT_PRECISION", "NORM", "RESCALE_G"]


def _early_prune(configs, named_args, **kwargs):
    args = {**named_args, **kwargs}  # launch_gemm passes everything by keyword: named_args is then empty
    a, c = args["a_ptr"], args["c_ptr"]
    if kwargs.get("SCALE_MODE") == 3:  # block scales: a BLOCK_K slice must lie inside one 128-wide K block
        configs = [cfg for cfg in configs if FP8_SCALE_BLOCK % cfg.kwargs["BLOCK_K"] == 0]
    return prune_gemm_configs(configs, args["M"], args["N"], args["K"],
                              a.element_size(), c.element_size(), kwargs.get("TMA_STORE", False),
                              smem_limit=_smem_limit(a.device), use_tma=kwargs.get("USE_TMA", True),
                              periodic_residual=kwargs.get("RES_PERIODIC", False),
                              precise_acc=kwargs.get("PRECISE_ACC", False),
                              rescale_g=kwargs.get("RESCALE_G", False), norm=kwargs.get("NORM", False))


@functools.lru_cache(maxsize=None)
def _device_facts(index: int) -> tuple[int, int, int]:
    """(multiprocessors, major capability, opt-in shared memory per block) - queried once per device."""
    props = torch.cuda.get_device_properties(index)
    return props.multi_processor_count, props.major, getattr(props, "shared_memory_per_block_optin", SMEM_OPTIN_BYTES)


def _smem_limit(device: torch.device) -> int:
    if device.type != "cuda":
        return SMEM_OPTIN_BYTES
    return _device_facts(device.index if device.index is not None else torch.cuda.current_device())[2]


def _tuning_bench(fn, quantiles):
    """Time one config for the autotuner: CUDA events over ~40 ms of runs (do_bench's default is 100 ms), enough to
    rank configs of the large problems it tunes (M > SMALL_M) while keeping first-use tuning to seconds per bucket.

    (CUDA-graph timing was tried here and picked 2x-slow configs on H200 - perf/LOG.md - so it is not used.)

    The first tuning of a process starts with ~200 ms of the first config's runs: an idle GPU sits at a low clock
    (345 MHz seen on H200) and ramps during the first configs, so without it the early configs - the large TMA tiles -
    were timed slow and a later, worse config won (sq4k tuned to 0.33x cuBLAS in one run, perf/LOG.md).
    """
    global _clocks_warm
    if not _clocks_warm:
        triton.testing.do_bench(fn, warmup=200, rep=1)
        _clocks_warm = True
    return triton.testing.do_bench(fn, warmup=10, rep=40, quantiles=quantiles)


_clocks_warm = False


# Problems with M <= SMALL_M run in microseconds, less than one Python launch: event timing would rank every config
# at the launch overhead. They use measured defaults (autotune/space.default_gemm_config) unless `tilewright tune`
# (which times CUDA-graph replays) stored a winner.
SMALL_M = 256


gemm_kernel = triton.autotune(
    configs=[INTERPRETER_CONFIG] if INTERPRET else gemm_configs(),
    key=_TUNING_KEY,
    prune_configs_by={"early_config_prune": _early_prune},
    do_bench=_tuning_bench,
    cache_results=True,  # a new process re-uses the winners from $TRITON_CACHE_DIR instead of re-tuning
)(_gemm_kernel)


def tma_compatible(t: torch.Tensor) -> bool:
    """True when a 2-D tensor can be described by a TMA descriptor: a unit stride, 16-byte aligned base and stride."""
    if t.dim() != 2 or t.numel() == 0:
        return False
    es = t.element_size()
    if t.data_ptr() % 16:
        return False
    if t.stride(1) == 1:
        other = t.stride(0)
    elif t.stride(0) == 1:
        other = t.stride(1)
    else:
        return False
    return (other * es) % 16 == 0 and other > 0


def _residual_is_flat(residual: torch.Tensor) -> bool:
    """An (R0, P, N) residual whose rows are evenly strided is a plain (M, N) matrix: row r at r * stride(1)."""
    r0, p, _ = residual.shape
    return r0 == 1 or residual.stride(0) == p * residual.stride(1)


def _needs_int64(M: int, N: int, out: torch.Tensor, residual) -> bool:
    """Whether epilogue offsets can pass 2^31 (with a tile of slack past M and N): then they are computed in int64."""
    limit = 2**31 - 1
    pad = 512
    if (M + pad) * out.stride(0) + (N + pad) * out.stride(1) >= limit:
        return True
    if residual is not None:
        r0, p, _ = residual.shape
        s0, s1, s2 = residual.stride()
        return r0 * s0 + (p + pad) * s1 + (N + pad) * s2 >= limit
    return False


def _tuned_config(a, out, M, N, K, use_tma, tma_store, periodic_residual,
                  precise_acc=False) -> triton.Config | None:
    """The measured Triton config for this device/dtype/shape bucket, if one suits this call: the winner `tilewright
    tune` stored in this machine's cache, else the shipped table's entry for this card (``autotune/tables.py``: the
    bucket or its nearest measured neighbour).

    Configs are measured with the plain epilogue on TMA-aligned operands, and every epilogue reuses them: the config
    is re-checked against the pruner for this call (pointer path, periodic residual, shared memory). One that no
    longer fits shared memory (a TMA-store tile beside a deep ring) is fitted by :func:`fit_shared_memory` (fewer
    stages, then a smaller BLOCK_K) and checked again; one the pruner still drops is not used (None: the caller's
    default or sweep decides).
    """
    from ..autotune import cache, tables

    record = cache.lookup("gemm", a.device, a.dtype, M, N, K) or tables.lookup("gemm", a.device, a.dtype, M, N, K)
    cfg = cache.triton_config(record)
    if cfg is None:
        return None

    def kept(c):  # (without the pruner's fallback, which hands a lone config back whatever it is)
        return bool(prune_gemm_configs([c], M, N, K, a.element_size(), out.element_size(), tma_store,
                                       smem_limit=_smem_limit(a.device), use_tma=use_tma,
                                       periodic_residual=periodic_residual, precise_acc=precise_acc,
                                       fallback=False))

    if kept(cfg):
        return cfg
    fitted = fit_shared_memory(cfg, a.element_size(), out.element_size(),
                               tma_store and cfg.kwargs.get("TMA_LOADS", True), _smem_limit(a.device))
    return fitted if fitted is not cfg and kept(fitted) else None


def _tensor_key(t):
    """What a launch plan depends on in a tensor: shape, strides, dtype, device, 16-byte base alignment (TMA)."""
    return None if t is None else (t.shape, t.stride(), t.dtype, t.device, t.data_ptr() % 16 == 0)


class _Plan:
    """Everything about a launch that follows from the call's signature: the kernel's non-pointer arguments, the
    config (None: the autotuner decides) and the grid. Working it out costs ~60 us of Python (descriptor checks,
    the autotune-cache lookup, a default config); launch_gemm caches plans per signature (see _plan_key)."""

    __slots__ = ("config", "grid", "split_k", "static", "tma")

    def __init__(self, static, config, grid, tma, split_k=False):
        self.static, self.config, self.grid, self.tma, self.split_k = static, config, grid, tma, split_k


_PLANS_MAX = 4096
_plans: dict = {}


def _make_plan(a, b, out, bias, residual, activation, preact, use_tma, config, num_programs,
               norm: NormPrologue | None, dequant: Dequant | None) -> _Plan:
    M, K = a.shape
    N = b.shape[1]
    if a.is_cuda:
        sms, major, _ = _device_facts(a.device.index if a.device.index is not None else torch.cuda.current_device())
    else:
        sms, major = 4, 9  # interpreter: a few programs, each visiting several tiles, exercises the persistent loop
    if use_tma is None:
        use_tma = major >= 9 and tma_compatible(a) and tma_compatible(b)
    tma_store = bool(use_tma) and out.stride(1) == 1 and tma_compatible(out)
    # Same preference as tma_compatible(): a unit stride on the last dim wins when both are 1 (size-1 dims).
    if residual is not None:
        res_strides, res_period = residual.stride(), residual.shape[1]
    else:
        res_strides, res_period = (0, 0, 0), 1
    programs = num_programs or sms
    static = dict(
        M=M, N=N, K=K,
        stride_am=a.stride(0), stride_ak=a.stride(1), stride_bk=b.stride(0), stride_bn=b.stride(1),
        stride_cm=out.stride(0), stride_cn=out.stride(1),
        stride_res0=res_strides[0], stride_res1=res_strides[1], stride_res2=res_strides[2], RES_PERIOD=res_period,
        M_BUCKET=triton.next_power_of_2(max(M, 1)),
        A_K_CONTIG=a.stride(1) == 1, B_K_CONTIG=b.stride(1) != 1, USE_TMA=bool(use_tma), TMA_STORE=tma_store,
        HAS_BIAS=bias is not None, ACTIVATION=activation, HAS_RESIDUAL=residual is not None,
        RES_PERIODIC=residual is not None and not _residual_is_flat(residual),
        STORE_PREACT=preact is not None,
        NORM=norm is not None, RESCALE_G=norm is not None and norm.g_scale is not None,
        # per tensor only when both scales are: with M == 1 (or N == 1) a rowwise scale_b (scale_a) sits beside a
        # one-element scale of the other side, and per-tensor mode would read scale_b[0] for every column
        SCALE_MODE=(0 if dequant is None else 3 if dequant.block_scaled
                    else 1 if dequant.scale_a.numel() == dequant.scale_b.numel() == 1 else 2),
        # block-scaled slices are promoted like the precise mode's (a second accumulator: same config pruning)
        PRECISE_ACC=dequant is not None and (dequant.block_scaled or not dequant.fast_accum),
        STORE_RSTD=norm is not None and norm.rstd is not None,
        DOT_PRECISION="ieee" if a.dtype == torch.float32 else "tf32",
        UPCAST_DOT=INTERPRET and a.dtype == torch.bfloat16,
        INDEX_64=_needs_int64(M, N, out, residual),
    )

    def grid(meta):
        units = triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]) * meta.get("SPLIT_K", 1)
        return (max(1, min(programs, units) if meta["PERSISTENT"] else units),)

    if config is None and not INTERPRET and a.is_cuda and norm is None:
        config = _tuned_config(a, out, M, N, K, bool(use_tma), tma_store, static["RES_PERIODIC"],
                               static["PRECISE_ACC"])
    if config is None and not INTERPRET and (M <= SMALL_M or not full_autotune()):
        config = default_gemm_config(M, N, K, use_tma=bool(use_tma), periodic_residual=static["RES_PERIODIC"],
                                     precise_acc=static["PRECISE_ACC"], rescale_g=static["RESCALE_G"],
                                     in_bytes=a.element_size(),
                                     out_bytes=out.element_size(), tma_store=tma_store,
                                     smem_limit=_smem_limit(a.device))
    if config is not None and static["SCALE_MODE"] == 3 and FP8_SCALE_BLOCK % config.kwargs["BLOCK_K"]:
        # block scales change every 128 columns of K: a slice must not straddle two blocks (BLOCK_K 256 -> 128). The
        # pipeline gets the stages that keep its bytes in flight (the decode tiles' deep K slices are what keep a
        # memory-bound GEMM streaming), as far as shared memory allows.
        deeper = config.num_stages * config.kwargs["BLOCK_K"] // FP8_SCALE_BLOCK
        config = fit_shared_memory(triton.Config({**config.kwargs, "BLOCK_K": FP8_SCALE_BLOCK},
                                                 num_warps=config.num_warps,
                                                 num_stages=deeper),
                                   a.element_size(), out.element_size(), tma_store, _smem_limit(a.device))
    if config is not None and config.kwargs.get("SPLIT_K", 1) > 1 and (norm is not None
                                                                       or not split_k_fits(M, N, K, config)):
        # a split-K config at a shape it cannot serve (a nearby bucket's winner, the default beside the RMSNorm
        # prologue, whose row sums need all of K, or a caller's config): the same tile unsplit
        config = triton.Config({**config.kwargs, "SPLIT_K": 1}, num_warps=config.num_warps,
                               num_stages=config.num_stages)
    if config is not None:
        if not config.kwargs.get("TMA_LOADS", True):
            # A pointer-load config stores through pointers too: building the output descriptor costs a scratch
            # allocation and a descriptor write per launch, several microseconds on a ~10 us decode GEMM.
            static["TMA_STORE"] = False
        static.update(config.all_kwargs())
        return _Plan(static, config, grid(config.kwargs), bool(use_tma) or static["TMA_STORE"],
                     config.kwargs.get("SPLIT_K", 1) > 1)
    return _Plan(static, None, grid, bool(use_tma) or tma_store)


def _plan_key(a, b, out, bias, residual, activation, preact, use_tma, norm, dequant):
    from ..autotune import cache

    return (_tensor_key(a), _tensor_key(b), _tensor_key(out), bias is None, _tensor_key(residual),
            None if preact is None else preact.stride(), activation, use_tma,
            None if norm is None else (norm.rstd is None, norm.g_scale is None),
            None if dequant is None else (dequant.scale_a.shape, dequant.scale_b.shape, dequant.fast_accum),
            os.environ.get("TILEWRIGHT_AUTOTUNE"), cache.generation)


def _check_parameters(a, b, bias, norm, dequant) -> None:
    """The kernel reads 1-D parameters as ``ptr + i`` and block scales by block index; the op layer makes them
    unit-stride (ops/_checks.contiguous_vector) and checks the blocks' shapes. A direct caller passing a sliced or
    expanded vector, or block scales of the wrong shape, gets an error, not garbage."""
    vectors = [("bias", bias)]
    if norm is not None:
        vectors += [("norm weight", norm.weight), ("rstd", norm.rstd), ("g_scale", norm.g_scale)]
    if dequant is not None:
        if dequant.block_scaled:
            if not (dequant.scale_a.is_contiguous() and dequant.scale_b.is_contiguous()):
                raise ValueError("launch_gemm: block scales must be contiguous")
            # the kernel indexes them by block without masks on the K / N block: a wrong shape would read past them
            M, K, N = a.shape[0], a.shape[1], b.shape[1]
            kb, nb = triton.cdiv(K, FP8_SCALE_BLOCK), triton.cdiv(N, FP8_SCALE_BLOCK)
            if tuple(dequant.scale_a.shape) != (M, kb) or tuple(dequant.scale_b.shape) != (kb, nb):
                raise ValueError(f"launch_gemm: block scales must be ({M}, {kb}) and ({kb}, {nb}), got "
                                 f"{tuple(dequant.scale_a.shape)} and {tuple(dequant.scale_b.shape)}")
        elif dequant.scale_a.dim() > 1 or dequant.scale_b.dim() > 1:
            raise ValueError("launch_gemm: per-tensor / rowwise scales are 1-D ((1,), (M,), (N,)); block scales need "
                             "Dequant(..., block_scaled=True)")
        else:
            vectors += [("scale_a", dequant.scale_a), ("scale_b", dequant.scale_b)]
    for name, vec in vectors:
        if vec is not None and vec.numel() > 1 and vec.stride(-1) != 1:
            raise ValueError(f"launch_gemm: {name} must have a unit stride, got stride {vec.stride()}")


_split_k_workspaces: dict = {}


def split_k_workspace(device: torch.device, stream: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp32 partial tiles, int32 arrival counters) for split-K launches on ``stream`` (default: the current one).

    One pair per (device, stream), allocated once and never freed: kernels on one stream run in order, so they can
    share it (each launch leaves its counters at zero, see ``_split_k_combine``), while two streams running split-K
    GEMMs at once must not. Never freed because an eager replay or a captured CUDA graph holds its address. A graph
    keeps the workspace of the stream it was captured on (torch captures on a side stream of its own), like any
    static buffer of a graph: two replays of one graph at once would race on it, as they would on the graph's
    outputs.
    ``SPLIT_K_WORKSPACE_BYTES`` (32 MB) per stream that runs a split-K GEMM; the pruner keeps the configs that fit.
    """
    if device.type != "cuda":  # the interpreter runs programs one after the other on the CPU
        key = (str(device), 0)
    else:
        index = device.index if device.index is not None else torch.cuda.current_device()
        device = torch.device("cuda", index)
        key = (index, stream if stream is not None else torch._C._cuda_getCurrentRawStream(index))
    pair = _split_k_workspaces.get(key)
    if pair is None:
        pair = (torch.empty(SPLIT_K_WORKSPACE_BYTES // 4, device=device, dtype=torch.float32),
                torch.zeros(SPLIT_K_MAX_TILES, device=device, dtype=torch.int32))
        _split_k_workspaces[key] = pair
    return pair


def _workspace_pointer(device_index: int, stream: int) -> int:
    return split_k_workspace(torch.device("cuda", device_index), stream)[0].data_ptr()


def _arrivals_pointer(device_index: int, stream: int) -> int:
    return split_k_workspace(torch.device("cuda", device_index), stream)[1].data_ptr()


def launch_gemm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, *, bias=None, residual=None,
                activation: int = 0, preact=None, norm: NormPrologue | None = None, dequant: Dequant | None = None,
                use_tma: bool | None = None, config: triton.Config | None = None,
                num_programs: int | None = None, compile_only: bool = False) -> torch.Tensor:
    """Compute ``out = act(a @ b + bias) + residual`` into ``out`` with the persistent Triton kernel.

    a: (M, K), b: (K, N), out: (M, N) (any strides; contiguous rows allow a TMA store); bias: (N,) unit-stride;
    residual: (R0, P, N) addressed as row r -> (r // P, r % P); activation: an ``ACTIVATIONS`` code; preact: optional
    (M, N) with out's strides that receives ``a @ b + bias`` before the activation. ``norm``: the fused RMSNorm
    prologue (:class:`NormPrologue`); ``dequant``: FP8 scales (:class:`Dequant`). Shapes and dtypes are checked by
    the op layer, not here.

    ``config`` bypasses every lookup (tests, reports); ``num_programs`` overrides the persistent grid size;
    ``compile_only`` (with ``config``) compiles the kernel this launch would run into Triton's caches - the same
    specialization, so a later launch loads it - and launches nothing (``tilewright tune``'s precompile, which runs
    beside the sweeps: the interpreter compiles nothing, so there it returns at once). Without ``config`` the config
    is this machine's tuned one, else the shipped table's, else the shape-based default - one compile at a new
    shape; ``TILEWRIGHT_AUTOTUNE=full`` runs Triton's sweep for buckets nothing measured instead. The launch plan
    (everything but the pointers) is cached per call signature on the GPU.
    """
    _check_parameters(a, b, bias, norm, dequant)
    if compile_only and config is None:
        raise ValueError("launch_gemm: compile_only needs a config (the kernel to compile)")
    if compile_only and (INTERPRET or not a.is_cuda):
        return out
    key = None
    if a.is_cuda and not INTERPRET and config is None and num_programs is None:
        key = _plan_key(a, b, out, bias, residual, activation, preact, use_tma, norm, dequant)
        plan = _plans.get(key)
    if key is None or plan is None:
        plan = _make_plan(a, b, out, bias, residual, activation, preact, use_tma, config, num_programs, norm, dequant)
        if key is not None:
            if len(_plans) >= _PLANS_MAX:
                _plans.clear()
            _plans[key] = plan
    if plan.tma:
        ensure_allocator()
    dummy = out
    # A fixed config says whether it splits K; the autotuner's sweep (plan.config None) may pick a split-K config, so
    # it always gets the workspace - a SPLIT_K > 1 launch handed the placeholder would add partial tiles into `out`.
    ws, arrivals = split_k_workspace(a.device) if plan.split_k or plan.config is None else (dummy, dummy)
    kernel_args = dict(
        plan.static,
        a_ptr=a, b_ptr=b, c_ptr=out, bias_ptr=bias if bias is not None else dummy,
        res_ptr=residual if residual is not None else dummy, preact_ptr=preact if preact is not None else dummy,
        g_ptr=norm.weight if norm is not None else dummy,
        gscale_ptr=norm.g_scale if norm is not None and norm.g_scale is not None else dummy,
        rstd_ptr=norm.rstd if norm is not None and norm.rstd is not None else dummy,
        scale_a_ptr=dequant.scale_a if dequant is not None else dummy,
        scale_b_ptr=dequant.scale_b if dequant is not None else dummy,
        ws_ptr=ws, arrivals_ptr=arrivals,
        eps=float(norm.eps) if norm is not None else 0.0,
    )
    if compile_only:
        _gemm_kernel.warmup(grid=plan.grid, **kernel_args)
        return out
    if plan.config is not None:
        compiled = retry_after_oom(lambda: _gemm_kernel[plan.grid](**kernel_args))
        if is_recording():
            roles = {name: t for name, t in (
                ("a_ptr", a), ("b_ptr", b), ("c_ptr", out), ("bias_ptr", bias), ("res_ptr", residual),
                ("preact_ptr", preact), ("g_ptr", norm and norm.weight), ("gscale_ptr", norm and norm.g_scale),
                ("rstd_ptr", norm and norm.rstd), ("scale_a_ptr", dequant and dequant.scale_a),
                ("scale_b_ptr", dequant and dequant.scale_b)) if t is not None}
            # Bound from this launch's own compiled kernel, never cached on the plan: the plan key does not see the
            # 16-byte alignment of bias / norm weight / scales, which Triton's specialization does (an aligned and an
            # unaligned bias share a plan but not a kernel). The op records once per replay key, so binding is rare.
            per_stream = {"ws_ptr": _workspace_pointer, "arrivals_ptr": _arrivals_pointer} if plan.split_k else None
            record(bind(_gemm_kernel, compiled, plan.grid, kernel_args, roles, per_stream), roles)
        return out
    M, N, K = plan.static["M"], plan.static["N"], plan.static["K"]
    if a.is_cuda and torch.cuda.is_current_stream_capturing() and not is_tuned(gemm_kernel, kernel_args):
        raise RuntimeError(
            f"tilewright {'rms_norm_linear' if norm else 'GEMM'}: this shape/dtype has not been autotuned yet and "
            f"autotuning cannot run during CUDA-graph capture (M={M}, N={N}, K={K}, dtype={a.dtype}). Run the same "
            "call once before capturing (warm-up), or load a tuned cache with `tilewright tune`.")
    retry_after_oom(lambda: gemm_kernel[plan.grid](**kernel_args))
    return out
