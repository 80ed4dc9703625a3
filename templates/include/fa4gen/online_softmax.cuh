// fa4gen/online_softmax.cuh: the running (max, sum) of each query row over K blocks, in the
// exp2 domain with the softmax scale folded into one FMA: p = exp2(s * scale_log2 - m * scale_log2).
//
// A warp holds MT m16 fragments of S; each thread owns two rows per fragment (g and g + 8) and
// 2 columns of each n8 tile, so a row's max needs the 4 threads of a quad (shuffles 1 and 2).
// The sum stays per-thread until the end: every correction factor is uniform across the quad.
// A thread's share of a row's max and sum is reduced in four chains, not one: a chain of 2 NT
// dependent FMNMX (or FADD) waits out each one's latency, and the consumer warp running the
// softmax has no other warp on its scheduler to fill the gaps (sm90 d 64: the max chain was
// 16% of the consumer's stall samples).
#pragma once
#include "fa4gen/prelude.cuh"

namespace fa4 {

// op over a thread's share of row h (columns 2t, 2t + 1 of each n8 group) of fragment `frag`,
// in four independent chains (n8 groups nt % 4; fewer below 32 columns) joined at the end: a
// quarter of one chain's latency for four registers (a full tree held one per group, and
// spilled in the portable kernel's two-fragment softmax).
template <int NT, class Op>
FA4_DEVICE float reduce_row(const float (&frag)[NT][4], int h, Op op) {
  constexpr int kChains = NT < 4 ? NT : 4;
  float acc[kChains];
#pragma unroll
  for (int c = 0; c < kChains; ++c) acc[c] = op(frag[c][2 * h], frag[c][2 * h + 1]);
#pragma unroll
  for (int nt = kChains; nt < NT; ++nt) acc[nt % kChains] = op(acc[nt % kChains], op(frag[nt][2 * h], frag[nt][2 * h + 1]));
  if constexpr (kChains == 4) {
    return op(op(acc[0], acc[1]), op(acc[2], acc[3]));
  } else {
#pragma unroll
    for (int c = 1; c < kChains; ++c) acc[0] = op(acc[0], acc[c]);
    return acc[0];
  }
}

template <int MT, int NT>
struct OnlineSoftmax {
  float row_max[MT][2];  // raw (unscaled) running max; -inf while a row has seen nothing
  float row_sum[MT][2];  // this thread's share of sum(p) at the current max

  FA4_DEVICE void init() {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        row_max[mt][h] = neg_inf();
        row_sum[mt][h] = 0.f;
      }
  }

