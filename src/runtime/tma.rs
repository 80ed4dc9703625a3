//! TMA tensor maps for the wgmma kernel: one `CUtensorMap` per operand, encoded on the host
//! for each call (they hold the tensor's address) and passed by value as the kernel's second
//! `__grid_constant__` parameter (`TmaMaps` in `templates/fwd_sm90.cu`, same order).
//!
//! Every map is 4-d `(dim, row, head, batch)`, innermost first, with 128-byte swizzling (the
//! layout the wgmma descriptors read) and a box of 64 columns: one 128-byte row per tile row —
//! except paged K/V in 8-row groups (`kv_in_row_groups`), 5-d `(64 columns, 8 rows, 64-column
//! block, row group, head)`: a box of a page's rows then spans every column, landing in shared
//! memory as groups of 8 rows × all 64-column blocks, and pages are row groups
//! `page * groups_per_page + row / 8` of one dimension (the page stride a whole number of
//! 8-row strides, `paged_row_groups`).
//! Reads outside the tensor are zero-filled and writes outside it dropped by the hardware, so
//! ragged ends of dense tensors and head dims need no code. Packed (varlen) tensors are one
//! batch of all rows and paged K/V a batch of pages; there the kernel handles sequence ends
//! (masks, V's tail rows zeroed, ragged O tiles stored without TMA).

use super::error::{DriverCall, Error};
use super::problem::{Problem, Strides};
use crate::spec::{DType, KernelSpec, kv_in_row_groups};
use cudarc::driver::sys;

/// The kernel's `TmaMaps`: Q (box tile_m rows), K and V (tile_n rows; paged: gcd(page_size,
/// tile_n)), O (64 rows: one consumer warpgroup's store).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct TmaMaps {
    pub q: sys::CUtensorMap,
    pub k: sys::CUtensorMap,
    pub v: sys::CUtensorMap,
    pub o: sys::CUtensorMap,
}

// SAFETY: plain old data (four opaque 128-byte descriptors), read by the kernel as `TmaMaps`.
unsafe impl cudarc::driver::DeviceRepr for TmaMaps {}

/// Whether TMA can describe a tensor with these strides: every stride of a dimension longer
/// than 1 must be a positive multiple of 16 bytes below 2^40 (validation already requires
/// multiples of 8 elements; zero strides, i.e. broadcasts, are the case left).
pub fn strides_fit(s: &Strides, rows: usize, heads: usize, batch: usize) -> bool {
    [(s.row, rows), (s.head, heads), (s.batch, batch)]
        .iter()
        .all(|&(stride, n)| {
            n <= 1 || (stride > 0 && stride.checked_mul(2).is_some_and(|b| b < (1i64 << 40)))
        })
}

/// Whether every operand of a problem can be described by a tensor map (a map has no empty
/// dimension: a ragged batch whose sequences hold no key at all has none for K/V).
pub fn problem_fits(p: &Problem) -> bool {
    let [(qb, qs), (kb, ks)] = p.batches_and_rows();
    let groups_fit = match p.paged {
        Some(pg) if kv_in_row_groups(true, p.head_dim as u32, p.head_dim_v as u32) => {
            paged_row_groups(&p.k_strides, pg.page_size, pg.num_pages).is_some()
                && paged_row_groups(&p.v_strides, pg.page_size, pg.num_pages).is_some()
        }
        _ => true,
    };
    [qb, qs, kb, ks].iter().all(|&n| n > 0)
        && groups_fit
        && strides_fit(&p.q_strides, qs, p.heads, qb)
        && strides_fit(&p.k_strides, ks, p.heads_kv, kb)
        && strides_fit(&p.v_strides, ks, p.heads_kv, kb)
        && strides_fit(&p.o_strides, qs, p.heads, qb)
}

/// Paged K or V as 8-row groups: (groups per page stride, groups in the tensor), where the
/// page stride is a whole number of 8-row strides (contiguous pages of a multiple of 8 keys,
/// or pages interleaved with another tensor's, as in a (pages, 2, page_size, Hkv, D) cache)
/// and the group index fits the kernel's 32-bit TMA coordinate. The kernel derives the same
/// groups per page from the strides in `FwdParams`.
pub fn paged_row_groups(s: &Strides, page_size: usize, num_pages: usize) -> Option<(i64, i64)> {
    let group = s.row.checked_mul(8)?;
    if num_pages == 0
        || s.row <= 0
        || s.batch <= 0
        || s.batch % group != 0
        || !page_size.is_multiple_of(8)
    {
        return None;
    }
    let per_page = s.batch / group;
    let total = per_page
        .checked_mul(num_pages as i64 - 1)?
        .checked_add(page_size as i64 / 8)?;
    (total <= i32::MAX as i64).then_some((per_page, total))
}

