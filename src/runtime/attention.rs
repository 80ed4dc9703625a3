//! `FlashAttention`: a kernel library bound to a CUDA context. It selects the kernel for a
//! call, loads its module once (verified cubin, dynamic shared memory raised once), caches it
//! per spec, validates buffers and launches on the caller's stream.

use super::combine::{CombineKernel, CombineOutput, MAX_COMBINE_DV, column_parts};
use super::current::Current;
use super::error::{DriverCall, Error};
use super::launch::LaunchMode;
use super::library::KernelLibrary;
use super::problem::{Problem, Validated};
use crate::params::FwdParams;
use crate::schedule::{self, CausalRuns};
use crate::select::{self, DeviceInfo, Selection};
use crate::spec::{DType, Impl, KernelSpec};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, sys,
};
use std::collections::HashMap;
use std::ffi::c_void;
use std::mem::ManuallyDrop;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// (bytes, partial-O elements) of the split-KV scratch for `splits` (0 bytes when unsplit).
fn split_workspace(p: &Problem, splits: u32) -> (usize, usize) {
    if splits <= 1 {
        return (0, 0);
    }
    let rows = splits as usize * p.total_q() * p.heads;
    let o = rows * p.head_dim_v;
    ((o + rows) * 4, o)
}

/// (counter bytes, total bytes) of the split tail's workspace for `grid` CTAs: an int32
/// arrival counter per (tail tile, consumer warpgroup), fewer than 2 grid tail tiles, then two
/// part entries per CTA, each a warp's O accumulators and row state as 512-byte lines
/// (fwd_sm90.cu `part_lines`).
fn tail_workspace(spec: &KernelSpec, grid: u32) -> (usize, usize) {
    let consumers = (spec.tile_m / 64) as usize;
    let counters = (2 * grid as usize * consumers * 4).next_multiple_of(256);
    let lines = spec.geometry().dv_pad as usize / 8 + 1;
    (
        counters,
        counters + 2 * grid as usize * consumers * 4 * lines * 512,
    )
}

/// Threads of the varlen schedule kernel (`fwd_sm90.cu` `kScheduleThreads`).
const SCHEDULE_THREADS: u32 = 1024;

/// A split module's two combine kernels (`runtime/combine.rs`).
struct CombineFns {
    /// `_combine`: one CTA per (query, head) row.
    per_row: CudaFunction,
    /// `_combine_rows`: a group of lanes per row.
    rows: CudaFunction,
}

/// A loaded kernel: its function handle (keeping its module alive) and launch geometry.
struct Loaded {
    func: CudaFunction,
    /// The split-KV combine kernels of the same module (split specs only).
    combine: Option<CombineFns>,
    /// The varlen schedule kernel of the same module (wgmma varlen specs; `None` in a cubin
    /// built before it, whose forward then deals the padded schedule).
    schedule: Option<CudaFunction>,
    threads: u32,
    smem_bytes: u32,
    /// Pairs of CTAs the device holds at once (0: never launched in pairs).
    max_pairs: u32,
}

/// Causal shapes (with their grids) whose orders a handle plans (`FlashAttention::
/// unit_order_for`), and the device bytes it keeps for them: past either, new shapes run the
/// plain snake rather than grow memory without bound (an engine's prefill lengths vary per
/// call; a 16k-key call's order is a few KiB, `schedule::MAX_UNITS` units 4 MiB).
const MAX_ORDERS: usize = 1024;
const MAX_ORDER_BYTES: usize = 64 << 20;

/// A causal shape's unit order: whether it pays by default (`schedule::Plan::pays`) and its
/// device copy, made once a call asks for it (it pays, or `Problem::lpt_rounds` forces it);
/// written before its first launch, read-only after.
struct UnitOrder {
    pays: bool,
    ptr: Option<u64>,
}

#[derive(Default)]
struct Orders {
    made: HashMap<(CausalRuns, usize), UnitOrder>,
    bytes: usize,
}

