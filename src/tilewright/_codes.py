"""Integer codes every GEMM family shares: the fused activation and the tile order.

The Triton kernels take them as constexprs and the CUDA kernels as ``-D`` defines / kernel arguments, so one table
keeps the ops, the Triton epilogue and the CUDA epilogue (``cuda_fallback/ptx/gemm_common.cuh``) in step.
"""
from __future__ import annotations

# Fused activation applied to ``a @ b + bias`` before the residual; 0 = none.
ACTIVATIONS = {None: 0, "relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}

# Order in which a persistent program walks the output tiles (triton_kernels/tile_order.py explains each).
TILE_ORDERS = {"row_major": 0, "grouped": 1, "morton": 2, "hilbert": 3}