/// Rows of a paged K/V box: `gcd(page_size, tile_n)`, so that every box of a block lies in one
/// page (the kernel computes the same).
pub fn page_box_rows(page_size: usize, tile_n: u32) -> usize {
    let (mut a, mut b) = (page_size, tile_n as usize);
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Whether K/V pages of `page_size` keys tile a `tile_n`-key block with TMA boxes: boxes of
/// `page_box_rows` rows, a multiple of 8 (whole 1024-byte swizzle atoms), at most 32 a block
/// (one per lane of the producer warp).
pub fn page_fits(page_size: usize, tile_n: u32) -> bool {
    let rows = page_box_rows(page_size, tile_n);
    page_size > 0 && rows.is_multiple_of(8) && tile_n as usize / rows <= 32
}

/// Whether every `tile_n`-key block lies inside one page: one box per 64 columns, as dense.
pub fn pages_hold_blocks(page_size: usize, tile_n: u32) -> bool {
    page_size > 0 && page_size.is_multiple_of(tile_n as usize)
}

/// A 4-d map of Q, K, V or O: `(dim, row, head, batch)` with a box of `box_rows` rows of one
/// head; or, with packed GQA rows (`group` = G), `(dim, head, row, batch)` with a box of the
/// G heads of a KV head times `box_rows / G` queries, landing in shared memory as rows (query,
/// head in group), group fastest: the kernel's packed row order.
#[allow(clippy::too_many_arguments)]
fn encode(
    dtype: DType,
    ptr: u64,
    dim: usize,
    rows: usize,
    heads: usize,
    batch: usize,
    s: &Strides,
    box_rows: u32,
    group: Option<usize>,
) -> Result<sys::CUtensorMap, Error> {
    let (dims, strides, boxes) = map_layout(dtype, dim, rows, heads, batch, s, box_rows, group);
    encode_rank(dtype, ptr, &dims, &strides, &boxes)
}

/// `encode`'s dims, byte strides (of every dim but the first) and box, innermost first.
#[allow(clippy::too_many_arguments)]
fn map_layout(
    dtype: DType,
    dim: usize,
    rows: usize,
    heads: usize,
    batch: usize,
    s: &Strides,
    box_rows: u32,
    group: Option<usize>,
) -> ([u64; 4], [u64; 3], [u32; 4]) {
    let elem = dtype.size() as u64;
    // A stride of a length-1 dimension is never stepped; give TMA any legal value.
    let stride = |v: i64, n: usize| {
        if n <= 1 { 16 } else { v as u64 * elem }
    };
    let (row, head, batch_stride) = (
        stride(s.row, rows),
        stride(s.head, heads),
        stride(s.batch, batch),
    );
    let (d, r, h, b) = (dim as u64, rows as u64, heads as u64, batch as u64);
    match group {
        None => (
            [d, r, h, b],
            [row, head, batch_stride],
            [64, box_rows, 1, 1],
        ),
        Some(g) => (
            [d, h, r, b],
            [head, row, batch_stride],
            [64, g as u32, box_rows / g as u32, 1],
        ),
    }
}

/// Whether the wgmma kernel can pack a GQA group of `group` heads: its 64-row consumer tiles
/// (and its Q and O boxes) must hold whole queries.
pub fn packs_group(group: usize) -> bool {
    group > 0 && 64 % group == 0
}

/// Paged K or V in 8-row groups (`paged_row_groups` holds): `(64 columns, 8 rows, dim / 64
/// column blocks, row groups, heads)`, a box of `box_rows` rows across every column.
fn encode_row_groups(
    dtype: DType,
    ptr: u64,
    dim: usize,
    heads: usize,
    s: &Strides,
    groups: i64,
    box_rows: u32,
) -> Result<sys::CUtensorMap, Error> {
    let elem = dtype.size() as u64;
    let blocks = dim as u64 / 64;
    let head_stride = if heads <= 1 { 16 } else { s.head as u64 * elem };
    encode_rank(
        dtype,
        ptr,
        &[64, 8, blocks, groups as u64, heads as u64],
        &[
            s.row as u64 * elem,
            128,
            8 * s.row as u64 * elem,
            head_stride,
        ],
        &[64, 8, blocks as u32, box_rows / 8, 1],
    )
}

/// `cuTensorMapEncodeTiled` with 128-byte swizzling: `dims` and `boxes` innermost first,
/// `strides` (bytes) of every dimension but the first.
fn encode_rank(
    dtype: DType,
    ptr: u64,
    dims: &[u64],
    strides: &[u64],
    boxes: &[u32],
) -> Result<sys::CUtensorMap, Error> {
    debug_assert!(dims.len() == boxes.len() && strides.len() + 1 == dims.len());
    let unit = [1u32; 5];
    let data_type = match dtype {
        DType::Bf16 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        DType::Fp16 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
    };
    let mut map = sys::CUtensorMap { opaque: [0; 16] };
    // SAFETY: every array has the rank (or rank - 1) entries the call reads (`unit` at least
    // as many: rank <= 5); the map is written by the driver; the address is only recorded,
    // not dereferenced.
    unsafe {
        sys::cuTensorMapEncodeTiled(
            &mut map,
            data_type,
            dims.len() as u32,
            ptr as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            unit.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
        .result()
        .call("cuTensorMapEncodeTiled")?;
    }
    Ok(map)
}

/// The four maps of a call of `spec` over `p`'s tensors at these addresses; `pairs`: launched
/// in CTA pairs, each loading half of a K/V block.
pub fn maps(
    spec: &KernelSpec,
    p: &Problem,
    pairs: bool,
    q: u64,
    k: u64,
    v: u64,
    o: u64,
) -> Result<TmaMaps, Error> {
    let dt = p.dtype;
    let [(qb, qs), (kb, ks)] = p.batches_and_rows();
    // Paged: boxes of gcd(page_size, tile_n) rows, each inside one page (`page_fits`).
    // In CTA pairs each CTA loads half of a block's rows (`KernelSpec::wgmma_pairs`).
    let kv_box = p
        .paged
        .map_or(spec.tile_n / if pairs { 2 } else { 1 }, |pg| {
            page_box_rows(pg.page_size, spec.tile_n) as u32
        });
    let kv_map = |ptr: u64, dim: usize, s: &Strides| match p.paged {
        Some(pg) if spec.geometry().kv_group_rows == 8 => {
            let (_, groups) = paged_row_groups(s, pg.page_size, pg.num_pages).ok_or_else(|| {
                crate::spec::Unsupported::Wgmma {
                    stem: spec.stem(),
                    why: "takes paged K/V whose page stride is a whole number of 8-row strides",
                }
            })?;
            encode_row_groups(dt, ptr, dim, p.heads_kv, s, groups, kv_box)
        }
        _ => encode(dt, ptr, dim, ks, p.heads_kv, kb, s, kv_box, None),
    };
    // Q and O: tiles of `box` rows, packed GQA rows as boxes of whole groups.
    let group = p.heads / p.heads_kv.max(1);
    if spec.pack_gqa && !packs_group(group) {
        return Err(crate::spec::Unsupported::Wgmma {
            stem: spec.stem(),
            why: "packs GQA groups of 1, 2, 4, 8, 16, 32 or 64 heads (whole queries per 64 rows)",
        }
        .into());
    }
    let packed = spec.pack_gqa.then_some(group);
    let q_or_o = |ptr: u64, dim: usize, s: &Strides, box_rows: u32| {
        encode(dt, ptr, dim, qs, p.heads, qb, s, box_rows, packed)
    };
    Ok(TmaMaps {
        q: q_or_o(q, p.head_dim, &p.q_strides, spec.tile_m)?,
        k: kv_map(k, p.head_dim, &p.k_strides)?,
        v: kv_map(v, p.head_dim_v, &p.v_strides)?,
        o: q_or_o(o, p.head_dim_v, &p.o_strides, 64)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::DType;

    /// The maps' layouts: unpacked `(dim, row, head, batch)` with a box of rows of one head;
    /// packed GQA `(dim, head, row, batch)` with a box of a group's heads x its queries, the
    /// same bytes per box (what the kernel's barrier expects).
    #[test]
    fn map_layouts() {
        // q (B 2, S 100, H 16, D 128) contiguous: row stride H * D, head stride D.
        let s = Strides::contiguous(100, 16, 128);
        let (dims, strides, boxes) = map_layout(DType::Bf16, 128, 100, 16, 2, &s, 128, None);
        assert_eq!(dims, [128, 100, 16, 2]);
        assert_eq!(strides, [16 * 128 * 2, 128 * 2, 100 * 16 * 128 * 2]);
        assert_eq!(boxes, [64, 128, 1, 1]);
        let (dims, strides, boxes) = map_layout(DType::Bf16, 128, 100, 16, 2, &s, 128, Some(8));
        assert_eq!(dims, [128, 16, 100, 2]);
        assert_eq!(strides, [128 * 2, 16 * 128 * 2, 100 * 16 * 128 * 2]);
        assert_eq!(boxes, [64, 8, 16, 1]);
        // O's box: one consumer's 64 rows; a length-1 batch gets a legal unused stride.
        let (_, strides, boxes) = map_layout(DType::Fp16, 64, 7, 4, 1, &s, 64, Some(4));
        assert_eq!((strides[2], boxes), (16, [64, 4, 16, 1]));
    }

    #[test]
    fn which_strides_tma_can_describe() {
        let dense = Strides::contiguous(1000, 16, 128);
        assert!(strides_fit(&dense, 1000, 16, 4));
        // A broadcast (zero) stride over a real dimension has no tensor map.
        let bcast = Strides { head: 0, ..dense };
        assert!(!strides_fit(&bcast, 1000, 16, 4));
        // ... but over a length-1 dimension it is never stepped.
        assert!(strides_fit(&bcast, 1000, 1, 4));
        let huge = Strides {
            batch: 1 << 40,
            ..dense
        };
        assert!(!strides_fit(&huge, 1000, 16, 2));
        let overflow = Strides {
            batch: i64::MAX / 2 + 8,
            ..dense
        };
        assert!(!strides_fit(&overflow, 1000, 16, 2));
        let mut p = Problem::new(DType::Bf16, 2, 300, 300, 8, 8, 64, 64);
        assert!(problem_fits(&p));
        p.v_strides.row = 0;
        assert!(!problem_fits(&p));
        // A ragged batch whose sequences hold no key: no K/V map (review: encoding failed).
        let mut p = Problem::new(DType::Bf16, 2, 100, 128, 8, 8, 64, 64);
        p.varlen = Some(crate::runtime::problem::Varlen {
            total_q: Some(200),
            total_k: Some(0),
            ..Default::default()
        });
        assert!(!problem_fits(&p));
    }

    #[test]
    fn paged_row_groups_need_whole_8_row_strides() {
        // (pages, page_size, Hkv, D) contiguous: a page is page_size / 8 groups.
        let nhd = Strides::contiguous(16, 8, 128);
        assert_eq!(paged_row_groups(&nhd, 16, 100), Some((2, 200)));
        // K of a (pages, 2, page_size, Hkv, D) cache: pages 2 * page_size rows apart.
        let kv = Strides {
            batch: 2 * 16 * 8 * 128,
            ..nhd
        };
        assert_eq!(paged_row_groups(&kv, 16, 100), Some((4, 4 * 99 + 2)));
        // A page stride that is not a whole number of 8-row strides, a page size that is
        // not a multiple of 8, a group index past 32 bits: no row-group map.
        let odd = Strides {
            batch: 16 * 8 * 128 + 64,
            ..nhd
        };
        assert_eq!(paged_row_groups(&odd, 16, 100), None);
        assert_eq!(paged_row_groups(&nhd, 12, 100), None);
        assert_eq!(paged_row_groups(&nhd, 16, 1 << 31), None);
        // problem_fits applies it to paged K/V of whole 64-column blocks only.
        let mut p = Problem::new(DType::Bf16, 2, 64, 64, 8, 8, 128, 128);
        let pg = crate::runtime::problem::Paged {
            page_size: 16,
            num_pages: 8,
            pages_per_seq: 4,
            page_table_stride: 4,
        };
        p.paged = Some(pg);
        p.k_strides = Strides::contiguous(16, 8, 128);
        p.v_strides = p.k_strides;
        assert!(problem_fits(&p));
        p.v_strides = odd;
        assert!(!problem_fits(&p));
        let mut p96 = Problem::new(DType::Bf16, 2, 64, 64, 8, 8, 96, 96);
        p96.paged = Some(pg);
        p96.k_strides = Strides {
            batch: 16 * 8 * 96 + 32,
            ..Strides::contiguous(16, 8, 96)
        };
        p96.v_strides = p96.k_strides;
        assert!(problem_fits(&p96), "d 96 keeps the per-page 4-d map");
    }

    #[test]
    fn which_pages_tma_can_tile() {
        // Boxes of gcd(page, tile_n) rows, a multiple of 8.
        for (page, tile_n, fits) in [
            (16, 128, true),
            (8, 128, true),
            (64, 128, true),
            (128, 128, true),
            (256, 128, true),
            (1, 128, false),
            (48, 128, true),
            (96, 128, true),
            (128, 80, true),
            (128, 160, true),
            (12, 128, false),
            (16, 80, true),
            (40, 80, true),
            (160, 80, true),
        ] {
            assert_eq!(page_fits(page, tile_n), fits, "page {page} tile_n {tile_n}");
        }
    }

    #[test]
    fn which_pages_hold_whole_blocks() {
        for (page, tile_n, whole) in [
            (128, 128, true),
            (256, 128, true),
            (256, 64, true),
            (128, 160, false),
            (16, 128, false),
            (1, 128, false),
            (0, 128, false),
        ] {
            assert_eq!(
                pages_hold_blocks(page, tile_n),
                whole,
                "page {page} tile_n {tile_n}"
            );
        }
    }
}
