//! The C ABI of `include/fa4gen.h`. Every entry point catches panics (`catch_unwind`) and
//! turns every error into a status code plus a thread-local message; nothing unwinds across
//! the boundary and no pointer is dereferenced before it is checked for null.

use crate::runtime::{
    CombineKernel, CombineOutput, Error, FlashAttention, Paged, Problem, RawPtrs, Strides, Varlen,
};
use crate::spec::DType;
use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};

pub const ABI_VERSION: u32 = 2;
pub const WINDOW_NONE: i64 = i64::MIN;
/// `fa4gen_dtype`: FA4GEN_BF16, and FA4GEN_FP32, a dtype only `fa4gen_combine`'s output may have.
pub const FA4GEN_BF16: i32 = 0;
pub const FA4GEN_FP32: i32 = 2;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Ok = 0,
    InvalidArgument = 1,
    Unsupported = 2,
    KernelMissing = 3,
    Library = 4,
    Cuda = 5,
    NoDevice = 6,
    Internal = 99,
}

/// Mirrors `fa4gen_problem` in include/fa4gen.h.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CProblem {
    pub dtype: i32,
    pub batch: i64,
    pub seqlen_q: i64,
    pub seqlen_k: i64,
    pub heads: i64,
    pub heads_kv: i64,
    pub head_dim: i64,
    pub head_dim_v: i64,
    pub q_strides: [i64; 3],
    pub k_strides: [i64; 3],
    pub v_strides: [i64; 3],
    pub o_strides: [i64; 3],
    pub softmax_scale: f32,
    pub causal: i32,
    pub window_left: i64,
    pub window_right: i64,
    pub return_lse: i32,
    pub pack_gqa: i32,
    pub num_splits: i32,
    // ABI 2: serving features.
    pub softcap: f32,
    pub has_sinks: i32,
    pub total_q: i64,
    pub total_k: i64,
    pub has_seqused_q: i32,
    pub has_seqused_k: i32,
    pub page_size: i64,
    pub num_pages: i64,
    pub pages_per_seq: i64,
    pub page_table_stride: i64,
    /// FA4's `tile_mn` override (tuning); 0, 0: the family's tile table.
    pub tile_m: i32,
    pub tile_n: i32,
}

/// Mirrors `fa4gen_seq_ptrs`: the serving features' device arrays (NULL: absent).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CSeqPtrs {
    pub cu_seqlens_q: *const i32,
    pub cu_seqlens_k: *const i32,
    pub seqused_q: *const i32,
    pub seqused_k: *const i32,
    pub page_table: *const i32,
    pub sinks: *const f32,
}

pub struct Handle {
    fa: FlashAttention,
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_error(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    // (try_with: a call from a thread-local destructor, after this one is gone, must not
    // panic across the ABI; its message is then lost.)
    let _ = LAST_ERROR.try_with(|e| *e.borrow_mut() = c);
}

fn status_of(e: &Error) -> Status {
    match e {
        Error::Invalid { .. } => Status::InvalidArgument,
        Error::Unsupported(_) | Error::NotBuilt { .. } => Status::Unsupported,
        Error::KernelMissing { .. } => Status::KernelMissing,
        Error::Library { .. }
        | Error::Manifest(_)
        | Error::Cubin { .. }
        | Error::ArchMismatch { .. } => Status::Library,
        Error::Driver { .. } => Status::Cuda,
        Error::NoDriver | Error::UnsupportedDevice { .. } => Status::NoDevice,
    }
}

/// Run `f`, catching panics; map its error to a status and record the message.
fn guard(f: impl FnOnce() -> Result<(), Error>) -> Status {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => {
            set_error("");
            Status::Ok
        }
        Ok(Err(e)) => {
            set_error(&e.to_string());
            status_of(&e)
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            set_error(&format!("internal error (please report): {what}"));
            Status::Internal
        }
    }
}

fn invalid(field: &'static str, value: impl std::fmt::Display, expected: &str) -> Error {
    Error::Invalid {
        field,
        value: value.to_string(),
        expected: expected.to_string(),
    }
}

