//! Which of a split module's two combine kernels reduces a call's partials, and its grid.
//!
//! Every split module (fwd_portable.cu) carries `_combine`, one CTA per (query, head) row, and
//! `_combine_rows`, a group of lanes per row. A CTA per row puts 128 threads on each row's
//! splits at once: one memory round trip for up to 32 splits, the right shape for decode's few
//! rows. A prefill-sized split has thousands of rows and few splits; there the CTAs per row
//! queue in waves of `8 x SMs` and spend their time at barriers, while the rows kernel holds
//! four to sixteen rows per CTA and takes `ceil(splits / 4)` round trips (its loads in flight).

/// Which combine kernel reduces a split's partials ([`FlashAttention::set_combine_kernel`]).
///
/// [`FlashAttention::set_combine_kernel`]: super::FlashAttention::set_combine_kernel
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CombineKernel {
    /// By shape ([`choose`]): the rows kernel where its round trips are no more than the
    /// per-row kernel's waves.
    #[default]
    Auto,
    /// One CTA per (query, head) row (`_combine`).
    PerRow,
    /// A group of lanes per row (`_combine_rows`).
    Rows,
}

impl CombineKernel {
    pub(crate) fn to_u8(self) -> u8 {
        match self {
            CombineKernel::Auto => 0,
            CombineKernel::PerRow => 1,
            CombineKernel::Rows => 2,
        }
    }

    pub(crate) fn from_u8(v: u8) -> CombineKernel {
        match v {
            1 => CombineKernel::PerRow,
            2 => CombineKernel::Rows,
            _ => CombineKernel::Auto,
        }
    }
}

/// The element type [`FlashAttention::combine_raw`] writes its output in.
///
/// [`FlashAttention::combine_raw`]: super::FlashAttention::combine_raw
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CombineOutput {
    /// The problem's 16-bit dtype (bf16 or fp16).
    #[default]
    Problem,
    /// fp32: what FA4's `flash_attn_combine` writes by default (its `out_dtype` defaults to
    /// the partials' dtype, fp32). Either 16-bit module's combine kernel writes it, told by
    /// `FwdParams::out_fp32`: the problem's dtype picks the module tried first.
    F32,
}

/// The widest O row [`FlashAttention::combine_raw`] reduces: FA4's `flash_attn_combine` is
/// tested to 512 (MLA decode's dv).
///
/// [`FlashAttention::combine_raw`]: super::FlashAttention::combine_raw
pub const MAX_COMBINE_DV: usize = 512;

/// The column parts an O row of `dv` columns is reduced in and their width: the fewest equal
/// parts, a power of two (`FwdParams::o_parts_log2`: the kernels step over a partials' row with
/// a shift), whose width the portable kernel has a module for (a multiple of 8 up to 256). Rows
/// up to 256 columns are one part, wider ones two, a launch each: MLA's 512 as two of 256.
/// `None` past [`MAX_COMBINE_DV`], off the 8-column grid, or past 256 columns off the
/// 16-column one.
pub fn column_parts(dv: usize) -> Option<(usize, usize)> {
    if dv == 0 || dv > MAX_COMBINE_DV || !dv.is_multiple_of(8) {
        return None;
    }
    [1, 2]
        .into_iter()
        .filter(|&k| dv.is_multiple_of(k))
        .map(|k| (k, dv / k))
        .find(|&(_, width)| width.is_multiple_of(8) && width <= 256)
}

/// Threads of either combine kernel (`kCombineThreads`).
pub(crate) const THREADS: u32 = 128;
/// CTAs of the per-row kernel an SM holds at once: its 56 registers a thread (d 128, ptxas
/// for sm_90a) allocate 64, eight CTAs of 128 threads.
const CTAS_PER_SM: u64 = 8;
/// Splits whose O loads one lane of the rows kernel has in flight (`kRowBatch`).
const BATCH: u64 = 4;

/// Rows one CTA of `_combine_rows` reduces per step (`kRowsPerCta`): an O row of `dv / 4`
/// float4 chunks takes 32 lanes above 16 chunks, 16 above 8, else 8.
pub(crate) fn rows_per_cta(dv: usize) -> u32 {
    let chunks = dv / 4;
    let lanes = if chunks > 16 {
        32
    } else if chunks > 8 {
        16
    } else {
        8
    };
    THREADS / lanes
}

