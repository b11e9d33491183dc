"""Rotary position embedding (rotate-half convention) as one elementwise pass, forward and backward.

``x`` is (B, S, H, D) with unit stride on D and any other strides: the query and key heads of a fused QKV GEMM's
output are rotated where they lie, in one launch for both (the caller views them as one tensor of Hq + Hkv heads).
With R the rotary dim (R <= D, even) and the halves ``x1 = x[..., :R/2]``, ``x2 = x[..., R/2:R]``:

    out1 = x1 * c1 - x2 * s1          out2 = x2 * c2 + x1 * s2          out[..., R:] = x[..., R:]

where ``c1, s1`` are the tables' entries for the first half and ``c2, s2`` for the second: half-width tables (R/2
columns, flash-attn's layout) give the same entries to both halves, full-width tables (R columns, the duplicated
``cat([freqs, freqs])`` layout of Hugging Face / Llama code) their own. The backward applies the transposed rotation:
``dx1 = dy1 * c1 + dy2 * s2``, ``dx2 = dy2 * c2 - dy1 * s1``.

Why a kernel: the rotate-half formula in torch eager (two slices, a negation, a concatenation, two products and a
sum, for q and for k) is ~7 kernels and ~14 passes over q and k per direction; this is one read and one write.
One program per token (b, s): it loads the token's table row once and loops over its heads. fp32 math, one rounding.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._env import interpreting
from .._record import is_recording, record, tensor_signature
from ._runtime import bind, retry_after_oom, store_bound


@triton.jit
def _rotary_kernel(x_ptr, cos_ptr, sin_ptr, out_ptr, S, H,
                   stride_xb, stride_xs, stride_xh, stride_ob, stride_os, stride_oh, stride_cb, stride_cs,
                   HALF: tl.constexpr, PASS: tl.constexpr, FULL_TABLES: tl.constexpr, BACKWARD: tl.constexpr,
                   BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr, BLOCK_PASS: tl.constexpr):
    """Program t = b * S + s. HALF = R / 2 columns per half; PASS = D - R columns copied unchanged."""
    t = tl.program_id(0)
    b = (t // S).to(tl.int64)
    s = (t % S).to(tl.int64)
    rd = tl.arange(0, BLOCK_HALF)
    mask_d = rd < HALF
    c_row = b * stride_cb + s * stride_cs
    c1 = tl.load(cos_ptr + c_row + rd, mask=mask_d, other=0.0).to(tl.float32)
    s1 = tl.load(sin_ptr + c_row + rd, mask=mask_d, other=0.0).to(tl.float32)
    if FULL_TABLES:
        c2 = tl.load(cos_ptr + c_row + HALF + rd, mask=mask_d, other=0.0).to(tl.float32)
        s2 = tl.load(sin_ptr + c_row + HALF + rd, mask=mask_d, other=0.0).to(tl.float32)
    else:
        c2 = c1
        s2 = s1
    x_tok = x_ptr + b * stride_xb + s * stride_xs
    o_tok = out_ptr + b * stride_ob + s * stride_os
    for h0 in range(0, H, BLOCK_H):
        rh = h0 + tl.arange(0, BLOCK_H)
        mask_h = rh < H
        mask = mask_h[:, None] & mask_d[None, :]
        x_rows = x_tok + rh.to(tl.int64)[:, None] * stride_xh
        o_rows = o_tok + rh.to(tl.int64)[:, None] * stride_oh
        a = tl.load(x_rows + rd[None, :], mask=mask, other=0.0).to(tl.float32)
        z = tl.load(x_rows + HALF + rd[None, :], mask=mask, other=0.0).to(tl.float32)
        if BACKWARD:
            o1 = a * c1[None, :] + z * s2[None, :]
            o2 = z * c2[None, :] - a * s1[None, :]
        else:
            o1 = a * c1[None, :] - z * s1[None, :]
            o2 = z * c2[None, :] + a * s2[None, :]
        tl.store(o_rows + rd[None, :], o1.to(out_ptr.dtype.element_ty), mask=mask)
        tl.store(o_rows + HALF + rd[None, :], o2.to(out_ptr.dtype.element_ty), mask=mask)
        if PASS > 0:  # columns past the rotary dim: copied
            rp = tl.arange(0, BLOCK_PASS)
            mask_p = mask_h[:, None] & (rp < PASS)[None, :]
            rest = tl.load(x_rows + 2 * HALF + rp[None, :], mask=mask_p, other=0.0)
            tl.store(o_rows + 2 * HALF + rp[None, :], rest.to(out_ptr.dtype.element_ty), mask=mask_p)


# Launches bound per signature (see swiglu.py): key = every tensor's signature, the direction, the current device.
_bound: dict = {}


def launch_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, out: torch.Tensor, rotary_dim: int,
                  *, backward: bool = False) -> None:
    """``out`` = x rotated (or, ``backward``, the gradient ``dy = x`` rotated back). x, out: (B, S, H, D) with unit
    stride on D; cos, sin: (Bc, Sc, W) with unit last stride and the same strides (one set of table strides in the
    kernel), Bc in {1, B} (read with stride 0 when 1), Sc >= S, W = rotary_dim / 2 (half tables) or rotary_dim (full
    tables). Checks are the op layer's job."""
    B, S, H, D = x.shape
    if x.numel() == 0:
        return
    tensors = (x, cos, sin, out)
    key = None
    if x.is_cuda and not interpreting():
        key = (*(tensor_signature(t) for t in tensors), rotary_dim, backward, torch.cuda.current_device())
        bound = _bound.get(key)
        if bound is not None:
            bound(*[t.data_ptr() for t in tensors])
            if is_recording():  # (an op replay records this launch: ops/rotary.py)
                record(bound, {"x_ptr": x, "cos_ptr": cos, "sin_ptr": sin, "out_ptr": out})
            return
    half = rotary_dim // 2
    width = cos.shape[-1]
    block_h = min(triton.next_power_of_2(H), max(1, 2048 // triton.next_power_of_2(max(half, 1))))
    grid = (B * S,)
    args = dict(x_ptr=x, cos_ptr=cos, sin_ptr=sin, out_ptr=out, S=S, H=H,
                stride_xb=x.stride(0), stride_xs=x.stride(1), stride_xh=x.stride(2),
                stride_ob=out.stride(0), stride_os=out.stride(1), stride_oh=out.stride(2),
                stride_cb=cos.stride(0) if cos.shape[0] > 1 else 0, stride_cs=cos.stride(1),
                HALF=half, PASS=D - rotary_dim, FULL_TABLES=width == rotary_dim, BACKWARD=backward,
                BLOCK_H=block_h, BLOCK_HALF=triton.next_power_of_2(max(half, 1)),
                BLOCK_PASS=triton.next_power_of_2(max(D - rotary_dim, 1)))
    compiled = retry_after_oom(lambda: _rotary_kernel[grid](**args, num_warps=4))
    if key is not None:
        roles = {"x_ptr": x, "cos_ptr": cos, "sin_ptr": sin, "out_ptr": out}
        bound = bind(_rotary_kernel, compiled, grid, {**args, "num_warps": 4}, roles)
        if bound is not None:
            store_bound(_bound, key, bound)
        record(bound, roles)
