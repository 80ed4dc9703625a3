//! The handle's context made current for one call, and the caller's put back after it.
//!
//! A handle binds its device's primary context to the calling thread before it loads,
//! allocates, frees or launches anything. Left bound, a call on another GPU would move the
//! caller's current device: PyTorch (the runtime API reads the driver's current context) would
//! then allocate and launch its next tensors on that GPU. So each entry point holds a
//! [`Current`] for as long as it touches the device, and the guard puts back whatever the
//! thread had, no context included.

use std::sync::Arc;

use cudarc::driver::{CudaContext, DriverError, result, sys};

/// Dropped, makes the thread's context the one it was when the guard was made.
pub(crate) struct Current {
    previous: sys::CUcontext, // null: none
    restore: bool,
}

impl Current {
    /// Keep the thread's current context across what follows (which may bind another).
    pub(crate) fn keep() -> Result<Self, DriverError> {
        let previous = result::ctx::get_current()?.unwrap_or(std::ptr::null_mut());
        Ok(Current {
            previous,
            restore: true,
        })
    }

    /// `ctx` current until dropped.
    pub(crate) fn bind(ctx: &Arc<CudaContext>) -> Result<Self, DriverError> {
        let mut guard = Current::keep()?;
        guard.restore = guard.previous != ctx.cu_ctx(); // already ours: nothing to put back
        ctx.bind_to_thread()?;
        Ok(guard)
    }
}

impl Drop for Current {
    fn drop(&mut self) {
        if self.restore {
            // SAFETY: the thread's context when the guard was made (the caller keeps it alive
            // across its call into the library), or null, which unbinds.
            let _ = unsafe { result::ctx::set_current(self.previous) };
        }
    }
}
