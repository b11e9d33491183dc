"""Op families: contracts, input checks, torch.library registration, fake impls and autograd."""
from .gemm import linear, matmul
from .attention import flash_attention, scaled_dot_product_attention

__all__ = ["linear", "matmul"]
__all__ += ["flash_attention", "scaled_dot_product_attention"]