fn nonneg(field: &'static str, v: i64) -> Result<usize, Error> {
    usize::try_from(v).map_err(|_| invalid(field, v, "a non-negative value"))
}

/// Convert the C problem to a `Problem` (range checks here; the rest in `Problem::validate`).
pub fn to_problem(c: &CProblem) -> Result<Problem, Error> {
    let dtype = match c.dtype {
        FA4GEN_BF16 => DType::Bf16,
        1 => DType::Fp16,
        d => {
            return Err(invalid(
                "dtype",
                d,
                "FA4GEN_BF16 (0) or FA4GEN_FP16 (1); FA4GEN_FP32 (2) only as fa4gen_combine's output",
            ));
        }
    };
    // Stride values are checked by Problem::validate, which names the tensor.
    let strides = |s: [i64; 3]| Strides {
        batch: s[0],
        row: s[1],
        head: s[2],
    };
    let bool_field = |field: &'static str, v: i32| match v {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(invalid(field, v, "0 or 1")),
    };
    let window = |w: i64| (w != WINDOW_NONE).then_some(w);
    let total = |field: &'static str, v: i64| -> Result<Option<usize>, Error> {
        if v == -1 {
            Ok(None)
        } else {
            nonneg(field, v).map(Some)
        }
    };
    let total_q = total("total_q", c.total_q)?;
    let total_k = total("total_k", c.total_k)?;
    let has_seqused_q = bool_field("has_seqused_q", c.has_seqused_q)?;
    let has_seqused_k = bool_field("has_seqused_k", c.has_seqused_k)?;
    let varlen = Varlen {
        total_q,
        total_k,
        seqused_q: has_seqused_q,
        seqused_k: has_seqused_k,
    };
    let paged = if c.page_size == 0 {
        None
    } else {
        Some(Paged {
            page_size: nonneg("page_size", c.page_size)?,
            num_pages: nonneg("num_pages", c.num_pages)?,
            pages_per_seq: nonneg("pages_per_seq", c.pages_per_seq)?,
            page_table_stride: if c.page_table_stride <= 0 {
                nonneg("pages_per_seq", c.pages_per_seq)?
            } else {
                nonneg("page_table_stride", c.page_table_stride)?
            },
        })
    };
    let p = Problem {
        dtype,
        batch: nonneg("batch", c.batch)?,
        seqlen_q: nonneg("seqlen_q", c.seqlen_q)?,
        seqlen_k: nonneg("seqlen_k", c.seqlen_k)?,
        heads: nonneg("heads", c.heads)?,
        heads_kv: nonneg("heads_kv", c.heads_kv)?,
        head_dim: nonneg("head_dim", c.head_dim)?,
        head_dim_v: nonneg("head_dim_v", c.head_dim_v)?,
        softmax_scale: (c.softmax_scale > 0.0 || c.softmax_scale.is_nan())
            .then_some(c.softmax_scale),
        causal: bool_field("causal", c.causal)?,
        window: (window(c.window_left), window(c.window_right)),
        return_lse: bool_field("return_lse", c.return_lse)?,
        pack_gqa: match c.pack_gqa {
            -1 => None,
            0 => Some(false),
            1 => Some(true),
            v => return Err(invalid("pack_gqa", v, "-1 (default), 0 or 1")),
        },
        cta_pairs: None,
        fill_tile: None,
        split_tail: None,
        m_major_runs: None,
        lpt_rounds: None,
        varlen_schedule: None,
        sequence_splits: None,
        tile_mn: match (c.tile_m, c.tile_n) {
            (0, 0) => None,
            (m, n) if m > 0 && n > 0 => Some((m as u32, n as u32)),
            (m, n) => {
                return Err(invalid(
                    "tile_m/tile_n",
                    format!("{m}x{n}"),
                    "0, 0 (the tile table) or both > 0",
                ));
            }
        },
        q_strides: strides(c.q_strides),
        k_strides: strides(c.k_strides),
        v_strides: strides(c.v_strides),
        o_strides: strides(c.o_strides),
        softcap: c.softcap,
        sinks: bool_field("has_sinks", c.has_sinks)?,
        num_splits: c.num_splits,
        varlen: (varlen != Varlen::default()).then_some(varlen),
        paged,
    };
    Ok(p)
}

