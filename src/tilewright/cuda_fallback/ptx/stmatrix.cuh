// stmatrix: warp-wide store of 8x8 b16 tiles from the mma accumulator layout into shared memory.
#pragma once
#include "common.cuh"

// Store four 8x8 b16 matrices: lane l supplies the smem row address of matrix l/8, row l%8; register ri of lane l
// holds (row l/4, cols 2*(l%4), +1) of matrix i - the mma/wgmma accumulator fragment layout. Rows are 16 bytes.
TW_DEVICE void stmatrix_x4(tw_u32 addr, tw_u32 r0, tw_u32 r1, tw_u32 r2, tw_u32 r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}