/// Whether `stream` is being captured into a graph (no allocations or copies then).
fn stream_is_capturing(stream: sys::CUstream) -> Result<bool, Error> {
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: queries the capture state of the caller's stream.
    unsafe { sys::cuStreamIsCapturing(stream, &mut status) }
        .result()
        .call("cuStreamIsCapturing")?;
    Ok(status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
}

/// Scratch bytes the selected kernel needs: split-KV's partials, or the split tail's (sized
/// for the grid before the pairs' clamp, which only shrinks it); then, 256-byte aligned at
/// [`schedule_list_offset`], the varlen schedule's list.
fn workspace_need(p: &Problem, sel: &Selection) -> usize {
    match schedule_list_bytes(sel) {
        0 => own_scratch(p, sel),
        list => schedule_list_offset(p, sel) + list,
    }
}

/// The forward's own scratch: split-KV's partials, or the split tail's.
fn own_scratch(p: &Problem, sel: &Selection) -> usize {
    if sel.num_splits > 1 {
        split_workspace(p, sel.num_splits).0
    } else if sel.split_tail {
        tail_workspace(&sel.spec, sel.grid.0).1
    } else {
        0
    }
}

/// Where the varlen schedule's list starts in the workspace: after the kernel's own scratch.
fn schedule_list_offset(p: &Problem, sel: &Selection) -> usize {
    own_scratch(p, sel).next_multiple_of(256)
}

/// The varlen schedule's list (`fwd_sm90.cu` `_schedule`): an int2 count, then an int2
/// (sequence, Q block) per unit; 0 bytes where selection deals the padded schedule.
fn schedule_list_bytes(sel: &Selection) -> usize {
    if sel.varlen_schedule {
        8 * (1 + sel.schedule_units)
    } else {
        0
    }
}

/// A workspace (split-KV's partials or the split tail's) owned by the handle, one per stream
/// (kernels on different streams may run at once), grown on demand and reused: no allocation
/// on the hot path.
struct Workspace {
    ptr: u64,
    bytes: usize,
}

/// One spec's loaded kernel, once loaded.
type Slot = Mutex<Option<Arc<Loaded>>>;

pub struct FlashAttention {
    lib: KernelLibrary,
    /// (Released in `drop`, under the guard that gives the caller its context back.)
    ctx: ManuallyDrop<Arc<CudaContext>>,
    device: DeviceInfo,
    /// Loaded kernels, a slot per spec: a load (a cubin read and verified, a jit compile of
    /// seconds) holds its own slot only, not the calls that need other, loaded kernels.
    cache: Mutex<HashMap<KernelSpec, Arc<Slot>>>,
    workspaces: Mutex<HashMap<usize, Workspace>>,
    /// Causal runs' unit orders (`Selection::lpt_rounds`) per schedule and slots.
    orders: Mutex<Orders>,
    /// Forwards launched as the previous kernel's programmatic dependents (on by default; see
    /// [`set_programmatic_launch`](Self::set_programmatic_launch)).
    programmatic: AtomicBool,
    /// Varlen batches dealt by the device's list of their units (on by default; see
    /// [`set_varlen_schedule`](Self::set_varlen_schedule)).
    varlen_schedule: AtomicBool,
    /// Waves of CTA slots' worth of (sequence, split) units where each sequence takes its own
    /// split count, 0 off (see [`set_sequence_splits`](Self::set_sequence_splits)).
    sequence_split_shares: AtomicU32,
    /// [`CombineKernel`] as its `to_u8` (see [`set_combine_kernel`](Self::set_combine_kernel)).
    combine_kernel: AtomicU8,
    #[cfg(feature = "jit")]
    jit: Option<super::jit::Jit>,
}

impl Drop for FlashAttention {
    fn drop(&mut self) {
        // Freeing the workspaces, unloading the modules and releasing the context each bind
        // the context: all of it under one guard, so the caller's is current again after.
        let _current = Current::keep().ok();
        let ws = self.workspaces.get_mut().unwrap_or_else(|p| p.into_inner());
        let orders = &mut self
            .orders
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .made;
        if (!ws.is_empty() || !orders.is_empty()) && self.ctx.bind_to_thread().is_ok() {
            let ptrs = ws
                .drain()
                .map(|(_, w)| w.ptr)
                .chain(orders.drain().filter_map(|(_, o)| o.ptr));
            for ptr in ptrs {
                // SAFETY: allocated by cuMemAlloc in this context; cuMemFree waits for its users.
                let _ = unsafe { cudarc::driver::result::free_sync(ptr) };
            }
        }
        self.cache
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        // SAFETY: never used again: the handle is being dropped.
        unsafe { ManuallyDrop::drop(&mut self.ctx) };
    }
}

/// Device pointers of one call (`CUdeviceptr`s); 0 where absent. `lse` is needed when
/// `return_lse`; the serving-feature arrays exactly when the `Problem` declares them.
#[derive(Clone, Copy, Debug, Default)]
pub struct RawPtrs {
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub o: u64,
    pub lse: u64,
    /// int32 (B+1), when `varlen.total_q` / `varlen.total_k` are set.
    pub cu_seqlens_q: u64,
    pub cu_seqlens_k: u64,
    /// int32 (B), when `varlen.seqused_q` / `varlen.seqused_k` are set.
    pub seqused_q: u64,
    pub seqused_k: u64,
    /// int32 (B, pages_per_seq) with row stride `paged.page_table_stride`, when paged.
    pub page_table: u64,
    /// fp32 (H), when `sinks`.
    pub sinks: u64,
    /// Split-KV scratch of `workspace_bytes` bytes (see [`FlashAttention::workspace_bytes`]);
    /// 0 lets the handle use its own per-stream workspace.
    pub workspace: u64,
    pub workspace_bytes: usize,
}

impl FlashAttention {
    /// Bind the library in `dir` to `ctx`'s device. Fails if the library's arch does not run
    /// on the device (checked before any cubin is touched).
    pub fn new(ctx: Arc<CudaContext>, dir: impl AsRef<Path>) -> Result<FlashAttention, Error> {
        // (Refused, the context drops here, and its release binds it.)
        let _current = Current::keep().call("cuCtxGetCurrent")?;
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
            ctx: ManuallyDrop::new(ctx),
            device,
            cache: Mutex::new(HashMap::new()),
            workspaces: Mutex::new(HashMap::new()),
            orders: Mutex::new(Orders::default()),
            programmatic: AtomicBool::new(true),
            varlen_schedule: AtomicBool::new(true),
            sequence_split_shares: AtomicU32::new(select::SEQUENCE_SPLIT_SHARES),
            combine_kernel: AtomicU8::new(CombineKernel::Auto.to_u8()),
            #[cfg(feature = "jit")]
            jit: None,
        })
    }

    /// Launch short forwards (`Selection::programmatic`) as programmatic dependents of the
    /// kernel before them on the stream (the default): their CTAs may then start, set up
    /// their shared memory and wait while that kernel finishes, rather than after it has
    /// drained, and the kernel after a forward may start as the forward's last CTAs run, if
    /// launched so itself. Every fa4gen kernel (forwards, the split-KV combine) waits for the
    /// previous grid (`griddepcontrol.wait`) before it touches global memory, so results are
    /// the same either way. Off: every forward in plain stream order (the combine still
    /// follows its split kernel programmatically).
    pub fn set_programmatic_launch(&self, on: bool) {
        self.programmatic.store(on, Ordering::Relaxed);
    }

    /// Deal a varlen batch of more than one sequence on the sm90 flagship by the list of its
    /// real (sequence, Q block) units, heaviest first, that a one-CTA kernel makes on the
    /// device just before the forward (`Selection::varlen_schedule`, the default), or by the
    /// padded schedule, every sequence as the longest (off; CTA pairs may then run). The
    /// results are the same either way; off is for measuring.
    pub fn set_varlen_schedule(&self, on: bool) {
        self.varlen_schedule.store(on, Ordering::Relaxed);
    }

    /// Give each sequence of a split varlen batch its own split count on the device
    /// (`Selection::sequence_splits`: by default decode batches of per-sequence key lengths):
    /// the grid holds `shares` waves of CTA slots' worth of (sequence, split) units
    /// ([`SEQUENCE_SPLIT_SHARES`](select::SEQUENCE_SPLIT_SHARES) by default), one per sequence
    /// and the rest dealt by the sequences' K blocks (lengths within an eighth of their mean:
    /// the count that fills one wave). 0: FA4's one count for every sequence. The results are
    /// the same up to the combine's rounding; other values are for measuring.
    pub fn set_sequence_splits(&self, shares: u32) {
        self.sequence_split_shares.store(shares, Ordering::Relaxed);
    }

    /// Which combine kernel reduces split-KV partials (forwards that split, and
    /// [`combine_raw`](Self::combine_raw)): by shape (`Auto`, the default), or one forced, to
    /// measure or test either. Both compute the same fp32 reduction, summed in another order.
    pub fn set_combine_kernel(&self, kernel: CombineKernel) {
        self.combine_kernel.store(kernel.to_u8(), Ordering::Relaxed);
    }

    /// Compile kernels the library lacks at first use, caching them on disk (`jit` feature).
    #[cfg(feature = "jit")]
    pub fn with_jit(mut self, jit: super::jit::Jit) -> FlashAttention {
        self.jit = Some(jit);
        self
    }

    /// [`with_jit`](Self::with_jit) on a handle in place (the C ABI's `fa4gen_enable_jit`).
    #[cfg(feature = "jit")]
    pub fn set_jit(&mut self, jit: super::jit::Jit) {
        self.jit = Some(jit);
    }

    /// Compile, in parallel, the kernels of `problems` that the library lacks, so that the
    /// first calls do not pay for it one at a time (`jit` feature). Returns how many compiled.
    #[cfg(feature = "jit")]
    pub fn prepare(&self, problems: &[Problem]) -> Result<usize, Error> {
        use rayon::prelude::*;
        let Some(jit) = &self.jit else {
            return Ok(0);
        };
        let mut specs: Vec<KernelSpec> = problems
            .iter()
            .filter_map(|p| self.plan(p).ok().map(|(_, s)| (p, s.spec)))
            .flat_map(|(p, s)| {
                // A flagship split's combine module too.
                let combine = (s.imp == Impl::Wgmma && s.feat.split)
                    .then(|| combine_spec(s.arch, p).ok())
                    .flatten();
                std::iter::once(s).chain(combine)
            })
            .filter(|s| !matches!(self.lib.entry_for(s), Ok(Some(_))))
            .collect();
        specs.sort();
        specs.dedup();
        specs
            .par_iter()
            .try_for_each(|s| jit.cubin(s).map(|_| ()))?;
        Ok(specs.len())
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
        // The handle's switches off: the padded schedule and FA4's one split count, unless the
        // problem asks itself.
        let varlen_off =
            |on: bool, asked: Option<bool>| problem.varlen.is_some() && asked.is_none() && !on;
        let list_off = varlen_off(
            self.varlen_schedule.load(Ordering::Relaxed),
            problem.varlen_schedule,
        );
        let shares_off = varlen_off(
            self.sequence_split_shares.load(Ordering::Relaxed) > 0,
            problem.sequence_splits,
        );
        let switched;
        let problem = if list_off || shares_off {
            let mut q = problem.clone();
            if list_off {
                q.varlen_schedule = Some(false);
            }
            if shares_off {
                q.sequence_splits = Some(false);
            }
            switched = q;
            &switched
        } else {
            problem
        };
        let v = problem.validate()?;
        let s = select::select(problem, &v, &self.device)?;
        // A kernel the library does not ship (a decode tile: the default plan is
        // prefill-shaped; a flagship tile a model plan left out): the next preference that
        // it ships serves the call instead.
        if !self.can_run(&s.spec, problem) {
            for prefer in &select::Prefer::FALLBACKS[1..] {
                let t = select::select_with(problem, &v, &self.device, *prefer)?;
                if self.can_run(&t.spec, problem) {
                    return Ok((v, t));
                }
            }
        }
        Ok((v, s))
    }

    /// Whether the library holds `spec` and, for a flagship split, its combine module.
    fn can_run(&self, spec: &KernelSpec, problem: &Problem) -> bool {
        self.can_load(spec)
            && (spec.imp != Impl::Wgmma
                || !spec.feat.split
                || combine_spec(spec.arch, problem).is_ok_and(|c| self.can_load(&c)))
    }

    /// Whether `spec` is in the library (or the jit may compile it).
    pub fn can_load(&self, spec: &KernelSpec) -> bool {
        #[cfg(feature = "jit")]
        if self.jit.is_some() {
            return true;
        }
        self.lib.entry(&spec.stem()).is_some()
    }

    /// Whether the library can run this problem (validation and selection pass and the
    /// selected kernel was built). Lets an engine fall back before calling.
    pub fn has_kernel(&self, problem: &Problem) -> bool {
        self.plan(problem)
            .is_ok_and(|(_, s)| self.can_load(&s.spec))
    }

    /// The cubin, symbol, threads and shared memory of a spec: from the library, or compiled
    /// by the jit when the library lacks it (or holds another build's rendering) and jit is on.
    fn find(&self, spec: &KernelSpec) -> Result<(Vec<u8>, String, u32, u32), Error> {
        let entry = self.lib.entry_for(spec);
        #[cfg(feature = "jit")]
        let entry = match entry {
            Err(_) if self.jit.is_some() => Ok(None),
            e => e,
        };
        if let Some(entry) = entry? {
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
        let slot = self
            .cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(*spec)
            .or_default()
            .clone();
        let mut slot = slot.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = slot.as_ref() {
            return Ok(k.clone());
        }
        let (cubin, symbol, threads, smem_bytes) = self.find(spec)?;
        let module = self
            .ctx
            .load_module(cudarc::nvrtc::Ptx::from_binary(cubin))
            .call("cuModuleLoadData")?;
        let func = module.load_function(&symbol).call("cuModuleGetFunction")?;
        // (The flagship's split reduces with the canonical combine module: `combine_for`.)
        let combine = if spec.feat.split && spec.imp == Impl::Portable {
            let get = |suffix: &str| {
                module
                    .load_function(&format!("{symbol}{suffix}"))
                    .call("cuModuleGetFunction")
            };
            Some(CombineFns {
                per_row: get("_combine")?,
                rows: get("_combine_rows")?,
            })
        } else {
            None
        };
        func.set_attribute(
            sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            smem_bytes as i32,
        )
        .call("cuFuncSetAttribute")?;
        if spec.imp == crate::spec::Impl::Wgmma && spec.ctas_per_sm() > 1 {
            // Two persistent CTAs per SM (grid = 2 x SMs) need both their shares of shared
            // memory resident: ask for the whole carveout rather than leave it to the driver.
            func.set_attribute(
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                100,
            )
            .call("cuFuncSetAttribute")?;
        }
        // A device that cannot co-schedule pairs of this kernel runs it alone.
        let max_pairs = if spec.wgmma_pairs() {
            super::cluster::max_pairs(func.cu_function(), threads, smem_bytes).unwrap_or(0)
        } else {
            0
        };
        let schedule = (spec.imp == Impl::Wgmma && spec.feat.varlen)
            .then(|| module.load_function(&format!("{symbol}_schedule")).ok())
            .flatten();
        let k = Arc::new(Loaded {
            func,
            combine,
            schedule,
            threads,
            smem_bytes,
            max_pairs,
        });
        *slot = Some(k.clone());
        Ok(k)
    }

    /// Bytes of scratch a problem needs (0 when selection neither splits K nor the schedule's
    /// tail nor lists varlen tiles): split-KV's fp32 partial O `(splits, total_q, H, Dv)` then
    /// partial LSE `(splits, <the LSE's layout>)`; the split tail's counters and tile parts;
    /// then (256-byte aligned) the varlen schedule's list, an int2 per unit and one more.
    pub fn workspace_bytes(&self, problem: &Problem) -> Result<usize, Error> {
        let (_, sel) = self.plan(problem)?;
        Ok(workspace_need(problem, &sel))
    }

    /// The handle's workspace for `stream`, at least `bytes` long; `None` while the stream is
    /// being captured and none is big enough (an allocation would break the capture): the
    /// split tail then runs without, split-KV refuses.
    fn workspace_for(&self, stream: sys::CUstream, bytes: usize) -> Result<Option<u64>, Error> {
        let mut ws = self.workspaces.lock().unwrap_or_else(|p| p.into_inner());
        let key = stream as usize;
        if let Some(w) = ws.get(&key)
            && w.bytes >= bytes
        {
            return Ok(Some(w.ptr));
        }
        if stream_is_capturing(stream)? {
            return Ok(None);
        }
        // The first workspace as asked (whole MiB); one that grows at least doubles, so slowly
        // growing shapes reallocate (and sync the stream) a logarithmic number of times.
        // (A power of two throughout held 32 MiB for the split tail's 18 at d 128.)
        let mut bytes = bytes.max(1).next_multiple_of(1 << 20);
        if let Some(old) = ws.remove(&key) {
            bytes = bytes.max(2 * old.bytes);
            // SAFETY: the stream's earlier kernels may still read it: wait for them first.
            unsafe {
                sys::cuStreamSynchronize(stream)
                    .result()
                    .call("cuStreamSynchronize")?;
                cudarc::driver::result::free_sync(old.ptr).call("cuMemFree")?;
            }
        }
        // SAFETY: the context is current (bound by the caller).
        let ptr = unsafe { cudarc::driver::result::malloc_sync(bytes) }.call("cuMemAlloc")?;
        ws.insert(key, Workspace { ptr, bytes });
        Ok(Some(ptr))
    }

    /// The device copy of `runs`' unit order over `slots` (`schedule::plan`), where it pays
    /// or is `force`d; else `None`, and the kernel deals by the plain snake: where it does not
    /// pay, while the stream is being captured and the copy does not exist yet (an
    /// allocation and copy would break the capture), past `MAX_ORDERS` / `MAX_ORDER_BYTES`,
    /// or where the allocation or copy fails (an optional speed-up: the call goes on, and a
    /// later one tries again). The copy runs on the caller's stream, which is then
    /// synchronised once, so the order is on the device before any launch on any stream
    /// reads it.
    fn unit_order_for(
        &self,
        stream: sys::CUstream,
        runs: CausalRuns,
        slots: usize,
        force: bool,
    ) -> Option<u64> {
        let key = (runs, slots);
        let mut orders = self.orders.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(o) = orders.made.get(&key) {
            if let Some(ptr) = o.ptr.filter(|_| force || o.pays) {
                return Some(ptr);
            }
            // Planned before: it does not pay, or it pays past MAX_ORDER_BYTES. Made only
            // where forced (a test or a tuning run asking for an order that does not pay).
            if !force {
                return None;
            }
        }
        if orders.made.len() >= MAX_ORDERS || !matches!(stream_is_capturing(stream), Ok(false)) {
            return None;
        }
        let plan = schedule::plan(&runs, slots)?;
        let pays = plan.pays();
        let bytes = plan.order.len() * 4;
        if !(force || pays) || orders.bytes + bytes > MAX_ORDER_BYTES {
            orders.made.insert(key, UnitOrder { pays, ptr: None });
            return None;
        }
        // SAFETY: the context is current (bound by the caller) and the stream is not being
        // captured; the host vector outlives the copy (the stream is synchronised before it
        // drops), and the device memory is freed on every failure.
        let ptr = unsafe {
            let ptr = cudarc::driver::result::malloc_sync(bytes).ok()?;
            let copied = cudarc::driver::result::memcpy_htod_async(ptr, &plan.order, stream)
                .and_then(|()| sys::cuStreamSynchronize(stream).result());
            if copied.is_err() {
                let _ = cudarc::driver::result::free_sync(ptr);
                return None;
            }
            ptr
        };
        orders.bytes += bytes;
        orders.made.insert(
            key,
            UnitOrder {
                pays,
                ptr: Some(ptr),
            },
        );
        Some(ptr)
    }

    /// Unit orders this handle holds on the device (`Selection::lpt_rounds`), for tests.
    #[doc(hidden)]
    pub fn unit_orders_made(&self) -> usize {
        let orders = self.orders.lock().unwrap_or_else(|p| p.into_inner());
        orders.made.values().filter(|o| o.ptr.is_some()).count()
    }

    /// Run attention on raw device pointers on `stream`.
    ///
    /// # Safety
    /// The pointers must be device memory of this context holding at least the extents
    /// [`Problem::extents`] reports (the feature arrays their documented shapes, with page
    /// indices below `num_pages` and sequence offsets within the tensors), 16-byte aligned
    /// (checked), live until the stream's work completes; `lse` must be valid when
    /// `return_lse` is set.
    pub unsafe fn forward_raw(
        &self,
        stream: sys::CUstream,
        problem: &Problem,
        ptrs: RawPtrs,
    ) -> Result<(), Error> {
        let (v, sel) = self.plan(problem)?;
        check_pointers(problem, &ptrs, true)?;
        let (_, o_part_elems) = split_workspace(problem, sel.num_splits);
        let ws_bytes = workspace_need(problem, &sel);
        // A caller's workspace must hold the kernel's own scratch; one without room for the
        // varlen schedule's list after it (sized before the list existed) runs the padded
        // schedule, with the same results.
        let own_bytes = own_scratch(problem, &sel);
        if ptrs.workspace != 0
            && (!ptrs.workspace.is_multiple_of(16) || ptrs.workspace_bytes < own_bytes)
        {
            return Err(Error::invalid(
                "workspace",
                format!("{:#x} ({} bytes)", ptrs.workspace, ptrs.workspace_bytes),
                if ws_bytes > own_bytes {
                    format!(
                        "16-byte aligned and at least {own_bytes} bytes for this problem ({ws_bytes} with the varlen schedule's list)"
                    )
                } else {
                    format!("16-byte aligned and at least {own_bytes} bytes for this problem")
                },
            ));
        }
        let _current = Current::bind(&self.ctx).call("cuCtxSetCurrent")?;
        if problem.batch == 0 || problem.seqlen_q == 0 || problem.total_q() == 0 {
            return Ok(()); // no output elements
        }
        if problem.seqlen_k == 0 && problem.out_is_dense() && !problem.sinks {
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
        let mut params = call_params(&v, &ptrs, problem.return_lse, sel.num_splits);
        // Counts per sequence: the grid's z axis is (sequence, split) units.
        let mut grid = sel.grid;
        if sel.sequence_splits {
            let slots = self.device.sm_count as u64 * u64::from(sel.spec.ctas_per_sm());
            params.split_slots = slots.min(i32::MAX as u64) as i32;
            grid.2 = select::sequence_split_units(
                problem.batch,
                sel.num_splits,
                grid.1,
                slots,
                self.sequence_split_shares.load(Ordering::Relaxed),
            );
            params.split_units = grid.2 as i32; // (at most batch * num_splits <= 65535)
        }
        if sel.num_splits > 1 {
            let ws = if ptrs.workspace != 0 {
                ptrs.workspace
            } else {
                self.workspace_for(stream, ws_bytes)?.ok_or_else(|| {
                    Error::invalid(
                        "workspace",
                        format!("{ws_bytes} bytes needed while the stream is being captured"),
                        "a split-KV workspace that exists before capture: run the shape once before capturing, or pass RawPtrs::workspace",
                    )
                })?
            };
            set_partials(&mut params, problem, ws, ws + (o_part_elems * 4) as u64);
        }
        // In pairs the grid is at most the pairs the device holds at once (persistent CTAs
        // waiting for an SM would run their tiles after everyone else's).
        let pairs = sel.pairs && kernel.max_pairs > 0;
        if pairs {
            grid.0 = grid.0.min(super::cluster::PAIR * kernel.max_pairs);
        }
        // The split tail, planned for the grid launched; its counters zeroed on the stream.
        let pair = if pairs {
            super::cluster::PAIR as usize
        } else {
            1
        };
        let tail_blocks = problem.seqlen_k.div_ceil(sel.spec.tile_n as usize);
        let tail = if sel.split_tail {
            select::tail_plan(sel.tiles / pair, grid.0 as usize / pair, tail_blocks)
        } else {
            None
        };
        if let Some((round, units)) = tail {
            let ws = if ptrs.workspace != 0 {
                Some(ptrs.workspace)
            } else {
                self.workspace_for(stream, ws_bytes)?
            };
            if let Some(ws) = ws {
                let (counter_bytes, _) = tail_workspace(&sel.spec, grid.0);
                // SAFETY: the workspace holds at least ws_bytes >= the counters' bytes (checked
                // above for the caller's; allocated so for the handle's).
                unsafe { sys::cuMemsetD32Async(ws, 0, counter_bytes / 4, stream) }
                    .result()
                    .call("cuMemsetD32Async")?;
                params.tail_counters = ws;
                params.o_partial = ws + counter_bytes as u64;
                params.tail_round = round as i32;
                params.tail_units = units as i32;
                params.tail_blocks = tail_blocks as i32; // (tail_plan kept it below 2^31)
            }
        }
        params.m_major_runs = i32::from(sel.m_major_runs);
        // The wgmma kernel's second parameter: its TMA descriptors (they hold the addresses).
        let maps = match sel.spec.imp {
            Impl::Wgmma => Some(super::tma::maps(
                &sel.spec, problem, pairs, ptrs.q, ptrs.k, ptrs.v, ptrs.o,
            )?),
            Impl::Portable => None,
        };
        if let (true, Some(schedule)) = (sel.varlen_schedule, &kernel.schedule) {
            // The list in the caller's workspace where it has room, else in the handle's, but
            // not into a graph being captured: a later, larger call may reallocate the
            // handle's, which the graph would still write. Without one the forward deals the
            // padded schedule.
            let ws = if ptrs.workspace != 0 {
                (ptrs.workspace_bytes >= ws_bytes).then_some(ptrs.workspace)
            } else if stream_is_capturing(stream)? {
                None
            } else {
                self.workspace_for(stream, ws_bytes)?
            };
            if let Some(ws) = ws {
                let list = ws + schedule_list_offset(problem, &sel) as u64;
                let mut list_arg = list;
                let mut args = [
                    &params as *const FwdParams as *mut c_void,
                    &mut list_arg as *mut u64 as *mut c_void,
                ];
                // SAFETY: the schedule kernel of a verified varlen module: an fa4::FwdParams (its
                // unit_order still null) and the list, which the workspace holds
                // (schedule_list_bytes: batch x the longest sequence's Q blocks, the most the
                // kernel lists). It runs in stream order after the previous kernel, so the
                // sequence arrays it reads are written; the forward waits for it.
                unsafe {
                    super::launch::launch(
                        schedule.cu_function(),
                        (1, 1, 1),
                        SCHEDULE_THREADS,
                        0,
                        stream,
                        LaunchMode {
                            cluster: 1,
                            programmatic: false,
                        },
                        &mut args,
                    )?;
                }
                params.unit_order = list;
            }
        }
        if sel.lpt_rounds {
            let runs = CausalRuns {
                seqlen_q: problem.seqlen_q,
                seqlen_k: problem.seqlen_k,
                tile_m: sel.spec.block_m() as usize,
                tile_n: sel.spec.tile_n as usize,
                run: sel.spec.wgmma_q_run().unwrap_or(1).max(1) as usize,
                heads_batch: problem.heads * problem.batch,
                pair,
            };
            let (slots, force) = (grid.0 as usize / pair, problem.lpt_rounds == Some(true));
            if let Some(ptr) = self.unit_order_for(stream, runs, slots, force) {
                params.unit_order = ptr;
            }
        }
        let mut args = [
            &params as *const FwdParams as *mut c_void,
            std::ptr::null_mut(),
        ];
        let nargs = match &maps {
            Some(m) => {
                args[1] = m as *const super::tma::TmaMaps as *mut c_void;
                2
            }
            None => 1,
        };
        let mode = LaunchMode {
            cluster: if pairs { super::cluster::PAIR } else { 1 },
            programmatic: sel.programmatic && self.programmatic.load(Ordering::Relaxed),
        };
        // SAFETY: the function was loaded from a verified cubin of this spec; its parameters
        // are an fa4::FwdParams, whose layout the kernel static_asserts against this struct,
        // and for the wgmma kernel its TmaMaps (four CUtensorMaps, the same order); every
        // forward kernel waits for the previous grid before it touches global memory.
        unsafe {
            super::launch::launch(
                kernel.func.cu_function(),
                grid,
                kernel.threads,
                kernel.smem_bytes,
                stream,
                mode,
                &mut args[..nargs],
            )?;
        }
        if let Some(combine) = self.combine_for(&sel.spec, problem)? {
            self.launch_combine(&combine, problem, &params, stream)?;
        } else if kernel.combine.is_some() {
            self.launch_combine(&kernel, problem, &params, stream)?;
        }
        Ok(())
    }

    /// The canonical combine module that reduces a flagship split's partials (`combine_spec`;
    /// the portable split kernel carries its own), loaded; `None` for any other kernel.
    fn combine_for(
        &self,
        spec: &KernelSpec,
        problem: &Problem,
    ) -> Result<Option<Arc<Loaded>>, Error> {
        if spec.imp != Impl::Wgmma || !spec.feat.split {
            return Ok(None);
        }
        self.load(&combine_spec(spec.arch, problem)?).map(Some)
    }

    /// Launch the combine kernel of a loaded split module over `params`' partials.
    fn launch_combine(
        &self,
        kernel: &Loaded,
        problem: &Problem,
        params: &FwdParams,
        stream: sys::CUstream,
    ) -> Result<(), Error> {
        let Some(combine) = &kernel.combine else {
            return Err(Error::invalid(
                "kernel",
                "a module without a combine kernel",
                "a split-KV kernel",
            ));
        };
        let (kind, grid) = super::combine::choose(
            CombineKernel::from_u8(self.combine_kernel.load(Ordering::Relaxed)),
            problem.seqlen_q,
            problem.heads,
            problem.batch,
            problem.head_dim_v,
            params.num_splits.max(1) as u32,
            self.device.sm_count,
        );
        let func = match kind {
            CombineKernel::Rows => &combine.rows,
            _ => &combine.per_row,
        };
        let mut args = [params as *const FwdParams as *mut c_void];
        // SAFETY: the combine kernel of a verified split module, whose one parameter is an
        // fa4::FwdParams; it runs after the forward on the same stream, as its programmatic
        // dependent, and waits for that grid before reading the partials.
        unsafe {
            super::launch::launch(
                func.cu_function(),
                grid,
                super::combine::THREADS,
                0,
                stream,
                LaunchMode {
                    cluster: 1,
                    programmatic: true,
                },
                &mut args,
            )
        }
    }

    /// FA4's `flash_attn_combine`: reduce `num_splits` (1..=256) fp32 partial outputs and LSEs
    /// into `ptrs.o` (the problem's strides, in elements of `output`: the problem's dtype or
    /// fp32) and, with `return_lse`, `ptrs.lse`:
    /// `lse = log(sum_s exp(lse_s) [+ exp(sink)])`, `out = sum_s exp(lse_s - lse) o_s`.
    /// `o_partial` is fp32 `(splits, B, Sq, H, Dv)` (`(splits, total_q, H, Dv)` when q is
    /// packed), `lse_partial` fp32 `(splits, B, H, Sq)` (`(splits, H, total_q)`), both
    /// contiguous: the layout split-KV forwards write. Dv is a multiple of 8 up to
    /// [`MAX_COMBINE_DV`] (512, MLA decode's; past 256 a multiple of 16): a row wider than a
    /// module's is reduced as two halves, a launch each ([`column_parts`]: 512 as two of
    /// 256). The problem's K side is validated but not read (nor its `head_dim`); the kernel
    /// comes from the canonical combine module of (dtype, part width, LSE, sink, varlen),
    /// `SpecClass::split_combine`, whatever forward produced the partials.
    ///
    /// # Safety
    /// As [`forward_raw`](Self::forward_raw), for out/lse/the declared arrays and for the
    /// partials at their layouts.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn combine_raw(
        &self,
        stream: sys::CUstream,
        problem: &Problem,
        num_splits: u32,
        o_partial: u64,
        lse_partial: u64,
        ptrs: RawPtrs,
        output: CombineOutput,
    ) -> Result<(), Error> {
        if !(1..=256).contains(&num_splits) {
            return Err(Error::invalid("num_splits", num_splits, "1..=256 partials"));
        }
        // No rows (an empty batch): the partials are empty tensors, which may be null.
        let no_rows = problem.batch == 0 || problem.seqlen_q == 0 || problem.total_q() == 0;
        for (field, ptr) in [("o_partial", o_partial), ("lse_partial", lse_partial)] {
            if !no_rows && (ptr == 0 || !ptr.is_multiple_of(16)) {
                return Err(Error::invalid(
                    field,
                    format!("pointer {ptr:#x}"),
                    "a non-null fp32 device pointer aligned to 16 bytes",
                ));
            }
        }
        let (parts, width) = column_parts(problem.head_dim_v).ok_or_else(|| {
            Error::invalid(
                "head_dim_v",
                problem.head_dim_v,
                format!("a multiple of 8 up to 256, or of 16 up to {MAX_COMBINE_DV}"),
            )
        })?;
        // Validated and launched as rows of one part's width; the partials' strides keep the
        // problem's dv (set_partials; o_parts_log2 below).
        let mut p = problem.clone();
        p.num_splits = 2;
        p.head_dim = width;
        p.head_dim_v = width;
        let v = p.validate()?;
        let (spec, fallback) = combine_specs(self.device.arch()?, &p, output)?;
        let ptrs = RawPtrs {
            q: 0,
            k: 0,
            v: 0,
            cu_seqlens_k: 0,
            seqused_k: 0,
            page_table: 0,
            ..ptrs
        };
        let mut checked = p.clone();
        checked.paged = None; // no K side
        checked.varlen = p.varlen.map(|vl| super::problem::Varlen {
            total_k: None,
            seqused_k: false,
            ..vl
        });
        check_pointers(&checked, &ptrs, false)?;
        let _current = Current::bind(&self.ctx).call("cuCtxSetCurrent")?;
        if no_rows {
            return Ok(());
        }
        let kernel = match (self.load(&spec), fallback) {
            (Err(Error::KernelMissing { .. }), Some(other)) => self.load(&other)?,
            (loaded, _) => loaded?,
        };
        let mut params = call_params(&v, &ptrs, problem.return_lse, num_splits);
        set_partials(&mut params, problem, o_partial, lse_partial);
        params.out_fp32 = i32::from(output == CombineOutput::F32);
        params.o_parts_log2 = parts.trailing_zeros() as i32;
        // A launch per column part, its partials and output moved to the part's first column
        // (the kernels step over whole rows of parts; each launch writes the same LSE).
        let out_elem = if output == CombineOutput::F32 { 4 } else { 2 };
        for part in 0..parts as u64 {
            let col = part * width as u64;
            let at = FwdParams {
                o_partial: o_partial + col * 4,
                o: params.o + col * out_elem,
                ..params
            };
            self.launch_combine(&kernel, &p, &at, stream)?;
        }
        Ok(())
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
        self.forward_varlen(stream, problem, q, k, v, out, lse, &SeqBuffers::default())
    }

    /// [`forward`](Self::forward) with the serving features' arrays: ragged batches
    /// (`cu_seqlens_*`, `seqused_*`), a page table, sinks. Each buffer must be present exactly
    /// when the problem declares it, and long enough (checked).
    ///
    /// Their contents are read by the kernels as FA4 reads them, unchecked (checking would
    /// copy them back and sync the stream on every call): `cu_seqlens_*` non-decreasing from 0
    /// and within the packed tensors' rows, `seqused_*` within each sequence's rows, page
    /// indices below `num_pages`. The flagship's loads and stores of q, k, v and out go
    /// through tensor maps of the buffers' extents and stay inside them whatever the arrays
    /// hold; the LSE's stores and the portable kernel's accesses do not. Values outside those
    /// ranges are a caller bug with undefined results on the device.
    #[allow(clippy::too_many_arguments)]
    pub fn forward_varlen(
        &self,
        stream: &CudaStream,
        problem: &Problem,
        q: &CudaSlice<u16>,
        k: &CudaSlice<u16>,
        v: &CudaSlice<u16>,
        out: &mut CudaSlice<u16>,
        lse: Option<&mut CudaSlice<f32>>,
        extra: &SeqBuffers<'_>,
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
                        format!("at least {ln} elements (B*H*Sq, or H*total_q when packed)"),
                    ));
                }
                Some(_) => {}
            }
        }
        let b = problem.batch;
        let pages = problem.paged.map_or(0, |pg| {
            (b.max(1) - 1)
                .saturating_mul(pg.page_table_stride)
                .saturating_add(pg.pages_per_seq)
        });
        for (field, have, need) in [
            (
                "cu_seqlens_q",
                extra.cu_seqlens_q.map(|x| x.len()),
                b.saturating_add(1),
            ),
            (
                "cu_seqlens_k",
                extra.cu_seqlens_k.map(|x| x.len()),
                b.saturating_add(1),
            ),
            ("seqused_q", extra.seqused_q.map(|x| x.len()), b),
            ("seqused_k", extra.seqused_k.map(|x| x.len()), b),
            ("page_table", extra.page_table.map(|x| x.len()), pages),
            (
                "learnable_sink",
                extra.sinks.map(|x| x.len()),
                problem.heads,
            ),
        ] {
            if let Some(have) = have
                && have < need
            {
                return Err(Error::invalid(
                    field,
                    format!("buffer of {have} elements"),
                    format!("at least {need} elements"),
                ));
            }
        }
        // The stream and every buffer on this handle's device: another GPU's addresses would
        // fault in a launch here (or, with peer access, cross the link unasked).
        let ours = self.ctx.cu_ctx();
        let others = [
            ("stream", Some(stream.context())),
            ("q", Some(q.context())),
            ("k", Some(k.context())),
            ("v", Some(v.context())),
            ("out", Some(out.context())),
            ("lse", lse.as_ref().map(|l| l.context())),
            ("cu_seqlens_q", extra.cu_seqlens_q.map(|x| x.context())),
            ("cu_seqlens_k", extra.cu_seqlens_k.map(|x| x.context())),
            ("seqused_q", extra.seqused_q.map(|x| x.context())),
            ("seqused_k", extra.seqused_k.map(|x| x.context())),
            ("page_table", extra.page_table.map(|x| x.context())),
            ("learnable_sink", extra.sinks.map(|x| x.context())),
        ];
        for (field, ctx) in others {
            if let Some(ctx) = ctx
                && ctx.cu_ctx() != ours
            {
                return Err(Error::invalid(
                    field,
                    format!(
                        "a buffer of another CUDA context (device {})",
                        ctx.ordinal()
                    ),
                    format!(
                        "buffers and stream of the handle's context (device {}'s primary)",
                        self.ctx.ordinal()
                    ),
                ));
            }
        }
        // Bound before the buffers' guards (which bind it too: waits on their last writes, and
        // events recording our use when dropped) and so released after them.
        let _current = Current::bind(&self.ctx).call("cuCtxSetCurrent")?;
        // The guards order our launch after earlier writes to these buffers and record our use
        // when dropped, so they live until after the launch.
        let (q_ptr, _gq) = q.device_ptr(stream);
        let (k_ptr, _gk) = k.device_ptr(stream);
        let (v_ptr, _gv) = v.device_ptr(stream);
        let (o_ptr, _go) = out.device_ptr_mut(stream);
        let lse_guard = lse
            .filter(|_| problem.return_lse)
            .map(|l| l.device_ptr_mut(stream));
        let (cq, ck, uq, uk, pt) = (
            extra.cu_seqlens_q.map(|x| x.device_ptr(stream)),
            extra.cu_seqlens_k.map(|x| x.device_ptr(stream)),
            extra.seqused_q.map(|x| x.device_ptr(stream)),
            extra.seqused_k.map(|x| x.device_ptr(stream)),
            extra.page_table.map(|x| x.device_ptr(stream)),
        );
        let sk = extra.sinks.map(|x| x.device_ptr(stream));
        let ptrs = RawPtrs {
            q: q_ptr,
            k: k_ptr,
            v: v_ptr,
            o: o_ptr,
            lse: lse_guard.as_ref().map_or(0, |g| g.0),
            cu_seqlens_q: cq.as_ref().map_or(0, |g| g.0),
            cu_seqlens_k: ck.as_ref().map_or(0, |g| g.0),
            seqused_q: uq.as_ref().map_or(0, |g| g.0),
            seqused_k: uk.as_ref().map_or(0, |g| g.0),
            page_table: pt.as_ref().map_or(0, |g| g.0),
            sinks: sk.as_ref().map_or(0, |g| g.0),
            ..RawPtrs::default()
        };
        // SAFETY: the buffers are live device allocations of at least the extents checked above.
        unsafe { self.forward_raw(stream.cu_stream(), problem, ptrs) }
    }
}

