// fa4gen/smem_tile.cuh: row-major tiles of 16-bit elements in shared memory, their cooperative
// loads from global memory, and the per-lane ldmatrix addresses of each MMA operand.
//
// Rows are padded by 8 elements (16 bytes): a row of STRIDE elements then starts 4 banks after
// the previous one, so the 8 rows one ldmatrix phase reads land in 8 distinct 4-bank groups for
// every head dim (64, 96, 128, 192, 256 alike), with no swizzle arithmetic on the hot path.
#pragma once
#include "fa4gen/cp_async.cuh"
#include "fa4gen/ldmatrix.cuh"

namespace fa4 {

// Copy a ROWS x COLS tile (COLS a multiple of 8) into shared memory at `smem` with row stride
// STRIDE elements, all NTHREADS threads of the CTA taking 16-byte chunks in turn.
// row_ptr(r) gives global row r or nullptr for a row past the end (zero-filled); columns at or
// past cols_valid (head-dim padding) are zero-filled too. `fallback` is any valid global address
// (a zero-byte copy still needs one).
template <int ROWS, int COLS, int STRIDE, int NTHREADS, class RowPtr>
FA4_DEVICE void load_tile_async(u32 smem, RowPtr row_ptr, int cols_valid, const u16* fallback,
                                int tid) {
  constexpr int kChunksPerRow = COLS / 8;
  constexpr int kChunks = ROWS * kChunksPerRow;
  constexpr int kIters = (kChunks + NTHREADS - 1) / NTHREADS;
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int i = tid + it * NTHREADS;
    if (kChunks % NTHREADS == 0 || i < kChunks) {
      const int r = i / kChunksPerRow;
      const int c = (i % kChunksPerRow) * 8;
      const u16* row = row_ptr(r);
      const bool ok = row != nullptr && c < cols_valid;
      cp_async_16_zfill(smem + (r * STRIDE + c) * 2, ok ? row + c : fallback, ok);
    }
  }
}

// The same copy for rows at a uniform stride (K and V tiles: `g_row0` is row 0 of the tile,
// rows at or past rows_valid are zero-filled). When the threads divide evenly over the 16-byte
// chunks of a row, each thread keeps one column and walks rows by a constant pointer step, so the
// main loop carries one pointer per tile instead of a hoisted address per chunk. The thread
// index is read afresh so the per-thread offsets are recomputed at each load (a few integer
// ops) instead of being held across the main loop: at 255 registers, held offsets spill.
template <int ROWS, int COLS, int STRIDE, int NTHREADS>
FA4_DEVICE void load_rows_async(u32 smem, const u16* g_row0, i64 g_row_stride, int rows_valid,
                                int cols_valid) {
  const int tid = thread_index_fresh();
  constexpr int kChunksPerRow = COLS / 8;
  if constexpr (NTHREADS % kChunksPerRow == 0) {
    constexpr int kRowStep = NTHREADS / kChunksPerRow;
    constexpr int kIters = (ROWS + kRowStep - 1) / kRowStep;
    const int r0 = tid / kChunksPerRow, c = (tid % kChunksPerRow) * 8;
    // Offsets within one tile fit 32 bits (the host caps row strides at 2^23 elements).
    const int stride = (int)g_row_stride;
    const u32 dst = smem + (r0 * STRIDE + c) * 2;
    const bool col_ok = c < cols_valid;
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int r = r0 + it * kRowStep;
      if (ROWS % kRowStep == 0 || r < ROWS) {
        const bool ok = col_ok && r < rows_valid;
        cp_async_16_zfill(dst + it * kRowStep * STRIDE * 2, g_row0 + (ok ? r * stride + c : 0), ok);
      }
    }
  } else {
    load_tile_async<ROWS, COLS, STRIDE, NTHREADS>(
        smem, [&](int r) { return r < rows_valid ? g_row0 + r * g_row_stride : nullptr; }, cols_valid, g_row0,
        tid);
  }
}

// The same copy for rows at arbitrary offsets (paged K/V with pages shorter than a tile):
// row_off(r) is the element offset of row r from `base`, asked only for rows below rows_valid.
template <int ROWS, int COLS, int STRIDE, int NTHREADS, class RowOff>
FA4_DEVICE void load_rows_gather_async(u32 smem, const u16* base, RowOff row_off, int rows_valid,
                                       int cols_valid) {
  const int tid = thread_index_fresh();
  constexpr int kChunksPerRow = COLS / 8;
  if constexpr (NTHREADS % kChunksPerRow == 0) {
    constexpr int kRowStep = NTHREADS / kChunksPerRow;
    constexpr int kIters = (ROWS + kRowStep - 1) / kRowStep;
    const int r0 = tid / kChunksPerRow, c = (tid % kChunksPerRow) * 8;
    const u32 dst = smem + (r0 * STRIDE + c) * 2;
    const bool col_ok = c < cols_valid;
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int r = r0 + it * kRowStep;
      if (ROWS % kRowStep == 0 || r < ROWS) {
        const bool ok = col_ok && r < rows_valid;
        cp_async_16_zfill(dst + it * kRowStep * STRIDE * 2, base + (ok ? row_off(r) + c : 0), ok);
      }
    }
  } else {
    load_tile_async<ROWS, COLS, STRIDE, NTHREADS>(
        smem, [&](int r) { return r < rows_valid ? base + row_off(r) : nullptr; }, cols_valid, base, tid);
  }
}

// Per-lane byte offsets (relative to a tile's base) for ldmatrix.x4, for a 16x16 block whose
// top-left element is (r0, c0); r0/c0 are compile-time in the unrolled GEMM loops, so the
// offsets fold into the instruction's immediate.
template <int STRIDE>
struct LdmatrixLane {
  int a_off;  // A operand (row-major M x K):   rows r0 + (l&7) + ((l>>3)&1)*8, cols c0 + (l>>4)*8
              //   -> r[0..3] = a[0..3] of the m16k16 fragment.
              // Same pattern serves V^T (.trans, rows = keys): r[0],r[1] = b of n8 tile c0,
              //   r[2],r[3] = b of n8 tile c0+8.
  int b_off;  // B operand stored N x K (K^T):  rows r0 + (l&7) + (l>>4)*8, cols c0 + ((l>>3)&1)*8
              //   -> r[0],r[1] = b of n8 tile r0, r[2],r[3] = b of n8 tile r0+8.
  FA4_DEVICE explicit LdmatrixLane(int lane) {
    a_off = (((lane & 7) + ((lane >> 3) & 1) * 8) * STRIDE + (lane >> 4) * 8) * 2;
    b_off = (((lane & 7) + (lane >> 4) * 8) * STRIDE + ((lane >> 3) & 1) * 8) * 2;
  }
  static constexpr __device__ int at(int r0, int c0) { return (r0 * STRIDE + c0) * 2; }
};

}  // namespace fa4
