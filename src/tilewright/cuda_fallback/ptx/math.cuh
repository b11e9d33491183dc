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
