// fa4gen/mask.cuh: bottom-right aligned causal and sliding-window visibility (FA4's rule).
//
// Key j is visible to query i iff  i + off - wl <= j <= i + off + wr,  off = Sk - Sq.
// Causal is (wl, wr) = (inf, 0); no mask is (inf, inf). The host passes an unbounded side as
// 2^30 - 1 (WINDOW_UNBOUNDED), wider than any sequence, and no side wider than that: with
// Sq, Sk < 2^30 every bound below stays in int.
#pragma once
#include "fa4gen/prelude.cuh"

namespace fa4 {

enum class MaskKind { None, Causal, Local };

template <MaskKind K>
struct BottomRightMask {
  int seqlen_k;
  int offset;  // Sk - Sq
  int wl, wr;  // window sides (Local only)

  // Keys [lo, hi) visible to query i.
  FA4_DEVICE int lo(int i) const {
    if constexpr (K == MaskKind::Local) return max(0, i + offset - wl);
    return 0;
  }
  FA4_DEVICE int hi(int i) const {
    if constexpr (K == MaskKind::Causal) return min(seqlen_k, i + offset + 1);
    if constexpr (K == MaskKind::Local) return min(seqlen_k, i + offset + wr + 1);
    return seqlen_k;
  }

  // The K blocks a CTA whose queries are [m0, m1) must visit: [block_lo, block_hi).
  FA4_DEVICE int block_lo(int m0, int tile_n) const { return lo(m0) / tile_n; }
  FA4_DEVICE int block_hi(int m1, int tile_n) const {
    const int h = hi(m1 - 1);
    return h <= 0 ? 0 : (h + tile_n - 1) / tile_n;
  }

  // Whether some (query in [m0, m1), key in [n0, n0 + tile_n)) pair is hidden, i.e. the block
  // needs per-element masking. Only the blocks on the diagonal(s) and the sequence end do.
  FA4_DEVICE bool block_is_partial(int m0, int m1, int n0, int tile_n) const {
    const int n1 = n0 + tile_n;
    return n1 > hi(m0) || n0 < lo(m1 - 1);
  }
};

}  // namespace fa4
