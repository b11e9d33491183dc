"""tilewright: fast GPU kernels for PyTorch (Triton first, hand-written CUDA where Triton cannot reach).

Public API: matmul, linear, rms_norm_linear, rms_norm_linears (one RMSNorm shared by several projections), scaled_mm
(FP8) and quantize_fp8 (block scales), flash_attention, scaled_dot_product_attention, flash_attention_with_kvcache
(decode against a paged KV cache), flash_attention_varlen (packed sequences of different lengths), swiglu and
apply_rotary (the MLP's gate and the rotary embedding, one pass each way), swiglu_linear (the gate/up projection and
its SwiGLU in one GEMM for inference on sm_90), nn.Linear, nn.RMSNormLinear, explain /
router, use_backend; clear_folded (drops the folded copy rms_norm_linear keeps beside a weight for inference).
"""
from . import nn, router
from .ops import (apply_rotary, clear_folded, flash_attention, flash_attention_varlen, flash_attention_with_kvcache,
                  linear, matmul, quantize_fp8, rms_norm_linear, rms_norm_linears, scaled_dot_product_attention,
                  scaled_mm, swiglu, swiglu_linear)
from .router import explain, use_backend

__version__ = "0.1.0"
__all__ = ["matmul", "linear", "rms_norm_linear", "rms_norm_linears", "scaled_mm", "quantize_fp8", "flash_attention",
           "scaled_dot_product_attention",
           "flash_attention_with_kvcache", "flash_attention_varlen", "swiglu", "swiglu_linear", "apply_rotary", "nn",
           "router",
           "explain", "use_backend", "clear_folded", "__version__"]
