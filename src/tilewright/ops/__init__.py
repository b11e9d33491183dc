"""Op families: contracts, input checks, torch.library registration, fake impls and autograd."""
from .gemm import linear, matmul

__all__ = ["linear", "matmul"]
