"""Facts several layers share, written once: the GEMM families' integer codes (fused activation, tile order), the
attention head dims, and the packed-batch descriptor both attention backends' launchers take (:class:`Varlen`).

The Triton kernels take the codes as constexprs and the CUDA kernels as ``-D`` defines / kernel arguments, so one
table keeps the ops, the Triton epilogue and the CUDA epilogue (``cuda_fallback/ptx/gemm_common.cuh``) in step; the
head-dim contract is checked by the op layer and padded by the Triton kernels from the same numbers.
"""
from __future__ import annotations

from typing import NamedTuple

# Fused activation applied to ``a @ b + bias`` before the residual; 0 = none.
ACTIVATIONS = {None: 0, "relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}

# The fused GELU's normal CDF without erf (the GEMM epilogues' 16-bit outputs): Phi(-|x|) = 2^-(1 + |x| P(|x|)) with
# P these coefficients, lowest order first (a weighted least-squares fit of log2 of the tail on [0, 9]; beyond 9 the
# tail keeps falling: under 1e-20 past 13, exactly 0 further out), and Phi(x) = 1 - Phi(-x) for x >= 0. In fp32
# (tests/test_gelu_fast.py, against math.erfc): |error| of Phi < 5e-7 everywhere, GELU's relative error < 1e-4 from
# x = -3 up (1/20 of half a bf16 ulp) and < 0.5% on the tail to -9, where the erff formula loses everything to
# 1 + erf(x) cancelling. Cost: 7 FMAs and one MUFU exponent, where erff takes ~25 FP32 instructions (9 selects
# between two polynomials) - the epilogue's ALU work was what the fused GELU cost (fc1 + GELU 1.39x the plain GEMM,
# H100, perf/LOG.md). The CUDA epilogue (cuda_fallback/ptx/gemm_common.cuh) holds the same numbers; a CPU test keeps
# them equal. fp32 outputs keep the exact erf (the fit's error would be a few fp32 ulps there).
GELU_TAIL_POLY = (1.151131272315979, 0.4589576721191406, 0.053246382623910904, -0.008055775426328182,
                  0.0007974200998432934, -4.4086544221499935e-05, 9.997324923460837e-07)

# Block-scaled FP8 (scaled_mm, quantize_fp8): one scale per FP8_SCALE_BLOCK elements of K - per row of a, per
# FP8_SCALE_BLOCK x FP8_SCALE_BLOCK block of b - the DeepSeek-V3 / TransformerEngine blockwise recipe's 128.
FP8_SCALE_BLOCK = 128

# Order in which a persistent program walks the output tiles (triton_kernels/tile_order.py explains each).
TILE_ORDERS = {"row_major": 0, "grouped": 1, "morton": 2, "hilbert": 3}

# Attention head dims: every multiple of HEAD_DIM_MULTIPLE from MIN_HEAD_DIM to MAX_HEAD_DIM. A multiple of 8: a row
# of 8 fp16/bf16 elements is 16 bytes, the TMA stride granule and the widest vector load; 256: the widest tile the
# attention autotune tables have configs for (and the largest head dim common models use).
MIN_HEAD_DIM = 8
MAX_HEAD_DIM = 256
HEAD_DIM_MULTIPLE = 8
SUPPORTED_HEAD_DIMS = tuple(range(MIN_HEAD_DIM, MAX_HEAD_DIM + 1, HEAD_DIM_MULTIPLE))  # (8, 16, ..., 256)


class Varlen(NamedTuple):
    """Packed sequences (flash-attn's varlen layout) for the attention launchers - the Triton kernels' ``VARLEN`` and
    the sm_90a kernels' ``TW_VARLEN`` builds: q / k / v are (total, H, D) tensors viewed as (1, H, total, D);
    ``cu_q`` / ``cu_k`` contiguous int32 (batch + 1) row offsets on the device; the grids cover ``max_q`` / ``max_k``
    rows per sequence, so they must be at least each sequence's length (the op checks)."""
    cu_q: "torch.Tensor"  # noqa: F821 - an annotation only: this module imports nothing
    cu_k: "torch.Tensor"  # noqa: F821
    max_q: int
    max_k: int

    @property
    def batch(self) -> int:
        """The number of packed sequences."""
        return self.cu_q.shape[0] - 1


def supported_head_dim(d: int) -> bool:
    """Whether flash attention takes head dim ``d``: a multiple of 8 from 8 to 256."""
    return MIN_HEAD_DIM <= d <= MAX_HEAD_DIM and d % HEAD_DIM_MULTIPLE == 0