fn problem_ref<'a>(p: *const CProblem) -> Result<&'a CProblem, Error> {
    // SAFETY: checked non-null; the caller promises it points at a fa4gen_problem.
    unsafe { p.as_ref() }
        .ok_or_else(|| invalid("problem", "NULL", "a pointer to an fa4gen_problem"))
}

fn handle_ref<'a>(h: *const Handle) -> Result<&'a Handle, Error> {
    // SAFETY: checked non-null; the caller promises it came from fa4gen_open and is not closed.
    unsafe { h.as_ref() }.ok_or_else(|| invalid("handle", "NULL", "a handle from fa4gen_open"))
}

#[unsafe(no_mangle)]
pub extern "C" fn fa4gen_abi_version() -> u32 {
    ABI_VERSION
}

#[unsafe(no_mangle)]
pub extern "C" fn fa4gen_last_error() -> *const c_char {
    LAST_ERROR
        .try_with(|e| e.borrow().as_ptr())
        .unwrap_or(c"".as_ptr())
}

/// # Safety
/// `p` must be null or point at writable memory for an `fa4gen_problem`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn fa4gen_problem_init(
    p: *mut CProblem,
    dtype: i32,
    batch: i64,
    seqlen_q: i64,
    seqlen_k: i64,
    heads: i64,
    heads_kv: i64,
    head_dim: i64,
    head_dim_v: i64,
) {
    // SAFETY: null is ignored; otherwise the caller provides a writable fa4gen_problem.
    let Some(p) = (unsafe { p.as_mut() }) else {
        return;
    };
    // (Saturating: validation refuses such strides' extents; a product must not wrap or panic.)
    let contiguous = |s: i64, h: i64, d: i64| {
        [
            s.saturating_mul(h).saturating_mul(d),
            h.saturating_mul(d),
            d,
        ]
    };
    *p = CProblem {
        dtype,
        batch,
        seqlen_q,
        seqlen_k,
        heads,
        heads_kv,
        head_dim,
        head_dim_v,
        q_strides: contiguous(seqlen_q, heads, head_dim),
        k_strides: contiguous(seqlen_k, heads_kv, head_dim),
        v_strides: contiguous(seqlen_k, heads_kv, head_dim_v),
        o_strides: contiguous(seqlen_q, heads, head_dim_v),
        softmax_scale: 0.0,
        causal: 0,
        window_left: WINDOW_NONE,
        window_right: WINDOW_NONE,
        return_lse: 0,
        pack_gqa: -1,
        num_splits: 1,
        softcap: 0.0,
        has_sinks: 0,
        total_q: -1,
        total_k: -1,
        has_seqused_q: 0,
        has_seqused_k: 0,
        page_size: 0,
        num_pages: 0,
        pages_per_seq: 0,
        page_table_stride: 0,
        tile_m: 0,
        tile_n: 0,
    };
}

/// # Safety
/// `root` must be null or a NUL-terminated string; `out` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fa4gen_open(
    root: *const c_char,
    device: i32,
    out: *mut *mut Handle,
) -> Status {
    guard(|| {
        if out.is_null() {
            return Err(invalid("out", "NULL", "a pointer to receive the handle"));
        }
        if root.is_null() {
            return Err(invalid(
                "kernels_root",
                "NULL",
                "a path to generated/ (one folder per arch)",
            ));
        }
        // SAFETY: non-null, NUL-terminated per the contract.
        let root = unsafe { CStr::from_ptr(root) }
            .to_str()
            .map_err(|_| invalid("kernels_root", "non-UTF-8 bytes", "a UTF-8 path"))?;
        let ordinal = usize::try_from(device)
            .map_err(|_| invalid("device", device, "a device ordinal >= 0"))?;
        let ctx = crate::runtime::context(ordinal)?;
        let fa = FlashAttention::from_root(ctx, root)?;
        let h = Box::into_raw(Box::new(Handle { fa }));
        // SAFETY: out is non-null and writable per the contract.
        unsafe { *out = h };
        Ok(())
    })
}

