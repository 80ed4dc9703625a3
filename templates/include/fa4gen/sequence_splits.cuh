// fa4gen/sequence_splits.cuh: split counts per sequence of a varlen batch, from its real
// lengths on the device (FwdParams::split_units > 0; the portable split kernel and its
// combines), and which (sequence, split) unit a CTA holds.
//
// FA4's count is one for the whole call, from its upper bounds (every sequence as the longest).
// An engine's decode step mixes context lengths: with few splits the longest sequence's CTAs
// run alone at the end, with many every short sequence is cut into slivers that cost more in
// fixed work, partials and combine than they save. Here, as FA3's scheduler metadata does, the
// counts come from the batch's lengths. The grid's z axis is split_units (sequence, split)
// units, not batch x num_splits: every sequence takes one, the rest are dealt by its K blocks
// (equal pieces in every sequence); where every length is within an eighth of the mean, each
// takes the count that fills one wave of CTA slots. At most num_splits, at most its blocks.
// Units are numbered sequence by sequence, so those no sequence takes are the grid's last
// and exit at once, after every CTA with work has launched.
//
// The forward and the combine compute it apart, with different thread counts: integer
// arithmetic only, so they agree exactly.
#pragma once
#include "fa4gen/seqlens.cuh"

namespace fa4 {

// The unit a forward CTA holds: its sequence (-1: none, the CTA exits), which of its splits,
// and how many that sequence takes.
struct SplitUnit {
  int batch, split, splits;
};

// The kernel's geometry the counts depend on: K blocks of tile_n keys, Q blocks of block_m
// packed rows (rows_per_query: the packed GQA group, 1 unpacked), cta_heads CTAs per Q block
// (heads_kv packed, heads unpacked).
struct SplitGeometry {
  int tile_n, block_m, rows_per_query, cta_heads;
};

// Shared memory the functions below use, in u64: per warp five sums, and the unit.
template <int THREADS>
constexpr int kSplitScratch = 5 * (THREADS / 32) + 3;

// Where split_unit leaves its unit's (sequence, split, splits) in `scratch`, for as long as
// the caller keeps it: the forward reads them there rather than hold them in registers.
template <int THREADS>
FA4_DEVICE const u64* split_unit_slot(const u64* scratch) {
  return scratch + 5 * (THREADS / 32);
}

namespace split_detail {

template <bool kVarlen, bool kPaged>
struct Blocks {
  u64 q, k;  // the sequence's Q blocks and K blocks
  FA4_DEVICE Blocks(const FwdParams& p, int b, const SplitGeometry& g) {
    const SeqInfo<kVarlen, kPaged> s(p, b);
    q = ((u64)max(s.seqlen_q, 0) * g.rows_per_query + g.block_m - 1) / g.block_m;
    k = (u64)((max(s.seqlen_k, 0) + g.tile_n - 1) / g.tile_n);
  }
};

// The batch's sums every sequence's count depends on.
struct Totals {
  u64 work;      // sum of Q blocks x K blocks
  u64 ctas;      // sum of Q blocks
  u64 keys;      // sum of K blocks over sequences with queries
  u64 live;      // sequences with queries and keys
  u64 longest;   // the most K blocks a sequence with queries has
};

// `first`: this thread's first sequence's blocks (0 past the batch), kept for a second pass.
template <int THREADS, bool kVarlen, bool kPaged>
FA4_DEVICE Totals totals(const FwdParams& p, const SplitGeometry& g, u64* scratch, u64 (&first)[2]) {
  constexpr int kWarps = THREADS / 32;
  Totals t{0, 0, 0, 0, 0};
  first[0] = first[1] = 0;
  for (int b = threadIdx.x; b < p.batch; b += THREADS) {
    const Blocks<kVarlen, kPaged> s(p, b, g);
    if (b == (int)threadIdx.x) first[0] = s.q, first[1] = s.k;
    t.work += s.q * s.k;
    t.ctas += s.q;
    if (s.q > 0) {
      t.keys += s.k;
      t.live += s.k > 0;
      t.longest = s.k > t.longest ? s.k : t.longest;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    t.work += __shfl_xor_sync(0xffffffffu, t.work, o);
    t.ctas += __shfl_xor_sync(0xffffffffu, t.ctas, o);
    t.keys += __shfl_xor_sync(0xffffffffu, t.keys, o);
    t.live += __shfl_xor_sync(0xffffffffu, t.live, o);
    const u64 other = __shfl_xor_sync(0xffffffffu, t.longest, o);
    t.longest = other > t.longest ? other : t.longest;
  }
  const int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) {
    scratch[warp] = t.work;
    scratch[kWarps + warp] = t.ctas;
    scratch[2 * kWarps + warp] = t.keys;
    scratch[3 * kWarps + warp] = t.live;
    scratch[4 * kWarps + warp] = t.longest;
  }
  __syncthreads();
  t = Totals{0, 0, 0, 0, 0};
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    t.work += scratch[w];
    t.ctas += scratch[kWarps + w];
    t.keys += scratch[2 * kWarps + w];
    t.live += scratch[3 * kWarps + w];
    t.longest = scratch[4 * kWarps + w] > t.longest ? scratch[4 * kWarps + w] : t.longest;
  }
  __syncthreads();  // every thread has read the sums: the scratch is free again
  return t;
}

// a / b through the 32-bit divider where both fit, as they do for every real batch: a 64-bit
// division is a subroutine of ~70 instructions on the deal's path before a CTA's first load.
FA4_DEVICE u64 quotient(u64 a, u64 b) { return ((a | b) >> 32) == 0 ? (u64)((u32)a / (u32)b) : a / b; }

// One sequence's count. Every count is at least one and the counts sum to at most
// split_units (the host makes that at least the batch): the extra units dealt by K blocks are
// floors of shares of (units - batch); one wave's count is capped at one plus the extra units
// over the live sequences.
FA4_DEVICE int count(const FwdParams& p, const Totals& t, u64 q, u64 k, int cta_heads) {
  if (q == 0 || k == 0) return 1;
  const u64 units = (u64)p.split_units, batch = (u64)p.batch;
  const u64 extra = units > batch ? units - batch : 0;
  u64 splits;
  if (t.longest * 8 * t.ctas <= 9 * t.work) {
    // Lengths within an eighth of their mean: the tail is whole CTAs of one size, so a split
    // only helps fill the slots, as many times as every CTA's copies fit in one wave (a batch
    // of 64 x 4k keys at 8 KV heads already fills the H200's 264 slots twice: unsplit).
    const u64 wave = quotient((u64)p.split_slots, t.ctas * (u64)cta_heads);
    const u64 most = 1 + quotient(extra, t.live);
    splits = wave < most ? wave : most;
  } else {
    // Mixed lengths: pieces of one size in every sequence. The last, largest CTAs to launch
    // leave a tail of at most a piece, whatever order they launch in.
    splits = 1 + quotient(extra * k, t.keys);
  }
  const u64 most = k < (u64)p.num_splits ? k : (u64)p.num_splits;
  return splits <= 1 ? 1 : splits >= most ? (int)most : (int)splits;
}

}  // namespace split_detail

