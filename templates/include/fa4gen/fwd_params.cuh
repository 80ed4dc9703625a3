// fa4gen/fwd_params.cuh: the forward kernels' one argument, passed by value as a
// __grid_constant__. Its Rust twin is `runtime::params::FwdParams` (#[repr(C)]); every generated
// kernel static_asserts the size and two offsets the Rust side computed, so the two cannot drift.
#pragma once
#include "fa4gen/prelude.cuh"

namespace fa4 {

struct FwdParams {
  const u16* q;  // (B, Sq, H, D)      strides below, in elements; last dim contiguous
  const u16* k;  // (B, Sk, Hkv, D)
  const u16* v;  // (B, Sk, Hkv, Dv)
  u16* o;        // (B, Sq, H, Dv)
  float* lse;    // (B, H, Sq) fp32; written only by kernels with the lse flag

  i64 q_batch_stride, q_row_stride, q_head_stride;
  i64 k_batch_stride, k_row_stride, k_head_stride;
  i64 v_batch_stride, v_row_stride, v_head_stride;
  i64 o_batch_stride, o_row_stride, o_head_stride;
  i64 lse_batch_stride, lse_head_stride;

  int batch, seqlen_q, seqlen_k, heads, heads_kv;
  int group;                      // heads / heads_kv
  int window_left, window_right;  // Local kernels; an unbounded side is seqlen_q + seqlen_k
  float scale_log2;               // softmax_scale * log2(e)
};

}  // namespace fa4
