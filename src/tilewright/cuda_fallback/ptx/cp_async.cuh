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

// Wait until every cp.async this thread issued has landed in shared memory (visible to this thread).
TW_DEVICE void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// Load 4 bytes from a 32-bit shared-window address (4-byte aligned).
TW_DEVICE tw_u32 ld_shared_b32(tw_u32 addr) {
  tw_u32 v;
  asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
  return v;
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
