//! `KernelSpec`: the one source of truth for a kernel variant.
//!
//! Everything else is derived from it: the file stem (and its parse), the kernel symbol, the
//! template context, the launch geometry (threads, dynamic shared memory) and `can_implement`.
//! The stem lists the fields in a fixed order and the boolean flags by name, absent ones omitted:
//!
//! ```text
//! fwd.sm90.portable.bf16.d128x128.m128n64.q1.causal.lse
//!  |    |      |      |     |        |     |    |     `- flags, in FLAGS order
//!  |    |      |      |     |        |     |    `------- mask: (none) | causal | local
//!  |    |      |      |     |        |     `------------ q_stage
//!  |    |      |      |     |        `------------------ tile_m x tile_n
//!  |    |      |      |     `--------------------------- head dims qk x v
//!  |    |      |      `--------------------------------- dtype
//!  |    |      `---------------------------------------- implementation (template family)
//!  |    `----------------------------------------------- arch family
//!  `---------------------------------------------------- kernel kind
//! ```

use crate::arch::Arch;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Element type of q, k, v and out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    Bf16,
    Fp16,
}

impl DType {
    pub const ALL: [DType; 2] = [DType::Bf16, DType::Fp16];
    pub const fn name(self) -> &'static str {
        match self {
            DType::Bf16 => "bf16",
            DType::Fp16 => "fp16",
        }
    }
    /// Bytes per element.
    pub const fn size(self) -> usize {
        2
    }
}

/// Which kernel template (and so which MMA instruction family) implements the spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Impl {
    /// `templates/fwd_portable.cu`: `mma.sync` m16n8k16 + `cp.async`, valid on every family.
    Portable,
    /// `templates/fwd_sm90.cu`: the Hopper flagship (sm90 only): TMA + mbarrier pipeline,
    /// `wgmma`, a producer warpgroup and 64-row consumer warpgroups.
    Wgmma,
}

impl Impl {
    pub const ALL: [Impl; 2] = [Impl::Portable, Impl::Wgmma];
    pub const fn name(self) -> &'static str {
        match self {
            Impl::Portable => "portable",
            Impl::Wgmma => "wgmma",
        }
    }
}

/// The mask kind compiled into the kernel. Window sizes themselves are run-time values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mask {
    /// Every key visible (only the sequence ends are masked).
    None,
    /// Bottom-right aligned causal: key j visible to query i iff `j <= i + Sk - Sq`.
    Causal,
    /// Bottom-right aligned window `[i + Sk - Sq - wl, i + Sk - Sq + wr]`, sizes at run time.
    Local,
}

impl Mask {
    pub const ALL: [Mask; 3] = [Mask::None, Mask::Causal, Mask::Local];
    /// Stem token; `None` has none.
    pub const fn token(self) -> Option<&'static str> {
        match self {
            Mask::None => None,
            Mask::Causal => Some("causal"),
            Mask::Local => Some("local"),
        }
    }
}

/// One compiled kernel variant. See the module docs for the stem format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct KernelSpec {
    pub arch: Arch,
    pub imp: Impl,
    pub dtype: DType,
    /// Head dim of q and k.
    pub d: u32,
    /// Head dim of v and out.
    pub dv: u32,
    /// Query rows per Q tile.
    pub tile_m: u32,
    /// Key rows per K/V tile.
    pub tile_n: u32,
    /// Q tiles per CTA sharing one K/V pipeline (FA4's q_stage).
    pub q_stage: u32,
    pub mask: Mask,
    /// Write the log-sum-exp (fp32, natural log).
    pub lse: bool,
    /// Fold the GQA group into the M dimension: a CTA's rows are (query, head-in-group) pairs,
    /// group index fastest (FA4's packed layout), so one CTA serves a whole KV head.
    pub pack_gqa: bool,
    /// The serving features compiled in (all off: the dense kernel).
    pub feat: Features,
}

/// Serving features: each adds run-time inputs the kernel reads only when compiled in, so the
/// dense kernels carry none of their cost.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct Features {
    /// Ragged batches: `cu_seqlens_q/k` (packed `(total, H, D)` rows) and/or `seqused_q/k`
    /// (per-sequence lengths), each optional at run time.
    pub varlen: bool,
    /// K/V in pages `(num_pages, page_size, Hkv, D)` through a `(B, max_pages)` page table;
    /// any page size (one page lookup per tile when it is a multiple of tile_n).
    pub paged: bool,
    /// A learnable per-head sink logit in the softmax denominator (gpt-oss).
    pub sink: bool,
    /// Scores soft-capped: `c * tanh(scale * qk / c)`, c at run time.
    pub softcap: bool,
    /// Split-KV: each CTA covers one of `num_splits` K ranges and writes an fp32 partial O and
    /// LSE; the combine kernel in the same module reduces them.
    pub split: bool,
}

/// The boolean key flags in stem order: (token, getter, setter). Adding a flag (varlen, paged,
/// sink, softcap…) is one field plus one row here; stem formatting and parsing both read this.
type FlagRow = (&'static str, fn(&KernelSpec) -> bool, fn(&mut KernelSpec));
pub const FLAGS: &[FlagRow] = &[
    ("lse", |s| s.lse, |s| s.lse = true),
    ("packgqa", |s| s.pack_gqa, |s| s.pack_gqa = true),
    ("varlen", |s| s.feat.varlen, |s| s.feat.varlen = true),
    ("paged", |s| s.feat.paged, |s| s.feat.paged = true),
    ("sink", |s| s.feat.sink, |s| s.feat.sink = true),
    ("softcap", |s| s.feat.softcap, |s| s.feat.softcap = true),
    ("split", |s| s.feat.split, |s| s.feat.split = true),
];

/// Why a spec cannot be built: every limit `can_implement` enforces, with the supported values.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unsupported {
    #[error(
        "head dim {name}={value} is not supported: it must be a multiple of 8 in 8..=256 (a multiple of 16 is fastest)"
    )]
    HeadDim { name: &'static str, value: u32 },
    #[error(
        "tile_m={tile_m} is not supported by the {imp} kernel: it must be 16 (four warps along the keys), 64 or 128 (warps own 16 or 32 rows)"
    )]
    TileM { imp: &'static str, tile_m: u32 },
    #[error(
        "a 16-row tile takes q_stage=1, not {q_stage}: its warps lie along the keys, not the rows"
    )]
    KeySplitQStage { q_stage: u32 },
    #[error(
        "tile_n={tile_n} is not supported with tile_m=16: its four warps take a quarter of each block each, so tile_n must be a multiple of {multiple}"
    )]
    KeySplitTileN { tile_n: u32, multiple: u32 },
    #[error("tile_n={tile_n} is not supported: it must be a multiple of 16 in 16..=256")]
    TileN { tile_n: u32 },
    #[error("q_stage={q_stage} is not supported: it must be 1 or 2")]
    QStage { q_stage: u32 },
    #[error("{stem}: the wgmma kernel {why}")]
    Wgmma { stem: String, why: &'static str },
    #[error(
        "{stem} needs {need} bytes of shared memory; {arch} allows {limit} per CTA (use a smaller tile_m/tile_n or q_stage)"
    )]
    SharedMemory {
        stem: String,
        arch: Arch,
        need: u32,
        limit: u32,
    },
    #[error(
        "{stem} needs about {need} registers per thread but {threads} threads may use at most {limit} each: it would spill; use a smaller tile or q_stage"
    )]
    Registers {
        stem: String,
        need: u32,
        threads: u32,
        limit: u32,
    },
    #[error(
        "{stem}: setmaxnreg would ask {asked} registers of a CTA that launched with {pool}: its consumers would wait forever"
    )]
    RegisterPool { stem: String, asked: u32, pool: u32 },
}

