// fa4gen/prelude.cuh: the fixed-width names and attributes every kernel uses.
// fa4gen kernels include no CUDA headers: NVRTC compiles them with nothing on the include path,
// and every instruction that matters is spelled out in PTX in the headers beside this one.
#pragma once

typedef unsigned int u32;
typedef unsigned short u16;
typedef long long i64;
typedef unsigned long long u64;

#define FA4_DEVICE __device__ __forceinline__

namespace fa4 {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

FA4_DEVICE float neg_inf() { return __int_as_float(0xff800000u); }

// 32-bit shared-state-space address of a generic pointer into shared memory.
FA4_DEVICE u32 smem_u32(const void* p) {
  return static_cast<u32>(__cvta_generic_to_shared(p));
}

// threadIdx.x read afresh (volatile: the compiler may not reuse an earlier read). Values derived
// from the thread index that are needed only after a register-heavy loop are cheaper to
// recompute than to keep live across it (at 255 registers, keeping one costs a spill).
FA4_DEVICE u32 thread_index_fresh() {
  u32 r;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(r));
  return r;
}
FA4_DEVICE u32 block_index_x_fresh() {
  u32 r;
  asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(r));
  return r;
}
FA4_DEVICE u32 block_index_y_fresh() {
  u32 r;
  asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(r));
  return r;
}
FA4_DEVICE u32 block_index_z_fresh() {
  u32 r;
  asm volatile("mov.u32 %0, %%ctaid.z;" : "=r"(r));
  return r;
}

// An opaque copy of x: expressions of the result cannot be hoisted out of a loop (a value
// that is cheap to recompute, e.g. a descriptor per k step from a loop-invariant address, is
// otherwise hoisted by the dozen and spilled).
FA4_DEVICE u32 opaque(u32 x) {
  u32 y;
  asm volatile("mov.b32 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}

FA4_DEVICE float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

FA4_DEVICE float fast_log2(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

FA4_DEVICE float fast_rcp(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace fa4
