// fa4gen/fwd_params.cuh: the forward kernels' one argument, passed by value as a
// __grid_constant__. Its Rust twin is `runtime::params::FwdParams` (#[repr(C)]); every generated
// kernel static_asserts the size and offsets the Rust side computed (`FwdParamsMatch`), so the
// two cannot drift.
#pragma once
#include "fa4gen/prelude.cuh"

namespace fa4 {

struct FwdParams {
  const u16* q;  // (B, Sq, H, D)      strides below, in elements; last dim contiguous
  const u16* k;  // (B, Sk, Hkv, D)
  const u16* v;  // (B, Sk, Hkv, Dv)
  u16* o;        // (B, Sq, H, Dv); fp32 elements from a combine with out_fp32
  float* lse;    // (B, H, Sq) fp32, (H, total_q) varlen; written only by kernels with the lse flag

  // Serving features, read only by kernels with the matching flag.
  const int* cu_seqlens_q;  // varlen: (B+1) row offsets into packed (total, H, D) q/out; may be null
  const int* cu_seqlens_k;  // varlen: the same for k/v; may be null
  const int* seqused_q;     // varlen: (B) valid query rows per sequence; may be null
  const int* seqused_k;     // varlen/paged: (B) valid keys per sequence; may be null
  const int* page_table;    // paged: (B, max_pages); k/v are (pages, page_size, Hkv, D)
  const float* sinks;       // sink: (H) logits, natural-log units, not scaled
  float* o_partial;         // split: (splits, rows, H, Dv) fp32, normalised per split
  float* lse_partial;       // split: (splits, <LSE layout>) fp32
  int* tail_counters;       // split tail: arrivals per (tail tile, consumer), zero at launch; o_partial: the parts
  const int* unit_order;    // causal runs: the schedule unit each snake place takes (Tiles::at); may be null

  i64 q_batch_stride, q_row_stride, q_head_stride;
  i64 k_batch_stride, k_row_stride, k_head_stride;
  i64 v_batch_stride, v_row_stride, v_head_stride;
  i64 o_batch_stride, o_row_stride, o_head_stride;
  i64 lse_batch_stride, lse_head_stride;
  i64 page_table_batch_stride;
  i64 o_partial_split_stride, lse_partial_split_stride;

  int batch, seqlen_q, seqlen_k, heads, heads_kv;
  int group;                      // heads / heads_kv
  int window_left, window_right;  // Local kernels; |side| <= 2^30 - 1, which stands for unbounded
  int page_size;                  // paged: keys per page
  int num_splits;                 // split: K ranges (gridDim.z = batch * num_splits, or split_units)
  int tail_round, tail_units, tail_blocks;  // split tail (tail_units > 0): its first round, units, blocks per tile
  float scale_log2;               // exp2 multiplier of a score: scale*log2(e), or softcap*log2(e)
  float softcap_scale;            // softcap: scale / softcap; the score is tanh(qk * softcap_scale)
  int m_major_runs;               // causal runs dealt Q block major, (head, batch) fastest (Tiles::at)
  int split_slots, split_units;   // portable split: > 0, each sequence's own count (sequence_splits.cuh)
  int out_fp32;                   // the combines: o holds fp32 (flash_attn_combine's out_dtype), else 16-bit
  int o_parts_log2;               // the combines: each O row reduced as 2^this column parts of kDv (0: one)
};

// Whether FwdParams has its Rust twin's layout (`params::layout()`, rendered into each kernel):
// the size, two offsets and the last field's offset (the size alone misses a field added in
// the struct's tail padding). NVRTC 13.0 (the GPU host's jit) has no __builtin_offsetof: there
// only the size is checked.
template <int kSize, int kGroup, int kScale, int kLast>
struct FwdParamsMatch {
  static constexpr bool value = sizeof(FwdParams) == kSize
#if defined(__has_builtin)
#if __has_builtin(__builtin_offsetof)
                                && __builtin_offsetof(FwdParams, group) == kGroup &&
                                __builtin_offsetof(FwdParams, scale_log2) == kScale &&
                                __builtin_offsetof(FwdParams, o_parts_log2) == kLast
#endif
#endif
      ;
};

}  // namespace fa4
