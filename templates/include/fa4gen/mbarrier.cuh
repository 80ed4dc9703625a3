// fa4gen/mbarrier.cuh: shared-memory transaction barriers (sm90+), the handshake between the
// producer warp's TMA loads and the consumer warpgroups.
//
// A barrier completes a phase when its expected arrivals have arrived and every byte announced
// with expect_tx has landed; waiters name the phase parity they wait for (0, 1, 0, ...).
#pragma once
#include "fa4gen/prelude.cuh"

namespace fa4 {

FA4_DEVICE void mbar_init(u32 bar, u32 arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(arrivals) : "memory");
}

// Makes initialised barriers visible to the async proxy (TMA) before anyone uses them.
FA4_DEVICE void mbar_fence_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

// One arrival that also announces `bytes` of TMA traffic the phase must wait for.
FA4_DEVICE void mbar_arrive_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

FA4_DEVICE void mbar_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

FA4_DEVICE bool mbar_try_wait(u32 bar, u32 parity) {
  u32 done;
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
      "selp.u32 %0, 1, 0, p;\n\t}"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}

// Blocks until the phase of the given parity has completed (try_wait itself suspends the
// thread for a while, so this loop does not spin hot).
FA4_DEVICE void mbar_wait(u32 bar, u32 parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}

}  // namespace fa4
