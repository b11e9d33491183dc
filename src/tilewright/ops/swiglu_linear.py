"""SwiGLU of a fused gate/up projection as one op: ``tilewright.swiglu_linear``.

``swiglu_linear(x, weight)`` = ``tilewright.swiglu(F.linear(x, weight))`` = ``F.silu(x @ Wg^T) * (x @ Wu^T)`` with
``Wg, Wu = weight.chunk(2, dim=0)`` - the Llama MLP's gate and up projections as one (2F, K) weight.

Why an op of its own: the pair writes the (M, 2F) projection, reads it back and writes (M, F) - at the Llama layer's
B 8 x S 2048 (F 5632) ~0.74 GB, ~0.13 ms of a 2.7 ms forward on an H200, the SwiGLU pass's own time. Where the sm_90a
GEMM runs (an H100 / H200, bf16 / fp16, the plain GEMM's measured win region), a call autograd does not record takes
its gated-linear build (cuda_fallback/gemm_sm90.py ``launch_cuda_swiglu``): the GEMM's epilogue pairs each gate
column with its up column in registers and stores the (M, F) result alone. Everywhere else - and for every call
autograd records, whose backward needs the projection - the op is the pair itself (``linear`` then ``swiglu``, each
with its own kernels and autograd), so it is never slower than writing the pair by hand.

Op (``torch.library.custom_op``): ``tilewright::swiglu_linear(x, weight) -> y``, 2-D core, inference only (no
autograd formula: a call that needs gradients runs the pair, which has one). ``TILEWRIGHT_SWIGLU_FUSED=0`` keeps every
call on the pair (A/B measurements).
"""
from __future__ import annotations

import math
import os
from typing import Optional

import torch

from . import _dtensor
from ._checks import check_optional_tensor, check_same_device, check_same_dtype, check_tensor, output_view
from ._eager import call_op, register_fast_dispatch
from .gemm import linear
from .swiglu import swiglu

FUSED_ENV = "TILEWRIGHT_SWIGLU_FUSED"


def fused_region(x: torch.Tensor, weight: torch.Tensor) -> tuple[bool, str]:
    """The shape-and-device part of :func:`fused_applies`, decidable while torch.compile traces (x of any rank): a
    CUDA tensor on an sm_90 device in bf16 / fp16, ``TILEWRIGHT_SWIGLU_FUSED`` not "0", and the plain GEMM's measured
    win region for the (M, 2F, K) problem - outside it cuBLAS or Triton runs the projection faster than this kernel's
    mainloop, and a call there is the pair itself, with the pair's routes (a small call's ATen ops, which a compiled
    graph fuses: measured, the Llama B1 forward lost 0.97x -> 0.61x torch.compile's speed with every call inside this
    op's node, perf/results/h200/model/model_2026-12-02_s40.csv)."""
    if os.environ.get(FUSED_ENV) == "0":
        return False, f"{FUSED_ENV}=0"
    if not x.is_cuda or x.dtype not in (torch.bfloat16, torch.float16):
        return False, "the fused kernel takes CUDA bf16 / fp16 tensors"
    if torch.cuda.get_device_capability(x.device)[0] != 9:
        return False, "the fused kernel is the sm_90a GEMM's (an H100 / H200)"
    from ..cuda_fallback import gemm_sm90

    return gemm_sm90.preferred(math.prod(x.shape[:-1]), weight.shape[0], x.shape[-1])


def fused_applies(x: torch.Tensor, weight: torch.Tensor) -> tuple[bool, str]:
    """Whether a 2-D call that autograd does not record takes the fused kernel, and why (not): :func:`fused_region`,
    and the gated-linear build's constraints and first-use self-check."""
    ok, why = fused_region(x, weight)
    if not ok:
        return ok, why
    from ..cuda_fallback import gemm_sm90

    return gemm_sm90.glu_ready(x, weight.t())


@torch.library.custom_op("tilewright::swiglu_linear", mutates_args=())
def swiglu_linear_op(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """2-D core: x (M, K), weight (2F, K) -> (M, F) = silu(x @ Wg^T) * (x @ Wu^T); the fused kernel where
    :func:`fused_applies`, else the pair."""
    if fused_applies(x, weight)[0]:
        return fused_or_pair(x, weight)
    return swiglu(linear(x, weight))


@swiglu_linear_op.register_fake
def _(x, weight):
    return x.new_empty((x.shape[0], weight.shape[0] // 2))


register_fast_dispatch(swiglu_linear_op)


def records_grad(*tensors) -> bool:
    """Whether autograd records a call on these tensors (grad mode on and one of them requires grad)."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def swiglu_linear(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """SwiGLU of a fused gate/up projection: ``tilewright.swiglu(F.linear(x, weight, bias))``, in one kernel where
    it can be.

    Args:
        x: ``(..., K)`` float16 / bfloat16 / float32.
        weight: ``(2F, K)``, the gate projection's F rows then the up projection's (``torch.cat([w_gate, w_up])``,
            the nn.Linear layout of a fused gate/up layer).
        bias: optional ``(2F,)`` (the pair runs then: the fused kernel has no bias).
    Returns:
        ``(..., F)`` in x's dtype, differentiable in x, weight and bias.

    Where it runs: a call autograd does not record (inference, ``torch.no_grad()``) on an H100 / H200 in bf16 / fp16
    with a problem in the sm_90a GEMM's measured region (:func:`fused_region`) takes the fused kernel - the (..., 2F)
    projection is never written (module docstring). Every other call runs :func:`tilewright.linear` then
    :func:`tilewright.swiglu`, with their routes, kernels and autograd.

    Numerics: the fused kernel forms ``silu(gate) * up`` from the fp32 accumulators and rounds once; the pair rounds
    the projection to x's dtype first, as torch's ``F.silu(gate) * up`` does (which also rounds silu's output). The
    fused result is at least as close to a float64 reference.
    """
    check_tensor("x", x, min_dim=1)
    check_tensor("weight", weight, dims=(2,))
    check_optional_tensor("bias", bias)
    check_same_dtype("x", x, weight=weight, **({"bias": bias} if bias is not None else {}))
    check_same_device("x", x, weight=weight, **({"bias": bias} if bias is not None else {}))
    if weight.shape[1] != x.shape[-1]:
        raise ValueError(f"weight: expected (2F, K) with K = x's last dim {x.shape[-1]}, got {tuple(weight.shape)}")
    if weight.shape[0] % 2:
        raise ValueError(f"weight: its rows hold [gate; up] and must be even in number, got {tuple(weight.shape)}")
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise ValueError(f"bias: expected ({weight.shape[0]},), got {tuple(bias.shape)}")
    if bias is not None or records_grad(x, weight, bias) or x.numel() == 0 or _dtensor.is_dtensor(x) \
            or _dtensor.is_dtensor(weight) or not fused_region(x, weight)[0]:
        return swiglu(linear(x, weight, bias))  # (DTensor arguments: the pair's sharding strategies)
    lead = x.shape[:-1]
    y = call_op(swiglu_linear_op, x.reshape(math.prod(lead), x.shape[-1]), weight)
    return output_view(y, (*lead, y.shape[-1]))


def fused_or_pair(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The gated-linear GEMM on a 2-D x already known to fit (:func:`fused_applies`), or the pair where its launch
    declines."""
    from ..cuda_fallback import gemm_sm90

    y = torch.empty((x.shape[0], weight.shape[0] // 2), device=x.device, dtype=x.dtype)
    if gemm_sm90.try_launch_swiglu(x, weight.t(), y):
        return y
    return swiglu(linear(x, weight))
