// fa4gen/cp_async.cuh: asynchronous global->shared copies (cp.async, sm80+).
// Copies bypass registers and L1 (.cg); a copy with pred == false writes 16 zero bytes instead,
// so tile rows past the end of a sequence and head-dim padding read as 0, never as garbage.
#pragma once
#include "fa4gen/prelude.cuh"

namespace fa4 {

FA4_DEVICE void cp_async_16_zfill(u32 smem_addr, const void* gmem, bool pred) {
  const int src_bytes = pred ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr), "l"(gmem),
               "r"(src_bytes));
}

// A 4-byte copy through L1 (.ca; 4 bytes is below .cg's minimum): small index arrays such as
// page-table entries, fetched ahead without a register round trip.
FA4_DEVICE void cp_async_4(u32 smem_addr, const void* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem_addr), "l"(gmem));
}

FA4_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;" ::); }

// Wait until at most N committed groups are still in flight (this thread's copies only:
// a __syncthreads() must follow before other threads read the data).
template <int N>
FA4_DEVICE void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

}  // namespace fa4
