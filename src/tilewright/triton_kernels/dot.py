"""``acc + a @ b`` for every kernel family, with the fp32 accumulation order made explicit.

fp32 operands (``input_precision="ieee"``) make ``tl.dot`` an FFMA chain on the CUDA cores: each output adds its
products one after the other into the accumulator it is given. Chained across a whole reduction (GEMM K, attention's
keys or queries), rounding error grows ~K; summing each tile's products from zero and adding the tile sums grows it
~(BLOCK + K / BLOCK), at one FADD per BLOCK FFMAs. On H100 the chained form missed the "2x torch's own error" rule by
1.2-2.2x at K = 4096 (GPU fuzzer). Triton rewrites ``acc + dot(a, b, 0)`` back into ``dot(a, b, acc)`` when the 0 is
a constant, so the tile starts from ``zero``, a 0.0 the caller computes from a runtime value. 16-bit and FP8 operands
accumulate in the tensor cores' fp32 registers; their order is left to the hardware.
"""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def dot_accumulate(a, b, acc, zero, DOT_PRECISION: tl.constexpr):
    """``acc + a @ b`` (fp32 result); ``zero`` must be 0.0 but not a compile-time constant (e.g. ``K * 0.0``)."""
    if DOT_PRECISION == "ieee":
        return acc + tl.dot(a, b, tl.full(acc.shape, zero, tl.float32), input_precision="ieee")
    return tl.dot(a, b, acc, input_precision=DOT_PRECISION)
