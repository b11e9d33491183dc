"""Facts several layers share, written once: the GEMM families' integer codes (fused activation, tile order) and the
attention head dims.

The Triton kernels take the codes as constexprs and the CUDA kernels as ``-D`` defines / kernel arguments, so one
table keeps the ops, the Triton epilogue and the CUDA epilogue (``cuda_fallback/ptx/gemm_common.cuh``) in step; the
head-dim contract is checked by the op layer and padded by the Triton kernels from the same numbers.
"""
from __future__ import annotations

# Fused activation applied to ``a @ b + bias`` before the residual; 0 = none.
ACTIVATIONS = {None: 0, "relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}

# Order in which a persistent program walks the output tiles (triton_kernels/tile_order.py explains each).
TILE_ORDERS = {"row_major": 0, "grouped": 1, "morton": 2, "hilbert": 3}

# Attention head dims: every multiple of HEAD_DIM_MULTIPLE from MIN_HEAD_DIM to MAX_HEAD_DIM. A multiple of 8: a row
# of 8 fp16/bf16 elements is 16 bytes, the TMA stride granule and the widest vector load; 256: the widest tile the
# attention autotune tables have configs for (and the largest head dim common models use).
MIN_HEAD_DIM = 8
MAX_HEAD_DIM = 256
HEAD_DIM_MULTIPLE = 8
SUPPORTED_HEAD_DIMS = tuple(range(MIN_HEAD_DIM, MAX_HEAD_DIM + 1, HEAD_DIM_MULTIPLE))  # (8, 16, ..., 256)


def supported_head_dim(d: int) -> bool:
    """Whether flash attention takes head dim ``d``: a multiple of 8 from 8 to 256."""
    return MIN_HEAD_DIM <= d <= MAX_HEAD_DIM and d % HEAD_DIM_MULTIPLE == 0
