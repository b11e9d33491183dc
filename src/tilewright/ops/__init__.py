"""Op families: contracts, input checks, torch.library registration, fake impls and autograd."""
from .gemm import linear, matmul
from .rms_norm_linear import rms_norm_linear
from .attention import flash_attention, scaled_dot_product_attention

__all__ = ["linear", "matmul"]
__all__ += ["rms_norm_linear"]
__all__ += ["flash_attention", "scaled_dot_product_attention"]
