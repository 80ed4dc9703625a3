// fa4gen/smem_tile.cuh: row-major tiles of 16-bit elements in shared memory, their cooperative
// loads from global memory, and the per-lane ldmatrix addresses of each MMA operand.
//
// Two layouts, both conflict-free for ldmatrix (the 8 rows one phase reads fall in 8 distinct
// 4-bank groups) and both written in whole 16-byte chunks:
// - PaddedRows<STRIDE>: rows of STRIDE = COLS + 8 elements, so a row starts 4 banks after the
//   previous one, for any head dim, with no address arithmetic on the hot path.
// - SwizzledRows<COLS> (COLS a multiple of 64): unpadded rows, chunk i of each 128-byte span of
//   row r stored at i ^ (r % 8). A warp's cp.async of two 256-byte rows then writes 512
//   contiguous bytes that match the global sectors one to one. Padded rows shift each row by 16
//   bytes against the 128-byte lines, so the copy took 24 L2 sectors and 10.5 shared-memory
//   wavefronts where 16 and 4 do (ncu, H200, d 128 decode: 1.5x the L2 reads of the bytes
//   needed, at the L2's limit), which is what decode's memory-bound K/V stream pays for.
#pragma once
#include "fa4gen/cp_async.cuh"
#include "fa4gen/ldmatrix.cuh"

namespace fa4 {

// Rows of STRIDE elements (COLS + 8: padded by 16 bytes).
template <int STRIDE>
struct PaddedRows {
  static constexpr int kRowBytes = STRIDE * 2;
  // Byte offset of element (r, c), c a multiple of 8.
  static constexpr FA4_DEVICE int offset(int r, int c) { return (r * STRIDE + c) * 2; }
  // A lane's part of an ldmatrix.x4 address (bytes from the tile), for the A operand (row-major
  // M x K: rows r0 + (l&7) + ((l>>3)&1)*8, cols c0 + (l>>4)*8 -> a[0..3] of the m16k16
  // fragment; the same pattern serves V^T with .trans, rows = keys: r[0], r[1] = b of n8 tile
  // c0, r[2], r[3] = b of n8 tile c0 + 8) and the B operand stored N x K (K^T: rows r0 + (l&7)
  // + (l>>4)*8, cols c0 + ((l>>3)&1)*8 -> r[0], r[1] = b of n8 tile r0, r[2], r[3] = b of n8
  // tile r0 + 8).
  static FA4_DEVICE u32 lane_a(int lane) { return offset((lane & 7) + ((lane >> 3) & 1) * 8, (lane >> 4) * 8); }
  static FA4_DEVICE u32 lane_b(int lane) { return offset((lane & 7) + (lane >> 4) * 8, ((lane >> 3) & 1) * 8); }
  // The x4 block whose top-left element is (r0, c0), from the tile address plus the lane's part;
  // r0 / c0 are compile-time in the unrolled GEMM loops, so this folds into the immediate.
  static FA4_DEVICE u32 x4(u32 tile_lane, int r0, int c0) { return cols(tile_lane, c0) + r0 * kRowBytes; }
  // x4 in two steps: the address of column block c0 (of every row), then + r0 * kRowBytes.
  static FA4_DEVICE u32 cols(u32 tile_lane, int c0) { return tile_lane + c0 * 2; }
  // The tile-plus-lane address as a GEMM over the tile takes it inside a main loop.
  static FA4_DEVICE u32 in_loop(u32 tile_lane) { return tile_lane; }
};

// Unpadded rows of COLS elements, 16-byte chunks swizzled within each 128-byte span by the row's
// low 3 bits. Tiles must start 128-byte aligned.
template <int COLS>
struct SwizzledRows {
  static_assert(COLS % 64 == 0, "whole 128-byte spans");
  static constexpr int kRowBytes = COLS * 2;
  static constexpr FA4_DEVICE int offset(int r, int c) { return r * kRowBytes + ((c >> 3) ^ (r & 7)) * 16; }
  // The lanes' rows and columns are PaddedRows' ones. Every x4 block starts at a row r0 that is a
  // multiple of 8 and a column c0 that is a multiple of 16, so a lane's chunk within its span is
  // (c0 / 8 % 8 + its column bit) ^ (its row % 8) = ((c0 / 16 % 4) << 1) ^ (its column bit ^ its
  // row % 8): the lane's part holds the second term in address bits 4-6, and x4 flips bits 5-6
  // by the first (an XOR with a compile-time constant; the rest is an add, no carries reach
  // bits 4-6 from a 128-byte aligned base).
  static FA4_DEVICE u32 lane_a(int lane) {
    return ((lane & 7) + ((lane >> 3) & 1) * 8) * kRowBytes + (((lane >> 4) ^ (lane & 7)) << 4);
  }
  static FA4_DEVICE u32 lane_b(int lane) {
    return ((lane & 7) + (lane >> 4) * 8) * kRowBytes + ((((lane >> 3) & 1) ^ (lane & 7)) << 4);
  }
  static FA4_DEVICE u32 x4(u32 tile_lane, int r0, int c0) { return cols(tile_lane, c0) + r0 * kRowBytes; }
  static FA4_DEVICE u32 cols(u32 tile_lane, int c0) {
    return (tile_lane ^ (u32)(((c0 >> 4) & 3) << 5)) + (c0 >> 6) * 128;
  }
  // An opaque copy: the four XOR'd bases are then derived where used, not hoisted and held
  // across the main loop (held, they spilled 20 bytes in 255-register kernels).
  static FA4_DEVICE u32 in_loop(u32 tile_lane) { return opaque(tile_lane); }
};

// The layout a K or V tile's row stride names: ROW (elements) = COLS for rows swizzled within
// 128-byte spans, unpadded; COLS + 8 for padded rows. Which one a kernel takes is decided once,
// in Rust (`KernelSpec::geometry`), and rendered as the stride.
template <int COLS, int ROW>
struct KvRowsOf {
  static_assert(ROW == COLS + 8, "a K/V row stride is COLS (swizzled) or COLS + 8 (padded)");
  using type = PaddedRows<ROW>;
};
template <int COLS>
struct KvRowsOf<COLS, COLS> {
  static_assert(COLS % 64 == 0, "swizzled rows are whole 128-byte spans");
  using type = SwizzledRows<COLS>;
};
template <int COLS, int ROW>
using KvRows = typename KvRowsOf<COLS, ROW>::type;

// Copy a ROWS x COLS tile (COLS a multiple of 8) into shared memory at `smem`, laid out as
// Rows (PaddedRows or SwizzledRows), all NTHREADS threads of the CTA taking 16-byte chunks in turn.
// row_ptr(r) gives global row r or nullptr for a row past the end (zero-filled); columns at or
// past cols_valid (head-dim padding) are zero-filled too. `fallback` is any valid global address
// (a zero-byte copy still needs one).
template <int ROWS, int COLS, class Rows, int NTHREADS, class RowPtr>
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
      cp_async_16_zfill(smem + Rows::offset(r, c), ok ? row + c : fallback, ok);
    }
  }
}