/// Every pointer of a call against what the problem declares: q/k/v (when `inputs`), out (and
/// lse when asked) non-null and 16-byte (4-byte) aligned unless their extent is empty; each
/// serving array present exactly when declared.
fn check_pointers(problem: &Problem, ptrs: &RawPtrs, inputs: bool) -> Result<(), Error> {
    let [qn, kn, vn, on, ln] = problem.extents()?;
    // The combine reads no q/k/v: only out, lse and the per-sequence arrays matter there.
    let (qn, kn, vn) = if inputs { (qn, kn, vn) } else { (0, 0, 0) };
    for (field, ptr, align, len) in [
        ("q", ptrs.q, 16, qn),
        ("k", ptrs.k, 16, kn),
        ("v", ptrs.v, 16, vn),
        ("out", ptrs.o, 16, on),
        ("lse", ptrs.lse, 4, ln),
    ] {
        // An empty tensor (e.g. no keys at all) may be null; anything else may not.
        let needed = (field != "lse" || problem.return_lse) && len > 0;
        if needed && (ptr == 0 || !ptr.is_multiple_of(align)) {
            return Err(Error::invalid(
                field,
                format!("pointer {ptr:#x}"),
                format!("a non-null device pointer aligned to {align} bytes"),
            ));
        }
    }
    let vl = problem.varlen.unwrap_or_default();
    for (field, ptr, declared) in [
        ("cu_seqlens_q", ptrs.cu_seqlens_q, vl.total_q.is_some()),
        ("cu_seqlens_k", ptrs.cu_seqlens_k, vl.total_k.is_some()),
        ("seqused_q", ptrs.seqused_q, vl.seqused_q),
        ("seqused_k", ptrs.seqused_k, vl.seqused_k),
        ("page_table", ptrs.page_table, problem.paged.is_some()),
        ("learnable_sink", ptrs.sinks, problem.sinks),
    ] {
        if declared && (ptr == 0 || !ptr.is_multiple_of(4)) {
            return Err(Error::invalid(
                field,
                format!("pointer {ptr:#x}"),
                "a non-null, 4-byte aligned device pointer (the problem declares this array)",
            ));
        }
        if !declared && ptr != 0 {
            return Err(Error::invalid(
                field,
                format!("pointer {ptr:#x}"),
                "null: the problem does not declare this array (set Problem::varlen / paged / sinks)",
            ));
        }
    }
    Ok(())
}

