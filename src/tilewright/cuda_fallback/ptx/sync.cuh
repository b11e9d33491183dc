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