/// Launch short forwards (`Selection::programmatic`) as programmatic dependents of the kernel
/// before them (non-zero, the default), or every forward in plain stream order (0):
/// `FlashAttention::set_programmatic_launch`.
///
/// # Safety
/// `h` null or an open handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fa4gen_set_programmatic_launch(h: *const Handle, on: i32) -> Status {
    guard(|| {
        handle_ref(h)?.fa.set_programmatic_launch(on != 0);
        Ok(())
    })
}

/// Deal varlen batches of more than one sequence by the device's list of their units, heaviest
/// first (non-zero, the default), or by the padded schedule (0): `FlashAttention::
/// set_varlen_schedule`.
///
/// # Safety
/// `h` null or an open handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fa4gen_set_varlen_schedule(h: *const Handle, on: i32) -> Status {
    guard(|| {
        handle_ref(h)?.fa.set_varlen_schedule(on != 0);
        Ok(())
    })
}

/// Give each sequence of a split varlen batch its own split count, `shares` waves of CTA
/// slots' worth of (sequence, split) units dealt by the sequences' K blocks (the default 4;
/// mixed decode batches), or FA4's one count for every sequence (0):
/// `FlashAttention::set_sequence_splits`.
///
/// # Safety
/// `h` null or an open handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fa4gen_set_sequence_splits(h: *const Handle, shares: i32) -> Status {
    guard(|| {
        let fa = &handle_ref(h)?.fa;
        let shares = u32::try_from(shares)
            .map_err(|_| Error::invalid("shares", shares, "0 (off) or a positive count"))?;
        fa.set_sequence_splits(shares);
        Ok(())
    })
}

/// Which kernel reduces split-KV partials: 0 by shape (the default), 1 one CTA per (query,
/// head) row, 2 a group of lanes per row: `FlashAttention::set_combine_kernel`.
///
/// # Safety
/// `h` null or an open handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fa4gen_set_combine_kernel(h: *const Handle, kernel: i32) -> Status {
    guard(|| {
        let k = match kernel {
            0 => CombineKernel::Auto,
            1 => CombineKernel::PerRow,
            2 => CombineKernel::Rows,
            other => {
                return Err(Error::invalid(
                    "kernel",
                    other,
                    "0 (by shape), 1 (per row) or 2 (rows)",
                ));
            }
        };
        handle_ref(h)?.fa.set_combine_kernel(k);
        Ok(())
    })
}

/// # Safety
/// `h` null or an open handle not used concurrently by another thread during this call;
/// `cache_dir` null or a NUL-terminated path.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fa4gen_enable_jit(h: *mut Handle, cache_dir: *const c_char) -> Status {
    guard(|| {
        // SAFETY: checked non-null; exclusive per the contract.
        let h = unsafe { h.as_mut() }
            .ok_or_else(|| invalid("handle", "NULL", "a handle from fa4gen_open"))?;
        let dir = if cache_dir.is_null() {
            None
        } else {
            // SAFETY: non-null, NUL-terminated per the contract.
            Some(
                unsafe { CStr::from_ptr(cache_dir) }
                    .to_str()
                    .map_err(|_| invalid("cache_dir", "non-UTF-8 bytes", "a UTF-8 path"))?
                    .to_string(),
            )
        };
        #[cfg(feature = "jit")]
        {
            use crate::runtime::jit::Jit;
            h.fa.set_jit(Jit::new(dir.map_or_else(Jit::default_dir, Into::into)));
            Ok(())
        }
        #[cfg(not(feature = "jit"))]
        {
            let _ = (h, dir);
            Err(Error::NotBuilt {
                feature: "jit (this libfa4gen was built without the `jit` cargo feature)",
                issue: 3,
            })
        }
    })
}

