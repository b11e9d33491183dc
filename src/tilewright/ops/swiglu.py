"""SwiGLU as a torch op: ``tilewright.swiglu``.

``swiglu(gate_up)`` = ``F.silu(gate) * up`` with ``gate, up = gate_up.chunk(2, dim=-1)`` (the layout of a fused
gate/up projection, as in Llama's MLP), or ``swiglu(gate, up)`` for two tensors. One Triton pass forward, one
backward (triton_kernels/swiglu.py); the backward of the one-tensor form writes the gate_up gradient whole.

Ops (``torch.library.custom_op``, so torch.compile / export see them; eager calls skip the dispatcher, ops/_eager.py):

* ``tilewright::swiglu(x, up) -> y``: 2-D core. ``up`` None: x is (M, 2F), y (M, F); else x and up are (M, F).
* ``tilewright::swiglu_backward(dy, x, up) -> (dx, dup)``: dx like x; dup like up (an empty tensor when up is None).

A call on fewer than ``_aten.COMPILED_ELEMENTWISE_MIN`` elements runs torch's own ``F.silu(gate) * up`` instead,
under torch.compile and in eager calls on CUDA tensors alike (``_aten.swiglu_formula_eager``; not with
``TILEWRIGHT_ATEN_BELOW=0`` or a forced backend): there the step is host-bound; inductor fuses the formula into a
kernel its graph launches for a few microseconds, and eagerly torch's ops are C++ calls and C++ autograd nodes, where
this op costs a Python call forward and a Python node backward. Larger calls keep the op: inductor's fused forward
and backward ran 0.95x / 1.05x this kernel at the Llama layer's B 8 x S 2048 (H100,
perf/results/h100/model/elementwise_2026-11-27.csv).
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F

from .._env import interpreting
from ._checks import (check_optional_tensor, check_same_device, check_same_dtype, check_tensor, output_view,
                      traced_into_graph, unit_last)
from . import _aten
from ._eager import call_op, register_fast_dispatch


def _halves(x: torch.Tensor, up: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    if up is None:
        F_ = x.shape[1] // 2
        return x[:, :F_], x[:, F_:]
    return x, up


def _use_kernel(x: torch.Tensor) -> bool:
    return x.is_cuda or interpreting()


@torch.library.custom_op("tilewright::swiglu", mutates_args=())
def swiglu_op(x: torch.Tensor, up: Optional[torch.Tensor]) -> torch.Tensor:
    """2-D core: ``silu(gate) * up`` (see the module docstring for the two forms)."""
    x = unit_last(x)
    up = None if up is None else unit_last(up)
    gate, up_ = _halves(x, up)
    if not _use_kernel(x):
        return (F.silu(gate.float()) * up_.float()).to(x.dtype)
    from ..triton_kernels.swiglu import launch_swiglu

    y = torch.empty(gate.shape, device=x.device, dtype=x.dtype)
    launch_swiglu(gate, up_, y)
    return y


@swiglu_op.register_fake
def _(x, up):
    return x.new_empty((x.shape[0], x.shape[1] // 2 if up is None else x.shape[1]))


@torch.library.custom_op("tilewright::swiglu_backward", mutates_args=())
def swiglu_backward_op(dy: torch.Tensor, x: torch.Tensor,
                       up: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dup) of :func:`swiglu_op` given dy (M, F); dup is an empty tensor in the one-tensor form."""
    x = unit_last(x)
    dy = unit_last(dy)
    up = None if up is None else unit_last(up)
    gate, up_ = _halves(x, up)
    dx = torch.empty(x.shape, device=x.device, dtype=x.dtype)
    dup = torch.empty(up.shape, device=x.device, dtype=x.dtype) if up is not None else x.new_empty((0,))
    dgate, dup_ = _halves(dx, dup if up is not None else None)
    if not _use_kernel(x):
        g, u, d = gate.float(), up_.float(), dy.float()
        s = torch.sigmoid(g)
        dgate.copy_(d * u * s * (1 + g * (1 - s)))
        dup_.copy_(d * g * s)
    else:
        from ..triton_kernels.swiglu import launch_swiglu

        launch_swiglu(gate, up_, dgate, dy=dy, dup=dup_)
    return dx, dup


