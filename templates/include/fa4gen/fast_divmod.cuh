// fa4gen/fast_divmod.cuh: division by a divisor fixed for a whole kernel (heads, the tile
// count of a head, the GQA group) as a multiply and a shift. A persistent kernel decodes a
// tile index into (Q block, head, batch) once per tile; with `/` and `%` that is several
// ~25-instruction integer divisions at the head of every tile's dependent chain, which short
// tiles (a sliding window's two blocks) feel.
#pragma once
#include "fa4gen/prelude.cuh"

namespace fa4 {

// For 1 <= d < 2^31 (smaller d are taken as 1) and 0 <= n < 2^31: with s = ceil(log2 d) and m = ceil(2^(31+s) / d) (< 2^32),
// n / d = (n * m) >> (31 + s). The rounding error m * d - 2^(31+s) is below d, so it adds less
// than n / 2^(31+s) < 2^-s <= 1/d to the exact quotient: never enough to reach the next integer.
struct FastDivmod {
  u32 divisor, multiplier, shift;
  FA4_DEVICE explicit FastDivmod(int d) : divisor(d > 1 ? (u32)d : 1u) {
    u32 s = 0;
    while ((1u << s) < divisor) ++s;
    shift = 31 + s;
    multiplier = (u32)(((1ull << shift) + divisor - 1) / divisor);
  }
  FA4_DEVICE int div(int n) const { return (int)(((u64)(u32)n * multiplier) >> shift); }
  // (quotient, remainder)
  FA4_DEVICE void divmod(int n, int& q, int& r) const {
    q = div(n);
    r = n - q * (int)divisor;
  }
};

// The greatest common divisor of a, b > 0 (Euclid): a paged kernel's TMA box rows,
// gcd(page_size, tile_n), worked out once per CTA.
FA4_DEVICE int gcd_positive(int a, int b) {
  while (b != 0) {
    const int t = a % b;
    a = b;
    b = t;
  }
  return a;
}

}  // namespace fa4