// The unit forward CTA `z` of the grid's z axis holds. THREADS threads (whole warps) call it
// together; it has barriers where split_units > 0. Without counts per sequence: sequence
// z / num_splits, split z % num_splits, num_splits each.
template <int THREADS, bool kVarlen, bool kPaged>
FA4_DEVICE SplitUnit split_unit(const FwdParams& p, int z, const SplitGeometry& g, u64* scratch) {
  static_assert(THREADS % 32 == 0, "whole warps");
  if (p.split_units <= 0) return SplitUnit{z / p.num_splits, z % p.num_splits, p.num_splits};
  constexpr int kWarps = THREADS / 32;
  u64* unit = scratch + 5 * kWarps;  // (batch, split, splits) of the sequence z falls in: split_unit_slot
  if (threadIdx.x == 0) unit[0] = ~0ull;  // read after the barriers below
  u64 first[2];
  const split_detail::Totals t = split_detail::totals<THREADS, kVarlen, kPaged>(p, g, scratch, first);
  // The units before each sequence: a block-wide scan, a chunk of THREADS sequences at a time,
  // until the chunk that holds unit z.
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  u64 before_chunk = 0;
  for (int b0 = 0; b0 < p.batch && before_chunk <= (u64)z; b0 += THREADS) {
    const int b = b0 + threadIdx.x;
    u64 n = 0;
    if (b0 == 0) {  // (the first pass's loads, kept: a decode batch is one chunk)
      n = b < p.batch ? (u64)split_detail::count(p, t, first[0], first[1], g.cta_heads) : 0;
    } else if (b < p.batch) {
      const split_detail::Blocks<kVarlen, kPaged> s(p, b, g);
      n = (u64)split_detail::count(p, t, s.q, s.k, g.cta_heads);
    }
    u64 incl = n;  // inclusive scan over the warp
#pragma unroll
    for (int o = 1; o < 32; o *= 2) {
      const u64 y = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += y;
    }
    if (lane == 31) scratch[warp] = incl;
    __syncthreads();
    u64 chunk = 0, first = before_chunk;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      chunk += scratch[w];
      if (w < warp) first += scratch[w];
    }
    first += incl - n;  // this sequence's first unit
    if (n > 0 && (u64)z >= first && (u64)z < first + n) {
      unit[0] = (u64)b;
      unit[1] = (u64)z - first;
      unit[2] = n;
    }
    before_chunk += chunk;
    __syncthreads();  // the warp sums are read, the unit written
  }
  if (unit[0] == ~0ull) return SplitUnit{-1, 0, 1};
  return SplitUnit{(int)unit[0], (int)unit[1], (int)unit[2]};
}

// How many splits sequence `b` takes: num_splits without counts per sequence. THREADS
// threads (whole warps) call it together; barriers as split_unit's.
template <int THREADS, bool kVarlen, bool kPaged>
FA4_DEVICE int sequence_splits(const FwdParams& p, int b, const SplitGeometry& g, u64* scratch) {
  static_assert(THREADS % 32 == 0, "whole warps");
  if (p.split_units <= 0) return p.num_splits;
  u64 first[2];
  const split_detail::Totals t = split_detail::totals<THREADS, kVarlen, kPaged>(p, g, scratch, first);
  const split_detail::Blocks<kVarlen, kPaged> s(p, b, g);
  return split_detail::count(p, t, s.q, s.k, g.cta_heads);
}

}  // namespace fa4