  // Fold in a block of scores: s becomes P (unnormalised, at the running max) in place, and
  // corr receives the factor every earlier O accumulator of the row must be multiplied by.
  // kSlackLog2 > 0: the running max moves only when a block's exceeds it by more than that
  // (scaled, log2 units), so P stays below 2^kSlackLog2 and corr is exactly 1 otherwise
  // (the final normalisation and LSE use the same max, so the result is the same).
  template <int kSlackLog2 = 0>
  FA4_DEVICE void update(float (&s)[MT][NT][4], float scale_log2, float (&corr)[MT][2]) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = fmaxf(row_max[mt][h], reduce_row(s[mt], h, [](float a, float b) { return fmaxf(a, b); }));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        if constexpr (kSlackLog2 > 0) {
          if ((mx - row_max[mt][h]) * scale_log2 <= (float)kSlackLog2) mx = row_max[mt][h];  // (false for -inf)
        }
        // A row masked everywhere so far keeps max -inf: subtract 0 so exp2 sees -inf (p = 0),
        // never -inf - -inf = NaN.
        const float base = mx == neg_inf() ? 0.f : mx * scale_log2;
        const float old = row_max[mt][h];
        corr[mt][h] = old == neg_inf() ? 0.f : fast_exp2((old - mx) * scale_log2);
        row_max[mt][h] = mx;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) s[mt][nt][2 * h + e] = fast_exp2(s[mt][nt][2 * h + e] * scale_log2 - base);
        row_sum[mt][h] = row_sum[mt][h] * corr[mt][h] + reduce_row(s[mt], h, [](float a, float b) { return a + b; });
      }
  }

  // The stale max: s becomes P at the running max as it stands (no row max, no correction),
  // and sums[mt][h] this thread's share of each row's block sum, for keep_stale to add once
  // the caller has checked that no P exceeds its bound. A row that has seen no key (max
  // -inf) gets +inf here: the caller treats such a row like an exceeded bound.
  FA4_DEVICE void stale_update(float (&s)[MT][NT][4], float scale_log2, float (&sums)[MT][2]) const {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float base = row_max[mt][h] * scale_log2;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) s[mt][nt][2 * h + e] = fast_exp2(s[mt][nt][2 * h + e] * scale_log2 - base);
        sums[mt][h] = reduce_row(s[mt], h, [](float a, float b) { return a + b; });
      }
  }
  FA4_DEVICE void keep_stale(const float (&sums)[MT][2]) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) row_sum[mt][h] += sums[mt][h];
  }
  // Fold in another state of the same rows over other keys (this thread's share of it: each
  // row's running max and sum share, e.g. another CTA's part of a split tile): afterwards the
  // state covers both, and a / b are the factors this part's and the other's O accumulators
  // take. A row that saw no key in one part (max -inf) gets factor 0 there.
  FA4_DEVICE void merge(const float (&m)[MT][2], const float (&l)[MT][2], float scale_log2, float (&a)[MT][2],
                        float (&b)[MT][2]) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float mx = fmaxf(row_max[mt][h], m[mt][h]);
        a[mt][h] = row_max[mt][h] == neg_inf() ? 0.f : fast_exp2((row_max[mt][h] - mx) * scale_log2);
        b[mt][h] = m[mt][h] == neg_inf() ? 0.f : fast_exp2((m[mt][h] - mx) * scale_log2);
        row_max[mt][h] = mx;
        row_sum[mt][h] = row_sum[mt][h] * a[mt][h] + l[mt][h] * b[mt][h];
      }
  }
  // Some row of this thread has seen no key yet.
  FA4_DEVICE bool any_row_empty() const {
    bool empty = false;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) empty |= row_max[mt][0] == neg_inf() || row_max[mt][1] == neg_inf();
    return empty;
  }

  // Complete each row's sum across its quad and fold in the row's sink logit, if any
  // (sink_log2(mt, h) = sink * log2(e); only called when kSink). Afterwards inv_sum() is the
  // factor that normalises O and lse() the natural-log log-sum-exp of the scaled scores (and the
  // sink): -inf and 0 for a row that saw nothing. With a sink the softmax runs at
  // max(row max, sink): P = exp(x - M) / (sum exp(x - M) + exp(sink - M)).
  template <bool kSink, class SinkLog2>
  FA4_DEVICE void finalize(float scale_log2, SinkLog2 sink_log2) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float l = row_sum[mt][h];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const float m = row_max[mt][h] == neg_inf() ? neg_inf() : row_max[mt][h] * scale_log2;
        float inv, lse2;
        if constexpr (kSink) {
          const float s = sink_log2(mt, h);
          const float top = fmaxf(m, s);
          if (top == neg_inf()) {
            inv = 0.f;
            lse2 = neg_inf();
          } else {
            const float a = fast_exp2(m - top);  // 0 when the row saw no key
            const float total = l * a + fast_exp2(s - top);
            inv = a * fast_rcp(total);
            lse2 = top + fast_log2(total);
          }
        } else {
          inv = l > 0.f ? fast_rcp(l) : 0.f;
          lse2 = l > 0.f ? m + fast_log2(l) : neg_inf();
        }
        row_sum[mt][h] = inv;
        row_max[mt][h] = lse2 * kLn2;
      }
  }
  FA4_DEVICE float inv_sum(int mt, int h) const { return row_sum[mt][h]; }
  FA4_DEVICE float lse(int mt, int h) const { return row_max[mt][h]; }
};

}  // namespace fa4
