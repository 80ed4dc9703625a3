// fa4gen/tma.cuh: the Tensor Memory Accelerator (sm90+): bulk tensor copies between global
// memory and shared memory described by a CUtensorMap the host encoded (cuTensorMapEncodeTiled)
// and passed as a __grid_constant__ kernel parameter. One thread issues a whole tile; the
// hardware zero-fills reads outside the tensor and clips writes to it, so ragged ends need no
// code. Maps are 4-d, (dim, row, head, batch) innermost first, but paged K/V's in 8-row groups.
#pragma once
#include "fa4gen/prelude.cuh"

namespace fa4 {

// The 128-byte opaque descriptor (layout matches CUtensorMap; alignment 64 as the ISA requires).
struct __align__(64) TensorMap {
  u64 opaque[16];
};

// Start loading the box at (c0, c1, c2, c3) into shared memory at `dst`; its bytes complete the
// transaction count of barrier `bar`.
FA4_DEVICE void tma_load_4d(u32 dst, const TensorMap* map, u32 bar, int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];" ::"r"(dst),
      "l"(reinterpret_cast<u64>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}

// The same for a 5-d map (paged K/V in 8-row groups: runtime/tma.rs).
FA4_DEVICE void tma_load_5d(u32 dst, const TensorMap* map, u32 bar, int c0, int c1, int c2, int c3, int c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5, %6}], [%7];" ::"r"(dst),
      "l"(reinterpret_cast<u64>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(bar)
      : "memory");
}

// Store the box at (c0..c3) from shared memory at `src` (rows or columns outside the tensor are
// dropped). Part of the thread's current bulk group.
FA4_DEVICE void tma_store_4d(const TensorMap* map, u32 src, int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%1, %2, %3, %4}], [%5];" ::"l"(
          reinterpret_cast<u64>(map)),
      "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(src)
      : "memory");
}

FA4_DEVICE void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }

// Wait until the committed stores have finished reading shared memory (it may then be reused
// or the CTA may exit).
FA4_DEVICE void tma_store_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }

// Order this thread's generic-proxy shared-memory writes before later async-proxy (TMA) reads.
FA4_DEVICE void fence_proxy_async_smem() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// Pull a map into the descriptor cache ahead of its first use.
FA4_DEVICE void tma_prefetch_map(const TensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<u64>(map)) : "memory");
}

// Byte offset of 16-bit element (row, col) inside a tile that TMA wrote (or will read) with
// 128-byte swizzling: 64 columns per 128-byte row; the 16-byte unit is XORed with row % 8.
// The tile must start on a 1024-byte boundary.
FA4_DEVICE u32 sw128_offset(int row, int col) {
  const u32 byte = (u32)col * 2u;
  return (u32)row * 128u + ((((byte >> 4) ^ (u32)row) & 7u) << 4) + (byte & 15u);
}

}  // namespace fa4
