"""RMSNorm-fused GEMM: ``y = act(F.linear(F.rms_norm(x, (K,), g, eps), W, bias)) + residual`` in one kernel.

Forward (``_rmsnorm_gemm_kernel``)
----------------------------------
The persistent GEMM of ``gemm.py`` (same operand loaders, tile orders, TMA/pointer paths and autotune space) with
three additions, none of which reads x a second time:

* **sum of squares from the tiles already loaded**: every K step the program squares its A tile in fp32 and adds the
  row sums to ``ss`` (BLOCK_M fp32 registers). Programs sharing a tile row recompute the same sums: ``BLOCK_M x K``
  FMAs next to ``BLOCK_M x BLOCK_N x K`` MACs, i.e. 1/BLOCK_N of the tensor-core work, on otherwise idle ALUs.
* **norm weight in the mainloop** (``APPLY_G``): the A tile is multiplied by ``g[k]`` in fp32 and rounded once to
  the input dtype before the dot, so the MMA sees ``bf16(x * g)``. ``rstd`` cannot be applied here (it depends on
  the whole row), but it is a per-row scale, so it commutes with the dot:
  ``sum_k (x*rstd*g)[m,k] W[n,k] = rstd[m] * sum_k (x*g)[m,k] W[n,k]``.
  ``APPLY_G=False`` is the *folded* variant: the caller passes ``W * g`` (one rounding per weight element) and the
  A tile goes to the tensor cores untouched. Both roundings are documented and measured in docs/numerics_rmsnorm.md.
* **epilogue**: ``rstd = 1 / sqrt(ss / K + eps)`` (IEEE sqrt, fp32), ``acc * rstd`` *before* bias, then the GEMM's
  epilogue (activation, residual) and one rounding to the output dtype. Programs with ``pid_n == 0`` store rstd
  (fp32, one per row) for the backward.

Numerics versus torch's unfused bf16 pipeline: torch rounds ``x * rstd`` (and then ``* g``) to bf16 before its GEMM;
the fused kernel rounds ``x * g`` once (exact when g is all ones, the RMSNorm initialisation) and applies rstd in
fp32. fp16 caveat: ``x * g`` is formed *before* normalisation, so it overflows fp16 where ``|x * g| > 65504`` while
torch's normalised operand would not (the sum of squares itself is fp32 and never overflows).

Backward (``_rmsnorm_bwd_kernel``)
----------------------------------
Given ``du = dy @ W`` (computed by the GEMM op), one pass over rows computes
``dx = rstd * (du*g) - x * rstd^3 * mean_k(du*g*x)``, ``u = x * rstd * g`` (the GEMM input, needed for ``dW = dy^T u``)
and per-program fp32 partial sums of ``dg = sum_m du * x * rstd``, reduced by the caller.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..autotune.space import INTERPRETER_CONFIG, gemm_configs
from .gemm import (INTERPRET, _early_prune, _ensure_allocator, _epilogue_chunks, _needs_int64, _residual_is_flat,
                   _tuning_bench, mainloop, operand_descriptors, residual_rows, tma_compatible)
from .tile_order import tile_coords


@triton.jit
def _rmsnorm_gemm_kernel(
    a_ptr, b_ptr, c_ptr, g_ptr, rstd_ptr, bias_ptr, res_ptr,
    M, N, K, eps,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    stride_res0, stride_res1, stride_res2, RES_PERIOD,
    M_BUCKET,  # autotune key only (see gemm.py)
    A_K_CONTIG: tl.constexpr, B_K_CONTIG: tl.constexpr, USE_TMA: tl.constexpr, TMA_STORE: tl.constexpr,
    APPLY_G: tl.constexpr, STORE_RSTD: tl.constexpr,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, HAS_RESIDUAL: tl.constexpr, RES_PERIODIC: tl.constexpr,
    DOT_PRECISION: tl.constexpr, UPCAST_DOT: tl.constexpr, INDEX_64: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP: tl.constexpr, TILE_ORDER: tl.constexpr, EPI_SPLIT: tl.constexpr,
    TMA_LOADS: tl.constexpr,  # tuned: descriptor loads (when USE_TMA allows) or pointer loads
    PERSISTENT: tl.constexpr,  # read by the launcher's grid (as in gemm.py)
    FLATTEN: tl.constexpr,
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

    for tile_id in tl.range(pid, num_tiles, num_programs, flatten=FLATTEN):
        pid_m, pid_n = tile_coords(tile_id, num_pid_m, num_pid_n, TILE_ORDER, GROUP)
        offs_m = pid_m * BLOCK_M
        offs_n = pid_n * BLOCK_N
        # The GEMM's K loop with its RMSNorm prologue on: the row sums of squares come from the A tiles it loads
        # (zero-filled / masked tails add nothing), A scaled by g before the dot when APPLY_G.
        acc, ss = mainloop(a_desc, b_desc, a_ptr, b_ptr, g_ptr, offs_m, offs_n, M, N, K, stride_am, stride_ak,
                           stride_bk, stride_bn, A_K_CONTIG, B_K_CONTIG, LOAD_DESC, True, APPLY_G, DOT_PRECISION,
                           UPCAST_DOT, BLOCK_M, BLOCK_N, BLOCK_K)

        # ---- epilogue, in fp32: rstd (IEEE sqrt), scale the rows, then the GEMM's chunked epilogue ----
        rstd = 1.0 / tl.sqrt_rn(ss / K + eps)
        rows = offs_m + tl.arange(0, BLOCK_M)
        if STORE_RSTD:
            tl.store(rstd_ptr + rows, rstd, mask=(rows < M) & (pid_n == 0))
        acc = acc * rstd[:, None]
        res_rows = residual_rows(res_ptr, offs_m, stride_res0, stride_res1, RES_PERIOD, BLOCK_M, HAS_RESIDUAL,
                                 RES_PERIODIC, INDEX_64)
        _epilogue_chunks(acc, offs_m, offs_n, M, N, c_desc, c_ptr, stride_cm, stride_cn, bias_ptr, res_rows,
                         stride_res2, c_ptr, BLOCK_M, BLOCK_N, EPI_SPLIT, TMA_STORE, HAS_BIAS, ACTIVATION,
                         HAS_RESIDUAL, False, INDEX_64)


_TUNING_KEY = ["M_BUCKET", "N", "K", "A_K_CONTIG", "B_K_CONTIG", "USE_TMA", "TMA_STORE", "APPLY_G", "HAS_BIAS",
               "ACTIVATION", "HAS_RESIDUAL", "RES_PERIODIC", "DOT_PRECISION"]

_CONFIG_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP", "TILE_ORDER", "EPI_SPLIT", "TMA_LOADS", "PERSISTENT",
                "FLATTEN")
_SOURCE_CONFIG = {}  # id(our config) -> the GEMM config it came from (the GEMM's pruner reads its keys)


def fused_configs(configs) -> list[triton.Config]:
    """The GEMM's config space restricted to the meta-parameters this kernel takes.

    A key the GEMM's space gains later is dropped here (configs that then coincide are kept once) and does not break
    this kernel; pruning still runs on the GEMM's own configs (``_prune``), so the pruner may read any key.
    """
    seen, out = {}, []
    for cfg in configs:
        kw = {k: v for k, v in cfg.kwargs.items() if k in _CONFIG_KEYS}
        ident = (tuple(sorted(kw.items())), cfg.num_warps, cfg.num_stages)
        if ident not in seen:
            seen[ident] = triton.Config(kw, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
            out.append(seen[ident])
        _SOURCE_CONFIG.setdefault(id(seen[ident]), cfg)
    return out


def _prune(configs, named_args, **kwargs):
    source = [_SOURCE_CONFIG.get(id(c), c) for c in configs]
    kept = {id(c) for c in _early_prune(source, named_args, **kwargs)}
    return [c for c, src in zip(configs, source) if id(src) in kept] or configs[:1]


# Same space, pruning and tuning benchmark as the plain GEMM (the pruner reads a_ptr, c_ptr, M, N, K and the
# layout switches, named alike here).
rmsnorm_gemm_kernel = triton.autotune(
    configs=fused_configs([INTERPRETER_CONFIG] if INTERPRET else gemm_configs()),
    key=_TUNING_KEY,
    prune_configs_by={"early_config_prune": _prune},
    do_bench=_tuning_bench,
    cache_results=True,
)(_rmsnorm_gemm_kernel)


def _is_tuned(kernel_args: dict) -> bool:
    if len(rmsnorm_gemm_kernel.configs) <= 1:
        return True
    key = [kernel_args[k] for k in rmsnorm_gemm_kernel.keys if k in kernel_args]
    for name in rmsnorm_gemm_kernel.arg_names:
        arg = kernel_args.get(name)
        if hasattr(arg, "dtype"):
            key.append(str(arg.dtype))
    return tuple(key) in rmsnorm_gemm_kernel.cache


def launch_rmsnorm_gemm(x: torch.Tensor, norm_weight: torch.Tensor | None, b: torch.Tensor, out: torch.Tensor,
                        rstd: torch.Tensor | None, eps: float, *, bias=None, residual=None, activation: int = 0,
                        use_tma: bool | None = None, config: triton.Config | None = None,
                        num_programs: int | None = None) -> torch.Tensor:
    """``out = act((rms_norm(x) * g) @ b * ... + bias) + residual`` with rstd (fp32, (M,)) stored when given.

    x: (M, K); norm_weight: (K,) or None (already folded into ``b``); b: (K, N) (``weight.t()``); out: (M, N);
    bias (N,); residual (R0, P, N) as in ``gemm.launch_gemm``. Checks are the op layer's job.
    """
    M, K = x.shape
    N = b.shape[1]
    if use_tma is None:
        use_tma = (INTERPRET or (x.is_cuda and torch.cuda.get_device_capability(x.device)[0] >= 9)) and \
            tma_compatible(x) and tma_compatible(b)
    tma_store = bool(use_tma) and out.stride(1) == 1 and tma_compatible(out)
    if use_tma or tma_store:
        _ensure_allocator()
    if residual is not None:
        res_strides, res_period = residual.stride(), residual.shape[1]
    else:
        res_strides, res_period = (0, 0, 0), 1
    programs = num_programs or (torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 4)
    dummy = out
    kernel_args = dict(
        a_ptr=x, b_ptr=b, c_ptr=out, g_ptr=norm_weight if norm_weight is not None else dummy,
        rstd_ptr=rstd if rstd is not None else dummy, bias_ptr=bias if bias is not None else dummy,
        res_ptr=residual if residual is not None else dummy,
        M=M, N=N, K=K, eps=float(eps),
        stride_am=x.stride(0), stride_ak=x.stride(1), stride_bk=b.stride(0), stride_bn=b.stride(1),
        stride_cm=out.stride(0), stride_cn=out.stride(1),
        stride_res0=res_strides[0], stride_res1=res_strides[1], stride_res2=res_strides[2], RES_PERIOD=res_period,
        M_BUCKET=triton.next_power_of_2(max(M, 1)),
        A_K_CONTIG=x.stride(1) == 1, B_K_CONTIG=b.stride(1) != 1, USE_TMA=bool(use_tma), TMA_STORE=tma_store,
        APPLY_G=norm_weight is not None, STORE_RSTD=rstd is not None,
        HAS_BIAS=bias is not None, ACTIVATION=activation, HAS_RESIDUAL=residual is not None,
        RES_PERIODIC=residual is not None and not _residual_is_flat(residual),
        DOT_PRECISION="ieee" if x.dtype == torch.float32 else "tf32",
        UPCAST_DOT=INTERPRET and x.dtype == torch.bfloat16,
        INDEX_64=_needs_int64(M, N, out, residual),
    )

    def grid(meta):
        tiles = triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])
        return (max(1, min(programs, tiles) if meta.get("PERSISTENT", True) else tiles),)

    if config is not None:
        _rmsnorm_gemm_kernel[grid](**kernel_args, **fused_configs([config])[0].all_kwargs())
        return out
    if x.is_cuda and torch.cuda.is_current_stream_capturing() and not _is_tuned(kernel_args):
        raise RuntimeError(
            "tilewright rms_norm_linear: this shape/dtype has not been autotuned yet and autotuning cannot run "
            f"during CUDA-graph capture (M={M}, N={N}, K={K}, dtype={x.dtype}). Run the same call once before "
            "capturing (warm-up).")
    rmsnorm_gemm_kernel[grid](**kernel_args)
    return out


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


def launch_rmsnorm_bwd(x: torch.Tensor, du: torch.Tensor | None, norm_weight: torch.Tensor, rstd: torch.Tensor, *,
                       need_dx: bool, need_u: bool, need_dg: bool, max_block_k: int | None = None):
    """Returns (dx or None, u or None, dg (fp32, (K,)) or None). x, du: (M, K) with unit last stride.

    ``max_block_k`` caps the chunk size (tests use it to exercise the multi-chunk path on small K).
    """
    M, K = x.shape
    dx = torch.empty_like(x) if need_dx else None
    u = torch.empty_like(x) if need_u else None
    if M == 0 or K == 0:
        dg = torch.zeros(K, device=x.device, dtype=torch.float32) if need_dg else None
        return dx, u, dg
    if x.is_cuda:
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count
        programs = min(M, 4 * sms)  # dg partials: programs x K fp32, small next to x for M >> SMs
        cap = max_block_k or 8192
    else:
        programs = min(M, 2)
        cap = max_block_k or 1024
    block_k = min(triton.next_power_of_2(K), cap)
    chunks = triton.cdiv(K, block_k)
    warps = 4 if block_k <= 1024 else (8 if block_k <= 4096 else 16)
    rows = triton.cdiv(M, programs)
    programs = triton.cdiv(M, rows)
    dg_part = None
    if need_dg:
        dg_part = (torch.zeros if chunks > 1 else torch.empty)((programs, K), device=x.device, dtype=torch.float32)
    dummy = x
    _rmsnorm_bwd_kernel[(programs,)](
        x, du if du is not None else dummy, norm_weight, rstd,
        dx if dx is not None else dummy, u if u is not None else dummy, dg_part if dg_part is not None else rstd,
        M, K, rows, x.stride(0), du.stride(0) if du is not None else 0,
        dx.stride(0) if dx is not None else 0, u.stride(0) if u is not None else 0,
        BLOCK_K=block_k, NUM_CHUNKS=chunks, STORE_DX=need_dx, STORE_U=need_u, STORE_DG=need_dg,
        num_warps=warps)
    dg = dg_part.sum(0) if need_dg else None
    return dx, u, dg
