"""Op families: contracts, input checks, torch.library registration, fake impls and autograd."""
from .attention import flash_attention, scaled_dot_product_attention
from .gemm import linear, matmul
from .kvcache import flash_attention_with_kvcache
from .rms_norm_linear import clear_folded, rms_norm_linear, rms_norm_linears
from .rotary import apply_rotary
from .scaled_mm import quantize_fp8, scaled_mm
from .swiglu import swiglu
from .swiglu_linear import swiglu_linear
from .varlen import flash_attention_varlen
from ._opaque import opaque_to_dynamo

# one torch.compile graph node each (_opaque.py); not the KV-cache op (it writes new tokens into its cache arguments)
# nor the FP8 ones and varlen (not traced by the model blocks yet; they keep dynamo's tracing)
for _fn in (linear, matmul, rms_norm_linear, rms_norm_linears, flash_attention, scaled_dot_product_attention,
            apply_rotary, swiglu, swiglu_linear):
    opaque_to_dynamo(_fn)
del _fn

__all__ = ["linear", "matmul", "rms_norm_linear", "rms_norm_linears", "scaled_mm", "quantize_fp8", "flash_attention",
           "scaled_dot_product_attention",
           "flash_attention_with_kvcache", "flash_attention_varlen", "swiglu", "swiglu_linear", "apply_rotary"]
