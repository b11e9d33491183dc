"""FP8 GEMM: ``tilewright.scaled_mm`` - the Triton GEMM on float8 inputs with dequantization scales, or on Hopper
the sm_90a CUDA FP8 kernel (cuda_fallback/fp8_gemm_sm90.py) where the router measured it faster.

Contract (that of ``torch._scaled_mm``, which is the peer): ``out = (a * scale_a) @ (b * scale_b) (+ bias)`` with
a (M, K) and b (K, N) in float8_e4m3fn / float8_e5m2, fp32 accumulation, scales fp32 either one per tensor
(``numel() == 1``) or rowwise (scale_a (M, 1) or (M,), scale_b (1, N) or (N,)), output bf16/fp16/fp32. Beyond
torch's contract: **block scales**, the FP8 training recipe's (DeepSeek-V3, TransformerEngine's blockwise recipe) -
scale_a (M, ceil(K / 128)), one per row of a and 128-wide block of K, and scale_b (ceil(K / 128), ceil(N / 128)), one
per 128 x 128 block of b - in float32 or float8_e8m0fnu (powers of two), as :func:`quantize_fp8` makes them; the
kernel promotes each K slice to fp32 with its blocks' scales.

Layout: like ``torch._scaled_mm``, b must be K-major (``b.t()`` contiguous, i.e. an (N, K) weight transposed): FP8
wgmma on Hopper reads both operands K-major only. No autograd (FP8 training recipes quantize gradients themselves).
"""
from __future__ import annotations

from typing import Optional

import torch

from .. import router
from .._codes import FP8_SCALE_BLOCK
from ..reference import is_block_layout, per_element_scales, scaled_mm_reference  # noqa: F401 (re-exported)
from ._checks import check_backend, check_optional_tensor, check_same_device, check_tensor, contiguous_vector
from . import _dtensor
from ._eager import call_op, register_fast_dispatch

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


@torch.library.custom_op("tilewright::scaled_mm", mutates_args=())
def scaled_mm_op(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                 bias: Optional[torch.Tensor], out_dtype: torch.dtype, use_fast_accum: bool,
                 backend: Optional[str]) -> torch.Tensor:
    """2-D core of :func:`scaled_mm` (inputs already checked; scales flattened to (1,) or (M,) / (N,), or the 2-D
    float32 block scales)."""
    M, N = a.shape[0], b.shape[1]
    out = torch.empty((M, N), device=a.device, dtype=out_dtype)
    if M == 0 or N == 0:
        return out
    # the kernel reads bias[n] / scale[i] at ptr + n / ptr + i
    bias = contiguous_vector(bias)
    if scale_a.dim() == 2:  # block scales: read as contiguous (M, K blocks) / (K blocks, N blocks) arrays
        scale_a, scale_b = scale_a.contiguous(), scale_b.contiguous()
    else:
        scale_a, scale_b = contiguous_vector(scale_a), contiguous_vector(scale_b)
    if a.shape[1] == 0:
        # K = 0: the empty sum is 0 whatever the scales - torch._scaled_mm gives zeros (plus the bias) even for Inf /
        # NaN scales, where dequantizing after the product (0 * inf) gave NaN
        if bias is None:
            out.zero_()
        else:
            out.copy_(bias.to(out_dtype).expand(M, N))
        return out
    scales = "block" if scale_a.dim() == 2 else ("tensor" if scale_a.numel() == 1 and scale_b.numel() == 1 else "row")
    choice = router.dispatch("scaled_mm", a, b, scales, out_dtype, None if bias is None else bias.dtype,
                             use_fast_accum, backend=backend)
    if choice == "torch":
        out.copy_(scaled_mm_reference(a, b, scale_a, scale_b, bias, out_dtype))
        return out
    if choice == "cuda":
        from ..cuda_fallback import fp8_gemm_sm90

        if fp8_gemm_sm90.try_launch(a, b, scale_a, scale_b, out, bias, use_fast_accum):
            return out  # (else the family was disabled or declined: Triton serves)
    from ..triton_kernels.gemm import Dequant, launch_gemm

    dequant = Dequant(scale_a, scale_b, use_fast_accum, block_scaled=scale_a.dim() == 2)  # (rowwise ones are 1-D here)
    launch_gemm(a, b, out, bias=bias, dequant=dequant)
    return out


