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

    // Serving features (null / unused unless the kernel's flag is compiled in).
    /// varlen: `int32 (B+1)` row offsets of each sequence in a packed `(total, H, D)` q / k.
    pub cu_seqlens_q: u64,
    pub cu_seqlens_k: u64,
    /// varlen (and paged for k): `int32 (B)` valid lengths per sequence.
    pub seqused_q: u64,
    pub seqused_k: u64,
    /// paged: `int32 (B, max_pages)` page indices; k/v then are `(pages, page_size, Hkv, D)`.
    pub page_table: u64,
    /// sink: `fp32 (H)` per-head logits.
    pub sinks: u64,
    /// split: fp32 partial O `(splits, rows, H, Dv)` and LSE `(splits, <LSE layout>)`.
    pub o_partial: u64,
    pub lse_partial: u64,
    /// split tail (`KernelSpec::wgmma_split_tail`): `int32` arrival counters, one per
    /// (tail tile, consumer warpgroup), zero at launch; `o_partial` then holds the parts.
    pub tail_counters: u64,
    /// The wgmma kernel's causal runs (`KernelSpec::wgmma_q_run` > 0): `int32 (units)`, the
    /// schedule unit (tile, or a pair's two) the snake's i-th place takes, head-major order
    /// (`Selection::lpt_rounds`, `schedule::lpt_order`); 0: the snake takes unit i.
    pub unit_order: u64,

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
    pub page_table_batch_stride: i64,
    /// Elements between splits of `o_partial` / `lse_partial`.
    pub o_partial_split_stride: i64,
    pub lse_partial_split_stride: i64,

    pub batch: i32,
    pub seqlen_q: i32,
    pub seqlen_k: i32,
    pub heads: i32,
    pub heads_kv: i32,
    pub group: i32,
    pub window_left: i32,
    pub window_right: i32,
    pub page_size: i32,
    pub num_splits: i32,
    /// split tail (`tail_units > 0`, `KernelSpec::wgmma_split_tail`): the round from which the
    /// persistent schedule deals equal shares of K blocks, the schedule units it deals so, and
    /// each tile's K blocks.
    pub tail_round: i32,
    pub tail_units: i32,
    pub tail_blocks: i32,
    /// The exp2-domain multiplier of a raw score: `scale * log2(e)`, or `softcap * log2(e)`
    /// with softcap (the score is then `tanh(qk * softcap_scale)`).
    pub scale_log2: f32,
    /// softcap: `scale / softcap`.
    pub softcap_scale: f32,
    /// The wgmma kernel's causal runs (`KernelSpec::wgmma_q_run` > 0) dealt Q-block-major
    /// (1: a run's schedule units heaviest first, the (head, batch) pairs fastest) rather than
    /// head-major (0: each (head, batch)'s blocks of the run together); `Selection::m_major_runs`.
    pub m_major_runs: i32,
    /// The portable split kernel and its combines: with `split_units` > 0, each sequence of
    /// the batch takes its own split count from the batch's lengths and the CTA slots
    /// (`split_slots`), at most `num_splits`, and the grid's z axis is `split_units`
    /// (sequence, split) units, at least the batch (`sequence_splits.cuh`,
    /// `Selection::sequence_splits`); 0: every sequence `num_splits`, z = batch x num_splits.
    pub split_slots: i32,
    pub split_units: i32,
    /// The combines (`_combine`, `_combine_rows`): 1 where `o` is fp32, as FA4's
    /// `flash_attn_combine` writes by default (its `out_dtype`, the partials' dtype); 0: the
    /// module's 16-bit dtype. Forward kernels never read it.
    pub out_fp32: i32,
    /// The combines: each O row is reduced as 2^this column parts of the module's dv
    /// (`combine_raw` past the portable kernel's 256 columns, e.g. MLA's dv 512 as two parts
    /// of 256; the rows kernel's grid y counts the parts); 0: one. Forward kernels never read it.
    pub o_parts_log2: i32,
}

// SAFETY: plain old data with a C layout; the kernel reads it as `fa4::FwdParams`.
unsafe impl cudarc::driver::DeviceRepr for FwdParams {}

/// What the templates assert `FwdParams` against (`FwdParamsMatch` in fwd_params.cuh).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub size: usize,
    /// Offsets of `group`, `scale_log2` and the last field, `o_parts_log2` (the size alone
    /// misses a field added in the struct's tail padding).
    pub group: usize,
    pub scale_log2: usize,
    pub last: usize,
}

pub const fn layout() -> Layout {
    Layout {
        size: std::mem::size_of::<FwdParams>(),
        group: std::mem::offset_of!(FwdParams, group),
        scale_log2: std::mem::offset_of!(FwdParams, scale_log2),
        last: std::mem::offset_of!(FwdParams, o_parts_log2),
    }
}
