//! Launches with one launch attribute (`cuLaunchKernelEx`): the config both kinds build, and the
//! split-KV combine launched as its split kernel's programmatic dependent. (Clusters of two:
//! `cluster.rs`.)

use super::error::{DriverCall, Error};
use cudarc::driver::sys;
use std::ffi::c_void;

/// A launch attribute to fill in.
pub(super) fn attribute() -> sys::CUlaunchAttribute {
    // SAFETY: a plain C struct of integers and a union of them: all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}

/// The launch config of `grid` CTAs of `threads` threads with `attr` (which must outlive it).
pub(super) fn config(
    grid: (u32, u32, u32),
    threads: u32,
    smem_bytes: u32,
    stream: sys::CUstream,
    attr: &mut sys::CUlaunchAttribute,
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
        attrs: attr,
        numAttrs: 1,
    }
}

/// `cuLaunchKernelEx` of `func` with `cfg`.
///
/// # Safety
/// `func` is a loaded function whose parameters `args` points to, valid for the launch; the
/// attribute `cfg` points to is alive.
pub(super) unsafe fn launch(
    func: sys::CUfunction,
    cfg: &sys::CUlaunchConfig,
    args: &mut [*mut c_void],
) -> Result<(), Error> {
    // SAFETY: the caller's contract.
    unsafe { sys::cuLaunchKernelEx(cfg, func, args.as_mut_ptr(), std::ptr::null_mut()) }
        .result()
        .call("cuLaunchKernelEx")
}

/// Launch `func` as a programmatic dependent of the kernel before it on `stream`: it may start
/// once every CTA of that kernel has called `grid_dependency_launch` (fa4gen/grid_dependency.cuh)
/// and must call `grid_dependency_wait` before reading that kernel's output. This hides the
/// launch gap between a split-KV kernel and its combine (a decode step of a few microseconds
/// pays it once per call, also inside a CUDA graph, where the edge becomes programmatic).
///
/// # Safety
/// As [`launch`], and `func` waits (`grid_dependency_wait`) before it reads anything the
/// previous kernel writes.
pub(super) unsafe fn launch_dependent(
    func: sys::CUfunction,
    grid: (u32, u32, u32),
    threads: u32,
    smem_bytes: u32,
    stream: sys::CUstream,
    args: &mut [*mut c_void],
) -> Result<(), Error> {
    let mut attr = attribute();
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    let cfg = config(grid, threads, smem_bytes, stream, &mut attr);
    // SAFETY: the caller's contract; the config and its attribute live across the call.
    unsafe { launch(func, &cfg, args) }
}