@scaled_mm_op.register_fake
def _(a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum, backend):
    return a.new_empty((a.shape[0], b.shape[1]), dtype=out_dtype)


register_fast_dispatch(scaled_mm_op)


BLOCK = FP8_SCALE_BLOCK  # block scales: one per 128 elements of K (and per 128 columns of b)
_E8M0 = getattr(torch, "float8_e8m0fnu", None)


def _block_scales(scale_a, scale_b, M: int, K: int, N: int):
    """``(scale_a, scale_b)`` as float32 when they are block scales (:func:`is_block_layout`), else None."""
    if not is_block_layout(scale_a, scale_b, M, K, N):
        return None
    for name, scale in (("scale_a", scale_a), ("scale_b", scale_b)):
        if scale.dtype not in (torch.float32, _E8M0):
            raise TypeError(f"{name}: block scales must be float32 or float8_e8m0fnu, got {scale.dtype}")
    return scale_a.float(), scale_b.float()  # (e8m0: powers of two, exact in float32)


def _flat_scale(name: str, scale, rows: int) -> torch.Tensor:
    if not isinstance(scale, torch.Tensor) or scale.dtype != torch.float32:
        raise TypeError(f"{name}: expected a float32 tensor, got "
                        f"{scale.dtype if isinstance(scale, torch.Tensor) else type(scale).__name__}")
    if scale.numel() == 1:
        return scale.reshape(1).contiguous()
    if scale.numel() == rows and (scale.dim() == 1 or scale.dim() == 2 and 1 in scale.shape):
        return scale.reshape(rows).contiguous()
    raise ValueError(f"{name}: expected one scale per tensor (numel 1), one per "
                     f"{'row of a' if name == 'scale_a' else 'column of b'} ({rows}), or block scales (scale_a "
                     f"(M, ceil(K / 128)) with scale_b (ceil(K / 128), ceil(N / 128))), got shape {tuple(scale.shape)}")


def scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, *,
              bias: torch.Tensor | None = None, out_dtype: torch.dtype = torch.bfloat16,
              use_fast_accum: bool = False, backend: str | None = None) -> torch.Tensor:
    """FP8 GEMM ``(a * scale_a) @ (b * scale_b) + bias``, fp32 accumulation, like ``torch._scaled_mm``.

    Args:
        a: (M, K) float8_e4m3fn or float8_e5m2.
        b: (K, N) float8, K-major (``weight.t()`` of an (N, K) weight), same device.
        scale_a, scale_b: float32, one per tensor (numel 1) or rowwise: (M,)/(M, 1) and (N,)/(1, N); both must
            use the same granularity. Or block scales: scale_a (M, ceil(K / 128)) - one per row of a and 128-wide
            block of K - and scale_b (ceil(K / 128), ceil(N / 128)) - one per 128 x 128 block of b - float32 or
            float8_e8m0fnu (``quantize_fp8(x, block=(1, 128))`` and ``quantize_fp8(w, block=(128, 128))`` make
            them: for a weight w (N, K), pass ``b = q.t()`` and ``scale_b = s.t()``). Block-scaled products always
            promote each 128-wide K slice to fp32 (``use_fast_accum`` has no effect there).
        bias: optional (N,) in ``out_dtype`` (bf16/fp16) or float32.
        out_dtype: bfloat16 (default), float16 or float32.
        use_fast_accum: as in ``torch._scaled_mm``: False (default) accumulates each K slice from zero and adds it
            in fp32 (cuBLASLt's accurate mode); True keeps the tensor cores' reduced-precision FP8 accumulator across
            K on sm_90 - faster, with errors growing with K.
        backend: None (router), "cuda" (the sm_90a FP8 kernel: per-tensor, row-wise or block scales, 16-bit out,
            bias in out_dtype, K a multiple of 16, N of 8), "triton" or "torch". The router takes the CUDA kernel on
            Hopper from M = 256 in accurate mode and for block scales (cuda_fallback/fp8_gemm_sm90.py says why),
            Triton elsewhere.

    Non-finite scales: an Inf or NaN scale makes its row (scale_a) or column (scale_b) of the output non-finite,
    but whether an entry is +Inf, -Inf or NaN follows the sign (and exact zeroness) of the FP8 accumulator, which
    rounding decides, so it may differ from torch's.
    """
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in FP8_DTYPES:
            raise TypeError(f"{name}: dtype {t.dtype} is not float8 (e4m3fn or e5m2); use tilewright.matmul for "
                            "16/32-bit inputs")
        if t.dim() != 2:
            raise ValueError(f"{name}: expected 2-D, got shape {tuple(t.shape)}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"b: expected (K, N) with K = a.shape[1] = {a.shape[1]}, got shape {tuple(b.shape)}")
    if b.shape[1] > 1 and b.shape[0] > 1 and b.stride(0) != 1:
        raise ValueError("b: must be K-major (b.t() contiguous, as torch._scaled_mm requires): FP8 tensor-core "
                         "instructions read both operands K-major; pass weight.t() of an (N, K) weight")
    if out_dtype not in OUT_DTYPES:
        raise TypeError(f"out_dtype: {out_dtype} is not supported; use bfloat16, float16 or float32")
    check_optional_tensor("bias", bias)
    check_backend(backend)
    check_same_device("a", a, b=b, scale_a=scale_a, scale_b=scale_b, bias=bias)
    M, N = a.shape[0], b.shape[1]
    blocks = _block_scales(scale_a, scale_b, M, a.shape[1], N)
    if blocks is not None:
        sa, sb = blocks
        if any(_dtensor.is_dtensor(t) for t in (a, b, sa, sb)):
            raise NotImplementedError("scaled_mm: block scales with DTensor arguments are not supported; use "
                                      "rowwise scales, or call it on the local shards")
    else:
        sa = _flat_scale("scale_a", scale_a, M)
        sb = _flat_scale("scale_b", scale_b, N)
    if blocks is None and (sa.numel() == 1) != (sb.numel() == 1) and not (M == 1 or N == 1):
        raise ValueError("scale_a, scale_b: mix of per-tensor and rowwise scales; use one granularity for both")
    if blocks is None and sa.numel() != sb.numel() and (sa.numel() == 1 or sb.numel() == 1):
        # degenerate shapes (M == 1 or N == 1): bring both to rowwise
        sa, sb = sa.expand(M).contiguous(), sb.expand(N).contiguous()
    if bias is not None:
        if not isinstance(bias, torch.Tensor) or bias.shape != (N,):
            raise ValueError(f"bias: expected shape ({N},), got "
                             f"{tuple(bias.shape) if isinstance(bias, torch.Tensor) else type(bias).__name__}")
        if bias.dtype not in (out_dtype, torch.float32):
            raise TypeError(f"bias: dtype {bias.dtype} must be out_dtype ({out_dtype}) or float32")
    return call_op(scaled_mm_op, a, b, sa, sb, bias, out_dtype, bool(use_fast_accum), backend)


# ------------------------------------------------------------------------------------------------ quantize_fp8
QUANT_BLOCKS = ((1, BLOCK), (BLOCK, BLOCK))


@torch.library.custom_op("tilewright::quantize_fp8", mutates_args=())
def quantize_fp8_op(x: torch.Tensor, block_m: int, block_k: int, dtype: torch.dtype) -> tuple[torch.Tensor,
                                                                                                 torch.Tensor]:
    """2-D core of :func:`quantize_fp8` (arguments checked): the Triton kernel on a CUDA device or under the
    interpreter, the torch formula (:func:`quantize_fp8_reference`) elsewhere."""
    from .._env import interpreting

    if x.is_cuda or interpreting():
        from ..triton_kernels.quantize_fp8 import launch_quantize_fp8

        return launch_quantize_fp8(x, block_m, block_k, dtype)
    return quantize_fp8_reference(x, (block_m, block_k), dtype)


@quantize_fp8_op.register_fake
def _(x, block_m, block_k, dtype):
    M, K = x.shape
    nk = -(-K // block_k)
    return (x.new_empty((M, K), dtype=dtype),
            x.new_empty((M if block_m == 1 else -(-M // block_m), nk), dtype=torch.float32))


def quantize_fp8_reference(x: torch.Tensor, block=(1, 128), dtype: torch.dtype = torch.float8_e4m3fn):
    """:func:`quantize_fp8` in torch ops (the tests' oracle; the kernel computes the same fp32 steps, so the results
    are bit-identical): per block amax of |x| over its finite-or-infinite entries (NaN left out), scale =
    max(amax, 1e-12) / the format's largest value, q = clamp(x / scale) cast to ``dtype``."""
    from ..triton_kernels.quantize_fp8 import FP8_MAX, MIN_AMAX

    bm, bk = block
    M, K = x.shape
    xf = x.float()
    ax = torch.where(torch.isnan(xf), torch.zeros_like(xf), xf.abs())
    pad_m, pad_k = (-M) % bm, (-K) % bk
    blocks = torch.nn.functional.pad(ax, (0, pad_k, 0, pad_m)).reshape((M + pad_m) // bm, bm, (K + pad_k) // bk, bk)
    amax = blocks.amax(dim=(1, 3))  # (M / bm, K / bk)
    # divided by a tensor, not the Python float: CUDA tensor / scalar is a multiplication by the scalar's reciprocal,
    # one ulp off the IEEE quotient the kernel computes (and CPU torch) for ~1 in 3 scales, which moves q's ties
    scale = torch.where(amax < MIN_AMAX, torch.full_like(amax, MIN_AMAX), amax) / torch.full_like(amax, FP8_MAX[dtype])
    q = xf / per_element_scales(scale, bm, bk, M, K)
    fmax = FP8_MAX[dtype]
    q = torch.where(q > fmax, torch.full_like(q, fmax), q)
    q = torch.where(q < -fmax, torch.full_like(q, -fmax), q)
    return q.to(dtype), scale


def quantize_fp8(x: torch.Tensor, block: tuple[int, int] = (1, 128),
                 dtype: torch.dtype = torch.float8_e4m3fn) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``x`` to FP8 with one scale per block, in one pass (fused absolute maximum, scale and cast).

    Args:
        x: (..., K) float tensor (bf16, fp16 or fp32), read through its strides. With ``block=(128, 128)`` it must be
            2-D (a weight).
        block: (1, 128) - one scale per row and 128 columns (FP8 training's activation recipe) - or (128, 128) - one
            per 128 x 128 tile (the weight recipe). Tail blocks (K or M not a multiple of 128) are partial.
        dtype: torch.float8_e4m3fn (largest value 448) or torch.float8_e5m2 (57344).
    Returns:
        (q, scale): q in ``dtype`` with x's shape (contiguous); scale fp32, (..., ceil(K / 128)) for (1, 128) and
        (ceil(M / 128), ceil(K / 128)) for (128, 128). ``scale`` is the dequantization scale - ``x ~ q * scale``
        block by block, the convention of ``torch._scaled_mm``'s scales: amax / the format's largest value (at
        least 1e-12 / it, so an all-zero block gives q = 0). NaN entries stay NaN in q and are left out of their
        block's maximum; an infinite entry makes its block's scale infinite. No gradient.

    ``tilewright.scaled_mm`` reads these scales directly (block-scaled FP8 GEMM): for activations x (M, K) and a
    weight w (N, K), ``scaled_mm(x8, w8.t(), sx, sw.t())`` with ``x8, sx = quantize_fp8(x, (1, 128))`` and
    ``w8, sw = quantize_fp8(w, (128, 128))``.
    """
    block = tuple(block) if isinstance(block, (tuple, list)) else block
    if block not in QUANT_BLOCKS:
        raise ValueError(f"block: expected (1, 128) or (128, 128), got {block!r}")
    check_tensor("x", x, dims=(2,) if block == (128, 128) else None, min_dim=1)
    if dtype not in FP8_DTYPES:
        raise TypeError(f"dtype: expected torch.float8_e4m3fn or torch.float8_e5m2, got {dtype}")
    lead = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1]) if x.dim() != 2 else x
    q, scale = call_op(quantize_fp8_op, x2.detach(), block[0], block[1], dtype)
    if x.dim() != 2:
        q, scale = q.reshape(x.shape), scale.reshape(*lead, scale.shape[-1])
    return q, scale
