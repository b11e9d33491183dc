// Fast math for softmax: MUFU exponent and fp32 row reductions across the four lanes of an mma fragment row.
#pragma once
#include "common.cuh"

// -inf without <math.h> (the sources also compile under NVRTC, which has no system headers): the masked score.
#define TW_NEG_INF __int_as_float(0xff800000)

// 2^x on the MUFU unit (ex2.approx, ~2 ulp, subnormals flushed); ex2(-inf) = 0, which masked scores rely on.
TW_DEVICE float ex2_approx(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

// 2^x on the FMA and ALU pipes, for a softmax exponent x <= 0, so that a kernel whose exponentials saturate the MUFU
// unit (16 a clock per SM) can move a share of them off it: x = n + f with n = round(x) from the 1.5 * 2^23 add (the
// integer lands in the low mantissa bits; __fadd_rn so that no contraction or reassociation folds the add and the
// subtract away), 2^f on [-0.5, 0.5] by a degree-3 polynomial fitted for relative error (< 7.5e-5, well below the
// 16-bit rounding P gets), then n added to the exponent field. Below -125 (and for -inf, a masked score) it returns
// exactly 0, as ex2.approx.ftz flushes there; a NaN input gives 0 too (fmaxf drops it) - the caller's row keeps
// its NaN through the MUFU exponentials of the same row.
TW_DEVICE float ex2_fma(float x) {
  const float xc = fmaxf(x, -126.0f);
  const float r = __fadd_rn(xc, 12582912.0f);
  const float f = __fsub_rn(xc, __fsub_rn(r, 12582912.0f));
  const float p = fmaf(fmaf(fmaf(0.05517167f, f, 0.24261114f), f, 0.69326097f), f, 0.99992806f);
  // unsigned: the shift pushes r's exponent bits out of the word (a signed overflow would be undefined)
  const unsigned scaled = __float_as_uint(p) + (__float_as_uint(r) << 23);
  return xc < -125.0f ? 0.0f : __uint_as_float(scaled);
}

// tanh(x) on the MUFU unit (tanh.approx, sm_75+; relative error ~2^-11): the logit soft cap, cap * tanh(s / cap),
// whose result is rounded to 16 bits as P anyway.
TW_DEVICE float tanh_approx(float x) {
  float r;
  asm("tanh.approx.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

// max(a, b) that returns NaN when either is NaN (max.NaN, sm_80+; one FMNMX like fmaxf). fmaxf drops a NaN, so a
// softmax row max through it hides a NaN score: with a +inf score beside it the row's logsumexp came out +inf where
// torch's is NaN (GPU fuzz).
TW_DEVICE float max_nan(float a, float b) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

// Max (NaN-propagating) / sum over the 4 lanes (lane % 4) that hold one row of an mma / wgmma accumulator fragment.
TW_DEVICE float quad_max(float x) {
  x = max_nan(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return max_nan(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
TW_DEVICE float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
