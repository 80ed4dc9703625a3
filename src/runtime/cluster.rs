//! Clusters of two: the wgmma kernel's CTA pairs (`KernelSpec::wgmma_pairs`), which share every
//! K/V block through TMA multicast. The cluster shape is a launch attribute (`launch.rs`), not
//! compiled into the kernel, so the same cubin also runs alone where a call cannot be paired.

use super::error::{DriverCall, Error};
use super::launch::{cluster_attribute, config};
use cudarc::driver::sys;

/// CTAs per cluster of a paired launch.
pub const PAIR: u32 = 2;

/// How many pairs of `func` (with `threads` and `smem_bytes` of dynamic shared memory) the
/// device holds at once: the persistent grid's bound, as a whole GPC's SMs need not pair up.
pub fn max_pairs(func: sys::CUfunction, threads: u32, smem_bytes: u32) -> Result<u32, Error> {
    let mut attrs = [cluster_attribute(PAIR)];
    let cfg = config(
        (PAIR, 1, 1),
        threads,
        smem_bytes,
        std::ptr::null_mut(),
        &mut attrs,
    );
    let mut n: std::ffi::c_int = 0;
    // SAFETY: a loaded function and a config whose one attribute lives across the call.
    unsafe { sys::cuOccupancyMaxActiveClusters(&mut n, func, &cfg) }
        .result()
        .call("cuOccupancyMaxActiveClusters")?;
    Ok(n.max(0) as u32)
}