// The same copy for rows at a uniform stride (K and V tiles: `g_row0` is row 0 of the tile,
// rows at or past rows_valid are zero-filled). When the threads divide evenly over the 16-byte
// chunks of a row, each thread keeps one column and walks rows by a constant pointer step, so the
// main loop carries one pointer per tile instead of a hoisted address per chunk. The thread
// index is read afresh so the per-thread offsets are recomputed at each load (a few integer
// ops) instead of being held across the main loop: at 255 registers, held offsets spill.
template <int ROWS, int COLS, class Rows, int NTHREADS>
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
    const bool col_ok = c < cols_valid;
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int r = r0 + it * kRowStep;
      if (ROWS % kRowStep == 0 || r < ROWS) {
        const bool ok = col_ok && r < rows_valid;
        cp_async_16_zfill(smem + Rows::offset(r, c), g_row0 + (ok ? r * stride + c : 0), ok);
      }
    }
  } else {
    load_tile_async<ROWS, COLS, Rows, NTHREADS>(
        smem, [&](int r) { return r < rows_valid ? g_row0 + r * g_row_stride : nullptr; }, cols_valid, g_row0,
        tid);
  }
}

// The same copy for rows at arbitrary offsets (paged K/V with pages shorter than a tile):
// row_off(r) is the element offset of row r from `base`, asked only for rows below rows_valid.
template <int ROWS, int COLS, class Rows, int NTHREADS, class RowOff>
FA4_DEVICE void load_rows_gather_async(u32 smem, const u16* base, RowOff row_off, int rows_valid,
                                       int cols_valid) {
  const int tid = thread_index_fresh();
  constexpr int kChunksPerRow = COLS / 8;
  if constexpr (NTHREADS % kChunksPerRow == 0) {
    constexpr int kRowStep = NTHREADS / kChunksPerRow;
    constexpr int kIters = (ROWS + kRowStep - 1) / kRowStep;
    const int r0 = tid / kChunksPerRow, c = (tid % kChunksPerRow) * 8;
    const bool col_ok = c < cols_valid;
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int r = r0 + it * kRowStep;
      if (ROWS % kRowStep == 0 || r < ROWS) {
        const bool ok = col_ok && r < rows_valid;
        cp_async_16_zfill(smem + Rows::offset(r, c), base + (ok ? row_off(r) + c : 0), ok);
      }
    }
  } else {
    load_tile_async<ROWS, COLS, Rows, NTHREADS>(
        smem, [&](int r) { return r < rows_valid ? base + row_off(r) : nullptr; }, cols_valid, base, tid);
  }
}

}  // namespace fa4
