"""SwiGLU, ``silu(gate) * up``, forward and backward as one elementwise pass each.

Why a kernel of its own: the Llama MLP's ``F.silu(gate) * up`` runs in torch eager as two kernels forward (silu
writes a rounded copy of gate that mul reads back) and four to five backward (mul's two products, silu's derivative,
the concatenation of the two halves' gradients into the gate_up GEMM's gradient). On the Llama layer at B 8 x S 2048
(FFN 5632) that is ~1.4 GB of traffic per training step where one pass each way needs ~0.6 GB.

Both kernels read gate and up through their own row strides, so the two halves of one fused gate_up output
(``gate_up.chunk(2, dim=-1)``) are read in place, and the backward writes d(gate) and d(up) into the halves of one
(M, 2F) gradient - the gate_up GEMM's output gradient - with no concatenation. Math in fp32, one rounding per output:
``y = g * sigmoid(g) * u``; ``dg = dy * u * s * (1 + g * (1 - s))``, ``du = dy * g * s`` with ``s = sigmoid(g)``
recomputed (nothing but the inputs is saved for the backward). Only core ``tl`` math, so the interpreter runs it.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._env import interpreting
from .._record import tensor_signature
from ._runtime import bind, retry_after_oom, store_bound


@triton.jit
def _swiglu_kernel(gate_ptr, up_ptr, dy_ptr, out_ptr, dup_ptr, M, F,
                   stride_gm, stride_um, stride_dym, stride_om, stride_dum,
                   BACKWARD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_F: tl.constexpr):
    """Program (i, j): rows [i BLOCK_M, ...) x columns [j BLOCK_F, ...). Forward: out = silu(gate) * up.
    BACKWARD: out = d(gate), dup_ptr = d(up), given dy. Every row offset is int64 (M x 2F can pass 2^31)."""
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rf = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
    mask = (rm < M)[:, None] & (rf < F)[None, :]
    rows = rm.to(tl.int64)[:, None]
    cols = rf[None, :]
    g = tl.load(gate_ptr + rows * stride_gm + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(up_ptr + rows * stride_um + cols, mask=mask, other=0.0).to(tl.float32)
    s = tl.sigmoid(g)
    if BACKWARD:
        dy = tl.load(dy_ptr + rows * stride_dym + cols, mask=mask, other=0.0).to(tl.float32)
        dg = dy * u * s * (1.0 + g * (1.0 - s))
        du = dy * g * s
        tl.store(out_ptr + rows * stride_om + cols, dg.to(out_ptr.dtype.element_ty), mask=mask)
        tl.store(dup_ptr + rows * stride_dum + cols, du.to(dup_ptr.dtype.element_ty), mask=mask)
    else:
        tl.store(out_ptr + rows * stride_om + cols, (g * s * u).to(out_ptr.dtype.element_ty), mask=mask)


# Launches bound per signature (``_runtime.BoundLaunch``): Triton's JIT dispatch costs 20-40 us of host a call, more
# than this kernel on a small MLP. Key: every tensor's signature (shape, strides, dtype, device, alignment), the
# direction, and the current device.
_bound: dict = {}


def _tile(F: int) -> tuple[int, int]:
    """(BLOCK_M, BLOCK_F): up to 1024 columns of a row, rows added while the tile stays at 2048 elements (16 per
    thread over 4 warps: 16-byte accesses of bf16, a full wave of loads in flight)."""
    block_f = min(triton.next_power_of_2(max(F, 1)), 1024)
    return max(1, 2048 // block_f), block_f


def launch_swiglu(gate: torch.Tensor, up: torch.Tensor, out: torch.Tensor, *, dy: torch.Tensor | None = None,
                  dup: torch.Tensor | None = None) -> None:
    """Forward (``dy`` None): ``out = silu(gate) * up``. Backward: ``out = d(gate)``, ``dup = d(up)`` given ``dy``.

    Every tensor (M, F) with unit column stride and any row stride (the op layer's job); nothing is returned."""
    M, F = gate.shape
    if M == 0 or F == 0:
        return
    backward = dy is not None
    tensors = (gate, up, dy, out, dup)
    key = None
    if gate.is_cuda and not interpreting():
        key = (*(tensor_signature(t) for t in tensors), torch.cuda.current_device())
        bound = _bound.get(key)
        if bound is not None:
            bound(*[t.data_ptr() for t in tensors if t is not None])
            return
    block_m, block_f = _tile(F)
    grid = (triton.cdiv(M, block_m), triton.cdiv(F, block_f))
    args = dict(gate_ptr=gate, up_ptr=up, dy_ptr=dy if backward else gate, out_ptr=out,
                dup_ptr=dup if backward else out, M=M, F=F,
                stride_gm=gate.stride(0), stride_um=up.stride(0), stride_dym=dy.stride(0) if backward else 0,
                stride_om=out.stride(0), stride_dum=dup.stride(0) if backward else 0,
                BACKWARD=backward, BLOCK_M=block_m, BLOCK_F=block_f)
    compiled = retry_after_oom(lambda: _swiglu_kernel[grid](**args, num_warps=4))
    if key is not None:
        roles = {name: t for name, t in zip(("gate_ptr", "up_ptr", "dy_ptr", "out_ptr", "dup_ptr"), tensors)
                 if t is not None}
        bound = bind(_swiglu_kernel, compiled, grid, {**args, "num_warps": 4}, roles)
        if bound is not None:
            store_bound(_bound, key, bound)