@swiglu_backward_op.register_fake
def _(dy, x, up):
    return x.new_empty(x.shape), (x.new_empty(up.shape) if up is not None else x.new_empty((0,)))


def _setup_context(ctx, inputs, output):
    x, up = inputs
    ctx.save_for_backward(x, up)


def _backward(ctx, dy):
    x, up = ctx.saved_tensors
    if dy.stride(-1) != 1 or 0 in dy.stride():
        dy = dy.contiguous()
    dx, dup = call_op(swiglu_backward_op, dy, x, up)
    return dx, (dup if up is not None else None)


swiglu_op.register_autograd(_backward, setup_context=_setup_context)


def _no_double_backward(ctx, *grads):
    raise RuntimeError("tilewright.swiglu: double backward (a gradient of a gradient) is not supported: the backward "
                       "is a fused kernel without a derivative of its own. For second-order gradients use "
                       "F.silu(gate) * up.")


swiglu_backward_op.register_autograd(_no_double_backward)
register_fast_dispatch(swiglu_op)
register_fast_dispatch(swiglu_backward_op)


def swiglu(x: torch.Tensor, up: torch.Tensor | None = None) -> torch.Tensor:
    """SwiGLU: ``F.silu(gate) * up`` in one pass (fp32 inside, one rounding), differentiable.

    Args:
        x: ``(..., 2F)`` holding ``[gate | up]`` along the last dim (``gate, up = x.chunk(2, dim=-1)``, the output of
            a fused gate/up projection) when ``up`` is None; else the gate, ``(..., F)``.
        up: optional ``(..., F)``, same shape, dtype and device as ``x``.
    Returns:
        ``(..., F)`` in x's dtype. float16 / bfloat16 / float32; any strides (a last dim that is not unit-stride is
        copied once). The backward writes the gate/up gradient of the one-tensor form as one ``(..., 2F)`` tensor.

    Numerics: ``gate * sigmoid(gate) * up`` in fp32 and one rounding to the output dtype; torch's eager formula
    rounds ``silu(gate)`` to the input dtype first, so this is at least as close to a float64 reference. A small
    call on CUDA tensors (under ``ops._aten.COMPILED_ELEMENTWISE_MIN`` elements of x: host-bound) runs
    ``F.silu(gate) * up`` itself - eagerly, and under torch.compile for inductor to fuse - with torch's numerics;
    ``TILEWRIGHT_ATEN_BELOW=0`` keeps eager calls on the kernel (module docstring).
    """
    check_tensor("x", x, min_dim=1)
    check_optional_tensor("up", up)
    if up is None:
        if x.shape[-1] % 2:
            raise ValueError(f"x: the last dim holds [gate | up] and must be even when up is None, got shape "
                             f"{tuple(x.shape)}")
    else:
        check_tensor("up", up, min_dim=1)
        check_same_dtype("x", x, up=up)
        check_same_device("x", x, up=up)
        if up.shape != x.shape:
            raise ValueError(f"up: expected x's shape {tuple(x.shape)}, got {tuple(up.shape)}")
    if traced_into_graph(x):
        formula = x.numel() < _aten.COMPILED_ELEMENTWISE_MIN
    else:
        formula = not interpreting() and _aten.swiglu_formula_eager(x)
    if formula:
        gate, up_ = x.chunk(2, dim=-1) if up is None else (x, up)
        return F.silu(gate) * up_
    lead = x.shape[:-1]
    rows = math.prod(lead)
    y = call_op(swiglu_op, x.reshape(rows, x.shape[-1]), None if up is None else up.reshape(rows, up.shape[-1]))
    return output_view(y, (*lead, y.shape[-1]))
