//! Launches in thread-block clusters of two: the wgmma kernel's CTA pairs
//! (`KernelSpec::wgmma_pairs`), which share every K/V block through TMA multicast. The cluster
//! shape is a launch attribute (`cuLaunchKernelEx`), not compiled into the kernel, so the same
//! cubin also runs alone where a call cannot be paired.

use super::error::{DriverCall, Error};
use super::launch::{attribute, config, launch};
use cudarc::driver::sys;
use std::ffi::c_void;

/// CTAs per cluster of a paired launch.
pub const PAIR: u32 = 2;

/// The cluster attribute of a paired launch: clusters of [`PAIR`] CTAs along x.
fn pair_attribute() -> sys::CUlaunchAttribute {
    let mut attr = attribute();
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attr.value.clusterDim = sys::CUlaunchAttributeValue_union__bindgen_ty_1 {
        x: PAIR,
        y: 1,
        z: 1,
    };
    attr
}

/// How many pairs of `func` (with `threads` and `smem_bytes` of dynamic shared memory) the
/// device holds at once: the persistent grid's bound, as a whole GPC's SMs need not pair up.
pub fn max_pairs(func: sys::CUfunction, threads: u32, smem_bytes: u32) -> Result<u32, Error> {
    let mut attr = pair_attribute();
    let cfg = config(
        (PAIR, 1, 1),
        threads,
        smem_bytes,
        std::ptr::null_mut(),
        &mut attr,
    );
    let mut n: std::ffi::c_int = 0;
    // SAFETY: a loaded function and a config whose one attribute lives across the call.
    unsafe { sys::cuOccupancyMaxActiveClusters(&mut n, func, &cfg) }
        .result()
        .call("cuOccupancyMaxActiveClusters")?;
    Ok(n.max(0) as u32)
}

/// Launch `func` over `grid` CTAs (a multiple of [`PAIR`]) in clusters of two.
///
/// # Safety
/// As `cuLaunchKernel`: `args` must match the kernel's parameters and outlive the call.
pub unsafe fn launch_pairs(
    func: sys::CUfunction,
    grid: u32,
    threads: u32,
    smem_bytes: u32,
    stream: sys::CUstream,
    args: &mut [*mut c_void],
) -> Result<(), Error> {
    let mut attr = pair_attribute();
    let cfg = config((grid, 1, 1), threads, smem_bytes, stream, &mut attr);
    // SAFETY: the caller's contract; the config and its attribute live across the call.
    unsafe { launch(func, &cfg, args) }
}
