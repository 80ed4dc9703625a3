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
// named_barrier_sync that also returns whether `pred` held in any of the `threads` threads:
// one thread's finding (e.g. an atomic's result) reaches its warpgroup without shared memory.
FA4_DEVICE bool named_barrier_or(int id, int threads, bool pred) {
  u32 any;
  asm volatile(
      "{\n .reg .pred p, q;\n setp.ne.u32 p, %1, 0;\n bar.red.or.pred q, %2, %3, p;\n selp.u32 %0, 1, 0, q;\n}"
      : "=r"(any)
      : "r"((u32)pred), "r"(id), "r"(threads)
      : "memory");
  return any != 0;
}

}  // namespace fa4
