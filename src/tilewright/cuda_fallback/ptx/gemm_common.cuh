// Device helpers shared by the GEMM kernels (sm_90a WGMMA, sm_100a tcgen05, sm_80+/sm_120 mma.sync): the fused
// epilogue's activation and the persistent tile order. Not PTX wrappers; they live under ptx/ so that the build
// cache key (which hashes every ptx/*.cuh) covers them.
#pragma once
#include "common.cuh"
#include "math.cuh"

// Build switches every GEMM kernel takes (the launcher always passes them with -D; these defaults serve standalone
// builds such as build-check): A stored M-major, fp16 (else bf16), activation code, bias, residual.
#ifndef TW_A_MN
#define TW_A_MN 0
#endif
#ifndef TW_FP16
#define TW_FP16 0
#endif
#ifndef TW_ACT
#define TW_ACT 0
#endif
#ifndef TW_BIAS
#define TW_BIAS 0
#endif
#ifndef TW_RES
#define TW_RES 0
#endif

namespace tw {

// Exact GELU, x * Phi(x), with the normal CDF from a fitted tail instead of erff: Phi(-|x|) = 2^-(1 + |x| P(|x|)),
// Phi(x) = 1 - Phi(-x) for x >= 0 (tilewright/_codes.py GELU_TAIL_POLY holds the same coefficients and says how they
// were fitted). Why: these epilogues store bf16 / fp16, where the fit's 3.6e-7 error in Phi never shows, and erff's
// ~25 FP32 instructions per element (two polynomials merged by 9 selects) were the fused GELU's whole cost in the
// cooperative kernel's exposed epilogue (fc1 + GELU 1.39x the plain GEMM on H100); this is 7 FMAs, a select, a
// subtract and one MUFU exponent (a pipe of its own). The negative tail is formed directly, without erff's
// 1 + erf(x) cancellation; -inf and NaN give what the erff formula gives (NaN).
TW_DEVICE float gelu_fast(float x) {
  const float a = fabsf(x);
  float p = 9.997324923460837e-07f;
  p = fmaf(p, a, -4.4086544221499935e-05f);
  p = fmaf(p, a, 0.0007974200998432934f);
  p = fmaf(p, a, -0.008055775426328182f);
  p = fmaf(p, a, 0.053246382623910904f);
  p = fmaf(p, a, 0.4589576721191406f);
  p = fmaf(p, a, 1.151131272315979f);
  const float tail = ex2_approx(-fmaf(p, a, 1.0f));  // Phi(-|x|); flushed to 0 below 2^-126
  // __fmul_rn: the product is rounded here, never contracted into an FFMA with the caller's residual add - nvcc
  // contracts across the inlined call or not depending on the code around it, so two builds of one epilogue (the
  // plain GEMM and its sums-of-squares twin) differed by an fp32 ulp, one fp16 ulp in a few outputs
  return __fmul_rn(x, x >= 0.0f ? 1.0f - tail : tail);
}

// Activation codes match tilewright/_codes.py ACTIVATIONS; CODE is a compile-time constant.
template <int CODE>
TW_DEVICE float activation(float x) {
  if constexpr (CODE == 1) return x < 0.0f ? 0.0f : x;  // not fmaxf: fmaxf(NaN, 0) = 0, torch.relu(NaN) = NaN
  else if constexpr (CODE == 2) return gelu_fast(x);
  else if constexpr (CODE == 3)  // __fmul_rn as gelu_fast's: no contraction with the residual add after it
    return __fmul_rn(0.5f * x, 1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
  else if constexpr (CODE == 4) return x / (1.0f + expf(-x));
  else return x;
}

// silu(x) = x * sigmoid(x) with the fast exponent and division (MUFU.EX2, MUFU.RCP): the gated-linear epilogue's
// (gemm_sm90.cu TW_GLU) silu(gate) * up, stored as bf16 / fp16, where their few-ulp fp32 errors never show. Why not
// activation<4>'s expf and IEEE division: ~26 instructions an element, which doubled the cooperative tile's SASS
// (1,688 -> 3,360, nvcc 13.0; 2,152 with this) in an epilogue that runs while no wgmma does. Large |x| behaves as the
// exact formula: a very negative x gives -0 (__fdividef returns 0 for a divisor past 2^126), a large x gives x, NaN
// stays NaN.
TW_DEVICE float silu_fast(float x) { return __fdividef(x, 1.0f + __expf(-x)); }

// (row, col) of a Hilbert index inside a 2^log2 x 2^log2 square.
TW_DEVICE void hilbert_decode(int d, int log2, int& row, int& col) {
  int x = 0, y = 0, t = d;
  for (int level = 0; level < log2; ++level) {
    int s = 1 << level;
    int rx = (t >> 1) & 1;
    int ry = (t ^ rx) & 1;
    if (ry == 0) {
      if (rx == 1) {
        x = s - 1 - x;
        y = s - 1 - y;
      }
      int tmp = x;
      x = y;
      y = tmp;
    }
    x += s * rx;
    y += s * ry;
    t >>= 2;
  }
  row = y;
  col = x;
}

// (row, col) of a Z-order index: even bits are the column, odd bits the row.
TW_DEVICE void morton_decode(int d, int log2, int& row, int& col) {
  row = 0;
  col = 0;
  for (int b = 0; b < log2; ++b) {
    col |= ((d >> (2 * b)) & 1) << b;
    row |= ((d >> (2 * b + 1)) & 1) << b;
  }
}

// Linear tile index -> (pid_m, pid_n). order: 0 row-major, 1 grouped, 2 morton, 3 hilbert (group a power of two).
TW_DEVICE void tile_coords(int t, int num_m, int num_n, int order, int group, int& pm, int& pn) {
  if (order == 0) {
    pm = t / num_n;
    pn = t % num_n;
    return;
  }
  int per_band = group * num_n;
  int band = t / per_band;
  int first_m = band * group;
  int rows = min(num_m - first_m, group);
  int local = t - band * per_band;
  pm = first_m + local % rows;
  pn = local / rows;
  if (order == 1 || rows != group) return;
  int per_square = group * group;
  int square = local / per_square;
  int first_n = square * group;
  if (num_n - first_n < group) return;  // partial square at the right edge: grouped order
  int log2 = 31 - __clz(group);
  int r, c;
  if (order == 2) morton_decode(local - square * per_square, log2, r, c);
  else hilbert_decode(local - square * per_square, log2, r, c);
  pm = first_m + r;
  pn = first_n + c;
}

// A 16-bit element (bf16, or fp16 when FP16) -> fp32, exact.
template <bool FP16>
TW_DEVICE float elem_to_f32(unsigned short h) {
  if constexpr (FP16) return f16_bits_to_f32(h);
  else return bf16_bits_to_f32(h);
}

// One output element of the fused epilogue for the scalar-store kernels (sm_100, sm_120): activation(acc + bias),
// plus the residual element at r when the kernel is built with TW_RES.
template <int CODE>
TW_DEVICE float epilogue_value(float acc, float b, const unsigned short* r) {
  float v = activation<CODE>(acc + b);
  if constexpr (TW_RES) v += elem_to_f32<(TW_FP16 != 0)>(*r);
  return v;
}

// Two 16-bit elements p[0] and p[stride] -> one register, p[0] in the low half; `second` false leaves the high half
// 0. With `vec` (stride 1, p 4-byte aligned) one 32-bit load. The epilogues load every operand element they need for
// a stretch of columns into registers this way *before* the stretch's stmatrix stores: those asm statements clobber
// memory, so a load written after one cannot be hoisted above it and each column pair would wait out a full
// global-load latency in turn (the sm_90a epilogue's bias + residual cost 15-47% of a 16384 x 1024..4096 GEMM so).
TW_DEVICE tw_u32 load_pair(const unsigned short* p, long long stride, bool second, bool vec) {
  if (vec && second) return *reinterpret_cast<const tw_u32*>(p);
  const tw_u32 lo = p[0];
  const tw_u32 hi = second ? p[stride] : 0u;
  return lo | (hi << 16);
}

// The low / high 16-bit element of a load_pair register -> fp32, exact.
template <bool FP16>
TW_DEVICE float pair_lo(tw_u32 v) { return elem_to_f32<FP16>((unsigned short)(v & 0xffffu)); }
template <bool FP16>
TW_DEVICE float pair_hi(tw_u32 v) { return elem_to_f32<FP16>((unsigned short)(v >> 16)); }


}  // namespace tw
