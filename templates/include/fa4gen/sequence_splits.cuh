// fa4gen/sequence_splits.cuh: how many K splits one sequence of a batch takes when the host
// asks for a count per sequence (FwdParams::split_slots > 0; the portable split kernel and its
// combines).
//
// FA4's count is one for the whole call, from its upper bounds (every sequence as the longest).
// An engine's decode step mixes context lengths: with few splits the longest sequence's CTAs
// run alone at the end, with many every short sequence is cut into slivers that cost more in
// fixed work, partials and combine than they save. Here, as FA3's scheduler metadata does, the
// count comes from the batch's real lengths: the batch's K blocks (every CTA's: Q blocks x key
// blocks x CTA heads) dealt split_shares per CTA slot give a share, and a sequence takes as
// many splits as its blocks need shares (less an eighth); where every length is within an
// eighth of the mean, every sequence takes the count that fills one wave of slots. At least
// one, at most num_splits (the grid's). The forward's CTAs past their sequence's count exit
// at once; the combine reads only that many partials.
//
// The forward and the combine compute it apart, with different thread counts: integer
// arithmetic only, so they agree exactly.
#pragma once
#include "fa4gen/seqlens.cuh"

namespace fa4 {

// THREADS threads (whole warps) call it together; it has barriers where split_slots > 0.
// `scratch` is 3 * THREADS / 32 u64 of shared memory, free again when it returns. `seqlen_k`:
// the sequence's own keys; `rows_per_query` and `cta_heads`: the kernel's packed GQA group (1
// unpacked) and its CTAs' heads (heads_kv packed, heads unpacked).
template <int THREADS, bool kVarlen, bool kPaged>
FA4_DEVICE int sequence_splits(const FwdParams& p, int seqlen_k, int tile_n, int block_m, int rows_per_query,
                               int cta_heads, u64* scratch) {
  static_assert(THREADS % 32 == 0, "whole warps");
  constexpr int kWarps = THREADS / 32;
  if (p.split_slots <= 0 || p.split_shares <= 0 || p.num_splits <= 1) return p.num_splits;
  // Over this thread's sequences: their CTAs' K blocks, their CTAs (per CTA head), and the
  // longest key range a CTA of theirs holds.
  u64 blocks = 0, ctas = 0, longest = 0;
  for (int b = threadIdx.x; b < p.batch; b += THREADS) {
    const SeqInfo<kVarlen, kPaged> s(p, b);
    const u64 q_blocks = ((u64)max(s.seqlen_q, 0) * rows_per_query + block_m - 1) / block_m;
    const u64 k_blocks = (u64)((max(s.seqlen_k, 0) + tile_n - 1) / tile_n);
    blocks += q_blocks * k_blocks;
    ctas += q_blocks;
    if (q_blocks > 0 && k_blocks > longest) longest = k_blocks;
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    blocks += __shfl_xor_sync(0xffffffffu, blocks, o);
    ctas += __shfl_xor_sync(0xffffffffu, ctas, o);
    const u64 other = __shfl_xor_sync(0xffffffffu, longest, o);
    longest = other > longest ? other : longest;
  }
  const int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) {
    scratch[warp] = blocks;
    scratch[kWarps + warp] = ctas;
    scratch[2 * kWarps + warp] = longest;
  }
  __syncthreads();
  blocks = ctas = longest = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    blocks += scratch[w];
    ctas += scratch[kWarps + w];
    longest = scratch[2 * kWarps + w] > longest ? scratch[2 * kWarps + w] : longest;
  }
  __syncthreads();  // every thread has read scratch: the caller may reuse it
  if (ctas == 0) return 1;
  const u64 slots = (u64)p.split_slots, limit = (u64)p.num_splits;
  u64 splits;
  if (longest * 8 * ctas <= 9 * blocks) {
    // Lengths within an eighth of their mean: the tail is whole CTAs of one size, so a split
    // only helps fill the slots, as many times as every CTA's copies fit in one wave (a batch
    // of 64 x 4k keys at 8 KV heads already fills the H200's 264 slots twice: unsplit).
    splits = slots / (ctas * (u64)cta_heads);
  } else {
    // Mixed lengths: the batch's blocks dealt split_shares per slot; a sequence takes as many
    // splits as its blocks need shares, less an eighth. Pieces of a fraction of a slot's work
    // bound the tail that the last, largest CTAs leave, whatever order they launch in.
    u64 share = (blocks * (u64)cta_heads + slots * (u64)p.split_shares - 1) / (slots * (u64)p.split_shares);
    share = share > 0 ? share : 1;
    const u64 own = (u64)((max(seqlen_k, 0) + tile_n - 1) / tile_n);
    splits = (own * 7 + share * 8 - 1) / (share * 8);
  }
  return splits <= 1 ? 1 : splits >= limit ? (int)limit : (int)splits;
}

}  // namespace fa4