/// # Safety
/// `h` must be null or a handle from `fa4gen_open` not yet closed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fa4gen_close(h: *mut Handle) {
    if !h.is_null() {
        let _ = catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: created by Box::into_raw in fa4gen_open; closed once per the contract.
            drop(unsafe { Box::from_raw(h) });
        }));
    }
}

/// # Safety
/// `h` and `p` must be null or valid (see the header).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fa4gen_supports(h: *const Handle, p: *const CProblem) -> Status {
    guard(|| {
        let h = handle_ref(h)?;
        let problem = to_problem(problem_ref(p)?)?;
        let (_, sel) = h.fa.plan(&problem)?;
        // In the library, or compilable once fa4gen_enable_jit was called.
        if !h.fa.can_load(&sel.spec) {
            return Err(Error::KernelMissing {
                stem: sel.spec.stem(),
                dir: h.fa.library().dir().display().to_string(),
            });
        }
        Ok(())
    })
}

/// # Safety
/// `h`, `p` must be null or valid; `buf` null or writable for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fa4gen_kernel_name(
    h: *const Handle,
    p: *const CProblem,
    buf: *mut c_char,
    len: u64,
) -> Status {
    guard(|| {
        let h = handle_ref(h)?;
        let problem = to_problem(problem_ref(p)?)?;
        if buf.is_null() || len == 0 {
            return Err(invalid(
                "buf",
                "NULL or empty",
                "a buffer of at least 1 byte",
            ));
        }
        let (_, sel) = h.fa.plan(&problem)?;
        let stem = sel.spec.stem();
        let n = stem.len().min(len as usize - 1);
        // SAFETY: buf holds len bytes; we write n + 1 <= len.
        unsafe {
            std::ptr::copy_nonoverlapping(stem.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
        }
        Ok(())
    })
}

/// # Safety
/// See `fa4gen_forward` in include/fa4gen.h: device pointers of the handle's device holding
/// the problem's extents, live until the stream's work completes.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn fa4gen_forward(
    h: *mut Handle,
    p: *const CProblem,
    q: *const c_void,
    k: *const c_void,
    v: *const c_void,
    out: *mut c_void,
    lse: *mut f32,
    stream: *mut c_void,
) -> Status {
    // SAFETY: same contract, no feature arrays and the handle's workspace.
    unsafe {
        fa4gen_forward_ext(
            h,
            p,
            q,
            k,
            v,
            out,
            lse,
            std::ptr::null(),
            std::ptr::null_mut(),
            0,
            stream,
        )
    }
}

/// # Safety
/// As `fa4gen_forward`; `extra` null or a valid `fa4gen_seq_ptrs`; `workspace` null or device
/// memory of `workspace_bytes` bytes not used concurrently by another call.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn fa4gen_forward_ext(
    h: *mut Handle,
    p: *const CProblem,
    q: *const c_void,
    k: *const c_void,
    v: *const c_void,
    out: *mut c_void,
    lse: *mut f32,
    extra: *const CSeqPtrs,
    workspace: *mut c_void,
    workspace_bytes: u64,
    stream: *mut c_void,
) -> Status {
    guard(|| {
        let h = handle_ref(h)?;
        let problem = to_problem(problem_ref(p)?)?;
        // SAFETY: checked non-null; the caller promises a valid fa4gen_seq_ptrs.
        let e = unsafe { extra.as_ref() };
        let ptrs = RawPtrs {
            q: q as u64,
            k: k as u64,
            v: v as u64,
            o: out as u64,
            lse: lse as u64,
            cu_seqlens_q: e.map_or(0, |e| e.cu_seqlens_q as u64),
            cu_seqlens_k: e.map_or(0, |e| e.cu_seqlens_k as u64),
            seqused_q: e.map_or(0, |e| e.seqused_q as u64),
            seqused_k: e.map_or(0, |e| e.seqused_k as u64),
            page_table: e.map_or(0, |e| e.page_table as u64),
            sinks: e.map_or(0, |e| e.sinks as u64),
            workspace: workspace as u64,
            workspace_bytes: workspace_bytes as usize,
        };
        // SAFETY: per the contract; forward_raw checks nulls and alignment before launching.
        unsafe {
            h.fa.forward_raw(stream as cudarc::driver::sys::CUstream, &problem, ptrs)
        }
    })
}

