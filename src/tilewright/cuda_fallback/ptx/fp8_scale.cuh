// The FP8 GEMM builds' switches shared by the sm_90a and sm_100a kernels: TW_FP8 (0: 16-bit operands) and TW_SCALE
// (1: per-tensor, one fp32 each; 2: row-wise, fp32 (M,) and (N,)), and the kernel parameters the scales add -
// device pointers, so a CUDA graph can update them in place. Included by the kernel file before its kernel.
#pragma once
#ifndef TW_FP8
#define TW_FP8 0
#endif
#ifndef TW_SCALE
#define TW_SCALE (TW_FP8 ? 1 : 0)
#endif
#if TW_FP8
#define TW_SCALE_PARAMS , const float* __restrict__ scale_a, const float* __restrict__ scale_b
#else
#define TW_SCALE_PARAMS
#endif
