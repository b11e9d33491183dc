// Fences, named barriers and register reallocation.
#pragma once
#include "common.cuh"

// Order this thread's prior generic-proxy shared-memory writes (st.shared, stmatrix) before later async-proxy
// accesses (TMA store, wgmma operand reads) of that memory.
TW_DEVICE void fence_proxy_async_smem() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// Named barrier `id` for `count` threads: wait until `count` threads arrived (this thread included), with
// bar.sync's memory ordering among the participants.
TW_DEVICE void named_barrier_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}

// Arrive on named barrier `id` (expecting `count` threads) without waiting for it to complete.
TW_DEVICE void named_barrier_arrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(count) : "memory");
}

// Counters between the CTAs of one grid. A writer's prior stores happen before its release-add; a reader whose
// relaxed load returns a count and who then fences (acq_rel, gpu scope) sees every store released into that count
// (the adds extend one release sequence; load + fence is an acquire pattern), and its later loads come after it.
// The load is relaxed so that its latency can hide under other work before the fence.
TW_DEVICE void red_release_gpu_add(unsigned* counter, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(counter), "r"(v) : "memory");
}

TW_DEVICE unsigned ld_relaxed_gpu(const unsigned* p) {
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

TW_DEVICE float ld_relaxed_gpu(const float* p) {
  float v;
  asm volatile("ld.relaxed.gpu.global.f32 %0, [%1];" : "=f"(v) : "l"(p) : "memory");
  return v;
}

TW_DEVICE void fence_acq_rel_gpu() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Lower this warpgroup's per-thread register budget to N (all 4 warps execute it; frees registers for others).
// Honoured only when the kernel has a register cap at entry: __launch_bounds__(threads, 1).
template <int N>
TW_DEVICE void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}

// Raise this warpgroup's per-thread register budget to N (blocks until the pool has the registers).
template <int N>
TW_DEVICE void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}
#endif
