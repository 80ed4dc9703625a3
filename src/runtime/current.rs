//! The handle's context made current for one call, and the caller's put back after it.
//!
//! A handle binds its device's primary context to the calling thread before it loads or
//! launches anything. Left bound, a call on another GPU would move the caller's current
//! device: PyTorch (the runtime API reads the driver's current context) would then allocate
//! and launch its next tensors on that GPU. So each entry point binds through [`Current`],
//! which restores whatever context the thread had when it drops.

use std::sync::Arc;

use cudarc::driver::{CudaContext, DriverError, result, sys};

/// `ctx` current on this thread until dropped; then the thread's previous context again.
pub(crate) struct Current {
    previous: Option<sys::CUcontext>,
}

impl Current {
    pub(crate) fn bind(ctx: &Arc<CudaContext>) -> Result<Self, DriverError> {
        let before = result::ctx::get_current()?;
        ctx.bind_to_thread()?;
        // Nothing to put back where the thread had no context or already had ours.
        let previous = before.filter(|&c| c != ctx.cu_ctx());
        Ok(Current { previous })
    }
}

impl Drop for Current {
    fn drop(&mut self) {
        if let Some(c) = self.previous {
            // SAFETY: `c` was the thread's current context when the guard was made; the
            // caller keeps it alive across its call into the library.
            let _ = unsafe { result::ctx::set_current(c) };
        }
    }
}
