// fa4gen/seqlens.cuh: where one sequence of a batch lives and how long it is, for dense
// batches, ragged (varlen) batches and paged K/V.
//
// Dense: every sequence has seqlen_q/seqlen_k rows at batch strides. Varlen: cu_seqlens_q/k
// (B+1 offsets into packed (total, H, D) tensors) and seqused_q/k (valid lengths of each
// sequence) are each optional at run time, as in FA4. Paged: K/V rows come from pages through
// the page table; the K length is seqused_k[b] or seqlen_k (= max_pages * page_size).
#pragma once
#include "fa4gen/cp_async.cuh"
#include "fa4gen/fwd_params.cuh"

namespace fa4 {

template <bool kVarlen, bool kPaged>
struct SeqInfo {
  int seqlen_q, seqlen_k;
  int q_row0;  // the sequence's first row among all rows: cu_seqlens_q[b], or b * seqlen_q
  bool q_packed;

  FA4_DEVICE SeqInfo(const FwdParams& p, int b) {
    seqlen_q = p.seqlen_q;
    seqlen_k = p.seqlen_k;
    q_row0 = b * p.seqlen_q;
    q_packed = false;
    if constexpr (kVarlen) {
      if (p.cu_seqlens_q != nullptr) {
        q_packed = true;
        q_row0 = p.cu_seqlens_q[b];
        seqlen_q = p.cu_seqlens_q[b + 1] - q_row0;
      }
      if (p.seqused_q != nullptr) seqlen_q = p.seqused_q[b];
      if (!kPaged && p.cu_seqlens_k != nullptr) seqlen_k = p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
    }
    if constexpr (kVarlen || kPaged) {
      if (p.seqused_k != nullptr) seqlen_k = p.seqused_k[b];
    }
  }

  // Element offset of the sequence's row 0 in q (or out): packed rows or a batch stride.
  FA4_DEVICE i64 q_offset(int b, i64 batch_stride, i64 row_stride) const {
    return q_packed ? (i64)q_row0 * row_stride : (i64)b * batch_stride;
  }
  // Index of (head, query i) in an LSE laid out (B, H, Sq), or (H, total_q) when packed.
  FA4_DEVICE i64 lse_index(const FwdParams& p, int b, int head, int i) const {
    return (q_packed ? (i64)q_row0 : (i64)b * p.lse_batch_stride) + (i64)head * p.lse_head_stride + i;
  }
};

// Element offset of row 0 of sequence b in a dense or varlen k/v (not paged).
template <bool kVarlen>
FA4_DEVICE i64 kv_seq_offset(const FwdParams& p, int b, i64 batch_stride, i64 row_stride) {
  if constexpr (kVarlen) {
    if (p.cu_seqlens_k != nullptr) return (i64)p.cu_seqlens_k[b] * row_stride;
  }
  return (i64)b * batch_stride;
}

// Paged K/V: the page-table entries one K block spans are copied into shared memory one block
// ahead (cp.async, 4 bytes each), so computing a row's address never waits on a global load.
// A block of TILE_N keys starting at n0 spans entries n0 / page_size ..
// (min(n0 + TILE_N, seqlen_k) - 1) / page_size: at most TILE_N + 1 (page size 1).
template <int TILE_N, int NTHREADS>
FA4_DEVICE void prefetch_page_entries(u32 slot, const FwdParams& p, int b, int n0, int seqlen_k) {
  const int first = n0 / p.page_size;
  const int last = (min(n0 + TILE_N, seqlen_k) - 1) / p.page_size;
  const int* row = p.page_table + (i64)b * p.page_table_batch_stride;
  for (int i = (int)thread_index_fresh(); i <= last - first; i += NTHREADS) cp_async_4(slot + i * 4, row + first + i);
}

// Copy a block of ROWS keys (rows n0 .. n0 + ROWS - 1 of the sequence) of a paged K or V into
// shared memory, pages shorter than the block. Each thread walks its rows r0, r0 + STEP, ...
// with a running (entry, row-in-page) pair: three divisions per block instead of two per row
// (a division by a run-time page size is ~25 instructions; per row they doubled the main
// loop's instruction count at page size 16).
template <int ROWS, int COLS, class Rows, int NTHREADS>
FA4_DEVICE void load_paged_rows_async(u32 smem, const u16* head_base, const int* entries, int n0, int page_size,
                                      i64 page_stride, i64 row_stride, int rows_valid, int cols_valid) {
  constexpr int kChunksPerRow = COLS / 8;
  static_assert(NTHREADS % kChunksPerRow == 0, "one column per thread");
  constexpr int kRowStep = NTHREADS / kChunksPerRow;
  constexpr int kIters = (ROWS + kRowStep - 1) / kRowStep;
  const int tid = (int)thread_index_fresh();
  const int r0 = tid / kChunksPerRow, c = (tid % kChunksPerRow) * 8;
  const bool col_ok = c < cols_valid;
  const int first = n0 / page_size;
  int entry = (n0 + r0) / page_size - first, in_page = (n0 + r0) % page_size;
  const int step_entries = kRowStep / page_size, step_rows = kRowStep % page_size;
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int r = r0 + it * kRowStep;
    if (ROWS % kRowStep == 0 || r < ROWS) {
      const bool ok = col_ok && r < rows_valid;
      const i64 off = ok ? (i64)entries[entry] * page_stride + (i64)in_page * row_stride + c : 0;
      cp_async_16_zfill(smem + Rows::offset(r, c), head_base + off, ok);
    }
    entry += step_entries;
    in_page += step_rows;
    if (in_page >= page_size) {
      in_page -= page_size;
      ++entry;
    }
  }
}

// Element offset of key n0 + r (block start n0) from the slot of its block's page entries.
FA4_DEVICE i64 paged_row_offset(const FwdParams& p, const int* entries, int n0, int r, i64 page_stride,
                                i64 row_stride) {
  const int j = n0 + r;
  const int page = entries[j / p.page_size - n0 / p.page_size];
  return (i64)page * page_stride + (i64)(j % p.page_size) * row_stride;
}

}  // namespace fa4
