// The attention kernels' wgmma calls and 16-bit packing for the element type the build chose (TW_FP16 = 1: fp16,
// else bf16): one definition each for the forward (attention_sm90.cu) and the backward (attention_bwd_sm90.cu).
// The including file defines TW_FP16 (default 0) before including this header.
#pragma once
#include "common.cuh"
#include "wgmma.cuh"

#ifndef TW_FP16
#define TW_FP16 0
#endif

// Two fp32 values as one register of 16-bit pairs of the build's type (lo in the low half): the register-A
// fragment format.
TW_DEVICE tw_u32 pack2(float lo, float hi) { return pack_pair<(TW_FP16 != 0)>(lo, hi); }

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// D(64 x N) (+)= A(64 x 16) B(16 x N), both from shared memory; K-major by default (TRANS 0, 0), MN-major where
// TRANS_A / TRANS_B is 1 (A stored (k, m), B stored (k, n): the backward's dQ = dS K reads dS^T and K so). Templates
// on the width, so `if constexpr` discards the wrappers of the other widths.
template <int N, int TRANS_A = 0, int TRANS_B = 0>
TW_DEVICE void mma_ss(float (&d)[N / 2], tw_u64 da, tw_u64 db, int scale_d) {
  if constexpr (N == 128) {
    if constexpr (TW_FP16) wgmma_m64n128k16_f16<TRANS_A, TRANS_B>(d, da, db, scale_d);
    else wgmma_m64n128k16_bf16<TRANS_A, TRANS_B>(d, da, db, scale_d);
  } else if constexpr (N == 176) {  // the forward's 176-key blocks (variant c176, head dim 128)
    if constexpr (TW_FP16) wgmma_m64n176k16_f16<TRANS_A, TRANS_B>(d, da, db, scale_d);
    else wgmma_m64n176k16_bf16<TRANS_A, TRANS_B>(d, da, db, scale_d);
  } else if constexpr (N == 192) {  // and its 192-key blocks
    if constexpr (TW_FP16) wgmma_m64n192k16_f16<TRANS_A, TRANS_B>(d, da, db, scale_d);
    else wgmma_m64n192k16_bf16<TRANS_A, TRANS_B>(d, da, db, scale_d);
  } else {
    static_assert(N == 64, "SS widths 64, 128, 176 and 192");
    if constexpr (TW_FP16) wgmma_m64n64k16_f16<TRANS_A, TRANS_B>(d, da, db, scale_d);
    else wgmma_m64n64k16_bf16<TRANS_A, TRANS_B>(d, da, db, scale_d);
  }
}

// D(64 x N) = A(64 x DIM) B(N x DIM)^T over a head dim of DIM, both operands K-major in shared memory as DIM / 64
// chunks of 64 columns (rows of 128 bytes, 128B-swizzled, one TMA box each): da / db the descriptors (LBO 16) of A's
// and B's first chunk, chunk j a_chunk * j / b_chunk * j bytes on. A k-step (16 columns) starts 32 bytes further into
// its chunk; the first overwrites D. The attention kernels' S = Q K^T (forward, dQ) and S^T = K Q^T, dP^T = V dO^T
// (dK / dV).
// Why descriptors, not addresses: the caller builds each operand's once from a warp-uniform address, and every
// wgmma's is that one advanced by its byte offset (wgmma_desc_advance: a 32-bit add to the low word, the same 64-bit
// value as the descriptor of the advanced address). Built per wgmma from an address ptxas does not know to be
// warp-uniform (a consumer's rows through wg - 1), or from loop-invariant ones it hoisted into ordinary registers,
// each was a mask, shift and OR in vector registers moved over with R2UR before its HGMMA.
template <int N, int DIM>
TW_DEVICE void mma_ss_head_dim(float (&d)[N / 2], tw_u64 da, tw_u32 a_chunk, tw_u64 db, tw_u32 b_chunk) {
#pragma unroll
  for (int kk = 0; kk < DIM / 16; ++kk) {
    const tw_u32 in_chunk = (kk % 4) * 32;
    mma_ss<N>(d, wgmma_desc_advance(da, (kk / 4) * a_chunk + in_chunk),
              wgmma_desc_advance(db, (kk / 4) * b_chunk + in_chunk), kk != 0);
  }
}

// D(64 x N) += A(64 x 16, registers) B(16 x N, shared memory) with B stored N-contiguous ((k, n) row-major: MN-major
// for a B operand), hence TRANS_B = 1 - V in the forward's P V, dO and Q in the backward's dV / dK.
template <int N>
TW_DEVICE void mma_rs_mn(float (&d)[N / 2], const tw_u32 (&a)[4], tw_u64 db) {
  if constexpr (N == 256) {
    if constexpr (TW_FP16) wgmma_m64n256k16_f16_rs<1>(d, a, db, 1);
    else wgmma_m64n256k16_bf16_rs<1>(d, a, db, 1);
  } else if constexpr (N == 128) {
    if constexpr (TW_FP16) wgmma_m64n128k16_f16_rs<1>(d, a, db, 1);
    else wgmma_m64n128k16_bf16_rs<1>(d, a, db, 1);
  } else {
    static_assert(N == 64, "RS widths 64, 128 and 256");
    if constexpr (TW_FP16) wgmma_m64n64k16_f16_rs<1>(d, a, db, 1);
    else wgmma_m64n64k16_bf16_rs<1>(d, a, db, 1);
  }
}

// D(64 x N) += A(64 x 16 K_STEPS) B over K_STEPS k-steps: A is register fragments in the accumulator layout of an
// m64 wgmma packed to 16-bit pairs (k-step kk takes columns 16kk..16kk+15, i.e. frag[4kk..4kk+3]); B is MN-major,
// db the descriptor of its first k-step (128B-swizzled rows of 128 bytes; LBO = bytes between its 64-column chunks,
// SBO = 8 rows x 128 B), k-step kk 16 rows (16 x 128 bytes) further (advanced as in mma_ss_head_dim).
template <int K_STEPS, int N, int F>
TW_DEVICE void mma_rs_frags(float (&d)[N / 2], const tw_u32 (&frag)[F], tw_u64 db) {
  static_assert(F >= 4 * K_STEPS, "four fragment registers per k-step");
#pragma unroll
  for (int kk = 0; kk < K_STEPS; ++kk) {
    const tw_u32 a[4] = {frag[4 * kk], frag[4 * kk + 1], frag[4 * kk + 2], frag[4 * kk + 3]};
    mma_rs_mn<N>(d, a, wgmma_desc_advance(db, kk * 16 * 128));
  }
}
#endif
