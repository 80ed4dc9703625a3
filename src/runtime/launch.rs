//! Launches through `cuLaunchKernelEx` with the attributes a forward call may ask for: clusters
//! of two (`cluster.rs`, the wgmma kernel's CTA pairs) and programmatic dependent launch.
//!
//! Programmatic dependent launch (PDL): a kernel launched with the programmatic stream
//! serialization attribute may start while the kernel before it on the stream still runs, once
//! every CTA of that one has called `grid_dependency_launch` (fa4gen/grid_dependency.cuh) or
//! exited; it must call `grid_dependency_wait` before it touches global memory the previous
//! kernel may read or write. Every forward kernel and the split-KV combine do so first thing
//! (the flagship after setting up its shared-memory barriers), so a short forward
//! (`Selection::programmatic`) overlaps its launch and prologue with the previous kernel's
//! tail; inside a CUDA graph the edge becomes programmatic.

use super::error::{DriverCall, Error};
use cudarc::driver::sys;
use std::ffi::c_void;

/// A launch attribute to fill in.
fn attribute() -> sys::CUlaunchAttribute {
    // SAFETY: a plain C struct of integers and a union of them: all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}

/// The cluster attribute: clusters of `x` CTAs along x.
pub(super) fn cluster_attribute(x: u32) -> sys::CUlaunchAttribute {
    let mut attr = attribute();
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attr.value.clusterDim = sys::CUlaunchAttributeValue_union__bindgen_ty_1 { x, y: 1, z: 1 };
    attr
}

/// The attribute that launches a kernel as the previous kernel's programmatic dependent.
fn programmatic_attribute() -> sys::CUlaunchAttribute {
    let mut attr = attribute();
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    attr
}

/// The launch config of `grid` CTAs of `threads` threads with `attrs` (which must outlive it).
pub(super) fn config(
    grid: (u32, u32, u32),
    threads: u32,
    smem_bytes: u32,
    stream: sys::CUstream,
    attrs: &mut [sys::CUlaunchAttribute],
) -> sys::CUlaunchConfig {
    sys::CUlaunchConfig {
        gridDimX: grid.0,
        gridDimY: grid.1,
        gridDimZ: grid.2,
        blockDimX: threads,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: smem_bytes,
        hStream: stream,
        attrs: attrs.as_mut_ptr(),
        numAttrs: attrs.len() as u32,
    }
}

/// How a kernel is launched, beyond its grid and block.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct LaunchMode {
    /// CTAs per cluster along x (1: no cluster attribute).
    pub cluster: u32,
    /// As the previous kernel's programmatic dependent (the kernel waits for it first).
    pub programmatic: bool,
}

/// `cuLaunchKernelEx` of `func` over `grid` CTAs of `threads` threads, launched as `mode` says.
///
/// # Safety
/// `func` is a loaded function whose parameters `args` points to, valid for the launch; with
/// `mode.programmatic`, `func` calls `grid_dependency_wait` before it touches global memory.
pub(super) unsafe fn launch(
    func: sys::CUfunction,
    grid: (u32, u32, u32),
    threads: u32,
    smem_bytes: u32,
    stream: sys::CUstream,
    mode: LaunchMode,
    args: &mut [*mut c_void],
) -> Result<(), Error> {
    let mut attrs = [attribute(), attribute()];
    let mut n = 0;
    if mode.cluster > 1 {
        attrs[n] = cluster_attribute(mode.cluster);
        n += 1;
    }
    if mode.programmatic {
        attrs[n] = programmatic_attribute();
        n += 1;
    }
    let cfg = config(grid, threads, smem_bytes, stream, &mut attrs[..n]);
    // SAFETY: the caller's contract; the config and its attributes live across the call.
    unsafe { sys::cuLaunchKernelEx(&cfg, func, args.as_mut_ptr(), std::ptr::null_mut()) }
        .result()
        .call("cuLaunchKernelEx")
}
