// Shared definitions for the PTX wrappers. No system headers: the same sources compile under nvcc and NVRTC.
#pragma once

#define TW_DEVICE __device__ __forceinline__

// Per-block opt-in shared-memory maximum of sm_90 and sm_100 (227 KiB); the host's _env.SMEM_OPTIN_BYTES is the same
// number (a CPU test keeps them equal).
#define TW_SMEM_OPTIN_BYTES (227 * 1024)

typedef unsigned int tw_u32;
typedef unsigned long long tw_u64;

// A TMA tensor map as the driver encodes it (cuTensorMapEncodeTiled): 128 opaque bytes, passed to kernels by value
// as a `const __grid_constant__` parameter so its address is a valid generic address for the copy engine.
struct alignas(128) TwTensorMap {
  tw_u64 opaque[16];
};

// `v` itself, but opaque to the compiler (no instruction is emitted): values computed from the result are formed
// after this point, not hoisted above it or folded with ones from before it. The attention kernels pass a shared base
// address through it inside their loops so that the loop's wgmma descriptors are formed there, in uniform registers,
// rather than hoisted ahead of the loop into ordinary ones (spills, R2UR before each HGMMA).
TW_DEVICE tw_u32 opaque_u32(tw_u32 v) {
  asm volatile("" : "+r"(v));
  return v;
}

// 32-bit shared-window address of a generic pointer into shared memory (what every shared::cta operand takes).
TW_DEVICE tw_u32 smem_u32(const void* p) {
  tw_u32 r;
  asm volatile("{\n.reg .u64 t;\ncvta.to.shared.u64 t, %1;\ncvt.u32.u64 %0, t;\n}\n" : "=r"(r) : "l"(p));
  return r;
}

// Store 4 bytes at a 32-bit shared-window address (4-byte aligned).
TW_DEVICE void st_shared_b32(tw_u32 addr, tw_u32 v) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}

// Store two fp32 values (8 bytes, 8-byte aligned) at a 32-bit shared-window address.
TW_DEVICE void st_shared_v2_f32(tw_u32 addr, float a, float b) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(addr), "f"(a), "f"(b) : "memory");
}

// Store 16 zero bytes at a 32-bit shared-window address (16-byte aligned).
TW_DEVICE void st_shared_zero16(tw_u32 addr) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};" ::"r"(addr), "r"(0u) : "memory");
}

// Pack two fp32 values into one bf16x2 register (round to nearest even); `lo` lands in the low half.
TW_DEVICE tw_u32 pack_bf16x2(float lo, float hi) {
  tw_u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// Pack two fp32 values into one f16x2 register (round to nearest even); `lo` lands in the low half.
TW_DEVICE tw_u32 pack_f16x2(float lo, float hi) {
  tw_u32 r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// Two fp32 values -> one register of two 16-bit elements, fp16 when FP16 else bf16 (round to nearest even); `lo`
// in the low half. The one packer of every kernel's epilogue and register-A fragments.
template <bool FP16>
TW_DEVICE tw_u32 pack_pair(float lo, float hi) {
  if constexpr (FP16) return pack_f16x2(lo, hi);
  else return pack_bf16x2(lo, hi);
}

// fp16 bits -> fp32 (exact).
TW_DEVICE float f16_bits_to_f32(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}

// bf16 bits -> fp32 (exact: bf16 is the top half of an fp32).
TW_DEVICE float bf16_bits_to_f32(unsigned short h) { return __uint_as_float(((tw_u32)h) << 16); }
