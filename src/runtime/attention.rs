//! `FlashAttention`: a kernel library bound to a CUDA context. It selects the kernel for a
//! call, loads its module once (verified cubin, dynamic shared memory raised once), caches it
//! per spec, validates buffers and launches on the caller's stream.

use super::error::{DriverCall, Error};
use super::library::KernelLibrary;
use super::problem::{Problem, Validated};
use crate::params::FwdParams;
use crate::select::{self, DeviceInfo, Selection};
use crate::spec::KernelSpec;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, sys,
};
use std::collections::HashMap;
use std::ffi::c_void;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// A loaded kernel: its function handle (keeping its module alive) and launch geometry.
struct Loaded {
    func: CudaFunction,
    threads: u32,
    smem_bytes: u32,
}

pub struct FlashAttention {
    lib: KernelLibrary,
    ctx: Arc<CudaContext>,
    device: DeviceInfo,
    cache: Mutex<HashMap<KernelSpec, Arc<Loaded>>>,
    #[cfg(feature = "jit")]
    jit: Option<super::jit::Jit>,
}

/// Device pointers of one call (`CUdeviceptr`s); `lse` may be 0 when not requested.
#[derive(Clone, Copy, Debug)]
pub struct RawPtrs {
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub o: u64,
    pub lse: u64,
}

impl FlashAttention {
    /// Bind the library in `dir` to `ctx`'s device. Fails if the library's arch does not run
    /// on the device (checked before any cubin is touched).
    pub fn new(ctx: Arc<CudaContext>, dir: impl AsRef<Path>) -> Result<FlashAttention, Error> {
        let lib = KernelLibrary::open(dir)?;
        let (major, minor) = ctx.compute_capability().call("cuDeviceGetAttribute")?;
        let sm_count = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .call("cuDeviceGetAttribute")? as u32;
        let device = DeviceInfo {
            major,
            minor,
            sm_count,
        };
        device.arch()?;
        if !lib.arch().runs_on(major, minor) {
            return Err(Error::ArchMismatch {
                dir: lib.dir().display().to_string(),
                lib_arch: lib.arch(),
                major,
                minor,
            });
        }
        Ok(FlashAttention {
            lib,
            ctx,
            device,
            cache: Mutex::new(HashMap::new()),
            #[cfg(feature = "jit")]
            jit: None,
        })
    }

    /// Compile kernels the library lacks at first use, caching them on disk (`jit` feature).
    #[cfg(feature = "jit")]
    pub fn with_jit(mut self, jit: super::jit::Jit) -> FlashAttention {
        self.jit = Some(jit);
        self
    }

    /// Open the library for the device of `ctx` under a `generated/`-style root
    /// (`<root>/<arch>/`).
    pub fn from_root(
        ctx: Arc<CudaContext>,
        root: impl AsRef<Path>,
    ) -> Result<FlashAttention, Error> {
        let (major, minor) = ctx.compute_capability().call("cuDeviceGetAttribute")?;
        let arch = crate::Arch::for_device(major, minor)
            .ok_or(Error::UnsupportedDevice { major, minor })?;
        FlashAttention::new(ctx, root.as_ref().join(arch.name()))
    }

    pub fn device(&self) -> DeviceInfo {
        self.device
    }

    pub fn library(&self) -> &KernelLibrary {
        &self.lib
    }

    /// Validate a problem and select its kernel (no GPU work).
    pub fn plan(&self, problem: &Problem) -> Result<(Validated, Selection), Error> {
        let v = problem.validate()?;
        let s = select::select(problem, &v, &self.device)?;
        Ok((v, s))
    }

    /// Whether the library can run this problem (validation and selection pass and the
    /// selected kernel was built). Lets an engine fall back before calling.
    pub fn has_kernel(&self, problem: &Problem) -> bool {
        #[cfg(feature = "jit")]
        if self.jit.is_some() {
            return self.plan(problem).is_ok();
        }
        self.plan(problem)
            .is_ok_and(|(_, s)| self.lib.entry(&s.spec.stem()).is_some())
    }

    /// The cubin, symbol, threads and shared memory of a spec: from the library, or compiled
    /// by the jit when the library lacks it and jit is on.
    fn find(&self, spec: &KernelSpec) -> Result<(Vec<u8>, String, u32, u32), Error> {
        if let Some(entry) = self.lib.entry(&spec.stem()) {
            let cubin = self.lib.read_cubin(entry)?;
            return Ok((cubin, entry.symbol.clone(), entry.threads, entry.smem_bytes));
        }
        #[cfg(feature = "jit")]
        if let Some(jit) = &self.jit {
            let k = jit.cubin(spec)?;
            let g = spec.geometry();
            return Ok((k.cubin, spec.symbol(), g.threads, g.smem_bytes));
        }
        Err(Error::missing(spec, self.lib.dir()))
    }

    fn load(&self, spec: &KernelSpec) -> Result<Arc<Loaded>, Error> {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = cache.get(spec) {
            return Ok(k.clone());
        }
        let (cubin, symbol, threads, smem_bytes) = self.find(spec)?;
        let module = self
            .ctx
            .load_module(cudarc::nvrtc::Ptx::from_binary(cubin))
            .call("cuModuleLoadData")?;
        let func = module.load_function(&symbol).call("cuModuleGetFunction")?;
        func.set_attribute(
            sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            smem_bytes as i32,
        )
        .call("cuFuncSetAttribute")?;
        let k = Arc::new(Loaded {
            func,
            threads,
            smem_bytes,
        });
        cache.insert(*spec, k.clone());
        Ok(k)
    }

