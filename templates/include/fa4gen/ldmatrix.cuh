// fa4gen/ldmatrix.cuh: warp-wide shared-memory matrix loads (ldmatrix, sm75+).
//
// x4 loads four 8x8 b16 matrices; lane i supplies the address of row i % 8 of matrix i / 8 and
// receives, for matrix j, register r[j] = M_j[lane / 4][2 * (lane % 4) .. +1] (or, with .trans,
// M_j[2 * (lane % 4) .. +1][lane / 4]). Which rows a lane points at decides which MMA
// fragment comes out; the callers in smem_tile.cuh spell that out per operand.
#pragma once
#include "fa4gen/prelude.cuh"

namespace fa4 {

FA4_DEVICE void ldmatrix_x4(u32 (&r)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

FA4_DEVICE void ldmatrix_x4_trans(u32 (&r)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

}  // namespace fa4