/// Launch geometry and shared-memory layout of a spec, derived in one place. The template
/// receives these numbers and `static_assert`s its own layout against them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Geometry {
    /// d and dv rounded up to the MMA k/n granularity (16); the padding is zero-filled.
    pub d_pad: u32,
    pub dv_pad: u32,
    /// Rows of a Q tile owned by one warp (16 or 32).
    pub warp_m: u32,
    /// Warps along the keys (portable): 1, or 4 for a 16-row decode tile, whose four warps
    /// share its rows and take a quarter of each K block's keys each (merged at the end).
    pub warps_n: u32,
    pub warps: u32,
    /// The CTAs per SM the kernel's launch bounds promise (its register budget): 1, or what
    /// a key-split decode tile's shared memory and registers allow.
    pub min_ctas: u32,
    pub threads: u32,
    /// Shared-memory row strides in elements: padded by 16 bytes so `ldmatrix` rows fall in
    /// distinct banks for any head dim, except K and V rows that the portable kernel swizzles
    /// instead (`KvRows`: whole 128-byte spans, tiles of at most 64 rows, unpaged), unpadded.
    pub q_row: u32,
    pub k_row: u32,
    pub v_row: u32,
    /// Byte offsets of the Q (and O staging), K and V regions.
    pub smem_q: u32,
    pub smem_k: u32,
    pub smem_v: u32,
    /// Paged kernels: two slots of `tile_n + 1` page-table entries (int32), prefetched one K
    /// block ahead (0 bytes otherwise).
    pub smem_pages: u32,
    /// Where O is staged for the store: the Q rows (`smem_q`; wgmma: the tile's Q buffer), or
    /// its own rows (wgmma, where shared memory allows after the Q buffers).
    pub smem_o: u32,
    pub smem_bytes: u32,
    /// K/V pipeline stages (portable: one K and one V buffer).
    pub stages: u32,
    /// Q tile buffers: 2 lets the (persistent) wgmma kernel load the next tile's Q (and so its
    /// K/V blocks, issued after it) while this tile runs; 1 elsewhere.
    pub q_bufs: u32,
    /// Rows per group of a wgmma K/V stage, each group holding its rows' 64-column blocks one
    /// after another: `tile_n` (one group: each 64-column block's rows contiguous, the dense
    /// layout) or 8 (`kv_in_row_groups`: a page's rows of all columns are one TMA box).
    pub kv_group_rows: u32,
}

/// Whether a wgmma kernel keeps its K/V stages in 8-row groups: paged K/V whose head dims are
/// whole 64-column blocks. A page's rows then load as one TMA box across all columns (one box
/// per 64 columns otherwise: twice the boxes at d = 128, and boxes, not bytes, are what small
/// pages cost). Head dims that are not multiples of 64 keep the dense layout: their last
/// block's columns past d must be zero-filled, which the row-group map cannot express.
pub fn kv_in_row_groups(paged: bool, d: u32, dv: u32) -> bool {
    paged && d.is_multiple_of(64) && dv.is_multiple_of(64)
}

/// Registers a thread needs beyond its fp32 accumulators (MMA fragments, addresses, softmax
/// state), measured from ptxas reports of the portable kernel at d = 64..256.
const NON_ACCUM_REGS: u32 = 56;

/// A portable kernel thread's registers: its fp32 accumulators, O (warp_m x dv) and S
/// (warp_m x the warp's keys of a block), plus the rest.
fn portable_regs(warp_m: u32, dv_pad: u32, warp_keys: u32) -> u32 {
    warp_m * (dv_pad + warp_keys) / 32 + NON_ACCUM_REGS
}

/// Warps along the keys of a 16-row portable tile (`Geometry::warps_n`).
pub const KEY_SPLIT_WARPS: u32 = 4;

impl KernelSpec {
    /// The file stem, e.g. `fwd.sm90.portable.bf16.d128x128.m128n64.q1.causal.lse`.
    pub fn stem(&self) -> String {
        let mut s = format!(
            "fwd.{}.{}.{}.d{}x{}.m{}n{}.q{}",
            self.arch.name(),
            self.imp.name(),
            self.dtype.name(),
            self.d,
            self.dv,
            self.tile_m,
            self.tile_n,
            self.q_stage
        );
        if let Some(t) = self.mask.token() {
            s.push('.');
            s.push_str(t);
        }
        for (token, get, _) in FLAGS {
            if get(self) {
                s.push('.');
                s.push_str(token);
            }
        }
        s
    }

    /// The `extern "C"` kernel symbol: the stem with `.` turned into `_`, prefixed.
    pub fn symbol(&self) -> String {
        format!("fa4gen_{}", self.stem().replace('.', "_"))
    }

    /// Elements per Q tile row-block handled by one CTA (q_stage tiles of tile_m rows).
    pub fn block_m(&self) -> u32 {
        self.q_stage * self.tile_m
    }

    pub fn geometry(&self) -> Geometry {
        if self.imp == Impl::Wgmma {
            return self.wgmma_geometry();
        }
        let round16 = |x: u32| x.div_ceil(16) * 16;
        let d_pad = round16(self.d);
        let dv_pad = round16(self.dv);
        // A warp owns 32 rows (two m16 fragments: each K/V fragment loaded from shared memory
        // feeds two MMAs) unless its O accumulators would not fit (dv > 128), then 16. The qk
        // dim does not count: Q and K fragments live one k step at a time.
        let warp_m = if dv_pad > 128 || self.tile_m < 128 {
            16
        } else {
            32
        };
        // A 16-row tile (decode: a step's few packed rows) lays its four warps along the keys,
        // so a K block's math is spread over the SM's four schedulers, not left to one warp.
        let warps_n = if self.tile_m == 16 {
            KEY_SPLIT_WARPS
        } else {
            1
        };
        let warps = self.block_m() / warp_m * warps_n;
        let q_row = d_pad.max(dv_pad) + 8;
        // K and V rows that are whole 128-byte spans are swizzled, not padded, in tiles of at
        // most 64 rows over unpaged K/V; the template takes the layout from this stride
        // (`KvRows` in smem_tile.cuh), so the rule lives here only. Why: padded rows cost
        // decode 1.5x its L2 reads (sectors split across 128-byte lines); the 128-row prefill
        // tiles run at 255 registers, where the swizzle's per-k-step bases spilled 8-20
        // bytes; pages of 16 keys measured 3-5% slower swizzled at d 128 and 3-8% at d 256
        // (H200, B 8-64), pages of 128 2-6% faster.
        let kv_row = |cols: u32| {
            if cols.is_multiple_of(64) && self.tile_m <= 64 && !self.feat.paged {
                cols
            } else {
                cols + 8
            }
        };
        let k_row = kv_row(d_pad);
        let v_row = kv_row(dv_pad);
        let elem = self.dtype.size() as u32;
        let smem_q = 0;
        let smem_k = smem_q + self.block_m() * q_row * elem;
        let smem_v = smem_k + self.tile_n * k_row * elem;
        let smem_pages = smem_v + self.tile_n * v_row * elem;
        let page_bytes = if self.feat.paged {
            (2 * (self.tile_n + 1) * 4).div_ceil(16) * 16
        } else {
            0
        };
        let smem_bytes = smem_pages + page_bytes;
        let threads = warps * 32;
        // Key-split tiles are small: the launch bounds ask for as many CTAs per SM as shared
        // memory and the registers allow (decode keeps one K and one V load in flight per CTA).
        let min_ctas = if warps_n > 1 {
            let by_smem = self.arch.max_dynamic_smem() / smem_bytes.max(1);
            let by_regs = 65536 / (threads * portable_regs(warp_m, dv_pad, self.tile_n / warps_n));
            by_smem.min(by_regs).max(1)
        } else {
            1
        };
        Geometry {
            d_pad,
            dv_pad,
            warp_m,
            warps_n,
            warps,
            min_ctas,
            threads,
            q_row,
            k_row,
            v_row,
            smem_q,
            smem_k,
            smem_v,
            smem_pages,
            smem_o: smem_q,
            smem_bytes,
            stages: 1,
            q_bufs: 1,
            kv_group_rows: self.tile_n,
        }
    }

