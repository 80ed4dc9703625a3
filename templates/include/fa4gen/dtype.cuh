// fa4gen/dtype.cuh: the 16-bit element types, as tags. Elements live in memory as raw 16-bit
// words; a tag says how to pack two fp32 values into one 32-bit register of that type and
// which MMA instruction consumes it.
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
};

struct Fp16 {
  static FA4_DEVICE u32 pack2(float lo, float hi) {
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
  }
};

}  // namespace fa4
