// fa4gen/sequence_splits.cuh: how many K splits one sequence of a batch takes when the host
// asks for a count per sequence (FwdParams::split_slots > 0; the portable split kernel and its
// combines).
//
// FA4's count is one for the whole call, from its upper bounds (every sequence as the longest).
// An engine's decode step mixes context lengths: with few splits the longest sequence's CTAs
// run alone at the end, with many every short sequence is cut into slivers that cost more in
// fixed work, partials and combine than they save. Here, as FA3's scheduler metadata does, the
// batch's K blocks (every CTA's: Q blocks x key blocks x CTA heads) over the CTA slots give
// each slot's share, and a sequence takes as many splits as its blocks need shares (less an
// eighth): at least one, at most num_splits (the grid's). The forward's CTAs past their
// sequence's count exit at once; the combine reads only that many partials.
//
// The forward and the combine compute it apart, with different thread counts: integer
// arithmetic only, so they agree exactly.
#pragma once
#include "fa4gen/seqlens.cuh"

namespace fa4 {

// THREADS threads (whole warps) call it together; it has barriers where split_slots > 0.
// `scratch` is THREADS / 32 u64 of shared memory, free again when it returns. `seqlen_k`: the
// sequence's own keys; `rows_per_query` and `cta_heads`: the kernel's packed GQA group (1
// unpacked) and its CTAs' heads (heads_kv packed, heads unpacked).
template <int THREADS, bool kVarlen, bool kPaged>
FA4_DEVICE int sequence_splits(const FwdParams& p, int seqlen_k, int tile_n, int block_m, int rows_per_query,
                               int cta_heads, u64* scratch) {
  static_assert(THREADS % 32 == 0, "whole warps");
  if (p.split_slots <= 0 || p.num_splits <= 1) return p.num_splits;
  u64 blocks = 0;  // this thread's sequences' CTA blocks (per CTA head)
  for (int b = threadIdx.x; b < p.batch; b += THREADS) {
    const SeqInfo<kVarlen, kPaged> s(p, b);
    const u64 q_blocks = ((u64)max(s.seqlen_q, 0) * rows_per_query + block_m - 1) / block_m;
    blocks += q_blocks * (u64)((max(s.seqlen_k, 0) + tile_n - 1) / tile_n);
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) blocks += __shfl_xor_sync(0xffffffffu, blocks, o);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = blocks;
  __syncthreads();
  u64 total = 0;
#pragma unroll
  for (int w = 0; w < THREADS / 32; ++w) total += scratch[w];
  __syncthreads();  // every thread has read scratch: the caller may reuse it
  const u64 slots = (u64)p.split_slots;
  u64 share = (total * (u64)cta_heads + slots - 1) / slots;
  share = share > 0 ? share : 1;
  // A sequence up to 8/7 of a share long stays whole: a batch of equal lengths that fills the
  // slots is not split for a sliver over its share.
  const u64 own = (u64)((max(seqlen_k, 0) + tile_n - 1) / tile_n);
  const u64 splits = (own * 7 + share * 8 - 1) / (share * 8);
  return splits <= 1 ? 1 : splits >= (u64)p.num_splits ? p.num_splits : (int)splits;
}

}  // namespace fa4