    /// The wgmma kernel's layout: a producer warpgroup plus one 64-row consumer warpgroup per
    /// 64 rows of tile_m; every tile stored as 128-byte swizzled 64-column blocks (TMA's
    /// SWIZZLE_128B, what the wgmma descriptors read), 1024-byte aligned; `q_bufs` Q tiles,
    /// `stages` K and V tiles, the O staging tile where it fits (else O is staged in
    /// the current Q buffer), then the barriers (q, q_empty per Q buffer; full and empty for K
    /// and V per stage), plus 1024 bytes of slack to align the dynamic base. `smem_pages` (no
    /// pages here) marks the end of the tiles.
    ///
    /// Shared memory goes first to a second Q buffer, then to O's own
    /// rows: with one Q buffer the producer cannot load the next tile's Q, nor its K/V behind
    /// it, before every Q K^T of this tile is done, and a tile of a few blocks (a window, a
    /// short sequence, the causal diagonal) waits for those loads; a second buffer hides
    /// them, and makes O's own rows unnecessary for that purpose. K/V stages beyond
    /// `WGMMA_STAGES` come last, only where both of those fit beside them (`wgmma_layout`).
    fn wgmma_geometry(&self) -> Geometry {
        self.wgmma_layout(match self.wgmma_ctas_per_sm() {
            2 => SM90_SMEM_SHARE_OF_2,
            _ => self.arch.max_dynamic_smem(),
        })
    }

    /// CTAs of the wgmma kernel per SM: two for one consumer warpgroup (tile_m 64) where half
    /// the shared memory holds its layout, else one. A lone consumer has no partner in its CTA
    /// to take turns at the tensor cores with; a second CTA's takes that role (its softmax and
    /// epilogue run while the other's GEMMs do), with half the register file: 128 registers
    /// per thread at launch, 232 for the consumer after setmaxnreg.
    pub fn wgmma_ctas_per_sm(&self) -> u32 {
        if self.tile_m == 64
            && self.wgmma_layout(SM90_SMEM_SHARE_OF_2).smem_bytes <= SM90_SMEM_SHARE_OF_2
        {
            2
        } else {
            1
        }
    }

    /// The layout within `limit` bytes of shared memory (its `smem_bytes` exceed it where
    /// even one Q buffer with O staged in it does not fit): `WGMMA_STAGES` K/V stages, or up
    /// to `WGMMA_MAX_STAGES` where they fit beside two Q buffers and O's own rows.
    fn wgmma_layout(&self, limit: u32) -> Geometry {
        (WGMMA_STAGES + 1..=WGMMA_MAX_STAGES)
            .rev()
            .map(|stages| self.wgmma_layout_staged(limit, stages))
            .find(|g| g.smem_bytes <= limit && g.q_bufs == 2 && g.smem_o != g.smem_q)
            .unwrap_or_else(|| self.wgmma_layout_staged(limit, WGMMA_STAGES))
    }

    fn wgmma_layout_staged(&self, limit: u32, stages: u32) -> Geometry {
        let chunks = |x: u32| x.div_ceil(64);
        let q_bytes = self.tile_m * 128 * chunks(self.d).max(chunks(self.dv));
        let kv_bytes = stages * self.tile_n * 128 * (chunks(self.d) + chunks(self.dv));
        let o_bytes = self.tile_m * 128 * chunks(self.dv);
        let barriers = |q_bufs: u32| (2 * q_bufs + 4 * stages) * 8 + 1024;
        let q_bufs = if 2 * q_bytes + kv_bytes + barriers(2) <= limit {
            2
        } else {
            1
        };
        let smem_q = 0;
        let smem_k = smem_q + q_bufs * q_bytes;
        let smem_v = smem_k + stages * self.tile_n * 128 * chunks(self.d);
        let kv_end = smem_v + stages * self.tile_n * 128 * chunks(self.dv);
        let (smem_o, smem_pages) = if kv_end + o_bytes + barriers(q_bufs) <= limit {
            (kv_end, kv_end + o_bytes)
        } else {
            (smem_q, kv_end)
        };
        let smem_bytes = smem_pages + barriers(q_bufs);
        let threads = 128 * (self.tile_m / 64 + 1);
        Geometry {
            d_pad: chunks(self.d) * 64,
            dv_pad: chunks(self.dv) * 64,
            warp_m: 16,
            warps_n: 1,
            warps: threads / 32,
            min_ctas: 1,
            threads,
            q_row: self.d,
            k_row: self.d,
            v_row: self.dv,
            smem_q,
            smem_k,
            smem_v,
            smem_pages,
            smem_o,
            smem_bytes,
            stages,
            q_bufs,
            kv_group_rows: if kv_in_row_groups(self.feat.paged, self.d, self.dv) {
                8
            } else {
                self.tile_n
            },
        }
    }

    /// Whether the wgmma kernel stores O from registers straight to global memory rather than
    /// staging it for a TMA store: where shared memory holds neither O's own rows nor a second
    /// Q buffer (d 192/128 128x128, d 256). Staged in the one Q buffer, O kept the next tile's
    /// Q from loading until the store had read it; stored directly (8-byte stores, 32
    /// contiguous bytes per row per warp store), the buffer is free after the last Q K^T and the next
    /// Q loads under the last P V and the epilogue. Same run, against staging in Q: d 256
    /// causal S 512 257 vs 240 TFLOP/s, 1k 363 vs 338; d 192/128 causal 512 281 vs 275, 1k
    /// 384 vs 370. (4-byte stores, half a sector each, lost 14% at d 256 S 512.) With it the
    /// d 256 kernels are persistent too (their tile loop once spilled beside the 128 O
    /// accumulators per thread; now it does not): +7% at d 256 causal S 512 and 1k.
    pub fn wgmma_o_direct(&self) -> bool {
        let g = self.geometry();
        g.smem_o == g.smem_q && g.q_bufs == 1
    }

