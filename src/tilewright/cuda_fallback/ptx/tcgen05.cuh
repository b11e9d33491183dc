// tcgen05 (sm_100a / sm_103a): the single-thread-issued tensor-core MMA with accumulators in tensor memory (TMEM).
// Descriptors: the instruction descriptor and the high bits of the shared-memory descriptors are encoded on the host
// by cuda_fallback/sm100_descriptors.py (unit-tested against the PTX ISA tables) and passed as kernel arguments; the
// constexpr encoders below mirror that module and gemm_sm100.cu static_asserts them on the same examples.
#pragma once
#include "common.cuh"

namespace tw {

// Instruction descriptor, kind::f16 (PTX ISA "Instruction descriptor"): D format bits [4,6) (1 = F32), A format
// [7,10) and B format [10,13) (0 = F16, 1 = BF16), A major bit 15 and B major bit 16 (0 = K-major, 1 = MN-major),
// N >> 3 in [17,23), bit 23 reserved, M >> 4 in [24,29). Dense, no negation, no saturation, no max-shift.
constexpr tw_u32 tc_idesc_f16(int m, int n, bool bf16, bool a_mn, bool b_mn) {
  return (1u << 4) | ((bf16 ? 1u : 0u) << 7) | ((bf16 ? 1u : 0u) << 10) | ((a_mn ? 1u : 0u) << 15) |
         ((b_mn ? 1u : 0u) << 16) | ((tw_u32)(n >> 3) << 17) | ((tw_u32)(m >> 4) << 24);
}

// Instruction descriptor, kind::f8f6f4: the same bit positions as kind::f16 with the A/B format fields reinterpreted
// (PTX ISA "Instruction descriptor" table: 0 = E4M3, 1 = E5M2, 3 = E2M3, 4 = E3M2, 5 = E2M1); D format 1 = F32.
// This package only emits the 8-bit formats, K-major (it never passes FP8 MN-major operands).
constexpr tw_u32 tc_idesc_f8(int m, int n, int a_fmt, int b_fmt) {
  return (1u << 4) | ((tw_u32)(a_fmt & 7) << 7) | ((tw_u32)(b_fmt & 7) << 10) | ((tw_u32)(n >> 3) << 17) |
         ((tw_u32)(m >> 4) << 24);
}

// High fields of the sm_100 shared-memory matrix descriptor (everything except the start address): LBO >> 4 in
// [16,30), SBO >> 4 in [32,46), version 1 in [46,48) (required on sm_100; Hopper's descriptor has no version field),
// base offset 0 in [49,52) (tiles sit on 1024-byte boundaries), LBO mode 0 (bit 52), layout in [61,64):
// 0 none, 2 = 128B swizzle, 4 = 64B, 6 = 32B (Hopper puts 128B as 1 in [62,64) - not interchangeable).
constexpr tw_u64 tc_smem_desc_hi(tw_u32 lbo_bytes, tw_u32 sbo_bytes, tw_u32 layout) {
  return ((tw_u64)((lbo_bytes >> 4) & 0x3FFF) << 16) | ((tw_u64)((sbo_bytes >> 4) & 0x3FFF) << 32) |
         ((tw_u64)1 << 46) | ((tw_u64)(layout & 7) << 61);
}

// A full descriptor: the high fields OR the 14-bit start address >> 4 (a shared::cta address below 256 KB).
TW_DEVICE tw_u64 tc_smem_desc(tw_u64 hi, tw_u32 smem_addr) { return hi | (tw_u64)((smem_addr >> 4) & 0x3FFF); }

}  // namespace tw

#if defined(__CUDA_ARCH_FEAT_SM100_ALL) || defined(__CUDA_ARCH_FEAT_SM103_ALL)
#define TW_HAS_TCGEN05 1

// TMEM allocation, one set per cta_group (the _cg2 names: a CTA pair, see below):
//   tmem_alloc: allocate `ncols` TMEM columns (power of two, 32..512) for this CTA; the whole warp executes it and
//     the TMEM address (lane 0, first column) is written to shared memory at `dst`. The same warp must dealloc.
//   tmem_relinquish_alloc_permit: give up this CTA's right to allocate more TMEM, so co-resident CTAs blocked in
//     alloc can proceed (warp-wide).
//   tmem_dealloc: free `ncols` columns at `taddr` (warp-wide, by the allocating warp; all TMEM reads/MMAs into it
//     must be done).
// cta_group::2: one warp in EACH CTA of the pair executes them (collectively with its peer), so both CTAs get the
// same column range of their own TMEM - the pair's MMA writes D at one address in both.
#define TW_DEFINE_TMEM_ALLOC(SUFFIX, CG)                                                                     \
  TW_DEVICE void tmem_alloc##SUFFIX(tw_u32 dst, tw_u32 ncols) {                                              \
    asm volatile("tcgen05.alloc.cta_group::" CG ".sync.aligned.shared::cta.b32 [%0], %1;" ::"r"(dst),        \
                 "r"(ncols)                                                                                  \
                 : "memory");                                                                                \
  }                                                                                                          \
  TW_DEVICE void tmem_relinquish_alloc_permit##SUFFIX() {                                                    \
    asm volatile("tcgen05.relinquish_alloc_permit.cta_group::" CG ".sync.aligned;" ::: "memory");           \
  }                                                                                                          \
  TW_DEVICE void tmem_dealloc##SUFFIX(tw_u32 taddr, tw_u32 ncols) {                                          \
    asm volatile("tcgen05.dealloc.cta_group::" CG ".sync.aligned.b32 %0, %1;" ::"r"(taddr), "r"(ncols)       \
                 : "memory");                                                                                \
  }
