// TMA (cp.async.bulk.tensor): whole-tile copies between global memory and shared memory by the copy engine.
#pragma once
#include "common.cuh"

// Pull the tensor map into the constant cache ahead of first use (a hint; no ordering guarantee).
TW_DEVICE void tma_prefetch_desc(const TwTensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(map) : "memory");
}

// Copy the box at (c0, c1) of the 2-D tensor `map` into smem `dst`; the box's bytes complete_tx on mbarrier `bar`.
// Out-of-bounds elements are written as zeros and still count towards the transaction bytes.
TW_DEVICE void tma_load_2d(tw_u32 dst, const TwTensorMap* map, tw_u32 bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::
          "r"(dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}

// tma_load_2d with a shared::cta destination (PTX ISA 8.6+, CUDA 12.8+). On sm_120 ptxas lowers the shared::cluster
// form to UTMALDG plus a run-time check and a syscall fallback (for a destination in another CTA of the cluster);
// this form has no such path. Same completion semantics: the box's bytes complete_tx on `bar`, OOB reads as zeros.
TW_DEVICE void tma_load_2d_cta(tw_u32 dst, const TwTensorMap* map, tw_u32 bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cta.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::
          "r"(dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}

// tma_load_2d for one CTA of a cta_group::2 pair: the box lands in THIS CTA's smem at `dst`, but its bytes
// complete_tx on `bar`, a shared::cluster address that may be the peer CTA's mbarrier (the pair's MMA issuer waits
// there for both halves of a stage).
TW_DEVICE void tma_load_2d_cg2(tw_u32 dst, const TwTensorMap* map, tw_u32 bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.cta_group::2.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, "
      "%4}], [%2];" ::"r"(dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}

// The load form for the architecture being compiled: shared::cta on sm_100+ (see tma_load_2d_cta), shared::cluster
// below (the form every CUDA 12 toolchain accepts for sm_90; its SASS has no fallback path there).
TW_DEVICE void tma_load_box(tw_u32 dst, const TwTensorMap* map, tw_u32 bar, int c0, int c1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
  tma_load_2d_cta(dst, map, bar, c0, c1);
#else
  tma_load_2d(dst, map, bar, c0, c1);
#endif
}

// One k-block of the GEMM operands into a ring stage (A at smem `sa`, B at `sb`), completing on mbarrier `full`.
// Boxes are one 128-byte swizzle row wide (BK = 64 16-bit elements): a K-major operand is a single (BK x BM|BN) box;
// an MN-major one is BM/64 (BN/64) boxes of 64 x BK placed BK * 128 bytes apart, the layout the MMA descriptors expect.
// SPLIT_B (the gated-linear epilogue, gemm_sm90.cu TW_GLU): B's first BN/2 columns come from n0 and its last BN/2 from
// n_up + n0 - a K-major B as two (BK x BN/2) boxes (the host's map has that box), BN/2 rows apart in smem, which is
// the one-box layout exactly (whole 8-row swizzle atoms); an MN-major B picks each 64-column box's origin.
template <bool A_MN, bool B_MN, int BM, int BN, int BK, bool SPLIT_B = false>
TW_DEVICE void tma_load_stage(tw_u32 sa, tw_u32 sb, const TwTensorMap* tm_a, const TwTensorMap* tm_b, tw_u32 full,
                              int m0, int n0, int k0, int n_up = 0) {
  if constexpr (A_MN) {
#pragma unroll
    for (int j = 0; j < BM / 64; ++j) tma_load_box(sa + j * BK * 128, tm_a, full, m0 + 64 * j, k0);
  } else {
    tma_load_box(sa, tm_a, full, k0, m0);
  }
  if constexpr (B_MN) {
#pragma unroll
    for (int j = 0; j < BN / 64; ++j) {
      const int n = SPLIT_B && j >= BN / 128 ? n_up + n0 + 64 * (j - BN / 128) : n0 + 64 * j;
      tma_load_box(sb + j * BK * 128, tm_b, full, n, k0);
    }
  } else if constexpr (SPLIT_B) {
    static_assert(BN % 16 == 0, "each half a whole number of 8-row swizzle atoms");
    tma_load_box(sb, tm_b, full, k0, n0);
    tma_load_box(sb + (BN / 2) * 128, tm_b, full, k0, n_up + n0);
  } else {
    tma_load_box(sb, tm_b, full, k0, n0);
  }
}

// Copy smem `src` into the box at (c0, c1) of `map`; elements outside the tensor are not written (clipped).
// Joins the calling thread's current bulk async-group.
TW_DEVICE void tma_store_2d(const TwTensorMap* map, tw_u32 src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(map), "r"(src),
               "r"(c0), "r"(c1)
               : "memory");
}

// Copy the box at (c0, c1, c2, c3) of the 4-D tensor `map` into smem `dst`; the box's bytes complete_tx on `bar`.
// Out-of-bounds elements (in any dimension) are written as zeros and still count towards the transaction bytes.
// Used for (D, S, H, B) views of attention tensors with arbitrary strides, so a tile never reads a neighbour head.
TW_DEVICE void tma_load_4d(tw_u32 dst, const TwTensorMap* map, tw_u32 bar, int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], "
      "[%2];" ::"r"(dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

// Copy `bytes` contiguous bytes from global `src` into smem `dst` (no tensor map: a plain 1-D bulk copy); they
// complete_tx on mbarrier `bar`. Both addresses 16-byte aligned, `bytes` a multiple of 16, and every byte in bounds:
// unlike the tiled loads nothing is zero-filled, so the caller sizes its buffers to whole copies.
TW_DEVICE void bulk_load(tw_u32 dst, const void* src, tw_u32 bytes, tw_u32 bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

// Copy smem `src` into the box at (c0, c1, c2, c3) of the 4-D `map`; elements outside the tensor are not written.
// Joins the calling thread's current bulk async-group.
TW_DEVICE void tma_store_4d(const TwTensorMap* map, tw_u32 src, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];" ::"l"(map),
               "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}

// Add smem `src` (fp32) element-wise into the box at (c0, c1, c2, c3) of the 4-D `map`; the L2 applies the adds, so
// CTAs adding into the same box never wait on each other; elements outside the tensor are skipped. Joins the calling
// thread's current bulk async-group (smem reusable after bulk_wait_group_read).
TW_DEVICE void tma_reduce_add_4d(const TwTensorMap* map, tw_u32 src, int c0, int c1, int c2, int c3) {
  asm volatile("cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4, %5}], [%1];"
               ::"l"(map), "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}

// Close the calling thread's current bulk async-group (the TMA stores issued since the last commit).
TW_DEVICE void bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }

// Wait until at most N of this thread's bulk groups still *read* shared memory (their smem may then be reused).
template <int N>
TW_DEVICE void bulk_wait_group_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}

// Wait until at most N of this thread's bulk groups are pending at all (their global writes are complete).
template <int N>
TW_DEVICE void bulk_wait_group() {
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
}