/// FA4's `flash_attn_combine` on raw pointers: `FlashAttention::combine_raw`.
///
/// # Safety
/// `h`, `p` null or valid; `extra` null or a valid `fa4gen_seq_ptrs`; `o_partial`,
/// `lse_partial`, `out`, `lse` device pointers of the handle's device at the layouts the
/// header gives, live until the stream's work completes.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn fa4gen_combine(
    h: *const Handle,
    p: *const CProblem,
    num_splits: u32,
    o_partial: *const f32,
    lse_partial: *const f32,
    out: *mut c_void,
    lse: *mut f32,
    extra: *const CSeqPtrs,
    stream: *mut c_void,
) -> Status {
    guard(|| {
        let h = handle_ref(h)?;
        // FA4GEN_FP32: fp32 output. A combine's dtype is only its output's (its loads are fp32
        // partials): the bf16 module's kernel (else the fp16 one's) writes fp32.
        let mut c = *problem_ref(p)?;
        let output = if c.dtype == FA4GEN_FP32 {
            c.dtype = FA4GEN_BF16;
            CombineOutput::F32
        } else {
            CombineOutput::Problem
        };
        let problem = to_problem(&c)?;
        // SAFETY: checked non-null; the caller promises a valid fa4gen_seq_ptrs.
        let e = unsafe { extra.as_ref() };
        // Only the rows' arrays and the sinks: the combine reads no K side.
        let ptrs = RawPtrs {
            q: 0,
            k: 0,
            v: 0,
            o: out as u64,
            lse: lse as u64,
            cu_seqlens_q: e.map_or(0, |e| e.cu_seqlens_q as u64),
            cu_seqlens_k: 0,
            seqused_q: e.map_or(0, |e| e.seqused_q as u64),
            seqused_k: 0,
            page_table: 0,
            sinks: e.map_or(0, |e| e.sinks as u64),
            workspace: 0,
            workspace_bytes: 0,
        };
        // SAFETY: per the contract; combine_raw checks nulls and alignment before launching.
        unsafe {
            h.fa.combine_raw(
                stream as cudarc::driver::sys::CUstream,
                &problem,
                num_splits,
                o_partial as u64,
                lse_partial as u64,
                ptrs,
                output,
            )
        }
    })
}

