// wgmma: warpgroup-wide asynchronous tensor-core MMA (sm_90a) - shared-memory descriptors and group control.
#pragma once
#include "common.cuh"
#include "wgmma_ops.cuh"

// Shared-memory matrix descriptor for a 128B-swizzled operand (PTX "matrix descriptor format", Hopper):
// start address >> 4 in bits [0,14), leading byte offset >> 4 in [16,30), stride byte offset >> 4 in [32,46),
// base offset 0 (the tile sits on a 1024-byte boundary), swizzle mode 1 (128B) in bits [62,64).
// K-major: LBO unused (1), SBO = 1024 (eight 128-byte rows). MN-major: LBO = bytes between 64-element MN groups,
// SBO = 1024 (eight K rows of 128 bytes).
TW_DEVICE tw_u64 wgmma_desc_sw128(tw_u32 smem_addr, tw_u32 lbo_bytes, tw_u32 sbo_bytes) {
  tw_u64 d = 0;
  d |= (tw_u64)((smem_addr & 0x3FFFF) >> 4);
  d |= (tw_u64)((lbo_bytes & 0x3FFFF) >> 4) << 16;
  d |= (tw_u64)((sbo_bytes & 0x3FFFF) >> 4) << 32;
  d |= (tw_u64)1 << 62;
  return d;
}

// Descriptor `d` with its start address `bytes` (a multiple of 16) further on: only the low word changes - the 14-bit
// start-address field holds any shared-memory address (< 256 KB) and so never carries into the fields above it -, so
// a descriptor built once keeps its constant high word and each advanced one costs a 32-bit add.
TW_DEVICE tw_u64 wgmma_desc_advance(tw_u64 d, tw_u32 bytes) {
  return (d & 0xFFFFFFFF00000000ull) | (tw_u32)((tw_u32)d + (bytes >> 4));
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Make this warpgroup's prior register writes (accumulators) visible to the wgmma ops issued after it; required
// before the first wgmma of a batch and whenever accumulator registers were touched by ordinary instructions.
TW_DEVICE void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }

// Close the wgmma ops issued since the last commit into one wgmma-group.
TW_DEVICE void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }

// Wait until at most N wgmma-groups are pending: the older groups' smem reads and register writes are complete.
template <int N>
TW_DEVICE void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Keep the compiler from moving accumulator reads/writes across a wgmma wait (registers are "in flight" until then).
template <int R>
TW_DEVICE void wgmma_reg_fence(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The same for 32-bit operand registers (a register-A fragment): keeps them live and unmodified until the wait.
template <int R>
TW_DEVICE void wgmma_reg_fence(tw_u32 (&a)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+r"(a[i])::"memory");
}
#endif