    /// Whether a kernel's K blocks start at its rows' first visible key rather than on the
    /// grid of `tile_n` keys: a local window, on either family. A window tile's keys are a
    /// span of (its queries + window) keys anywhere on the key axis; blocks laid from its
    /// start cover it in ceil(span / tile_n) blocks, where the grid can need one more (a packed 24-query tile under gpt-oss's 128-key window spans 151 keys: 3
    /// blocks of 64 on the span, 3 or 4 on the grid; 2 of 80 on the span; a decode step's 128
    /// keys: one 128-key block, two on the grid). Causal and unmasked tiles start at key 0
    /// either way. With paged K/V the wgmma kernel starts a tile's blocks at the TMA box
    /// boundary at or before that key (boxes of gcd(page_size, tile_n) rows, each inside one
    /// page), the portable kernel at the key itself (a block that crosses pages loads row by
    /// row). `TileShape::visited_window_blocks` counts blocks from the key (paged wgmma
    /// tiles: at most one block more each).
    pub fn window_blocks(&self) -> bool {
        self.mask == Mask::Local
    }

    /// Whether the wgmma kernel chains its tiles: a tile's last P V shares its turn at the
    /// tensor cores with the next tile's first Q K^T, whose softmax then runs during the
    /// P V, before this tile's epilogue. It needs the next tile's Q in a
    /// buffer of its own, and K/V stages enough for the producer to run past the tile's end:
    /// with 2 stages (d >= 96) it measured even to 1% slower (d 128 causal), with 4 (d 64)
    /// 4-11% faster on short causal sequences and windows.
    pub fn wgmma_chain_tiles(&self) -> bool {
        let g = self.geometry();
        g.stages > WGMMA_STAGES && g.q_bufs == 2
    }

    /// The Q blocks the wgmma kernel's masked schedule runs together, one (head, batch)'s
    /// consecutive blocks fastest (`Tiles` in fwd_sm90.cu), or `None` for the plain masked
    /// order ((head, batch) fastest, heaviest blocks first). CTAs at work together then
    /// share fewer heads' K/V, each read by more of them while it is in L2; whole runs come
    /// heaviest first and the m_blocks % run lowest blocks follow in the plain order, so no
    /// tile is empty and the snake still evens out the costs (simulated max/mean work per
    /// CTA 1.03 for runs of 16 at 128 Q blocks x 16 heads).
    /// - `Some(0)`: packed GQA at d > 64, runs of G (the group, a run-time value): the G Q
    ///   blocks that unpacked would be one head's tile. H200, H64/Hkv8 causal, d 128 1k
    ///   0.84 -> 0.98 and 4k 0.94 -> 1.00 of unpacked; at d 64 (K/V of 32 MB) the plain
    ///   order balanced better, 512 1.09 and 1k 1.19 of unpacked against 0.91 and 1.00.
    /// - `Some(16)`: unpacked causal, runs of 16 Q blocks, or of all a head's blocks where
    ///   it has fewer (the kernel takes min(16, m_blocks)): there the old order visited a
    ///   head's Q blocks rounds apart, so its K/V, evicted in between, came from DRAM once per
    ///   Q block (ncu, d 256 causal S 512, B 32 H 8: 3.49 TB/s of DRAM traffic and a 34% L2
    ///   hit rate against cuDNN's 2.11 TB/s and 45%, 137 us against 122 us).
    ///   H200, B·S 16k, H·d 2048, one run, three rounds,
    ///   TFLOP/s plain -> runs of 16: 4k d 64 443 -> 454, d 128 592 -> 619, d 192/128 621
    ///   -> 665, d 256 664 -> 686; 16k d 64 478 -> 489, d 192/128 629 -> 646 (runs of 8 and
    ///   32 within 1-2% of 16; d 128 and 256 at 16k moved 10% between rounds either way).
    /// - Unpacked local masks (unmeasured): `None`, the plain order.
    pub fn wgmma_q_run(&self) -> Option<u32> {
        match self.mask {
            Mask::None => None,
            _ if self.pack_gqa => (self.d.max(self.dv) > 64).then_some(0),
            Mask::Causal => Some(16),
            Mask::Local => None,
        }
    }

    /// Whether the wgmma kernel's Q blocks end at (or within 63 rows past) the last query row
    /// instead of starting at the first: the grid's spare rows (tile_m - Sq·G mod tile_m),
    /// rounded down to whole consumers' 64, come before row 0, zeros that TMA loads and that
    /// are never stored (a consumer's rows lie wholly before row 0 or wholly from it: a TMA
    /// store from a negative row faults on the H200). Under a causal mask a block sees keys up
    /// to its last row, so the partial block is then the lightest (one or two K blocks)
    /// instead of the heaviest, and every block ends up to that many rows earlier: at d 64's
    /// 192-row tiles (4096 mod 192 = 64) each visits one K block fewer, 5.5% of a 4k call's
    /// blocks and 1.5% of a 16k one's. H200, same run, sustained, three rounds, TFLOP/s
    /// before -> after: d 64 causal 4k 427 -> 451 (+5.6%), 16k 493 -> 496, 2k 367 (128x128,
    /// then selected) -> 385 (192x128, selected now that its cost counts the move); aligned
    /// calls unchanged (d 128 4k 581 -> 581); packed G 8 at 4k 478 -> 479 (its 24-query
    /// tiles move by 8 queries, rarely a K block).
    /// Varlen too, per sequence: there the rows before a sequence's first are the previous
    /// sequence's, and like the zeros before a dense call's neither computed nor stored (the
    /// consumers that hold them idle: fwd_sm90.cu `kIdleConsumers`). Ragged prefill batches (Sq = Sk per
    /// sequence), H200, same run, five rounds, TFLOP/s: d 64 192x128 366 -> 388 (+6.2%), d 256
    /// 128x80 (three rounds) 372 -> 394 (+5.9%).
    /// Only where tile_m is not a multiple of tile_n: on a 128x128 tile a 64-row shift moves
    /// no tile end past a K block boundary where Sq = Sk (the ends stay on the 128-key grid),
    /// and there it measured, with the same blocks, -1.1% (d 128 varlen, paired), -0.5% (d
    /// 192/128 varlen), -0.5% (d 128 dense S 4000), -1.3% (d 192/128 dense S 4000), and
    /// -0.4% where it moved nothing (d 128 dense S 2000: the pad's code alone). A call with
    /// Sk - Sq off the 128-key grid would save blocks there; not measured, not taken.
    /// Unmasked and windowed tiles cost the same wherever the grid lies, and a 64-row tile
    /// never has a whole consumer's spare rows (its kernels leave the pad's arithmetic out: it
    /// cost the fill tile's packed paged varlen kernel 20 more bytes of spills).
    /// (`TileShape::end_aligned` is the host's model of it.)
    pub fn wgmma_q_from_end(&self) -> bool {
        self.imp == Impl::Wgmma
            && self.mask == Mask::Causal
            && crate::tiles::q_from_end_tile(self.tile_m as usize, self.tile_n as usize)
    }

