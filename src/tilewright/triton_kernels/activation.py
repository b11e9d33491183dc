"""Epilogue activations shared by the Triton kernels, computed in fp32 on the accumulator, and the backward's
``grad * act'(preact)`` as one elementwise kernel.

Only core ``tl`` math is used (no libdevice), so the same code runs under ``TRITON_INTERPRET=1``.
"""
import torch
import triton
import triton.language as tl

from .._codes import ACTIVATIONS, GELU_TAIL_POLY  # noqa: F401  (the codes apply_activation switches on)
from .._env import interpreting
from .._record import tensor_signature
from ._runtime import bind, retry_after_oom, store_bound

_G0, _G1, _G2, _G3, _G4, _G5, _G6 = (tl.constexpr(c) for c in GELU_TAIL_POLY)


@triton.jit
def gelu_fast(x):
    """Exact GELU x * Phi(x) with Phi from the fitted tail 2^-(1 + |x| P(|x|)) (_codes.GELU_TAIL_POLY says why and
    how close): 7 FMAs and one exponent where tl.erf costs ~25 FP32 instructions, for 16-bit outputs."""
    a = tl.abs(x)
    p = _G6 * a + _G5
    p = p * a + _G4
    p = p * a + _G3
    p = p * a + _G2
    p = p * a + _G1
    p = p * a + _G0
    tail = tl.exp2(-(p * a + 1.0))
    return x * tl.where(x >= 0.0, 1.0 - tail, tail)


@triton.jit
def apply_activation(x, ACTIVATION: tl.constexpr, EXACT_ERF: tl.constexpr = True):
    """activation(x) for an fp32 block; ACTIVATION is one of the ACTIVATIONS codes. ``EXACT_ERF`` False: GELU by
    :func:`gelu_fast` (for a 16-bit output, where its error never shows)."""
    if ACTIVATION == 1:
        # not tl.maximum: on the GPU it is fmax, which turns NaN into 0 (torch.relu keeps NaN); found by the GPU
        # fuzzer (the interpreter's numpy maximum propagates NaN, so the CPU tier could not see it)
        x = tl.where(x < 0.0, 0.0, x)
    elif ACTIVATION == 2:
        # exact GELU, as torch.nn.functional.gelu(approximate="none")
        if EXACT_ERF:
            x = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
        else:
            x = gelu_fast(x)
    elif ACTIVATION == 3:
        # tanh GELU; tanh(u) = 2 * sigmoid(2u) - 1 keeps us on core tl ops (no libdevice)
        u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        x = 0.5 * x * (1.0 + (2.0 * tl.sigmoid(2.0 * u) - 1.0))
    elif ACTIVATION == 4:
        x = x * tl.sigmoid(x)
    return x


@triton.jit
def activation_derivative(z, ACTIVATION: tl.constexpr):
    """d activation(z) / dz for an fp32 block (ACTIVATION > 0): the derivatives reference.activation_grad_reference
    computes, tanh-GELU's rearranged (below)."""
    if ACTIVATION == 1:
        d = tl.where(z > 0.0, 1.0, 0.0)  # NaN > 0 is false: 0, as (z > 0).float()
    elif ACTIVATION == 2:
        cdf = 0.5 * (1.0 + tl.erf(z * 0.7071067811865476))
        pdf = tl.exp(-0.5 * z * z) * 0.3989422804014327
        d = cdf + z * pdf
    elif ACTIVATION == 3:
        # d = 0.5 (1 + t) + 0.5 z (1 - t^2) k (1 + 3c z^2) with t = tanh(u) = 2 sigmoid(2u) - 1, rewritten without
        # cancellation: 0.5 (1 + t) = sigmoid(2u) and 1 - t^2 = 4 sigmoid(2u) sigmoid(-2u). Forming t first lost
        # ~2.6x torch's fp32 error near u = 0 (interpreter check against float64).
        k = 0.7978845608028654
        u2 = 2.0 * (k * (z + 0.044715 * z * z * z))
        sp = tl.sigmoid(u2)
        sn = tl.sigmoid(-u2)
        d = sp + 2.0 * z * sp * sn * k * (1.0 + 3.0 * 0.044715 * z * z)
    else:
        s = tl.sigmoid(z)
        d = s * (1.0 + z * (1.0 - s))
    return d


@triton.jit
def _activation_grad_kernel(grad_ptr, preact_ptr, out_ptr, n, ACTIVATION: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    g = tl.load(grad_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    z = tl.load(preact_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, (g * activation_derivative(z, ACTIVATION)).to(out_ptr.dtype.element_ty), mask=mask)


# Launches bound per signature (``_runtime.BoundLaunch``): Triton's JIT dispatch costs 20-40 us of host a call, and a
# training step calls this once per activation with the same shapes every time. Key: both inputs' signatures (out is
# a fresh tensor like grad), the activation and the current device.
_bound: dict = {}


def launch_activation_grad(grad: torch.Tensor, preact: torch.Tensor, activation: int) -> torch.Tensor:
    """``grad * act'(preact)`` in grad's dtype, fp32 inside: one read of each input and one write, where the torch
    formula it replaces (reference.activation_grad_reference) ran ~6 elementwise kernels over fp32 temporaries - 2 ms
    of a ViT-L block's 8 ms fwd+bwd on H100 (torch.profiler). Both inputs contiguous and of one shape (the caller
    checks); ``activation`` is an ACTIVATIONS code > 0."""
    out = torch.empty_like(grad)
    n = grad.numel()
    if not n:
        return out
    key = None
    if grad.is_cuda and not interpreting():
        key = (tensor_signature(grad), tensor_signature(preact), tensor_signature(out), activation,
               torch.cuda.current_device())
        bound = _bound.get(key)
        if bound is not None:
            bound(grad.data_ptr(), preact.data_ptr(), out.data_ptr())
            return out
    block = 1024
    grid = (triton.cdiv(n, block),)
    args = dict(grad_ptr=grad, preact_ptr=preact, out_ptr=out, n=n, ACTIVATION=activation, BLOCK=block)
    compiled = retry_after_oom(lambda: _activation_grad_kernel[grid](**args, num_warps=4))
    if key is not None:
        bound = bind(_activation_grad_kernel, compiled, grid, {**args, "num_warps": 4},
                     {"grad_ptr": grad, "preact_ptr": preact, "out_ptr": out})
        if bound is not None:
            store_bound(_bound, key, bound)
    return out
