// Plain global stores for epilogues that write straight from registers (no smem staging / TMA store).
#pragma once
#include "common.cuh"

// Store 2 bytes (one 16-bit value) without allocating in L1: a row's last columns where they are no whole chunk.
TW_DEVICE void st_global_b16(void* ptr, unsigned short v) {
  asm volatile("st.global.L1::no_allocate.b16 [%0], %1;" ::"l"(ptr), "h"(v) : "memory");
}

// Store 4 bytes (two packed 16-bit values) without allocating in L1: output is written once and never re-read.
TW_DEVICE void st_global_b32(void* ptr, tw_u32 v) {
  asm volatile("st.global.L1::no_allocate.b32 [%0], %1;" ::"l"(ptr), "r"(v) : "memory");
}

// Store 16 bytes (eight packed 16-bit values) without allocating in L1; `ptr` must be 16-byte aligned.
TW_DEVICE void st_global_v4_b32(void* ptr, tw_u32 a, tw_u32 b, tw_u32 c, tw_u32 d) {
  asm volatile("st.global.L1::no_allocate.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(ptr), "r"(a), "r"(b), "r"(c),
               "r"(d)
               : "memory");
}

