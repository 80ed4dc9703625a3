//! `FwdParams`: the forward kernels' single by-value argument, the Rust twin of
//! `templates/include/fa4gen/fwd_params.cuh`. Every generated kernel `static_assert`s
//! `size_of::<FwdParams>()` and two field offsets rendered from this definition, so a change on
//! one side without the other fails to compile instead of misreading arguments.

/// Device pointers are `u64` (`CUdeviceptr`); strides are in elements.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FwdParams {
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub o: u64,
    pub lse: u64,

    pub q_batch_stride: i64,
    pub q_row_stride: i64,
    pub q_head_stride: i64,
    pub k_batch_stride: i64,
    pub k_row_stride: i64,
    pub k_head_stride: i64,
    pub v_batch_stride: i64,
    pub v_row_stride: i64,
    pub v_head_stride: i64,
    pub o_batch_stride: i64,
    pub o_row_stride: i64,
    pub o_head_stride: i64,
    pub lse_batch_stride: i64,
    pub lse_head_stride: i64,

    pub batch: i32,
    pub seqlen_q: i32,
    pub seqlen_k: i32,
    pub heads: i32,
    pub heads_kv: i32,
    pub group: i32,
    pub window_left: i32,
    pub window_right: i32,
    pub scale_log2: f32,
}

// SAFETY: plain old data with a C layout; the kernel reads it as `fa4::FwdParams`.
unsafe impl cudarc::driver::DeviceRepr for FwdParams {}

/// (size, offset of `group`, offset of `scale_log2`): what the templates assert against.
pub const fn layout() -> (usize, usize, usize) {
    (
        std::mem::size_of::<FwdParams>(),
        std::mem::offset_of!(FwdParams, group),
        std::mem::offset_of!(FwdParams, scale_log2),
    )
}
