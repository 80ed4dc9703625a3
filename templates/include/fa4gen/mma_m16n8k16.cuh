// fa4gen/mma_m16n8k16.cuh: the warp-wide tensor-core MMA of sm80+ (mma.sync), fp32 accumulate.
//
// D[16x8] += A[16x16] * B[16x8], A row-major, B column-major, one warp. With g = lane / 4 and
// t = lane % 4 the fragments are:
//   A: a[0] = A[g][2t..2t+1]   a[1] = A[g+8][2t..]   a[2] = A[g][2t+8..]   a[3] = A[g+8][2t+8..]
//   B: b[0] = B[2t..2t+1][g]   b[1] = B[2t+8..2t+9][g]
//   C: c[0..1] = C[g][2t..2t+1]  c[2..3] = C[g+8][2t..2t+1]
// The C layout of two adjacent n8 tiles is exactly the A layout of one k16 step, which is what
// lets P stay in registers between the two GEMMs of attention.
#pragma once
#include "fa4gen/dtype.cuh"

namespace fa4 {

template <class T>
struct MmaM16N8K16;

template <>
struct MmaM16N8K16<Bf16> {
  static FA4_DEVICE void run(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

template <>
struct MmaM16N8K16<Fp16> {
  static FA4_DEVICE void run(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

template <class T>
FA4_DEVICE void mma_m16n8k16(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  MmaM16N8K16<T>::run(c, a, b0, b1);
}

// Zero a warp's grid of m16n8 accumulators ([M fragments][N tiles][4 floats]).
template <int M, int N>
FA4_DEVICE void zero_accumulators(float (&c)[M][N][4]) {
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int n = 0; n < N; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) c[m][n][e] = 0.f;
}

}  // namespace fa4
