// FP8 GEMM for Hopper (sm_90a), the kernel of scaled_mm: out = act(scale * (A @ B) + bias) + residual with e4m3 / e5m2
// operands, fp32 accumulation promoted out of the tensor cores every k-block (accurate mode) or not (fast mode), and
// torch._scaled_mm's per-tensor or row-wise scales applied before the bias. The persistent warp-specialized GEMM of
// gemm_sm90.cu with its TW_FP8 switch on (that file's header has the design); fp8_gemm_sm90.py is the host side. One
// kernel body, several builds: no copy of the pipeline.
#ifndef TW_FP8
#define TW_FP8 1
#endif
#include "gemm_sm90.cu"