/// The launch parameters of a call: the validated problem's values plus the call's pointers.
fn call_params(v: &Validated, ptrs: &RawPtrs, return_lse: bool, num_splits: u32) -> FwdParams {
    FwdParams {
        q: ptrs.q,
        k: ptrs.k,
        v: ptrs.v,
        o: ptrs.o,
        lse: if return_lse { ptrs.lse } else { 0 },
        cu_seqlens_q: ptrs.cu_seqlens_q,
        cu_seqlens_k: ptrs.cu_seqlens_k,
        seqused_q: ptrs.seqused_q,
        seqused_k: ptrs.seqused_k,
        page_table: ptrs.page_table,
        sinks: ptrs.sinks,
        num_splits: num_splits as i32,
        ..v.params
    }
}

/// The canonical module whose `_combine` kernel reduces `problem`'s partials
/// (`SpecClass::split_combine`): the problem's dtype, dv, LSE flag, sink and whether its
/// queries are ragged (`cu_seqlens_q` or `seqused_q`; the combine reads no K side).
pub fn combine_spec(arch: crate::Arch, problem: &Problem) -> Result<KernelSpec, Error> {
    let ragged_q = problem
        .varlen
        .is_some_and(|vl| vl.total_q.is_some() || vl.seqused_q);
    crate::tiles::SpecClass::split_combine(
        arch,
        problem.dtype,
        problem.head_dim_v as u32,
        problem.return_lse,
        problem.sinks,
        ragged_q,
    )
    .ok_or_else(|| {
        Error::invalid(
            "head_dim_v",
            problem.head_dim_v,
            "a head dim the portable kernel has a tile for (multiples of 8 up to 256)",
        )
    })
}

