// mbarrier: the shared-memory barrier objects that TMA completes into and that pipeline stages hand over with.
#pragma once
#include "common.cuh"

// Initialise the barrier at `bar` for `count` arrivals per phase; it starts in phase 0 with no transactions pending.
TW_DEVICE void mbar_init(tw_u32 bar, tw_u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

// Make prior mbarrier.init results visible to other threads and to the async proxy (TMA) before any use.
TW_DEVICE void fence_mbarrier_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

// Arrive once and raise the phase's expected transaction count by `bytes` (the TMA loads that complete_tx into it).
TW_DEVICE void mbar_arrive_expect_tx(tw_u32 bar, tw_u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

// Arrive once (release semantics: this thread's prior memory accesses happen before the phase completes).
TW_DEVICE void mbar_arrive(tw_u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

// Spin until the phase with parity `parity` has completed (acquire: its arrivals' writes and TMA bytes are visible).
// A barrier in phase 0 reports the (virtual) preceding phase of parity 1 as complete - producers start on parity 1.
// mbar_wait acquires at CTA scope (the default); mbar_wait_cluster at cluster scope, for a phase completed by
// release.cluster arrivals from another CTA of the cluster (mbar_arrive_cluster).
#define TW_DEFINE_MBAR_WAIT(NAME, SEM)                                                                       \
  TW_DEVICE void NAME(tw_u32 bar, tw_u32 parity) {                                                           \
    asm volatile(                                                                                            \
        "{\n"                                                                                                \
        ".reg .pred done;\n"                                                                                 \
        "TW_WAIT_%=:\n"                                                                                      \
        "mbarrier.try_wait.parity" SEM ".shared::cta.b64 done, [%0], %1;\n"                                  \
        "@!done bra TW_WAIT_%=;\n"                                                                           \
        "}\n" ::"r"(bar),                                                                                    \
        "r"(parity)                                                                                          \
        : "memory");                                                                                         \
  }
TW_DEFINE_MBAR_WAIT(mbar_wait, "")
TW_DEFINE_MBAR_WAIT(mbar_wait_cluster, ".acquire.cluster")
#undef TW_DEFINE_MBAR_WAIT

// mbar_arrive by the threads whose `pred` is true, as one predicated instruction rather than a branch: code between
// a wgmma and its wait must not diverge, or ptxas serialises the wgmma pipeline (C7520, "WG.AR in divergent path").
TW_DEVICE void mbar_arrive_if(tw_u32 bar, bool pred) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %1, 0;\n"
      "@p mbarrier.arrive.shared::cta.b64 _, [%0];\n"
      "}\n" ::"r"(bar),
      "r"((int)pred)
      : "memory");
}

// This CTA's rank in its cluster (%cluster_ctarank).
TW_DEVICE tw_u32 cluster_ctarank() {
  tw_u32 r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// The shared::cluster address of the variable at local shared::cta address `addr` in the CTA of cluster rank `rank`.
TW_DEVICE tw_u32 mapa_shared(tw_u32 addr, tw_u32 rank) {
  tw_u32 r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}

// Arrive on an mbarrier given by its shared::cluster address (possibly in another CTA of the cluster); release at
// cluster scope, so this thread's prior writes are visible to whoever waits on that barrier.
TW_DEVICE void mbar_arrive_cluster(tw_u32 cluster_bar) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(cluster_bar) : "memory");
}

// Every thread of every CTA in the cluster: arrive (release) then wait (acquire) - orders mbarrier inits, TMEM alloc
// results and all remote smem traffic across the cluster.
TW_DEVICE void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
