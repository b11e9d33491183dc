"""tilewright: fast GPU kernels for PyTorch (Triton first, hand-written CUDA where Triton cannot reach).

Public API: matmul, linear, nn.Linear, router.explain, use_backend.
"""
from . import nn, router
from .ops import linear, matmul
from .ops import rms_norm_linear
from .ops import flash_attention, scaled_dot_product_attention
from .router import explain, use_backend

__version__ = "0.1.0"
__all__ = ["matmul", "linear", "nn", "router", "explain", "use_backend", "__version__"]
__all__ += ["rms_norm_linear"]
__all__ += ["flash_attention", "scaled_dot_product_attention"]
