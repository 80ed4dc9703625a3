// fa4gen/block_reduce.cuh: one float reduced over a warp or a whole CTA (max or sum), every
// thread getting the result: a butterfly within each warp, then the warps' values through
// shared memory.
#pragma once
#include "fa4gen/prelude.cuh"

namespace fa4 {

struct MaxOp {
  FA4_DEVICE float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
  FA4_DEVICE float operator()(float a, float b) const { return a + b; }
};

// Over each aligned group of LANES lanes (a power of two up to 32); the whole warp calls it
// together.
template <int LANES = 32, typename Op>
FA4_DEVICE float warp_reduce(float x, Op op) {
  static_assert(LANES >= 1 && LANES <= 32 && (LANES & (LANES - 1)) == 0, "a power of two up to a warp");
#pragma unroll
  for (int o = LANES / 2; o > 0; o /= 2) x = op(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// THREADS (a multiple of 32) threads call it together: it has barriers. `scratch` is
// THREADS / 32 floats of shared memory, free again when it returns.
template <int THREADS, typename Op>
FA4_DEVICE float block_reduce(float x, float* scratch, Op op) {
  static_assert(THREADS % 32 == 0, "whole warps");
  x = warp_reduce<32>(x, op);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = x;
  __syncthreads();
  x = scratch[0];
#pragma unroll
  for (int w = 1; w < THREADS / 32; ++w) x = op(x, scratch[w]);
  __syncthreads();  // every thread has read scratch: the next call may write it
  return x;
}

}  // namespace fa4