/// # Safety
/// `h`, `p` null or valid; `out` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fa4gen_workspace_bytes(
    h: *const Handle,
    p: *const CProblem,
    out: *mut u64,
) -> Status {
    guard(|| {
        let h = handle_ref(h)?;
        let problem = to_problem(problem_ref(p)?)?;
        if out.is_null() {
            return Err(invalid("out", "NULL", "a pointer to receive the size"));
        }
        let n = h.fa.workspace_bytes(&problem)? as u64;
        // SAFETY: non-null and writable per the contract.
        unsafe { *out = n };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn init() -> CProblem {
        let mut p = std::mem::MaybeUninit::<CProblem>::uninit();
        // SAFETY: writes a whole CProblem.
        unsafe {
            fa4gen_problem_init(p.as_mut_ptr(), 0, 2, 100, 200, 8, 2, 128, 128);
            p.assume_init()
        }
    }

    fn last_error() -> String {
        // SAFETY: a valid NUL-terminated thread-local string.
        unsafe { CStr::from_ptr(fa4gen_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn problem_init_is_contiguous_and_valid() {
        let c = init();
        let p = to_problem(&c).unwrap();
        assert_eq!(p, Problem::new(DType::Bf16, 2, 100, 200, 8, 2, 128, 128));
        p.validate().unwrap();
    }

    #[test]
    fn bad_fields_are_named() {
        type Mutation = fn(&mut CProblem);
        let cases: Vec<(Mutation, &str)> = vec![
            (|p| p.dtype = 7, "dtype"),
            (|p| p.dtype = FA4GEN_FP32, "dtype"), // a combine's output only
            (|p| p.batch = -1, "batch"),
            (|p| p.causal = 2, "causal"),
            (|p| p.return_lse = -1, "return_lse"),
            (|p| p.pack_gqa = 5, "pack_gqa"),
            (|p| p.head_dim = -8, "head_dim"),
            (|p| p.has_sinks = 3, "has_sinks"),
            (|p| p.has_seqused_k = -1, "has_seqused_k"),
            (|p| p.total_k = i64::MIN + 1, "total_k"),
            (
                |p| {
                    p.page_size = -16;
                },
                "page_size",
            ),
        ];
        for (mutate, field) in cases {
            let mut c = init();
            mutate(&mut c);
            match to_problem(&c) {
                Err(Error::Invalid { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}: {other:?}"),
            }
        }
        let mut c = init();
        c.num_splits = 3;
        c.total_q = 200;
        c.page_size = 16;
        c.num_pages = 10;
        c.pages_per_seq = 13;
        let p = to_problem(&c).unwrap();
        assert_eq!(p.num_splits, 3);
        assert_eq!(p.varlen.and_then(|v| v.total_q), Some(200));
        assert_eq!(p.paged.map(|pg| pg.page_table_stride), Some(13));
    }

    #[test]
    fn null_pointers_give_status_and_message() {
        let c = init();
        // SAFETY: exercising the null checks.
        unsafe {
            assert_eq!(
                fa4gen_supports(std::ptr::null(), &c),
                Status::InvalidArgument
            );
            assert!(last_error().contains("handle"), "{}", last_error());
            let mut h = std::ptr::null_mut();
            assert_eq!(
                fa4gen_open(std::ptr::null(), 0, &mut h),
                Status::InvalidArgument
            );
            assert!(last_error().contains("kernels_root"));
            assert_eq!(
                fa4gen_open(c"generated".as_ptr(), 0, std::ptr::null_mut()),
                Status::InvalidArgument
            );
            assert_eq!(
                fa4gen_open(c"generated".as_ptr(), -1, &mut h),
                Status::InvalidArgument
            );
            assert_eq!(
                fa4gen_forward(
                    std::ptr::null_mut(),
                    &c,
                    std::ptr::null(),
                    std::ptr::null(),
                    std::ptr::null(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut()
                ),
                Status::InvalidArgument
            );
            assert_eq!(
                fa4gen_set_programmatic_launch(std::ptr::null(), 0),
                Status::InvalidArgument
            );
            assert_eq!(
                fa4gen_set_varlen_schedule(std::ptr::null(), 0),
                Status::InvalidArgument
            );
            assert_eq!(
                fa4gen_set_sequence_splits(std::ptr::null(), 2),
                Status::InvalidArgument
            );
            assert_eq!(
                fa4gen_set_combine_kernel(std::ptr::null(), 0),
                Status::InvalidArgument
            );
            assert!(last_error().contains("handle"), "{}", last_error());
            assert_eq!(
                fa4gen_combine(
                    std::ptr::null(),
                    &c,
                    2,
                    std::ptr::null(),
                    std::ptr::null(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    std::ptr::null(),
                    std::ptr::null_mut()
                ),
                Status::InvalidArgument
            );
            assert!(last_error().contains("handle"), "{}", last_error());
            fa4gen_close(std::ptr::null_mut());
            fa4gen_problem_init(std::ptr::null_mut(), 0, 1, 1, 1, 1, 1, 8, 8);
        }
        assert_eq!(fa4gen_abi_version(), 2);
    }

    #[test]
    fn panics_do_not_cross() {
        assert_eq!(guard(|| panic!("boom")), Status::Internal);
        assert!(last_error().contains("boom"));
        assert_eq!(guard(|| Ok(())), Status::Ok);
        assert_eq!(last_error(), "");
    }
}
