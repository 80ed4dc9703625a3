// fa4gen/warpgroup.cuh: warpgroup-level control (sm90+): register reallocation between warp
// roles and named barriers among a subset of the CTA's warps.
#pragma once
#include "fa4gen/prelude.cuh"

namespace fa4 {

// Give registers back to the pool (producer warps need few) / take them (consumers). Every
// warp of the warpgroup executes the same instruction.
template <int N>
FA4_DEVICE void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}
template <int N>
FA4_DEVICE void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}

// Named barrier `id` (1..15; 0 is __syncthreads) over `threads` threads.
FA4_DEVICE void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
FA4_DEVICE void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Lane 0's answer to "am I the elected thread of this warp".
FA4_DEVICE bool elect_one() {
  u32 pred;
  asm volatile(
      "{\n\t.reg .pred p;\n\t.reg .b32 r;\n\t"
      "elect.sync r|p, 0xffffffff;\n\t"
      "selp.u32 %0, 1, 0, p;\n\t}"
      : "=r"(pred));
  return pred != 0;
}

}  // namespace fa4