/// The module whose combine writes `problem`'s output (`combine_spec`), and for fp32 output the
/// one to load where the library lacks it: the other 16-bit dtype's, since either combine
/// kernel writes fp32 (only its 16-bit store differs), so a library that ships one dtype's
/// modules serves fp32 output too.
pub fn combine_specs(
    arch: crate::Arch,
    problem: &Problem,
    output: CombineOutput,
) -> Result<(KernelSpec, Option<KernelSpec>), Error> {
    let spec = combine_spec(arch, problem)?;
    if output == CombineOutput::Problem {
        return Ok((spec, None));
    }
    let mut other = problem.clone();
    other.dtype = match problem.dtype {
        DType::Bf16 => DType::Fp16,
        DType::Fp16 => DType::Bf16,
    };
    Ok((spec, Some(combine_spec(arch, &other)?)))
}

/// Point the parameters at split partials: O `(splits, total_q, H, Dv)` fp32 at `o_partial`,
/// LSE `(splits, <LSE layout>)` fp32 at `lse_partial`.
fn set_partials(params: &mut FwdParams, p: &Problem, o_partial: u64, lse_partial: u64) {
    let total_q = p.total_q() as i64;
    params.o_partial = o_partial;
    params.lse_partial = lse_partial;
    params.o_partial_split_stride = total_q * (p.heads * p.head_dim_v) as i64;
    params.lse_partial_split_stride = total_q * p.heads as i64;
}