/// The kernel and grid for `rows` (query, head) rows of `batch` sequences (`rows` counts one
/// sequence's: `max_seqlen_q x heads`), `splits` partials each, on `sm_count` SMs.
pub(crate) fn choose(
    mode: CombineKernel,
    max_seqlen_q: usize,
    heads: usize,
    batch: usize,
    dv: usize,
    splits: u32,
    sm_count: u32,
) -> (CombineKernel, (u32, u32, u32)) {
    let all_rows = (max_seqlen_q * heads * batch) as u64;
    let waves = all_rows.div_ceil(CTAS_PER_SM * u64::from(sm_count.max(1)));
    let round_trips = u64::from(splits).div_ceil(BATCH);
    let kind = match mode {
        CombineKernel::Auto if round_trips <= waves => CombineKernel::Rows,
        CombineKernel::Auto => CombineKernel::PerRow,
        m => m,
    };
    let grid = match kind {
        CombineKernel::Rows => (
            ((max_seqlen_q * heads) as u64)
                .div_ceil(u64::from(rows_per_cta(dv)))
                .min(u64::from(u32::MAX)) as u32,
            1,
            batch as u32,
        ),
        _ => (max_seqlen_q as u32, heads as u32, batch as u32),
    };
    (kind, grid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_parts_are_the_fewest_that_a_module_serves() {
        assert_eq!(column_parts(8), Some((1, 8)));
        assert_eq!(column_parts(128), Some((1, 128)));
        assert_eq!(column_parts(256), Some((1, 256)));
        assert_eq!(column_parts(512), Some((2, 256)));
        assert_eq!(column_parts(320), Some((2, 160)));
        assert_eq!(column_parts(272), Some((2, 136)));
        // Past 256, halves must be whole 8-column groups: 264 = 2 x 132 is not.
        for dv in [0, 4, 100, 264, 296, 513, 520, 1024] {
            assert_eq!(column_parts(dv), None, "dv {dv}");
        }
        for dv in (8..=256)
            .step_by(8)
            .chain((272..=MAX_COMBINE_DV).step_by(16))
        {
            let (k, w) = column_parts(dv).unwrap();
            assert!(k * w == dv && w % 8 == 0 && w <= 256, "dv {dv}: {k} x {w}");
            assert_eq!(k, if dv <= 256 { 1 } else { 2 });
        }
    }

    #[test]
    fn rows_per_cta_follows_the_lanes_per_row() {
        // kRowLanes: d 64 (16 chunks) and d 48 (12) take half a warp, d 32 a quarter.
        assert_eq!(rows_per_cta(256), 4);
        assert_eq!(rows_per_cta(128), 4);
        assert_eq!(rows_per_cta(96), 4);
        assert_eq!(rows_per_cta(64), 8);
        assert_eq!(rows_per_cta(48), 8);
        assert_eq!(rows_per_cta(32), 16);
        assert_eq!(rows_per_cta(8), 16);
    }

    #[test]
    fn prefill_rows_take_the_rows_kernel_and_decode_with_many_splits_the_per_row_one() {
        let auto = CombineKernel::Auto;
        // Chunked prefill: Sq 128 x H 32, four splits: one round trip, many rows.
        let (k, grid) = choose(auto, 128, 32, 1, 128, 4, 132);
        assert_eq!(k, CombineKernel::Rows);
        assert_eq!(grid, (1024, 1, 1));
        // Decode, B 1 x H 32 with 64 splits: 16 round trips against one wave.
        assert_eq!(
            choose(auto, 1, 32, 1, 128, 64, 132),
            (CombineKernel::PerRow, (1, 32, 1))
        );
        // Decode with few splits: one round trip either way, the rows kernel has no barriers.
        assert_eq!(choose(auto, 1, 32, 8, 128, 4, 132).0, CombineKernel::Rows);
        assert_eq!(choose(auto, 1, 32, 8, 128, 5, 132).0, CombineKernel::PerRow);
        // 16 splits (4 round trips) need four waves' worth of rows (8 CTAs an SM).
        assert_eq!(
            choose(auto, 1, 32, 99, 128, 16, 132).0,
            CombineKernel::PerRow
        );
        assert_eq!(
            choose(auto, 1, 32, 100, 128, 16, 132).0,
            CombineKernel::Rows
        );
        // Forced either way.
        assert_eq!(
            choose(CombineKernel::PerRow, 128, 32, 1, 128, 4, 132).0,
            CombineKernel::PerRow
        );
        assert_eq!(
            choose(CombineKernel::Rows, 1, 32, 1, 64, 64, 132),
            (CombineKernel::Rows, (4, 1, 1))
        );
    }
}