    /// The wgmma kernel may run in CTA pairs (clusters of 2 on neighbouring SMs): the two take
    /// consecutive Q blocks of one head, so they visit the same K/V blocks in lockstep; each
    /// loads half of every K/V block and the TMA multicasts it into both, halving the K/V
    /// traffic from L2 to the SMs (`fa4gen/cluster.cuh`). Selection launches pairs when the
    /// call has an even number of Q blocks and, by default, 4k keys or more
    /// (`select::PAIRS_MIN_KEYS`: there sustained calls run at the power cap and the halved
    /// traffic pays, d 128 full +2% at 4k and 8k, +3% at 16k on the H200; shorter, the
    /// partners' lockstep costs about as much); else the same kernel runs alone (a cluster of
    /// one).
    ///
    /// Dense calls, unmasked or causal: under a causal mask the partners' K ranges share block
    /// 0 and differ only past the lighter one's diagonal, so the pair loads the heavier one's
    /// range and the lighter one releases its extra blocks unread (session 13, sustained, old
    /// kernel -> pairs: d 192/128 causal 4k 603 -> 620, 16k 658 -> 687; d 256 4k 624 -> 635,
    /// 16k 695 -> 711; d 128 4k 589 -> 590, 16k 633 -> 644; the pair code running alone at 1k
    /// cost 0.2-0.4%), except where tiles chain (a tile's first block then runs in the tile
    /// before, ahead of the partner's extra blocks). Varlen too (session 16, one round: d 128
    /// 16k causal +2.2%, d 192/128 +2.5%, 4k +1.1%): a pair is two Q blocks of one sequence,
    /// and where a sequence has an odd number of them the last one's partner is a ghost that
    /// loads its half and computes nothing (`Tile::ghost`). A local window's ranges differ at
    /// both ends, and paged K/V is per page. Head dims of 128 and more (FA3 makes the same
    /// choices): at d 64 the pair code cost the kernel running alone 3.5% at 1k (424 -> 408
    /// TFLOP/s, three rounds) while pairs gained under 1% at 16k.
    pub fn wgmma_pairs(&self) -> bool {
        self.imp == Impl::Wgmma
            && self.d.max(self.dv) >= 128
            && self.mask != Mask::Local
            && (self.mask == Mask::None || !self.wgmma_chain_tiles())
            && !self.pack_gqa
            && !self.feat.paged
            && !self.feat.split
            && self.ctas_per_sm() == 1
    }

    /// How far (scaled scores, log2 units) a block's row max may exceed the running max before
    /// the wgmma kernel moves it (`OnlineSoftmax::update`): P then stays below 2^slack, and a
    /// warp whose rows all kept their max skips rescaling O (in tiles of 8+ blocks). The
    /// result is the same up to rounding: the normalisation and the LSE use the max the
    /// exponentials did. H200, same run, three rounds, TFLOP/s exact max -> slack 8:
    /// d 128 full 4k 667 -> 708, 16k 634 -> 653; d 256 full 16k 701 -> 746; d 192/128 full
    /// 16k 691 -> 698; d 64 full 4k 507 -> 526, 16k 512 -> 516, causal 16k 484 -> 508;
    /// d 192/128 causal 4k 672 -> 676; short causal lost 0.5-2.5% with the vote in every
    /// tile (d 256 1k 363 -> 356, d 64 1k 320 -> 313), hence the 8-block floor. Windows
    /// (tiles of two or three blocks) keep the exact max. The cost is accuracy on sharply
    /// peaked rows: the dominant key's P (exactly 1 with the exact max) is up to 2^8 and
    /// rounded to 16 bits for P V while the row sum adds it unrounded (a CPU model: worst
    /// error 4.9e-3 of max |O| with bf16 P against 9.9e-4; FA4 on Blackwell makes the same
    /// trade). The oracle's bounds hold (worst err/bound 0.5, as before).
    pub fn wgmma_max_slack(&self) -> u32 {
        if self.mask == Mask::Local { 0 } else { 8 }
    }

    /// Whether the wgmma kernel's main loop takes a block's exponentials at the running max
    /// as it stands (the stale max): no row max, no quad shuffles, no correction factor. A
    /// warp then checks its packed P (one three-input bf16x2/f16x2 max per two registers);
    /// where a P exceeds 2^slack (the bound `wgmma_max_slack` keeps anyway), overflowed, or a
    /// row has seen no key yet, that warp recomputes the block's scores from shared memory
    /// with mma.sync (`warp_qk` in fwd_sm90.cu) and takes the exact update. Tiles of fewer
    /// than 8 blocks, boundary blocks and the block holding key 0 (where sink-like keys put
    /// a row's max) take the exact update as before.
    ///
    /// Measured on the H200 (session 15, sustained A/B, same inputs, three rounds): d 128
    /// full 4k +4.7%, 16k +2.3%, 1k +3.9%; d 192/128 full 4k +4.8%, 16k +4.4%, causal 4k
    /// +3.6%, 16k +4.1%, 1k -0.6%; d 128 causal 4k +2.1%, 16k +3.8%, 1k -1.0%; d 256 full
    /// +0.3-1.0%, but d 256 causal 4k +0.8%, 16k -0.3%, 1k -1.4% (its 128x80 tile saves the
    /// fewest exponentials per block), so not there; d 64 0 to -7% in session 14 (not
    /// issue-bound; its causal kernel spilled). The serving features that leave a main-loop
    /// block's scores alone keep it: packed GQA (its Q buffer is the plain one's row layout),
    /// varlen (only a tile's first visited block holds a sequence's end), paged K/V (row
    /// groups: `warp_qk` addresses them) and sinks (they join at `finalize`). Not softcap
    /// (the recompute would have to cap too) and not chained tiles.
    pub fn wgmma_stale_max(&self) -> bool {
        self.imp == Impl::Wgmma
            && self.d.min(self.dv) >= 128
            && self.wgmma_max_slack() > 0
            && (self.mask == Mask::None || (self.mask == Mask::Causal && self.d.max(self.dv) < 256))
            && !self.wgmma_chain_tiles()
            && !self.feat.split
            && !self.feat.softcap
    }

    /// Whether the wgmma kernel can split its schedule's tail (`Tiles` in fwd_sm90.cu): a
    /// persistent grid of G CTAs (or pairs) over U equal tiles idles (ceil(U / G) - U / G) /
    /// ceil(U / G) of the call in its last round, 3% at 2048 tiles on 132 CTAs (measured with
    /// ncu: max/mean active cycles per SM 1.032). The last U % G + G tiles are dealt instead
    /// as equal shares of their K blocks (Stream-K's idea), so a tile may be computed in two
    /// parts by two CTAs; each writes its unnormalised O and row state to the workspace, and
    /// the one that finishes second merges and stores. Unmasked dense calls only: every tile
    /// then visits the same blocks, so a share's tiles and parts follow in closed form.
    /// Not where tiles chain (d 64's four stages): the merge's registers spilled in that
    /// kernel's main loop, and d 64 tiles at 192 rows leave a smaller tail (0.7% at 16k). Not
    /// with packed GQA (spilled at d 256; selection packs by default only at d <= 64 or for
    /// short queries, which have no tail to split).
    pub fn wgmma_split_tail(&self) -> bool {
        self.imp == Impl::Wgmma
            && self.mask == Mask::None
            && !self.wgmma_chain_tiles()
            && !self.pack_gqa
            && !self.feat.varlen
            && !self.feat.paged
            && !self.feat.split
    }

    /// Registers per thread of the wgmma kernel's (producer, consumer) warpgroups after
    /// `setmaxnreg`: the consumers take what the producer gives back (FA3's split).
    pub fn wgmma_registers(&self) -> (u32, u32) {
        if self.tile_m / 64 >= 3 {
            (24, 160)
        } else if self.wgmma_ctas_per_sm() == 2 {
            (24, 232)
        } else {
            (24, 240)
        }
    }

