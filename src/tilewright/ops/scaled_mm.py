"""FP8 GEMM: ``tilewright.scaled_mm`` - the Triton GEMM on float8 inputs with dequantization scales.

Contract (that of ``torch._scaled_mm``, which is the peer): ``out = (a * scale_a) @ (b * scale_b) (+ bias)`` with
a (M, K) and b (K, N) in float8_e4m3fn / float8_e5m2, fp32 accumulation, scales fp32 either one per tensor
(``numel() == 1``) or rowwise (scale_a (M, 1) or (M,), scale_b (1, N) or (N,)), output bf16/fp16/fp32.

Layout: like ``torch._scaled_mm``, b must be K-major (``b.t()`` contiguous, i.e. an (N, K) weight transposed): FP8
wgmma on Hopper reads both operands K-major only. No autograd (FP8 training recipes quantize gradients themselves).
"""
from __future__ import annotations

from typing import Optional

import torch

from .. import router
from ._checks import check_backend, check_optional_tensor, check_same_device, contiguous_vector
from ._eager import call_op, register_fast_dispatch

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


@torch.library.custom_op("tilewright::scaled_mm", mutates_args=())
def scaled_mm_op(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                 bias: Optional[torch.Tensor], out_dtype: torch.dtype, use_fast_accum: bool,
                 backend: Optional[str]) -> torch.Tensor:
    """2-D core of :func:`scaled_mm` (inputs already checked; scales flattened to (1,) or (M,) / (N,))."""
    M, N = a.shape[0], b.shape[1]
    out = torch.empty((M, N), device=a.device, dtype=out_dtype)
    if M == 0 or N == 0:
        return out
    # the kernel reads bias[n] / scale[i] at ptr + n / ptr + i
    bias, scale_a, scale_b = contiguous_vector(bias), contiguous_vector(scale_a), contiguous_vector(scale_b)
    if a.shape[1] == 0:
        # K = 0: the empty sum is 0 whatever the scales - torch._scaled_mm gives zeros (plus the bias) even for Inf /
        # NaN scales, where dequantizing after the product (0 * inf) gave NaN
        if bias is None:
            out.zero_()
        else:
            out.copy_(bias.to(out_dtype).expand(M, N))
        return out
    choice = router.dispatch("scaled_mm", a, b, backend=backend)
    if choice == "torch":
        out.copy_(scaled_mm_reference(a, b, scale_a, scale_b, bias, out_dtype))
        return out
    from ..triton_kernels.gemm import Dequant, launch_gemm

    launch_gemm(a, b, out, bias=bias, dequant=Dequant(scale_a, scale_b, use_fast_accum))
    return out


@scaled_mm_op.register_fake
def _(a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum, backend):
    return a.new_empty((a.shape[0], b.shape[1]), dtype=out_dtype)


register_fast_dispatch(scaled_mm_op)


def scaled_mm_reference(a, b, scale_a, scale_b, bias=None, out_dtype=torch.bfloat16, compute_dtype=torch.float32):
    """Dequantize and multiply in ``compute_dtype`` (the torch backend; float64 for test references)."""
    sa = scale_a.to(compute_dtype).reshape(-1, 1) if scale_a.numel() > 1 else scale_a.to(compute_dtype).reshape(())
    sb = scale_b.to(compute_dtype).reshape(1, -1) if scale_b.numel() > 1 else scale_b.to(compute_dtype).reshape(())
    y = (a.to(compute_dtype) @ b.to(compute_dtype)) * sa * sb
    if bias is not None:
        y = y + bias.to(compute_dtype)
    return y.to(out_dtype)


def _flat_scale(name: str, scale, rows: int) -> torch.Tensor:
    if not isinstance(scale, torch.Tensor) or scale.dtype != torch.float32:
        raise TypeError(f"{name}: expected a float32 tensor, got "
                        f"{scale.dtype if isinstance(scale, torch.Tensor) else type(scale).__name__}")
    if scale.numel() == 1:
        return scale.reshape(1).contiguous()
    if scale.numel() == rows and (scale.dim() == 1 or scale.dim() == 2 and 1 in scale.shape):
        return scale.reshape(rows).contiguous()
    raise ValueError(f"{name}: expected one scale per tensor (numel 1) or one per "
                     f"{'row of a' if name == 'scale_a' else 'column of b'} ({rows}), got shape {tuple(scale.shape)}")


def scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, *,
              bias: torch.Tensor | None = None, out_dtype: torch.dtype = torch.bfloat16,
              use_fast_accum: bool = False, backend: str | None = None) -> torch.Tensor:
    """FP8 GEMM ``(a * scale_a) @ (b * scale_b) + bias``, fp32 accumulation, like ``torch._scaled_mm``.

    Args:
        a: (M, K) float8_e4m3fn or float8_e5m2.
        b: (K, N) float8, K-major (``weight.t()`` of an (N, K) weight), same device.
        scale_a, scale_b: float32, one per tensor (numel 1) or rowwise: (M,)/(M, 1) and (N,)/(1, N); both must
            use the same granularity.
        bias: optional (N,) in ``out_dtype`` (bf16/fp16) or float32.
        out_dtype: bfloat16 (default), float16 or float32.
        use_fast_accum: as in ``torch._scaled_mm``: False (default) accumulates each K slice from zero and adds it
            in fp32 (cuBLASLt's accurate mode); True keeps the tensor cores' reduced-precision FP8 accumulator across
            K on sm_90 - faster, with errors growing with K.
        backend: None (router), "triton" or "torch".

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
    sa = _flat_scale("scale_a", scale_a, M)
    sb = _flat_scale("scale_b", scale_b, N)
    if (sa.numel() == 1) != (sb.numel() == 1) and not (M == 1 or N == 1):
        raise ValueError("scale_a, scale_b: mix of per-tensor and rowwise scales; use one granularity for both")
    if sa.numel() != sb.numel() and (sa.numel() == 1 or sb.numel() == 1):
        # degenerate shapes (M == 1 or N == 1): bring both to rowwise
        sa, sb = sa.expand(M).contiguous(), sb.expand(N).contiguous()
    if bias is not None:
        if not isinstance(bias, torch.Tensor) or bias.shape != (N,):
            raise ValueError(f"bias: expected shape ({N},), got "
                             f"{tuple(bias.shape) if isinstance(bias, torch.Tensor) else type(bias).__name__}")
        if bias.dtype not in (out_dtype, torch.float32):
            raise TypeError(f"bias: dtype {bias.dtype} must be out_dtype ({out_dtype}) or float32")
    return call_op(scaled_mm_op, a, b, sa, sb, bias, out_dtype, bool(use_fast_accum), backend)
