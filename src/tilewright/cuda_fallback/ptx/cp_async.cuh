// Per-thread asynchronous copies global -> shared (cp.async, sm_80+): a thread issues the copy and goes on; the bytes
// land while it works, and cp_async_wait_all() (then a barrier for the other threads' copies) makes them readable.
// Used for small operands a kernel needs late but knows early - the GEMM epilogue's bias slice, issued during the
// mainloop so its global latency never reaches the epilogue.
#pragma once
#include "common.cuh"

// Copy `src_bytes` (0..4) bytes from `src` (4-byte aligned global address) to the 4 bytes at shared address `dst`,
// zero-filling the rest: a partial or empty copy for a tail column past the end of the operand reads nothing past it.
TW_DEVICE void cp_async_4_zfill(tw_u32 dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

// cp_async_4_zfill under a predicate instead of an `if` around the copy and its address: ptxas keeps it one predicated
// LDGSTS where an `if` compiled to a divergent branch (BSSY / BSYNC) in gemm_sm90.cu's block-scale k-block
// (TW_FP8_SCALE_AHEAD).
TW_DEVICE void cp_async_4_zfill_if(bool pred, tw_u32 dst, const void* src, int src_bytes) {
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %3, 0;\n\t@p cp.async.ca.shared.global [%0], [%1], 4, %2;\n\t}"
      ::"r"(dst), "l"(src), "r"(src_bytes), "r"((int)pred)
      : "memory");
}

// Arrive on mbarrier `bar` once every cp.async this thread has issued so far has landed (the arrival is the copy
// engine's, later; this thread goes on at once). .noinc: the arrival counts against the barrier's expected count, so
// the phase cannot complete before these copies land - the init count includes one per arriving thread (gemm_sm90.cu's
// block scales copied into the pipeline stage by a producer warp, TW_FP8_SCALE_STAGE). Waiters that see the phase
// complete see the copied bytes.
TW_DEVICE void cp_async_mbar_arrive_noinc(tw_u32 bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}

// Wait until every cp.async this thread issued has landed in shared memory (visible to this thread).
TW_DEVICE void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// Load 4 bytes from a 32-bit shared-window address (4-byte aligned).
TW_DEVICE tw_u32 ld_shared_b32(tw_u32 addr) {
  tw_u32 v;
  asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
  return v;
}

// 16 bytes from a 32-bit shared-window address (16-byte aligned) in one LDS.128 (gemm_sm90.cu's TW_STORE_DIRECT:
// a staged output chunk on its way to global memory).
TW_DEVICE void ld_shared_v4_b32(tw_u32 addr, tw_u32 (&v)[4]) {
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];" : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3]) : "r"(addr)
               : "memory");
}

// Two adjacent fp32 from a shared-window address (8-byte aligned) in one LDS.64 (gemm_sm90.cu's block scales: a
// lane's two rows' scale_a side by side, TW_FP8_SCALE_AHEAD).
TW_DEVICE void ld_shared_f32x2(tw_u32 addr, float& lo, float& hi) {
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(lo), "=f"(hi) : "r"(addr) : "memory");
}

// cp.async groups (gemm_sm90.cu's block scales copied k-blocks ahead, TW_FP8_SCALE_AHEAD): the copies this thread
// issued since its last commit become one group; the wait returns once at most N of this thread's groups are still
// in flight - groups complete in commit order, so the older ones have landed and are visible to this thread. (A
// register load's wait is for every load in flight, the newest included.)
TW_DEVICE void cp_async_commit_group() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int N>
TW_DEVICE void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