    /// Registers per thread a CTA of the wgmma kernel launches with, the pool `setmaxnreg`
    /// moves registers within: each of the SM's four sub-partitions has 16 Ki registers for
    /// the warps dealt to it (a CTA's warps round-robin, `wgmma_ctas_per_sm` CTAs), in steps
    /// of 8 per thread. 384 threads get 168, 512 get 128; 640 would get 96 (five warps a
    /// sub-partition), so four consumers could grow to 112 only: measured in the thirty-ninth
    /// session, where asking 120 hung the kernel in `setmaxnreg`.
    pub fn wgmma_launch_registers(&self) -> u32 {
        let warps_per_partition =
            (self.geometry().threads / 32).div_ceil(4) * self.wgmma_ctas_per_sm();
        (16384 / (32 * warps_per_partition) / 8 * 8).min(256)
    }

    /// CTAs of this kernel one SM holds at once: `__launch_bounds__(threads, 1)` lets ptxas use
    /// up to 255 registers per thread, so registers allow `65536 / (threads * 255)`; shared
    /// memory allows the arch's per-CTA limit over this kernel's need.
    pub fn ctas_per_sm(&self) -> u32 {
        if self.imp == Impl::Wgmma {
            return self.wgmma_ctas_per_sm();
        }
        let g = self.geometry();
        let by_regs = (65536 / (g.threads * 255)).max(g.min_ctas);
        let by_smem = (self.arch.max_dynamic_smem() / g.smem_bytes.max(1)).max(1);
        by_regs.min(by_smem)
    }

    /// Every limit of the implementation, as code. `Ok` means the generated kernel compiles
    /// and runs correctly for every problem the runtime routes to it.
    pub fn can_implement(&self) -> Result<(), Unsupported> {
        if self.imp == Impl::Wgmma {
            return self.wgmma_can_implement();
        }
        for (name, value) in [("d", self.d), ("dv", self.dv)] {
            if value == 0 || !value.is_multiple_of(8) || value > 256 {
                return Err(Unsupported::HeadDim { name, value });
            }
        }
        if ![16, 64, 128].contains(&self.tile_m) {
            return Err(Unsupported::TileM {
                imp: self.imp.name(),
                tile_m: self.tile_m,
            });
        }
        if self.tile_n == 0 || !self.tile_n.is_multiple_of(16) || self.tile_n > 256 {
            return Err(Unsupported::TileN {
                tile_n: self.tile_n,
            });
        }
        if !(1..=2).contains(&self.q_stage) {
            return Err(Unsupported::QStage {
                q_stage: self.q_stage,
            });
        }
        // A key-split tile (16 rows): one Q tile per CTA, and each warp's share of a block whole
        // MMA k steps.
        if self.tile_m == 16 && self.q_stage != 1 {
            return Err(Unsupported::KeySplitQStage {
                q_stage: self.q_stage,
            });
        }
        if self.tile_m == 16 && !self.tile_n.is_multiple_of(16 * KEY_SPLIT_WARPS) {
            return Err(Unsupported::KeySplitTileN {
                tile_n: self.tile_n,
                multiple: 16 * KEY_SPLIT_WARPS,
            });
        }
        let g = self.geometry();
        let limit = self.arch.max_dynamic_smem();
        if g.smem_bytes > limit {
            return Err(Unsupported::SharedMemory {
                stem: self.stem(),
                arch: self.arch,
                need: g.smem_bytes,
                limit,
            });
        }
        // fp32 accumulators per thread, O (warp_m x dv) and S (warp_m x tile_n), plus the rest,
        // against the register file share of one thread (64 Ki registers per SM, 255 max).
        let need = portable_regs(g.warp_m, g.dv_pad, self.tile_n / g.warps_n);
        let limit = (65536 / g.threads).min(255);
        if need > limit {
            return Err(Unsupported::Registers {
                stem: self.stem(),
                need,
                threads: g.threads,
                limit,
            });
        }
        Ok(())
    }
}

/// K/V pipeline stages of the wgmma kernel: at least `WGMMA_STAGES`, and up to
/// `WGMMA_MAX_STAGES` where shared memory holds them beside two Q buffers and O's own rows
/// (d 64). More stages let the producer run further past a tile's end, which chained tiles
/// need (`KernelSpec::wgmma_chain_tiles`): d 64 with chained tiles, 4 stages against 2 (H200,
/// same run), S 512 causal 253-257 against 229-236 TFLOP/s, 1k causal 328-334 against
/// 296-300, window 128 at 16k 0.228-0.232 against 0.250-0.263 ms.
pub const WGMMA_STAGES: u32 = 2;
pub const WGMMA_MAX_STAGES: u32 = 4;

/// Shared memory one of two CTAs on an sm90 SM may take: half the SM's 228 KiB, less the
/// 1 KiB the driver reserves per CTA.
const SM90_SMEM_SHARE_OF_2: u32 = 228 * 1024 / 2 - 1024;

impl KernelSpec {
    fn wgmma_can_implement(&self) -> Result<(), Unsupported> {
        let no = |why: &'static str| {
            Err(Unsupported::Wgmma {
                stem: self.stem(),
                why,
            })
        };
        if self.arch != Arch::Sm90 {
            return no("runs on sm90 only (wgmma and setmaxnreg are sm_90a instructions)");
        }
        for (name, value) in [("d", self.d), ("dv", self.dv)] {
            if value == 0 || !value.is_multiple_of(16) || value > 256 {
                let _ = name; // both dims share one limit
                return no("needs head dims that are multiples of 16 up to 256 (the wgmma k step)");
            }
        }
        if ![64, 128, 192].contains(&self.tile_m) {
            return no("needs tile_m 64, 128 or 192 (one consumer warpgroup per 64 rows)");
        }
        if self.tile_n == 0 || !self.tile_n.is_multiple_of(16) || self.tile_n > 256 {
            return no("needs tile_n a multiple of 16 up to 256");
        }
        if self.q_stage != 1 {
            return no("has no q_stage 2 (two consumer warpgroups already share each K/V tile)");
        }
        if self.feat.split && self.mask == Mask::Local {
            return no("splits K only unmasked or causal (a window's tiles visit a few blocks)");
        }
        let g = self.geometry();
        let limit = self.arch.max_dynamic_smem();
        if g.smem_bytes > limit {
            return Err(Unsupported::SharedMemory {
                stem: self.stem(),
                arch: self.arch,
                need: g.smem_bytes,
                limit,
            });
        }
        // setmaxnreg.inc waits until the pool holds what it asks: past it, never.
        let (producer, consumer) = self.wgmma_registers();
        let asked = producer * 128 + consumer * (g.threads - 128);
        let pool = self.wgmma_launch_registers() * g.threads;
        if asked > pool {
            return Err(Unsupported::RegisterPool {
                stem: self.stem(),
                asked,
                pool,
            });
        }
        // Per consumer thread: O (64 x dv) and S (64 x tile_n) fp32 accumulators and P as
        // 16-bit (half of S), plus addresses and softmax state.
        let need = (g.dv_pad + self.tile_n + self.tile_n / 2) / 2 + 32;
        let limit = self.wgmma_registers().1;
        if need > limit {
            return Err(Unsupported::Registers {
                stem: self.stem(),
                need,
                threads: g.threads,
                limit,
            });
        }
        Ok(())
    }
}

impl fmt::Display for KernelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.stem())
    }
}

/// A stem that does not parse, with the token at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("bad kernel stem `{stem}`: {why}")]
pub struct StemError {
    pub stem: String,
    pub why: String,
}

