"""Epilogue activations shared by the Triton kernels, computed in fp32 on the accumulator.

Only core ``tl`` math is used (no libdevice), so the same code runs under ``TRITON_INTERPRET=1``.
"""
import triton
import triton.language as tl

from .._codes import ACTIVATIONS  # noqa: F401  (the codes apply_activation switches on)


@triton.jit
def apply_activation(x, ACTIVATION: tl.constexpr):
    """activation(x) for an fp32 block; ACTIVATION is one of the ACTIVATIONS codes."""
    if ACTIVATION == 1:
        # not tl.maximum: on the GPU it is fmax, which turns NaN into 0 (torch.relu keeps NaN); found by the GPU
        # fuzzer (the interpreter's numpy maximum propagates NaN, so the CPU tier could not see it)
        x = tl.where(x < 0.0, 0.0, x)
    elif ACTIVATION == 2:
        # exact GELU, as torch.nn.functional.gelu(approximate="none")
        x = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    elif ACTIVATION == 3:
        # tanh GELU; tanh(u) = 2 * sigmoid(2u) - 1 keeps us on core tl ops (no libdevice)
        u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        x = 0.5 * x * (1.0 + (2.0 * tl.sigmoid(2.0 * u) - 1.0))
    elif ACTIVATION == 4:
        x = x * tl.sigmoid(x)
    return x