TW_DEFINE_TMEM_ALLOC(, "1")
TW_DEFINE_TMEM_ALLOC(_cg2, "2")
#undef TW_DEFINE_TMEM_ALLOC

// Order this thread's prior tcgen05 ops before a following thread-sync (mbarrier arrive, bar.sync).
TW_DEVICE void tc_fence_before_sync() { asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory"); }

// Order this thread's later tcgen05 ops after a preceding thread-sync (mbarrier wait, bar.sync).
TW_DEVICE void tc_fence_after_sync() { asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory"); }

// D[tmem] (+)= A[smem desc] * B[smem desc], one MMA of the shape in `idesc`, issued by ONE thread and executed
// asynchronously; accumulate = 0 overwrites D. Completion is observed via tcgen05.commit. One definition per .kind:
//   tc_mma_f16     kind::f16, K = 16 (16-bit inputs);
//   tc_mma_f8f6f4  kind::f8f6f4, K = 32 for 8-bit inputs (32 bytes of each K-major row, the same byte step as
//                  16 x 16-bit), F32 accumulation; the element formats come from `idesc` (bits 7-12), so one build
//                  serves e4m3 and e5m2 (and mixed) operands.
// The _cg2 forms are the cta_group::2 MMA of a CTA pair (M = 256): issued by one thread of the pair's even CTA, A's
// 128-row halves and B's N/2-row halves read from the same smem offsets in both CTAs, D written to both CTAs' TMEM.
#define TW_DEFINE_TC_MMA(NAME, CG, KIND)                                                                     \
  TW_DEVICE void NAME(tw_u32 d_tmem, tw_u64 a_desc, tw_u64 b_desc, tw_u32 idesc, tw_u32 accumulate) {        \
    asm volatile(                                                                                            \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\n"                                                          \
        "tcgen05.mma.cta_group::" CG ".kind::" KIND " [%0], %1, %2, %3, p;\n}\n" ::"r"(d_tmem),                \
        "l"(a_desc), "l"(b_desc), "r"(idesc), "r"(accumulate)                                                \
        : "memory");                                                                                         \
  }
TW_DEFINE_TC_MMA(tc_mma_f16, "1", "f16")
TW_DEFINE_TC_MMA(tc_mma_f8f6f4, "1", "f8f6f4")
TW_DEFINE_TC_MMA(tc_mma_f16_cg2, "2", "f16")
TW_DEFINE_TC_MMA(tc_mma_f8f6f4_cg2, "2", "f8f6f4")
#undef TW_DEFINE_TC_MMA

// Arrive once on mbarrier `bar` when every tcgen05 op this thread issued so far has completed (their smem reads and
// TMEM writes are done); implies tcgen05.fence::before_thread_sync.
TW_DEVICE void tc_commit(tw_u32 bar) {
  asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];" ::"r"(bar) : "memory");
}

// ---- cta_group::2 (a 2x1 cluster computing one 256-row tile; see gemm_sm100.cu TW_CTA2) ----

// (TMEM alloc / relinquish / dealloc of a pair: tmem_alloc_cg2 & co. above.)

// tcgen05.commit of the pair's MMAs, arriving once on the mbarrier at local offset `bar` in every CTA of `cta_mask`
// (bit i = cluster rank i): how both CTAs learn that a stage was consumed / an accumulator is complete.
TW_DEVICE void tc_commit_multicast_cg2(tw_u32 bar, unsigned short cta_mask) {
  asm volatile(
      "tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64 [%0], %1;" ::"r"(bar),
      "h"(cta_mask)
      : "memory");
}

// Load 16 consecutive 32-bit TMEM columns of this warp's 32-lane slice (lane i of the warp reads TMEM lane
// (taddr >> 16) + i): one accumulator row segment per thread. The registers are undefined until tc_wait_ld().
TW_DEVICE void tmem_ld_32x32b_x16(tw_u32 taddr, tw_u32 (&r)[16]) {
  asm volatile(
      "tcgen05.ld.sync.aligned.32x32b.x16.b32 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, "
      "%15}, [%16];"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]), "=r"(r[7]),
        "=r"(r[8]), "=r"(r[9]), "=r"(r[10]), "=r"(r[11]), "=r"(r[12]), "=r"(r[13]), "=r"(r[14]), "=r"(r[15])
      : "r"(taddr)
      : "memory");
}

// Wait until all of this thread's tcgen05.ld have completed (their destination registers are valid).
TW_DEVICE void tc_wait_ld() { asm volatile("tcgen05.wait::ld.sync.aligned;" ::: "memory"); }

// Keep the compiler from reading TMEM-load destination registers before tc_wait_ld (they are "in flight").
TW_DEVICE void tc_reg_fence(tw_u32 (&r)[16]) {
#pragma unroll
  for (int i = 0; i < 16; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

#endif