/// The serving features' device arrays for [`FlashAttention::forward_varlen`] (None: absent).
#[derive(Clone, Copy, Default)]
pub struct SeqBuffers<'a> {
    pub cu_seqlens_q: Option<&'a CudaSlice<i32>>,
    pub cu_seqlens_k: Option<&'a CudaSlice<i32>>,
    pub seqused_q: Option<&'a CudaSlice<i32>>,
    pub seqused_k: Option<&'a CudaSlice<i32>>,
    pub page_table: Option<&'a CudaSlice<i32>>,
    pub sinks: Option<&'a CudaSlice<f32>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{Paged, Strides, Varlen};
    use crate::select::H200;
    use crate::spec::DType;

    /// Bad input never panics on the host path: random problems, edge values favoured (0, 1,
    /// each bound and its neighbours, huge, negative strides and windows, varlen, pages,
    /// splits), through `extents`, `validate`, `select` and the workspace's size, as a review
    /// fuzzed 3M of them (forty-sixth session). Overflow checks are on in the test profile, so
    /// a product that wraps fails here. What validates must select a grid within the launch's
    /// limits (y and z at most 65535; x is 0 only for the degenerate calls that never launch).
    #[test]
    fn random_problems_never_panic_on_the_host_path() {
        use rand::{Rng, SeedableRng, rngs::StdRng};
        let mut rng = StdRng::seed_from_u64(46);
        // Half the problems draw from the listed values only (mostly valid shapes, so selection
        // and the workspace see them), half also from random magnitudes.
        fn pick(choices: &[usize], tame: bool, rng: &mut StdRng) -> usize {
            if tame || rng.random_bool(0.7) {
                choices[rng.random_range(0..choices.len())]
            } else {
                let bits = rng.random_range(1..40);
                rng.random_range(0..1usize << bits)
            }
        }
        let dims = [
            0, 1, 2, 7, 8, 64, 113, 128, 192, 256, 264, 1000, 4096, 65535, 65536,
        ];
        let lens = [
            0,
            1,
            7,
            113,
            1000,
            16384,
            (1 << 30) - 1,
            1 << 30,
            usize::MAX / 2,
        ];
        let (tame_dims, tame_lens) = ([1, 2, 4, 8, 16, 32, 64], [1, 7, 113, 1000, 4096, 16384]);
        let strides = [0, 8, -8, 1 << 23, (1 << 23) + 8, i64::MAX - 7, i64::MIN];
        let (mut validated, mut selected) = (0, 0);
        for i in 0..20000 {
            let tame = i % 2 == 0;
            let (d, l): (&[usize], &[usize]) = if tame {
                (&tame_dims, &tame_lens)
            } else {
                (&dims, &lens)
            };
            let heads = pick(d, tame, &mut rng);
            let mut p = Problem::new(
                if rng.random_bool(0.5) {
                    DType::Bf16
                } else {
                    DType::Fp16
                },
                pick(d, tame, &mut rng),
                pick(l, tame, &mut rng),
                pick(l, tame, &mut rng),
                heads,
                if rng.random_bool(0.5) {
                    (heads / 8).max(1)
                } else {
                    pick(d, tame, &mut rng)
                },
                pick(&[64, 96, 128, 192, 256, 8, 0, 512], tame, &mut rng),
                pick(&[64, 128, 256, 8, 0, 512], tame, &mut rng),
            );
            p.causal = rng.random_bool(0.4);
            if rng.random_bool(0.3) {
                let w = |rng: &mut StdRng| match rng.random_range(0..4) {
                    0 => None,
                    1 => Some(rng.random_range(-5..200)),
                    2 => Some(i64::MAX),
                    _ => Some(i64::MIN + 1),
                };
                p.window = (w(&mut rng), w(&mut rng));
            }
            p.num_splits = [1, 0, -1, 2, 7, 256, 257, i32::MAX, i32::MIN][rng.random_range(0..9)];
            if rng.random_bool(0.2) {
                p.softcap = [1e-40, 15.0, f32::INFINITY, -1.0][rng.random_range(0..4)];
            }
            if rng.random_bool(0.2) {
                p.softmax_scale = Some([3e38, 1e-30, 0.125, f32::NAN][rng.random_range(0..4)]);
            }
            if !tame && rng.random_bool(0.3) {
                let s = &mut [
                    &mut p.q_strides,
                    &mut p.k_strides,
                    &mut p.v_strides,
                    &mut p.o_strides,
                ][rng.random_range(0..4)];
                **s = Strides {
                    batch: strides[rng.random_range(0..strides.len())],
                    row: strides[rng.random_range(0..strides.len())],
                    head: strides[rng.random_range(0..strides.len())],
                };
            }
            if rng.random_bool(0.3) {
                p.varlen = Some(Varlen {
                    total_q: rng.random_bool(0.5).then(|| pick(l, tame, &mut rng)),
                    total_k: rng.random_bool(0.5).then(|| pick(l, tame, &mut rng)),
                    seqused_q: rng.random_bool(0.3),
                    seqused_k: rng.random_bool(0.5),
                });
            }
            if rng.random_bool(0.2) {
                p.paged = Some(Paged {
                    page_size: pick(&[1, 16, 128, 0, 1 << 20], tame, &mut rng),
                    num_pages: pick(&dims, tame, &mut rng),
                    pages_per_seq: pick(&dims, tame, &mut rng).max(1),
                    page_table_stride: pick(&[1, 4096, usize::MAX / 3, 1 << 31], tame, &mut rng),
                });
            }
            let _ = p.extents();
            let _ = p.total_q();
            let Ok(v) = p.validate() else { continue };
            validated += 1;
            let Ok(sel) = crate::select::select(&p, &v, &H200) else {
                continue;
            };
            selected += 1;
            assert!(
                sel.grid.1 <= 65535 && sel.grid.2 <= 65535,
                "{p:?}: grid {:?}",
                sel.grid
            );
            // The kernels' int counts: (query, head) rows and the flagship's tiles.
            assert!(p.counted_rows() * p.heads <= i32::MAX as usize);
            assert!(sel.spec.imp != Impl::Wgmma || sel.tiles <= i32::MAX as usize);
            let _ = workspace_need(&p, &sel);
        }
        assert!(
            validated > 1000 && selected > 1000,
            "{validated} validated, {selected} selected"
        );
    }

    #[test]
    fn fp32_combine_output_may_use_either_16_bit_module() {
        let p = Problem::new(DType::Fp16, 2, 3, 3, 4, 4, 64, 64);
        let (own, none) = combine_specs(crate::Arch::Sm90, &p, CombineOutput::Problem).unwrap();
        assert_eq!((own.dtype, own.dv, own.feat.split), (DType::Fp16, 64, true));
        assert!(
            none.is_none(),
            "16-bit output: the problem's dtype's module only"
        );
        let (first, other) = combine_specs(crate::Arch::Sm90, &p, CombineOutput::F32).unwrap();
        let other = other.expect("fp32 output: the other dtype's module as the fallback");
        assert_eq!(first, own);
        assert_eq!(
            (other.dtype, other.dv, other.lse),
            (DType::Bf16, 64, own.lse)
        );
        // A head dim no module has is refused either way, before any pointer is looked at.
        let wide = Problem::new(DType::Bf16, 1, 1, 1, 1, 1, 512, 512);
        assert!(combine_specs(crate::Arch::Sm90, &wide, CombineOutput::F32).is_err());
    }

    fn need(p: &Problem) -> (Selection, usize, usize) {
        let v = p.validate().unwrap();
        let s = select::select(p, &v, &H200).unwrap();
        (s, schedule_list_offset(p, &s), workspace_need(p, &s))
    }

    #[test]
    fn the_varlen_list_follows_the_kernels_own_scratch() {
        // A chunk beside decodes: 8 sequences, the longest 512 queries, unsplit: the list
        // alone, from offset 0.
        let mut p = Problem::new(DType::Bf16, 8, 512, 16384, 32, 8, 128, 128);
        p.causal = true;
        p.varlen = Some(Varlen {
            total_q: Some(519),
            seqused_k: true,
            ..Varlen::default()
        });
        p.num_splits = 1;
        let (s, at, bytes) = need(&p);
        assert!(s.varlen_schedule && s.num_splits == 1);
        assert_eq!((at, bytes), (0, 8 * (1 + s.schedule_units)));
        let rows: usize = 512 * if s.spec.pack_gqa { 4 } else { 1 };
        assert_eq!(
            s.schedule_units,
            8 * rows.div_ceil(s.spec.block_m() as usize)
        );
        // Split 3 ways: the partials first, the list after them, 256-byte aligned.
        p.num_splits = 3;
        let (s, at, bytes) = need(&p);
        assert!(s.varlen_schedule && s.num_splits == 3);
        let partials = split_workspace(&p, 3).0;
        assert_eq!(at, partials.next_multiple_of(256));
        assert_eq!(bytes, at + 8 * (1 + s.schedule_units));
        // The padded schedule: no list.
        p.varlen_schedule = Some(false);
        let (s, _, bytes) = need(&p);
        assert!(!s.varlen_schedule && s.schedule_units == 0);
        assert_eq!(bytes, partials);
    }
}