impl FromStr for KernelSpec {
    type Err = StemError;

    fn from_str(stem: &str) -> Result<Self, StemError> {
        let err = |why: String| StemError {
            stem: stem.to_string(),
            why,
        };
        let mut it = stem.split('.');
        let mut next = |what: &str| it.next().ok_or_else(|| err(format!("missing {what}")));
        let kind = next("kernel kind")?;
        if kind != "fwd" {
            return Err(err(format!("unknown kernel kind `{kind}`")));
        }
        let arch: Arch = next("arch")?.parse().map_err(err)?;
        let imp_tok = next("implementation")?;
        let imp = Impl::ALL
            .into_iter()
            .find(|i| i.name() == imp_tok)
            .ok_or_else(|| err(format!("unknown implementation `{imp_tok}`")))?;
        let dt_tok = next("dtype")?;
        let dtype = DType::ALL
            .into_iter()
            .find(|t| t.name() == dt_tok)
            .ok_or_else(|| err(format!("unknown dtype `{dt_tok}`")))?;
        let dims = next("head dims")?;
        let (d, dv) = dims
            .strip_prefix('d')
            .and_then(|r| r.split_once('x'))
            .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
            .ok_or_else(|| err(format!("head dims `{dims}` are not d<D>x<DV>")))?;
        let tiles = next("tile")?;
        let (tile_m, tile_n) = tiles
            .strip_prefix('m')
            .and_then(|r| r.split_once('n'))
            .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
            .ok_or_else(|| err(format!("tile `{tiles}` is not m<M>n<N>")))?;
        let qs = next("q_stage")?;
        let q_stage = qs
            .strip_prefix('q')
            .and_then(|r| r.parse().ok())
            .ok_or_else(|| err(format!("q_stage `{qs}` is not q<N>")))?;
        let mut spec = KernelSpec {
            arch,
            imp,
            dtype,
            d,
            dv,
            tile_m,
            tile_n,
            q_stage,
            mask: Mask::None,
            lse: false,
            pack_gqa: false,
            feat: Features::default(),
        };
        // Optional tokens, each at most once and in canonical order.
        let mut rest: Vec<&str> = it.collect();
        rest.reverse();
        if let Some(&t) = rest.last()
            && let Some(m) = Mask::ALL.into_iter().find(|m| m.token() == Some(t))
        {
            spec.mask = m;
            rest.pop();
        }
        for (token, _, set) in FLAGS {
            if rest.last() == Some(token) {
                set(&mut spec);
                rest.pop();
            }
        }
        if let Some(t) = rest.last() {
            return Err(err(format!("unexpected or out-of-order token `{t}`")));
        }
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// O goes from registers to global memory exactly where it has no staging rows besides
    /// the one Q buffer; two Q buffers or O's own rows keep the TMA store.
    #[test]
    fn o_from_registers_where_one_q_buffer_and_no_o_rows() {
        for (stem, direct) in [
            ("fwd.sm90.wgmma.bf16.d256x256.m128n80.q1.causal", true),
            ("fwd.sm90.wgmma.bf16.d256x256.m128n64.q1.local", true),
            ("fwd.sm90.wgmma.bf16.d192x128.m128n128.q1.causal", true),
            ("fwd.sm90.wgmma.bf16.d192x128.m128n64.q1.causal", false),
            ("fwd.sm90.wgmma.bf16.d128x128.m128n160.q1", false),
            ("fwd.sm90.wgmma.bf16.d128x128.m128n128.q1.causal", false),
            ("fwd.sm90.wgmma.bf16.d64x64.m192n128.q1", false),
        ] {
            let spec: KernelSpec = stem.parse().unwrap();
            let g = spec.geometry();
            assert_eq!(spec.wgmma_o_direct(), direct, "{stem}");
            if direct {
                assert_eq!((g.q_bufs, g.smem_o), (1, g.smem_q), "{stem}");
            }
        }
    }

    /// CTA pairs: dense calls at d >= 128, unmasked or causal; not a local window, not packed,
    /// varlen, paged or split, and not causal where tiles chain (a tile's first block would
    /// run in the tile before, ahead of its partner's extra blocks).
    #[test]
    fn pairs_where_partners_share_their_blocks() {
        for (stem, pairs) in [
            ("fwd.sm90.wgmma.bf16.d128x128.m128n128.q1", true),
            ("fwd.sm90.wgmma.bf16.d128x128.m128n128.q1.causal", true),
            ("fwd.sm90.wgmma.bf16.d256x256.m128n80.q1.causal.lse", true),
            ("fwd.sm90.wgmma.bf16.d192x128.m128n128.q1.causal", true),
            ("fwd.sm90.wgmma.bf16.d128x128.m128n128.q1.local", false),
            (
                "fwd.sm90.wgmma.bf16.d128x128.m128n128.q1.causal.varlen",
                true,
            ),
            (
                "fwd.sm90.wgmma.bf16.d128x128.m128n128.q1.causal.varlen.paged",
                false,
            ),
            (
                "fwd.sm90.wgmma.bf16.d128x128.m128n128.q1.causal.packgqa",
                false,
            ),
            ("fwd.sm90.wgmma.bf16.d64x64.m192n128.q1.causal", false),
            ("fwd.sm90.wgmma.bf16.d128x128.m128n64.q1", true),
            ("fwd.sm90.wgmma.bf16.d128x128.m128n64.q1.causal", false),
        ] {
            let spec: KernelSpec = stem.parse().unwrap();
            assert_eq!(spec.wgmma_pairs(), pairs, "{stem}");
        }
        let chained: KernelSpec = "fwd.sm90.wgmma.bf16.d128x128.m128n64.q1.causal"
            .parse()
            .unwrap();
        assert!(chained.wgmma_chain_tiles());
    }

    /// The stale max where it measured a gain: head dims of 128 and more, unmasked, or causal
    /// below d 256; not d 64, not causal d 256, no window, no softcap, no chained tiles.
    #[test]
    fn stale_max_where_measured_to_gain() {
        for (stem, stale) in [
            ("fwd.sm90.wgmma.bf16.d128x128.m128n128.q1", true),
            ("fwd.sm90.wgmma.fp16.d128x128.m128n160.q1.lse", true),
            ("fwd.sm90.wgmma.bf16.d192x128.m128n128.q1", true),
            ("fwd.sm90.wgmma.bf16.d192x128.m128n128.q1.causal", true),
            ("fwd.sm90.wgmma.bf16.d256x256.m128n80.q1", true),
            ("fwd.sm90.wgmma.bf16.d256x256.m128n80.q1.causal", false),
            ("fwd.sm90.wgmma.bf16.d128x128.m128n160.q1.causal.lse", true),
            ("fwd.sm90.wgmma.bf16.d64x64.m192n128.q1", false),
            ("fwd.sm90.wgmma.bf16.d128x128.m128n128.q1.local", false),
            ("fwd.sm90.wgmma.bf16.d128x128.m128n128.q1.sink", true),
            ("fwd.sm90.wgmma.bf16.d128x128.m128n128.q1.varlen", true),
            (
                "fwd.sm90.wgmma.bf16.d128x128.m128n128.q1.causal.packgqa",
                true,
            ),
            (
                "fwd.sm90.wgmma.bf16.d128x128.m128n128.q1.causal.lse.packgqa.varlen.paged.sink",
                true,
            ),
            ("fwd.sm90.wgmma.bf16.d128x128.m128n128.q1.softcap", false),
            (
                "fwd.sm90.wgmma.bf16.d256x256.m128n80.q1.causal.packgqa",
                false,
            ),
            ("fwd.sm90.wgmma.bf16.d128x128.m128n64.q1.causal", false),
            ("fwd.sm90.portable.bf16.d128x128.m128n64.q1", false),
        ] {
            let spec: KernelSpec = stem.parse().unwrap();
            assert_eq!(spec.wgmma_stale_max(), stale, "{stem}");
        }
    }

    fn base() -> KernelSpec {
        KernelSpec {
            arch: Arch::Sm90,
            imp: Impl::Portable,
            dtype: DType::Bf16,
            d: 128,
            dv: 128,
            tile_m: 128,
            tile_n: 64,
            q_stage: 1,
            mask: Mask::Causal,
            lse: true,
            pack_gqa: false,
            feat: Features::default(),
        }
    }

    #[test]
    fn stem_format() {
        assert_eq!(
            base().stem(),
            "fwd.sm90.portable.bf16.d128x128.m128n64.q1.causal.lse"
        );
        assert_eq!(
            base().symbol(),
            "fa4gen_fwd_sm90_portable_bf16_d128x128_m128n64_q1_causal_lse"
        );
    }

    #[test]
    fn stem_round_trip_every_flag_combination() {
        for arch in Arch::ALL {
            for dtype in DType::ALL {
                for mask in Mask::ALL {
                    for bits in 0..(1u32 << FLAGS.len()) {
                        let mut s = KernelSpec {
                            arch,
                            dtype,
                            mask,
                            lse: false,
                            pack_gqa: false,
                            d: 192,
                            dv: 128,
                            ..base()
                        };
                        for (i, (_, _, set)) in FLAGS.iter().enumerate() {
                            if bits & (1 << i) != 0 {
                                set(&mut s);
                            }
                        }
                        let parsed: KernelSpec = s.stem().parse().unwrap();
                        assert_eq!(parsed, s, "{}", s.stem());
                    }
                }
            }
        }
    }

    #[test]
    fn bad_stems_are_rejected() {
        for bad in [
            "",
            "bwd.sm90.portable.bf16.d128x128.m128n64.q1",
            "fwd.sm80.portable.bf16.d128x128.m128n64.q1",
            "fwd.sm90.tcgen05.bf16.d128x128.m128n64.q1",
            "fwd.sm90.portable.fp32.d128x128.m128n64.q1",
            "fwd.sm90.portable.bf16.d128.m128n64.q1",
            "fwd.sm90.portable.bf16.d128x128.m128.q1",
            "fwd.sm90.portable.bf16.d128x128.m128n64",
            "fwd.sm90.portable.bf16.d128x128.m128n64.q1.lse.causal",
            "fwd.sm90.portable.bf16.d128x128.m128n64.q1.lse.lse",
            "fwd.sm90.portable.bf16.d128x128.m128n64.q1.softcap.sink",
            "fwd.sm90.portable.bf16.d128x128.m128n64.q1.softcaps",
        ] {
            assert!(bad.parse::<KernelSpec>().is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn can_implement_rejections() {
        let cases: Vec<(KernelSpec, &str)> = vec![
            (KernelSpec { d: 100, ..base() }, "head dim d=100"),
            (KernelSpec { dv: 0, ..base() }, "head dim dv=0"),
            (KernelSpec { d: 264, ..base() }, "head dim d=264"),
            (
                KernelSpec {
                    tile_m: 96,
                    ..base()
                },
                "tile_m=96",
            ),
            (
                KernelSpec {
                    tile_n: 40,
                    ..base()
                },
                "tile_n=40",
            ),
            (
                KernelSpec {
                    q_stage: 3,
                    ..base()
                },
                "q_stage=3",
            ),
            (
                KernelSpec {
                    arch: Arch::Sm120,
                    d: 256,
                    dv: 256,
                    tile_n: 128,
                    ..base()
                },
                "shared memory",
            ),
            (
                KernelSpec {
                    d: 128,
                    tile_n: 128,
                    ..base()
                },
                "registers",
            ),
        ];
        for (spec, want) in cases {
            let e = spec.can_implement().unwrap_err().to_string();
            assert!(
                e.contains(want),
                "{}: got `{e}`, want `{want}`",
                spec.stem()
            );
        }
        base().can_implement().unwrap();
    }

    #[test]
    fn wgmma_register_pools_hold_what_setmaxnreg_asks() {
        // (stem, registers per thread at launch, CTAs per SM)
        for (stem, launch, ctas) in [
            ("fwd.sm90.wgmma.bf16.d64x64.m192n128.q1", 128, 1),
            ("fwd.sm90.wgmma.bf16.d128x128.m128n128.q1.causal", 168, 1),
            ("fwd.sm90.wgmma.bf16.d256x256.m128n80.q1", 168, 1),
            ("fwd.sm90.wgmma.bf16.d64x64.m64n128.q1", 128, 2),
        ] {
            let spec: KernelSpec = stem.parse().unwrap();
            assert_eq!(spec.wgmma_launch_registers(), launch, "{stem}");
            assert_eq!(spec.wgmma_ctas_per_sm(), ctas, "{stem}");
            let (producer, consumer) = spec.wgmma_registers();
            let threads = spec.geometry().threads;
            // setmaxnreg asks no more than the launch gave.
            assert!(
                producer * 128 + consumer * (threads - 128) <= launch * threads,
                "{stem}"
            );
            assert!(spec.can_implement().is_ok(), "{stem}");
        }
    }

    #[test]
    fn geometry_is_consistent() {
        // Rows padded by 8 elements, except K and V rows of whole 128-byte spans in tiles of
        // at most 64 rows: swizzled, unpadded.
        let g = base().geometry();
        assert_eq!((g.warp_m, g.warps, g.threads), (32, 4, 128));
        assert_eq!((g.warps_n, g.min_ctas), (1, 1));
        assert_eq!(g.smem_bytes, 2 * (128 * 136 + 64 * 136 + 64 * 136));
        let g = KernelSpec {
            tile_m: 64,
            ..base()
        }
        .geometry();
        assert_eq!(g.smem_bytes, 2 * (64 * 136 + 64 * 128 + 64 * 128));
        let g = KernelSpec {
            d: 96,
            dv: 96,
            ..base()
        }
        .geometry();
        assert_eq!(g.smem_bytes, 2 * (128 * 104 + 64 * 104 + 64 * 104));
        // A 16-row tile: four warps along the keys, three CTAs per SM at d 128.
        let g = KernelSpec {
            tile_m: 16,
            tile_n: 128,
            ..base()
        }
        .geometry();
        assert_eq!((g.warp_m, g.warps_n, g.warps, g.threads), (16, 4, 4, 128));
        assert_eq!(g.smem_bytes, 2 * (16 * 136 + 128 * 128 + 128 * 128));
        assert_eq!(g.min_ctas, 3);
        let g = KernelSpec {
            d: 256,
            dv: 256,
            ..base()
        }
        .geometry();
        assert_eq!((g.warp_m, g.warps, g.threads), (16, 8, 256));
        let g = KernelSpec {
            d: 72,
            dv: 72,
            q_stage: 2,
            ..base()
        }
        .geometry();
        assert_eq!((g.d_pad, g.warps), (80, 8));
    }
}
