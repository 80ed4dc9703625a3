// fa4gen/stmatrix.cuh: warp-wide shared-memory matrix stores (stmatrix, sm90+).
//
// x4 stores four 8x8 b16 matrices: lane i supplies the address of row i % 8 of matrix i / 8,
// and its register r[j] holds M_j[lane / 4][2 * (lane % 4) .. +1] — the layout of an MMA
// accumulator's n8 group once packed to 16 bits, so a warp's 16 x 16 block of O leaves its
// registers in one instruction instead of four 4-byte stores with an address each.
#pragma once
#include "fa4gen/prelude.cuh"

namespace fa4 {

FA4_DEVICE void stmatrix_x4(u32 addr, const u32 (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1,%2,%3,%4};" ::"r"(addr), "r"(r[0]), "r"(r[1]),
               "r"(r[2]), "r"(r[3])
               : "memory");
}

}  // namespace fa4
