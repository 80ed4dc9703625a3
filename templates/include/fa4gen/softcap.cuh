// fa4gen/softcap.cuh: tanh for soft-capped scores, s = c * tanh(scale * qk / c).
//
// tanh.approx.f32 has a relative error of 2^-11; times a cap of 30 that is up to 0.015 in the
// logit, a 1.5% error in a probability, larger than fp16 rounding. This form costs two MUFU ops
// (ex2, rcp) instead of one and is accurate to about 1e-7 absolute, so capped scores are as exact
// as uncapped ones.
#pragma once
#include "fa4gen/prelude.cuh"

namespace fa4 {

FA4_DEVICE float tanh_accurate(float x) {
  const float e = fast_exp2(-2.f * kLog2e * fabsf(x));  // in (0, 1]: no overflow for any x
  const float t = (1.f - e) * fast_rcp(1.f + e);
  return copysignf(t, x);
}

}  // namespace fa4
