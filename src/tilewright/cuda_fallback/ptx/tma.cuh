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

// Copy smem `src` into the box at (c0, c1) of `map`; elements outside the tensor are not written (clipped).
// Joins the calling thread's current bulk async-group.
TW_DEVICE void tma_store_2d(const TwTensorMap* map, tw_u32 src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(map), "r"(src),
               "r"(c0), "r"(c1)
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
