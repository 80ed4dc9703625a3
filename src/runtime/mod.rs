//! The runtime engines link: kernel libraries on disk, validation, selection, loading, launch.

mod attention;
mod cluster;
mod combine;
pub(crate) mod current;
mod error;
#[cfg(feature = "jit")]
pub mod jit;
mod launch;
mod library;
mod problem;
pub mod tma;

pub use attention::{FlashAttention, RawPtrs, SeqBuffers, combine_spec};
pub use combine::{CombineKernel, CombineOutput, MAX_COMBINE_DV, column_parts};
pub use error::Error;
pub use library::KernelLibrary;
pub use problem::{Paged, Problem, Strides, Validated, Varlen, WINDOW_UNBOUNDED, resolve_mask};

/// Whether a CUDA driver can be loaded here (cudarc panics on first use otherwise).
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen libcuda.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// Context on device `ordinal`, or a typed error where there is no driver or no device.
pub fn context(ordinal: usize) -> Result<std::sync::Arc<cudarc::driver::CudaContext>, Error> {
    if !driver_present() {
        return Err(Error::NoDriver);
    }
    let driver = |call| move |source| Error::Driver { call, source };
    // (cuInit first: before it, even asking for the current context fails.)
    cudarc::driver::result::init().map_err(driver("cuInit"))?;
    // CudaContext::new binds the new context to the thread: the caller's comes back.
    let _current = current::Current::keep().map_err(driver("cuCtxGetCurrent"))?;
    cudarc::driver::CudaContext::new(ordinal).map_err(driver("cuDevicePrimaryCtxRetain"))
}
