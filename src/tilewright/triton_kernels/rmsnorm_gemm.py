"""RMSNorm-fused GEMM: ``y = act(F.linear(F.rms_norm(x, (K,), g, eps), W, bias)) + residual`` in one kernel.

Forward (``gemm._gemm_kernel`` with ``NORM`` on)
-------------------------------------------------
The persistent GEMM of ``gemm.py`` (same operand loaders, tile orders, TMA/pointer paths and autotune space) with
three additions, none of which reads x a second time:

* **sum of squares from the tiles already loaded**: every K step the program squares its A tile in fp32 and adds the
  row sums to ``ss`` (BLOCK_M fp32 registers). Programs sharing a tile row recompute the same sums: ``BLOCK_M x K``
  FMAs next to ``BLOCK_M x BLOCK_N x K`` MACs, i.e. 1/BLOCK_N of the tensor-core work, on otherwise idle ALUs.
* **norm weight in the mainloop**: the A tile is multiplied by ``g[k]`` in fp32 and rounded once to the input dtype
  before the dot, so the MMA sees ``bf16(x * g)``. ``rstd`` cannot be applied here (it depends on the whole row),
  but it is a per-row scale, so it commutes with the dot:
  ``sum_k (x*rstd*g)[m,k] W[n,k] = rstd[m] * sum_k (x*g)[m,k] W[n,k]``. The rounding is documented and measured in
  docs/numerics_rmsnorm.md. (A *folded* variant that took ``W * g`` and fed the loaded A tile to the tensor cores
  untouched was removed: on sm_90 it computed wrong products for 128x256 tiles and the pointer path, see
  ``gemm._norm_step``.)
* **epilogue**: ``rstd = 1 / sqrt(ss / K + eps)`` (IEEE sqrt, fp32), ``acc * rstd`` *before* bias, then the GEMM's
  epilogue (activation, residual) and one rounding to the output dtype. Programs with ``pid_n == 0`` store rstd
  (fp32, one per row) for the backward.

Numerics versus torch's unfused bf16 pipeline: torch rounds ``x * rstd`` (and then ``* g``) to bf16 before its GEMM;
the fused kernel rounds ``x * g`` once (exact when g is all ones, the RMSNorm initialisation) and applies rstd in
fp32. fp16: ``x * g`` is formed *before* normalisation and would overflow fp16 where ``|x * g| > 65504`` while
torch's normalised operand would not, so for fp16 g is scaled by a power of two 2^-e with max|g| < 2^e
(:func:`g_pow2_scale`) and 2^e is applied with rstd. The sum of squares is fp32 and never overflows.

Backward (``_rmsnorm_bwd_kernel``)
-------------------------------------------
Given ``du = dy @ W`` (computed by the GEMM op), one pass over rows computes
``dx = rstd * (du*g) - x * rstd^3 * mean_k(du*g*x)``, ``u = x * rstd * g`` (the GEMM input, needed for ``dW = dy^T u``)
and per-program fp32 partial sums of ``dg = sum_m du * x * rstd``, reduced by the caller.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._env import REFERENCE_SMS, interpreting, sm_count
from .._record import is_recording, record, tensor_signature
from ._runtime import bind, retry_after_oom, store_bound
from .gemm import NormPrologue, launch_gemm

@triton.jit
def _g_pow2_scale_kernel(g_ptr, out_ptr, K, BLOCK: tl.constexpr):
    """One program: out = [2^-e, 2^e] with max|finite g| = m * 2^e, 0.5 <= m < 1 (see :func:`g_pow2_scale`)."""
    gmax = tl.zeros((BLOCK,), dtype=tl.float32)
    for k0 in range(0, K, BLOCK):
        rk = k0 + tl.arange(0, BLOCK)
        g_abs = tl.abs(tl.load(g_ptr + rk, mask=rk < K, other=0.0).to(tl.float32))
        gmax = tl.maximum(gmax, tl.where(g_abs < float("inf"), g_abs, 0.0))  # NaN < inf is false: left out too
    biased = (tl.max(gmax, axis=0).to(tl.int32, bitcast=True) >> 23) & 0xFF
    e = tl.minimum(tl.maximum(biased - 126, -125), 125)  # a zero / subnormal max gives e = -125 (any e is exact)
    tl.store(out_ptr, ((127 - e) << 23).to(tl.float32, bitcast=True))
    tl.store(out_ptr + 1, ((127 + e) << 23).to(tl.float32, bitcast=True))


def g_pow2_scale(g: torch.Tensor) -> torch.Tensor:
    """(2,) fp32 ``[2^-e, 2^e]`` on g's device with max|g| = m * 2^e, 0.5 <= m < 1, over the *finite* entries.

    fp16 only: the mainloop rounds ``x * g`` to fp16 before the dot, which overflows once |x * g| > 65504 (NaN rows
    where the unfused pipeline, which normalises first, stays finite). ``x * (g * 2^-e)`` is at most |x|, so it cannot
    overflow, and the accumulator takes 2^e back with rstd. A power of two keeps every product bit-identical to
    ``x * g`` wherever that did not overflow or fall below fp16's normal range. An Inf / NaN in g stays Inf / NaN
    whatever the scale, so it is left out of the max (scaling by 2^-125 for it would flush the finite products to 0).
    e is clamped to [-125, 125] so both factors stay normal fp32 numbers.

    One single-program launch per call, recomputed every time: a cache keyed on the weight's storage and version
    would go stale when a writer bypasses the version counter (``p.data.copy_(...)``) or a new tensor reuses the
    address, and a stale e is not harmless (too small: overflow; too large: products flushed below fp16's normal
    range). It used to be a reduction at the start of every GEMM program; it was a suspect when the GPU fuzzer found
    wrong fp16 rows (the 128x256 tile was the trigger, see ``autotune.space._RESCALE_G_MAX_TILE``), and one
    reduction per call is less work than one per program.
    """
    if g.dim() != 1 or (g.numel() > 1 and g.stride(0) != 1):  # the kernel reads g_ptr + k
        raise ValueError(f"norm_weight must be a unit-stride (K,) vector (the op layer makes it one), got shape "
                         f"{tuple(g.shape)} and stride {g.stride()}")
    out = torch.empty(2, device=g.device, dtype=torch.float32)
    K = g.numel()
    retry_after_oom(lambda: _g_pow2_scale_kernel[(1,)](
        g, out, K, BLOCK=min(max(triton.next_power_of_2(max(K, 1)), 16), 1024), num_warps=4))
    record(None, {})  # not replayable on its own: an op recording this call gets no eager replay (ops/_fast.py)
    return out


def launch_rmsnorm_gemm(x: torch.Tensor, norm_weight: torch.Tensor, b: torch.Tensor, out: torch.Tensor,
                        rstd: torch.Tensor | None, eps: float, *, bias=None, residual=None, activation: int = 0,
                        use_tma: bool | None = None, config: triton.Config | None = None,
                        num_programs: int | None = None) -> torch.Tensor:
    """``out = act(rms_norm(x, g) @ b + bias) + residual`` in one kernel, rstd (fp32, (M,)) stored when given.

    x: (M, K); norm_weight: (K,) unit-stride; b: (K, N) (``weight.t()``); out: (M, N); bias (N,); residual
    (R0, P, N) as in ``gemm.launch_gemm``, whose other arguments these are. Checks are the op layer's job. The kernel
    is the GEMM's with its NORM switch on, tuned by the GEMM's autotuner (whose key holds NORM).
    """
    if not isinstance(norm_weight, torch.Tensor):
        raise TypeError(f"launch_rmsnorm_gemm: norm_weight must be a (K,) tensor, got {type(norm_weight).__name__} "
                        "(the folded-weight variant, norm_weight=None, was removed: it computed wrong results)")
    g_scale = g_pow2_scale(norm_weight) if x.dtype == torch.float16 else None
    return launch_gemm(x, b, out, bias=bias, residual=residual, activation=activation, use_tma=use_tma,
                       config=config, num_programs=num_programs,
                       norm=NormPrologue(norm_weight, rstd, eps, g_scale))


# --------------------------------------------------------------------------------------------------------------------
# Two-pass forward: u = x * rstd * g and rstd in one pass over x; the GEMM (any backend) then reads u.
# --------------------------------------------------------------------------------------------------------------------
@triton.jit
def _rmsnorm_fwd_kernel(a_ptr, g_ptr, u_ptr, rstd_ptr, ss_ptr, M, K, rows_per_prog, stride_xm, stride_um, eps,
                        BLOCK_K: tl.constexpr, NUM_CHUNKS: tl.constexpr, SS_GIVEN: tl.constexpr):
    """Program p owns rows [p * rows_per_prog, (p + 1) * rows_per_prog): rstd = 1 / sqrt(mean(x^2) + eps) (fp32,
    IEEE sqrt as the fused kernel's epilogue) and u = x * rstd * g rounded once. NUM_CHUNKS > 1 (long rows): a first
    sweep sums the squares, a second re-reads the row (from L2) and writes u. SS_GIVEN: the rows' sums of squares
    are read from ``ss_ptr`` (fp32, (M,): computed upstream, e.g. by a residual GEMM's epilogue) instead of summed -
    the long rows' first sweep is skipped. x is ``a_ptr``, the name the fused kernel gives it, so the op's replay
    roles name x alike for both forwards (ops/_fast.build)."""
    pid = tl.program_id(0)
    rk = tl.arange(0, BLOCK_K)
    if NUM_CHUNKS == 1:
        mask_k = rk < K
        g = tl.load(g_ptr + rk, mask=mask_k, other=0.0).to(tl.float32)
    for i in range(rows_per_prog):
        row = pid * rows_per_prog + i
        if row < M:
            row64 = row.to(tl.int64)
            if SS_GIVEN:
                ss = tl.load(ss_ptr + row)
            if NUM_CHUNKS == 1:
                x = tl.load(a_ptr + row64 * stride_xm + rk, mask=mask_k, other=0.0).to(tl.float32)
                if not SS_GIVEN:
                    ss = tl.sum(x * x, axis=0)
                r = 1.0 / tl.sqrt_rn(ss / K + eps)
                tl.store(u_ptr + row64 * stride_um + rk, (x * r * g).to(u_ptr.dtype.element_ty), mask=mask_k)
            else:
                if not SS_GIVEN:
                    part = tl.zeros((BLOCK_K,), dtype=tl.float32)
                    for ci in range(NUM_CHUNKS):
                        ck = ci * BLOCK_K + rk
                        x = tl.load(a_ptr + row64 * stride_xm + ck, mask=ck < K, other=0.0).to(tl.float32)
                        part += x * x
                    ss = tl.sum(part, axis=0)
                r = 1.0 / tl.sqrt_rn(ss / K + eps)
                for ci in range(NUM_CHUNKS):
                    ck = ci * BLOCK_K + rk
                    mk = ck < K
                    x = tl.load(a_ptr + row64 * stride_xm + ck, mask=mk, other=0.0).to(tl.float32)
                    g = tl.load(g_ptr + ck, mask=mk, other=0.0).to(tl.float32)
                    tl.store(u_ptr + row64 * stride_um + ck, (x * r * g).to(u_ptr.dtype.element_ty), mask=mk)
            tl.store(rstd_ptr + row, r)


def _row_tiling(K: int, cap: int) -> tuple[int, int, int]:
    """(BLOCK_K, chunks, warps) of the row kernels (the norm's forward and backward passes): a whole row in registers
    up to ``cap`` columns, chunks of ``cap`` beyond; warps grow with the row so each thread holds <= 32 values."""
    block_k = min(triton.next_power_of_2(max(K, 1)), cap)
    return block_k, triton.cdiv(K, block_k), 4 if block_k <= 1024 else (8 if block_k <= 4096 else 16)


def launch_rmsnorm_fwd(x: torch.Tensor, norm_weight: torch.Tensor, rstd: torch.Tensor, eps: float, *,
                       max_block_k: int | None = None, sumsq: torch.Tensor | None = None) -> torch.Tensor:
    """``u = rms_norm(x) * g`` (x's dtype, (M, K), contiguous) with ``rstd`` (fp32, (M,)) written in place: the first
    pass of the two-pass forward (ops/rms_norm_linear.py), whose GEMM then reads u. x: (M, K) with unit last stride;
    norm_weight unit-stride. ``sumsq`` (contiguous fp32 (M,)): the rows' sums of squares, given - rstd is computed
    from them instead of from x. Recorded with u as a buffer it writes whole, so the op's eager replay holds both
    launches (ops/_fast.build)."""
    M, K = x.shape
    u = torch.empty((M, K), device=x.device, dtype=x.dtype)
    if M == 0:
        return u
    sms = sm_count(x.device)
    block_k, chunks, warps = _row_tiling(K, max_block_k or 8192)
    rows = triton.cdiv(M, min(M, 8 * sms))  # a few waves of programs, several rows each
    programs = triton.cdiv(M, rows)
    # (without sumsq the kernel never reads ss_ptr: rstd stands in as a valid address of the right type)
    args = dict(a_ptr=x, g_ptr=norm_weight, u_ptr=u, rstd_ptr=rstd, ss_ptr=rstd if sumsq is None else sumsq, M=M,
                K=K, rows_per_prog=rows, stride_xm=x.stride(0), stride_um=u.stride(0), eps=eps, BLOCK_K=block_k,
                NUM_CHUNKS=chunks, SS_GIVEN=sumsq is not None)
    compiled = retry_after_oom(lambda: _rmsnorm_fwd_kernel[(programs,)](**args, num_warps=warps))
    if is_recording():
        # u is written whole: the GEMM after it reads it as a scratch buffer a replay allocates (ops/_fast.build)
        roles = {"a_ptr": x, "g_ptr": norm_weight, "u_ptr": u, "rstd_ptr": rstd}
        if sumsq is not None:
            roles["ss_ptr"] = sumsq
        bound = None if not x.is_cuda or interpreting() else \
            bind(_rmsnorm_fwd_kernel, compiled, (programs,), {**args, "num_warps": warps}, roles)
        record(bound, roles, writes=("u_ptr", "rstd_ptr"))
    return u


@triton.jit
def _row_sumsq_kernel(a_ptr, ss_ptr, M, K, stride_xm, stride_xk, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    """Program p: the fp32 sums of squares of rows [p * BLOCK_M, (p + 1) * BLOCK_M) of x, a (BLOCK_M, BLOCK_K) tile
    of loads in flight per step (a read-only pass: the folded forward's only traffic besides its GEMM)."""
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rk = tl.arange(0, BLOCK_K)
    rows = a_ptr + rm.to(tl.int64)[:, None] * stride_xm
    acc = tl.zeros((BLOCK_M, BLOCK_K), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ck = k0 + rk
        x = tl.load(rows + ck[None, :] * stride_xk, mask=(rm[:, None] < M) & (ck[None, :] < K),
                    other=0.0).to(tl.float32)
        acc += x * x
    tl.store(ss_ptr + rm, tl.sum(acc, axis=1), mask=rm < M)


def launch_row_sumsq(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Each row's sum of squares of x (M, K), read through its strides, as fp32 (M,) (into ``out``, a contiguous fp32
    (M,) tensor, when given): the folded forward's pass over x (ops/rms_norm_linear.py; the CUDA GEMM turns it into
    rstd in its epilogue)."""
    M, K = x.shape
    if out is not None and (out.dtype != torch.float32 or out.shape != (M,) or out.stride(0) != 1
                            or out.device != x.device):
        raise ValueError(f"out: expected a contiguous float32 ({M},) tensor on {x.device}")
    ss = torch.empty((M,), device=x.device, dtype=torch.float32) if out is None else out
    if M == 0:
        return ss
    # 4096 elements a step, 16 a thread (two 16-byte loads of bf16) - and rows short, so that the grid has enough
    # programs: 8 rows x 512 ran 1.4 TB/s at M 2048 (256 programs looping over K) and 2.7 at M 8192, where 2 x 2048
    # gives 1,024 / 4,096 programs
    block_k = min(triton.next_power_of_2(max(K, 16)), 2048)
    block_m = max(1, 4096 // block_k)
    _row_sumsq_kernel[(triton.cdiv(M, block_m),)](x, ss, M, K, x.stride(0), x.stride(1), BLOCK_M=block_m,
                                                  BLOCK_K=block_k, num_warps=8)
    if is_recording():
        record(None, {})  # its GEMM reads a folded copy of the weight that a replay could not refresh: no replay
    return ss


# --------------------------------------------------------------------------------------------------------------------
# Backward of the norm: dx, u = x * rstd * g (input of the dW GEMM), partial dg.
# --------------------------------------------------------------------------------------------------------------------
@triton.jit
def _rmsnorm_bwd_kernel(
    x_ptr, du_ptr, g_ptr, rstd_ptr, dx_ptr, u_ptr, dg_part_ptr,
    M, K, rows_per_prog, stride_xm, stride_dum, stride_dxm, stride_um,
    BLOCK_K: tl.constexpr, NUM_CHUNKS: tl.constexpr,
    STORE_DX: tl.constexpr, STORE_U: tl.constexpr, STORE_DG: tl.constexpr,
):
    """Program p owns rows [p * rows_per_prog, (p + 1) * rows_per_prog) and row p of the dg partials.

    NUM_CHUNKS == 1: a row is held in registers (BLOCK_K >= K), one read of x and du, dg kept in registers.
    NUM_CHUNKS > 1 (long rows): a first sweep over the row's chunks computes sum(du*g*xhat), a second writes dx/u and
    adds to the program's dg partial row in memory (zero-initialised by the caller); the second sweep re-reads a row
    that the first just brought into L2.
    """
    pid = tl.program_id(0)
    rk = tl.arange(0, BLOCK_K)
    row0 = pid * rows_per_prog
    pid64 = pid.to(tl.int64)
    if NUM_CHUNKS == 1:
        mask_k = rk < K
        g = tl.load(g_ptr + rk, mask=mask_k, other=0.0).to(tl.float32)
        dg = tl.zeros((BLOCK_K,), dtype=tl.float32)
    for i in range(rows_per_prog):
        row = row0 + i
        if row < M:
            row64 = row.to(tl.int64)
            r = tl.load(rstd_ptr + row)
            if NUM_CHUNKS == 1:
                x = tl.load(x_ptr + row64 * stride_xm + rk, mask=mask_k, other=0.0).to(tl.float32)
                xhat = x * r
                if STORE_U:
                    tl.store(u_ptr + row64 * stride_um + rk, (xhat * g).to(u_ptr.dtype.element_ty), mask=mask_k)
                if STORE_DX or STORE_DG:
                    du = tl.load(du_ptr + row64 * stride_dum + rk, mask=mask_k, other=0.0).to(tl.float32)
                    if STORE_DG:
                        dg += du * xhat
                    if STORE_DX:
                        dug = du * g
                        c = tl.sum(dug * xhat, axis=0) / K
                        dx = r * (dug - xhat * c)
                        tl.store(dx_ptr + row64 * stride_dxm + rk, dx.to(dx_ptr.dtype.element_ty), mask=mask_k)
            else:
                c = 0.0
                if STORE_DX:
                    part = tl.zeros((BLOCK_K,), dtype=tl.float32)
                    for ci in range(NUM_CHUNKS):
                        ck = ci * BLOCK_K + rk
                        mk = ck < K
                        x = tl.load(x_ptr + row64 * stride_xm + ck, mask=mk, other=0.0).to(tl.float32)
                        du = tl.load(du_ptr + row64 * stride_dum + ck, mask=mk, other=0.0).to(tl.float32)
                        g = tl.load(g_ptr + ck, mask=mk, other=0.0).to(tl.float32)
                        part += du * g * x
                    c = tl.sum(part, axis=0) * r / K
                for ci in range(NUM_CHUNKS):
                    ck = ci * BLOCK_K + rk
                    mk = ck < K
                    x = tl.load(x_ptr + row64 * stride_xm + ck, mask=mk, other=0.0).to(tl.float32)
                    g = tl.load(g_ptr + ck, mask=mk, other=0.0).to(tl.float32)
                    xhat = x * r
                    if STORE_U:
                        tl.store(u_ptr + row64 * stride_um + ck, (xhat * g).to(u_ptr.dtype.element_ty), mask=mk)
                    if STORE_DX or STORE_DG:
                        du = tl.load(du_ptr + row64 * stride_dum + ck, mask=mk, other=0.0).to(tl.float32)
                        if STORE_DG:
                            dgp = dg_part_ptr + pid64 * K + ck
                            tl.store(dgp, tl.load(dgp, mask=mk, other=0.0) + du * xhat, mask=mk)
                        if STORE_DX:
                            dx = r * (du * g - xhat * c)
                            tl.store(dx_ptr + row64 * stride_dxm + ck, dx.to(dx_ptr.dtype.element_ty), mask=mk)
    if NUM_CHUNKS == 1:
        if STORE_DG:
            tl.store(dg_part_ptr + pid64 * K + rk, dg, mask=mask_k)


# The backward kernel bound per signature (one per call of the norm's backward, two per decoder layer): Triton's JIT
# dispatch re-derives ~15 arguments' specializations and the launch's constexprs every call, 20-40 us of host on the
# device's CPU in a step that is host-bound at small sizes. Key: every tensor's shape, strides, dtype, device and
# alignment (Triton's specialization), the outputs asked for, the chunk cap and the current device; the outputs are
# fresh allocations whose strides follow from x's (empty_like), so the key fixes them too.
_bwd_bound: dict = {}


def launch_rmsnorm_bwd(x: torch.Tensor, du: torch.Tensor | None, norm_weight: torch.Tensor, rstd: torch.Tensor, *,
                       need_dx: bool, need_u: bool, need_dg: bool, max_block_k: int | None = None):
    """Returns (dx or None, u or None, dg (fp32, (K,)) or None). x, du: (M, K) with unit last stride.

    ``max_block_k`` caps the chunk size (tests use it to exercise the multi-chunk path on small K). A CUDA call at a
    signature seen before launches the kernel bound at its first call (``_runtime.BoundLaunch``).
    """
    M, K = x.shape
    dx = torch.empty_like(x) if need_dx else None
    u = torch.empty_like(x) if need_u else None
    if M == 0 or K == 0:
        dg = torch.zeros(K, device=x.device, dtype=torch.float32) if need_dg else None
        return dx, u, dg
    key = None
    if x.is_cuda and not interpreting():
        key = (tensor_signature(x), tensor_signature(du), tensor_signature(norm_weight), tensor_signature(rstd),
               need_dx, need_u, need_dg, max_block_k, torch.cuda.current_device())
        hit = _bwd_bound.get(key)
        if hit is not None:
            bound, dg_shape, zero_dg, reduce_bound = hit
            dg_part = (torch.zeros if zero_dg else torch.empty)(dg_shape, device=x.device, dtype=torch.float32) \
                if need_dg else None
            bound(*[t.data_ptr() for t in (x, du, norm_weight, rstd, dx, u, dg_part) if t is not None])
            if dg_part is None or reduce_bound is None:
                return dx, u, _reduce_dg(dg_part)[0]
            dg = torch.empty((K,), device=x.device, dtype=torch.float32)
            reduce_bound(dg_part.data_ptr(), dg.data_ptr())
            return dx, u, dg
    if x.is_cuda:
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count
        programs = min(M, 4 * sms)  # dg partials: programs x K fp32, small next to x for M >> SMs
        cap = max_block_k or 8192
    else:
        # The interpreter's cost is programs x rows either way; a GPU-like count keeps the dg partials as short
        # (and the CPU tests' numerics as close to the device's) as there
        programs = min(M, 4 * REFERENCE_SMS)
        cap = max_block_k or 1024
    block_k, chunks, warps = _row_tiling(K, cap)
    rows = triton.cdiv(M, programs)
    programs = triton.cdiv(M, rows)
    dg_part = None
    if need_dg:
        dg_part = (torch.zeros if chunks > 1 else torch.empty)((programs, K), device=x.device, dtype=torch.float32)
    dummy = x
    kernel_args = dict(
        x_ptr=x, du_ptr=du if du is not None else dummy, g_ptr=norm_weight, rstd_ptr=rstd,
        dx_ptr=dx if dx is not None else dummy, u_ptr=u if u is not None else dummy,
        dg_part_ptr=dg_part if dg_part is not None else rstd,
        M=M, K=K, rows_per_prog=rows, stride_xm=x.stride(0), stride_dum=du.stride(0) if du is not None else 0,
        stride_dxm=dx.stride(0) if dx is not None else 0, stride_um=u.stride(0) if u is not None else 0,
        BLOCK_K=block_k, NUM_CHUNKS=chunks, STORE_DX=need_dx, STORE_U=need_u, STORE_DG=need_dg)
    compiled = retry_after_oom(lambda: _rmsnorm_bwd_kernel[(programs,)](**kernel_args, num_warps=warps))
    bound = None
    if key is not None:
        # the roles in the order a hit passes its pointers; a dummy (an output not asked for) stays unbound (null)
        roles = {name: t for name, t in (("x_ptr", x), ("du_ptr", du), ("g_ptr", norm_weight), ("rstd_ptr", rstd),
                                          ("dx_ptr", dx), ("u_ptr", u), ("dg_part_ptr", dg_part)) if t is not None}
        bound = bind(_rmsnorm_bwd_kernel, compiled, (programs,), {**kernel_args, "num_warps": warps}, roles)
    dg, reduce_bound = _reduce_dg(dg_part, bind_it=key is not None)
    if key is not None and bound is not None:
        store_bound(_bwd_bound, key, (bound, (programs, K), chunks > 1, reduce_bound))
    return dx, u, dg


@triton.jit
def _dg_reduce_kernel(part_ptr, dg_ptr, P, K, BLOCK_P: tl.constexpr, BLOCK_K: tl.constexpr):
    """dg[k] = sum over the P partial rows of part[p, k] (P x K, contiguous fp32), accumulated in float64, stored as
    fp32. One program per BLOCK_K columns; a fixed order of additions (deterministic)."""
    cols = tl.program_id(0) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask_k = cols < K
    acc = tl.zeros((BLOCK_K,), dtype=tl.float64)
    for p0 in range(0, P, BLOCK_P):
        rows = p0 + tl.arange(0, BLOCK_P)
        part = tl.load(part_ptr + rows[:, None].to(tl.int64) * K + cols[None, :],
                       mask=(rows[:, None] < P) & mask_k[None, :], other=0.0)
        acc += tl.sum(part.to(tl.float64), axis=0)
    tl.store(dg_ptr + cols, acc.to(tl.float32), mask=mask_k)


# 256 x 16 partials a step: 4,096 float64 values over 4 warps (32 a thread), 64-byte row segments. A program's steps
# are a chain of dependent loads, so few long steps and many programs: at 528 partial rows, 3 steps, and K / 16
# programs (256 at K 4096). H200, us a call at K 2048 / 4096 / 5120 (perf/results/h200/rms_norm_linear/
# dg_reduce_2026-11-29_1153.txt): 256 x 16 7.7 / 8.5 / 9.1; 128 x 32 11.2-12.5; 32 x 128 (17 steps) 38; torch's three
# kernels 24-30. Every tiling's dg equals torch's float64 sum bit for bit there.
DG_REDUCE_BLOCK_P, DG_REDUCE_BLOCK_K = 256, 16


def _reduce_dg(dg_part: torch.Tensor | None, bind_it: bool = False):
    """(dg, its launch bound for the next call or None) from the backward kernel's per-program partials (programs x
    K). Summed in float64: it takes the last level of dg's reduction over M out of the error budget (the GPU fuzz found
    an fp32 dg at 1.01x the tolerance, M = 4099, K = 1). One kernel (_dg_reduce_kernel): torch's
    ``dg_part.sum(0, dtype=torch.float64).to(torch.float32)`` cast the partials to a float64 copy first, then reduced
    and converted - three kernels, 28 us at K 4096 (H200, 2% of the 8192 x 4096 x 4096 training step; this kernel
    8.5 us) and three launches of host."""
    if dg_part is None:
        return None, None
    P, K = dg_part.shape
    dg = torch.empty((K,), device=dg_part.device, dtype=torch.float32)
    grid = (triton.cdiv(K, DG_REDUCE_BLOCK_K),)
    args = dict(part_ptr=dg_part, dg_ptr=dg, P=P, K=K, BLOCK_P=DG_REDUCE_BLOCK_P, BLOCK_K=DG_REDUCE_BLOCK_K)
    compiled = _dg_reduce_kernel[grid](**args, num_warps=4)
    bound = bind(_dg_reduce_kernel, compiled, grid, {**args, "num_warps": 4}, {"part_ptr": dg_part, "dg_ptr": dg}) \
        if bind_it else None
    return dg, bound
