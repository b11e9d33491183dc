"""Op families: contracts, input checks, torch.library registration, fake impls and autograd."""
from .attention import flash_attention, scaled_dot_product_attention
from .gemm import linear, matmul
from .kvcache import flash_attention_with_kvcache
from .rms_norm_linear import rms_norm_linear
from .rotary import apply_rotary
from .scaled_mm import quantize_fp8, scaled_mm
from .swiglu import swiglu
from .varlen import flash_attention_varlen

__all__ = ["linear", "matmul", "rms_norm_linear", "scaled_mm", "quantize_fp8", "flash_attention",
           "scaled_dot_product_attention",
           "flash_attention_with_kvcache", "flash_attention_varlen", "swiglu", "apply_rotary"]
