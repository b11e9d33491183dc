// ldmatrix + mma.sync: the warp-level tensor-core path (sm_80 and later, including sm_120 where it is the only one).
#pragma once
#include "common.cuh"

// Load four 8x8 b16 matrices from shared memory: lane l supplies the 16-byte row address of matrix l/8, row l%8;
// register i of lane l receives (row l/4, cols 2*(l%4), +1) of matrix i - exactly the mma.sync A/B fragment layout.
// Warp-collective; the registers are valid when the instruction retires (no separate wait).
TW_DEVICE void ldmatrix_x4(tw_u32 addr, tw_u32 (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// As ldmatrix_x4 but each 8x8 matrix is transposed on the way: register i of lane l receives (row 2*(l%4), +1;
// col l/4) of the stored matrix i - the fragment of an operand stored MN-major (rows of smem run along K).
TW_DEVICE void ldmatrix_x4_trans(tw_u32 addr, tw_u32 (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// D(16x8, fp32) += A(16x16, row) * B(16x8, col), bf16 inputs, synchronous within the warp. Fragments (g = lane/4,
// t = lane%4): a = {(g, 2t..), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..)}, b = {(k 2t.., n g), (k 2t+8.., n g)},
// d = {(g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)}.
TW_DEVICE void mma_m16n8k16_bf16(float (&d)[4], const tw_u32 (&a)[4], tw_u32 b0, tw_u32 b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The same MMA with fp16 inputs (fp32 accumulation).
TW_DEVICE void mma_m16n8k16_f16(float (&d)[4], const tw_u32 (&a)[4], tw_u32 b0, tw_u32 b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
