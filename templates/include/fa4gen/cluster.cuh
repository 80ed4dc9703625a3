// fa4gen/cluster.cuh: thread-block clusters (sm90+): CTAs on neighbouring SMs that can reach
// each other's shared memory. The Hopper forward runs long dense calls (unmasked or causal) in
// pairs that share every K/V block: each CTA loads half of a block and the TMA multicasts it
// into both CTAs' shared memory, which halves the K/V traffic from L2 to the SMs. Every function here also
// works in a cluster of one (a launch without the cluster attribute).
#pragma once
#include "fa4gen/tma.cuh"

namespace fa4 {

// CTAs in this CTA's cluster (1 when launched without clusters). (A CTA's rank in a cluster of
// (2, 1, 1) on a 1-d grid is blockIdx.x & 1.)
FA4_DEVICE u32 cluster_size() {
  u32 n;
  asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
  return n;
}

// Every non-exited thread of the cluster arrives, then waits for all the others: the release
// and acquire order this CTA's shared-memory work (barrier initialisation, the last remote
// arrivals) against the other CTAs'.
FA4_DEVICE void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// One arrival on the barrier at the same shared-memory offset in CTA `rank` of the cluster
// (its address there comes from mapa). The default (CTA-scope) release, as CUTLASS's cluster
// barriers: what it orders is a stage the arriving warp's wgmmas have finished reading (waited
// for) and the partner's TMA will overwrite, both async-proxy work the barrier itself orders.
// Cluster scope cost a GPU-wide MEMBAR per arrival (and an L1 invalidation per wait).
FA4_DEVICE void mbar_arrive_cluster(u32 bar, u32 rank) {
  u32 remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(bar), "r"(rank));
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}

// tma_load_4d into every CTA of `cta_mask`: the box lands at offset `dst` of each one's shared
// memory, and its bytes complete each one's barrier at offset `bar`.
FA4_DEVICE void tma_load_4d_multicast(u32 dst, const TensorMap* map, u32 bar, int c0, int c1, int c2, int c3, u16 cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%2, %3, %4, %5}], [%6], %7;" ::"r"(dst),
      "l"(reinterpret_cast<u64>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar), "h"(cta_mask)
      : "memory");
}

}  // namespace fa4