    /// Run attention on raw device pointers on `stream`.
    ///
    /// # Safety
    /// The pointers must be device memory of this context holding at least the extents
    /// [`Problem::extents`] reports, 16-byte aligned (checked), live until the stream's work
    /// completes; `lse` must be valid when `return_lse` is set.
    pub unsafe fn forward_raw(
        &self,
        stream: sys::CUstream,
        problem: &Problem,
        ptrs: RawPtrs,
    ) -> Result<(), Error> {
        let (v, sel) = self.plan(problem)?;
        for (field, ptr, align) in [
            ("q", ptrs.q, 16),
            ("k", ptrs.k, 16),
            ("v", ptrs.v, 16),
            ("out", ptrs.o, 16),
            ("lse", ptrs.lse, 4),
        ] {
            let needed = field != "lse" || problem.return_lse;
            if needed && (ptr == 0 || ptr % align != 0) {
                return Err(Error::invalid(
                    field,
                    format!("pointer {ptr:#x}"),
                    format!("a non-null device pointer aligned to {align} bytes"),
                ));
            }
        }
        self.ctx.bind_to_thread().call("cuCtxSetCurrent")?;
        if problem.batch == 0 || problem.seqlen_q == 0 {
            return Ok(()); // no output elements
        }
        if problem.seqlen_k == 0 && problem.out_is_dense() {
            // Nothing to attend to: out = 0, LSE = -inf, without a kernel.
            let [_, _, _, o_len, lse_len] = problem.extents()?;
            // SAFETY: the caller guarantees out/lse hold these extents on this context.
            unsafe {
                sys::cuMemsetD8Async(ptrs.o, 0, o_len * problem.dtype.size(), stream)
                    .result()
                    .call("cuMemsetD8Async")?;
                if problem.return_lse {
                    sys::cuMemsetD32Async(ptrs.lse, f32::NEG_INFINITY.to_bits(), lse_len, stream)
                        .result()
                        .call("cuMemsetD32Async")?;
                }
            }
            return Ok(());
        }
        // Loaded only when a launch follows: degenerate calls above need no module.
        let kernel = self.load(&sel.spec)?;
        let params = FwdParams {
            q: ptrs.q,
            k: ptrs.k,
            v: ptrs.v,
            o: ptrs.o,
            lse: if problem.return_lse { ptrs.lse } else { 0 },
            ..v.params
        };
        let mut args = [&params as *const FwdParams as *mut c_void];
        // SAFETY: the function was loaded from a verified cubin of this spec; its one parameter
        // is an fa4::FwdParams, whose layout the kernel static_asserts against this struct.
        unsafe {
            cudarc::driver::result::launch_kernel(
                kernel.func.cu_function(),
                sel.grid,
                (kernel.threads, 1, 1),
                kernel.smem_bytes,
                stream,
                &mut args,
            )
        }
        .call("cuLaunchKernel")
    }

    /// Run attention on cudarc buffers (elements as raw 16-bit words, in `problem.dtype`),
    /// after checking that each buffer holds what the problem's shapes and strides reach.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        stream: &CudaStream,
        problem: &Problem,
        q: &CudaSlice<u16>,
        k: &CudaSlice<u16>,
        v: &CudaSlice<u16>,
        out: &mut CudaSlice<u16>,
        lse: Option<&mut CudaSlice<f32>>,
    ) -> Result<(), Error> {
        let [qn, kn, vn, on, ln] = problem.extents()?;
        for (field, have, need) in [
            ("q", q.len(), qn),
            ("k", k.len(), kn),
            ("v", v.len(), vn),
            ("out", out.len(), on),
        ] {
            if have < need {
                return Err(Error::invalid(
                    field,
                    format!("buffer of {have} elements"),
                    format!("at least {need} elements for the problem's shape and strides"),
                ));
            }
        }
        if problem.return_lse {
            match &lse {
                None => {
                    return Err(Error::invalid(
                        "lse",
                        "None",
                        "an fp32 buffer when return_lse is set",
                    ));
                }
                Some(l) if l.len() < ln => {
                    return Err(Error::invalid(
                        "lse",
                        format!("buffer of {} elements", l.len()),
                        format!("at least B*H*Sq = {ln} elements"),
                    ));
                }
                Some(_) => {}
            }
        }
        // The guards order our launch after earlier writes to these buffers and record our use
        // when dropped, so they live until after the launch.
        let (q_ptr, _gq) = q.device_ptr(stream);
        let (k_ptr, _gk) = k.device_ptr(stream);
        let (v_ptr, _gv) = v.device_ptr(stream);
        let (o_ptr, _go) = out.device_ptr_mut(stream);
        let lse_guard = lse
            .filter(|_| problem.return_lse)
            .map(|l| l.device_ptr_mut(stream));
        let ptrs = RawPtrs {
            q: q_ptr,
            k: k_ptr,
            v: v_ptr,
            o: o_ptr,
            lse: lse_guard.as_ref().map_or(0, |g| g.0),
        };
        // SAFETY: the buffers are live device allocations of at least the extents checked above.
        unsafe { self.forward_raw(stream.cu_stream(), problem, ptrs) }
    }
}
