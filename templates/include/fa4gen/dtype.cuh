// fa4gen/dtype.cuh: the 16-bit element types, as tags. Elements live in memory as raw 16-bit
// words; a tag says how to pack two fp32 values into one 32-bit register of that type and
// which MMA instruction consumes it, and how to bound a packed register's values.
#pragma once
#include "fa4gen/prelude.cuh"

namespace fa4 {

struct Bf16 {
  // cvt packs its first source into the upper half: pass (hi, lo).
  static FA4_DEVICE u32 pack2(float lo, float hi) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
  }
  // Elementwise max of two packed pairs (two in a row become sm_90's three-input VHMNMX).
  static FA4_DEVICE u32 max2(u32 a, u32 b) {
    u32 r;
    asm("max.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
  }
  // The bits of 2^e: for values >= 0 the order of the bits is the order of the values, +inf
  // above every finite one.
  static FA4_DEVICE constexpr u32 pow2_bits(int e) { return (u32)(127 + e) << 7; }
};

struct Fp16 {
  static FA4_DEVICE u32 pack2(float lo, float hi) {
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
  }
  static FA4_DEVICE u32 max2(u32 a, u32 b) {
    u32 r;
    asm("max.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
  }
  static FA4_DEVICE constexpr u32 pow2_bits(int e) { return (u32)(15 + e) << 10; }
};

// Whether any of the packed non-negative pairs x exceeds 2^e (+inf included): M independent
// chains of maxima (a fragment's registers), joined at the end.
template <class T, int N, int M>
FA4_DEVICE bool any_exceeds_pow2(const u32 (&x)[N][M], int e) {
  u32 m[M];
#pragma unroll
  for (int c = 0; c < M; ++c) m[c] = x[0][c];
#pragma unroll
  for (int i = 1; i < N; ++i)
#pragma unroll
    for (int c = 0; c < M; ++c) m[c] = T::max2(m[c], x[i][c]);
#pragma unroll
  for (int c = 1; c < M; ++c) m[0] = T::max2(m[0], m[c]);
  const u32 t = T::pow2_bits(e);
  return (m[0] & 0xFFFFu) > t || (m[0] >> 16) > t;
}

}  // namespace fa4
