// fa4gen/wgmma.cuh: the shape-independent half of sm90's warpgroup MMA: shared-memory matrix
// descriptors, the fences and the commit/wait of asynchronous groups. The per-shape
// instructions (m64nNk16, operands from shared memory or A from registers) are rendered into
// each kernel for exactly the N it uses (templates/macros/wgmma.cu).
//
// Accumulator layout of m64nN (fp32), per warp w of the warpgroup (rows 16w..16w+15), with
// g = lane / 4 and t = lane % 4: acc[j][0..1] = C[g][8j + 2t ..], acc[j][2..3] = C[g + 8][8j + 2t ..]
// — the mma.sync m16n8 layout, so the online softmax and the P-as-A-operand packing of the
// portable kernel apply unchanged.
#pragma once
#include "fa4gen/prelude.cuh"

namespace fa4 {

// Descriptor of a 128-byte-swizzled operand tile (the layout TMA writes with SWIZZLE_128B):
// rows of 64 16-bit elements, 8-row atoms of 1024 bytes. `lbo` and `sbo` are the byte strides
// the ISA defines per major-ness:
//   K-major (Q, K: the reduction dim contiguous): sbo = 1024 between 8-row groups; lbo unused.
//   MN-major (V in O += P V): lbo = bytes between 64-column blocks of N, sbo = 1024 between
//   8-key groups of K.
FA4_DEVICE u64 sw128_desc(u32 smem_addr, u32 lbo, u32 sbo) {
  u64 d = (u64)((smem_addr & 0x3FFFFu) >> 4);
  d |= (u64)((lbo >> 4) & 0x3FFFu) << 16;
  d |= (u64)((sbo >> 4) & 0x3FFFu) << 32;
  d |= (u64)1 << 62;  // swizzle mode: 128 bytes
  return d;
}

// Before the first wgmma of a batch that reads registers or accumulators written by ordinary
// instructions.
FA4_DEVICE void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
FA4_DEVICE void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
// Wait until at most N committed groups of this warpgroup are still in flight.
template <int N>
FA4_DEVICE void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// The same wait, after the work written before it. ptxas (13.5) schedules a wait_group as early
// as it can in its basic block: the softmax written between a P V's issue and its wait, meant
// to run while the tensor cores work, ended up after the wait (SASS: WARPGROUP.DEPBAR, then
// every MUFU.EX2 of the block). A wait in a block of its own stays put: both arms of a branch on
// `uniform` wait, their asm texts differ so the compiler cannot merge them back into one block,
// and which arm runs does not matter. `uniform` must be the same across the warpgroup (the
// wait is .aligned); a kernel parameter is, and the compiler cannot fold it.
template <int N>
FA4_DEVICE void wgmma_wait_after_work(int uniform) {
  if (uniform & 1)
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
  else
    asm volatile("wgmma.wait_group.sync.aligned %0; // (other arm)" ::"n"(N) : "memory");
}

// Pin accumulator registers at this point of the program: ordinary code may not move reads or
// writes of them across an asynchronous wgmma's issue or its wait.
template <int N>
FA4_DEVICE void fence_regs(float (&acc)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(acc[i][e])::"memory");
}

}  // namespace fa4
