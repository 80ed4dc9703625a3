//! Tile tables: the (tile_m, tile_n) a family uses for a head dim. Plans enumerate kernels with
//! these and the runtime selects with these, so the two can never disagree (FA3's host code and
//! its generator each kept a copy: "this needs to match the kernel configs").

use crate::arch::Arch;
use crate::spec::{DType, Features, Impl, KernelSpec, Mask};

/// Candidate tiles of the portable kernel, best first; later ones are fall-backs where a
/// family's shared memory or registers cannot hold the first (sm120 at d = 256, q_stage 2 at
/// dv > 128). Chosen by the `tiles` sweep on the H200 (bf16, S = 4096, B·S = 16k, H·d = 2048,
/// TFLOP/s non-causal / causal; docs/BENCHMARKS.md):
/// - d 64:      128x128 310/278, 128x64 273/259, 64x128 252/238, 64x64 233/241, 128x32 180/214
/// - d 128:     128x64 347/302, 128x32 308/269, 64x128 278/259, 64x64 266/252
/// - d 192/128: 128x64 334/293, 128x32 304/260, 64x128 264/249, 64x64 252/232
/// - d 256:     64x64 287/265, 128x128 287/248, 128x64 264/232, 128x32 230/203, 64x128 215/161
///   (64x64: 4 warps and 99 KB, so two CTAs share an SM and cover each other's barriers).
fn portable_candidates(d: u32, dv: u32, mask: Mask, feat: Features) -> &'static [(u32, u32)] {
    if d.max(dv) <= 64 && mask != Mask::Local && !feat.varlen && !feat.split && !feat.paged {
        &[(128, 128), (128, 64), (64, 64)]
    } else if d.max(dv) <= 64 {
        // Local windows visit few blocks; 128x128 spilled here (the window test per element
        // needs registers the 128 S accumulators hold). Ragged batches, pages and split-KV hold a
        // sequence's offsets and lengths (or its split range) and spilled 112-252 bytes at
        // 128x128 with causal masks (gpt-oss plan, NVRTC 13.5).
        &[(128, 64), (64, 64)]
    } else if dv > 128 {
        &[(64, 64), (128, 64), (64, 32)]
    } else {
        &[(128, 64), (64, 64), (64, 32)]
    }
}

/// Everything of a portable `KernelSpec` but its tile: what a problem (or a plan entry) fixes.
/// Plans, the tile sweep and selection all build specs through it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpecClass {
    pub arch: Arch,
    pub dtype: DType,
    pub d: u32,
    pub dv: u32,
    pub q_stage: u32,
    pub mask: Mask,
    pub lse: bool,
    pub pack_gqa: bool,
    pub feat: Features,
}

impl SpecClass {
    /// The spec on a given tile (not checked: see `KernelSpec::can_implement`).
    pub fn on_tile(self, tile_m: u32, tile_n: u32) -> KernelSpec {
        KernelSpec {
            arch: self.arch,
            imp: Impl::Portable,
            dtype: self.dtype,
            d: self.d,
            dv: self.dv,
            tile_m,
            tile_n,
            q_stage: self.q_stage,
            mask: self.mask,
            lse: self.lse,
            pack_gqa: self.pack_gqa,
            feat: self.feat,
        }
    }

    /// The spec on the first tile of the table the family can implement; `None` when no tile
    /// fits (head dims out of range).
    pub fn portable(self) -> Option<KernelSpec> {
        portable_candidates(self.d, self.dv, self.mask, self.feat)
            .iter()
            .map(|&(m, n)| self.on_tile(m, n))
            .find(|s| s.can_implement().is_ok())
    }

    /// The Hopper flagship (`Impl::Wgmma`) spec on its tile table, when the family is sm90 and
    /// the kernel implements the class (dense, sinks and softcap included, q_stage 1, head
    /// dims multiples of 16), packed or not as the class says (selection unpacks a class
    /// whose group the flagship cannot pack, `runtime::tma::packs_group`); `None` sends the
    /// class to the portable kernel.
    pub fn flagship(self) -> Option<KernelSpec> {
        self.flagship_tiles().next()
    }

    /// The flagship for a problem's shape: among the table's wide tiles (`flagship_by_shape`)
    /// the one of least cost, `TileShape::cost`: the blocks its tiles visit (padding rows and
    /// keys included), each costing its rows times its keys plus `BLOCK_OVERHEAD_KEYS`, over
    /// the tile's rate. The table is ordered for long sequences; short ones pay for padding
    /// instead. At d 128 (H200, B·S 16k, same run) 128x128 ran 571/288 TFLOP/s full/causal
    /// at S 512 against 464/261 for 128x160, 576/374 against 529/339 at 1k, 622/482 against
    /// 615/477 at 4k; the table's 128x160 is ahead at 16k. At d 64, 192x128 ran 505-520/437
    /// against 463-471/404-412 for 128x128 at 4k, but 276-280 against 292-302 at 1k causal,
    /// where a 192-row tile's padding and diagonal cost more than its rate gains.
    pub fn flagship_for_shape(self, shape: TileShape) -> Option<KernelSpec> {
        cheapest(self.flagship_by_shape(), shape)
    }

    /// The flagship tiles `flagship_for_shape` chooses among: the table's first, and the
    /// others at least 128 keys wide (the narrower ones exist for registers or local masks,
    /// not for short sequences) — every one for a packed local mask, whose tiles hold
    /// tile_m / G queries and so span few more keys than the window: there narrow blocks
    /// waste less (H200, d 64, H64/Hkv8, window 128, three interleaved rounds, grid-aligned
    /// blocks: 192x64 0.186-0.192 ms at S 16k and 0.196-0.198 for gpt-oss's sliding layer,
    /// against 0.207-0.210 / 0.216-0.217 on 192x128, 0.205 / 0.212 on 128x64; since
    /// window-aligned blocks 192x80 leads, see `wgmma_candidates`; unpacked, whose tiles
    /// span tile_m + window keys, 192x64 lost: 0.285 against 0.234 on 128x128). Where
    /// registers hold the table's first tile under 128 keys (d 256: 128x80) its narrower
    /// tiles are shape candidates too: short causal calls pad less on them (H200, sustained
    /// protocol, two rounds: d 256 causal S 512 128x64 325-327 TFLOP/s against 308 on 128x80,
    /// 1k 444-445 against 429-430). Plans carry all of them.
    pub fn flagship_by_shape(self) -> impl Iterator<Item = KernelSpec> {
        let first = self.flagship();
        let narrow_too = self.pack_gqa && self.mask == Mask::Local;
        self.flagship_tiles().filter(move |s| {
            first.is_some_and(|f| *s == f || s.tile_n >= 128 || f.tile_n < 128 || narrow_too)
        })
    }

    /// The flagship's fill tile: 64 rows (one consumer warpgroup) by 128 keys, for long calls
    /// whose 128-row tiles would leave half the SMs idle (`select::FILL_MIN_KEYS`): twice the
    /// tiles in one round, at about 0.63 of a 128-row tile's rate per SM. H200, d 128 H 32/8,
    /// causal bottom-right, CUDA graphs, ms forced 128x128 / 64x128 in one run
    /// (`…-session31-chunked-fill.jsonl`): Sq 128 over 8k 0.091 / 0.072, over 32k 0.337 /
    /// 0.265; Sq 256 over 4k 0.050 / 0.040, over 32k 0.346 / 0.264; B 2 x Sq 32 packed (H 64/8)
    /// over 8k 0.089 / 0.070; d 96 Sq 256 over 32k 0.341 / 0.254: 1.25-1.34x. With twice the
    /// SMs' worth of 128-row tiles it loses (Sq 512 over 32k, 128 tiles: 0.40 / 0.57). Head
    /// dims 65-128, unmasked or causal, with every serving feature but the split (varlen,
    /// pages, sinks, softcap: chunked prefill in an engine is a varlen call over a paged
    /// cache); `None` elsewhere.
    pub fn flagship_fill(self) -> Option<KernelSpec> {
        let fits = self.arch == Arch::Sm90
            && (65..=128).contains(&self.d.max(self.dv))
            && self.mask != Mask::Local
            && !self.feat.split;
        Some(KernelSpec {
            imp: Impl::Wgmma,
            ..self.on_tile(64, 128)
        })
        .filter(|s| fits && s.can_implement().is_ok())
    }

    /// The flagship's 128-row tile for a class whose table leads with 192 rows (d <= 64), for
    /// calls of one round either way (`select::narrow`): both row counts' tiles fit on the SMs
    /// at once, so the call takes one tile's time, and a 128-row tile takes 0.73-0.83 of a
    /// 192-row one's. H200, d 64 H 64/8 packed, causal bottom-right, unsplit, CUDA graphs, two
    /// libraries in one run (`…-session49-chunked-{main,d64}.jsonl`): Sq 256 over 16k (88 tiles
    /// of 192 rows, 128 of 128) 0.1828 / 0.1842 ms on 192x128 against 0.1603 / 0.1599 on
    /// 128x128; beside FA4 in one run (`…-session49-fa4-chunked-serving.jsonl`) 0.186 forced
    /// onto 192x128, 0.160-0.172 on 128x128, FA4 0.177; pages of 128 / 16 0.196 / 0.223 on
    /// 192x128, 0.168 / 0.196 on 128x128. Unmasked or causal, with every serving feature but
    /// the split; `None` elsewhere.
    pub fn flagship_one_round(self) -> Option<KernelSpec> {
        let first = self.flagship()?;
        (first.tile_m == 192 && self.mask != Mask::Local && !self.feat.split)
            .then(|| KernelSpec {
                imp: Impl::Wgmma,
                ..self.on_tile(128, first.tile_n)
            })
            .filter(|s| s.can_implement().is_ok())
    }

    /// The flagship for paged K/V of `page_size` keys, whose blocks TMA loads as boxes of
    /// gcd(page_size, tile_n) rows, one per page. Each box costs: on the H200 (d 128, B 8,
    /// Sq 1k, Sk 4k, H 32/8, causal; contiguous 128x160 0.753 ms, 128x128 0.838 ms) page 128
    /// on 128x128 (one box per 64 columns) ran 0.834 ms, on 128x160 (boxes of 32 rows)
    /// 0.895 ms; page 16 1.06 ms on 128x128, 1.02 ms on 128x160. So a tile whose blocks lie
    /// inside a page comes first, else the table's first tile the pages fit; `None` (pages not
    /// a multiple of 8 keys) leaves the call to the portable kernel.
    pub fn flagship_for_pages(self, page_size: usize) -> Option<KernelSpec> {
        use crate::runtime::tma::{page_fits, pages_hold_blocks};
        self.flagship_tiles()
            .find(|s| pages_hold_blocks(page_size, s.tile_n))
            .or_else(|| {
                self.flagship_tiles()
                    .find(|s| page_fits(page_size, s.tile_n))
            })
    }

    /// The flagship for paged K/V of `page_size` keys and a call of `shape`. Under a local
    /// window blocks start at each tile's window (at the TMA box boundary before it), not on
    /// pages, so the tile is chosen by shape (`flagship_for_shape`) among those the pages fit:
    /// H200, B 1, S 16k, H 32/4, window 128, d 64, sustained, two rounds, TFLOP/s on the
    /// visible pairs (`…-session20-paged-window-ab.txt`): pages of 16 192x80 202 (boxes of 16
    /// rows), 128x144 199, 192x128 163, 192x64 163; pages of 128 192x80 205, 192x128 156 (the
    /// grid's 157; contiguous 192x80 225). Otherwise `flagship_for_pages`.
    pub fn flagship_for_paged_shape(
        self,
        page_size: usize,
        shape: TileShape,
    ) -> Option<KernelSpec> {
        if self.mask != Mask::Local {
            return self.flagship_for_pages(page_size);
        }
        use crate::runtime::tma::page_fits;
        cheapest(
            self.flagship_by_shape()
                .filter(|s| page_fits(page_size, s.tile_n)),
            shape,
        )
    }

    /// The flagship's implementable specs for this class, best first (packed GQA as the
    /// class says: selection takes a class unpacked where the flagship cannot pack it).
    fn flagship_tiles(self) -> impl Iterator<Item = KernelSpec> {
        let table = if self.arch == Arch::Sm90 {
            wgmma_candidates(self.d, self.dv, self.mask)
        } else {
            &[]
        };
        table
            .iter()
            .map(move |&(m, n)| KernelSpec {
                imp: Impl::Wgmma,
                ..self.on_tile(m, n)
            })
            .filter(|s| s.can_implement().is_ok())
    }

    /// The module a standalone split-KV combine (FA4's `flash_attn_combine`) runs from. Every
    /// split module carries a `_combine` kernel, which reads only the dtype, dv, the LSE flag,
    /// the sink and the varlen arrays: not the mask, d, packing or tile. One canonical module
    /// per such key (the portable split forward of d = dv, unmasked, unpacked, q_stage 1) then
    /// serves the partials of any forward, so a plan ships a handful of them and the combine
    /// never depends on which forward produced its partials. `None` where dv has no portable
    /// tile (outside 8..=256).
    pub fn split_combine(
        arch: Arch,
        dtype: DType,
        dv: u32,
        lse: bool,
        sink: bool,
        varlen: bool,
    ) -> Option<KernelSpec> {
        SpecClass {
            arch,
            dtype,
            d: dv,
            dv,
            q_stage: 1,
            mask: Mask::None,
            lse,
            pack_gqa: false,
            feat: Features {
                varlen,
                sink,
                split: true,
                ..Features::default()
            },
        }
        .portable()
    }

    /// The spec on the decode tile table (see `decode_candidates`) for a problem of `rows`
    /// packed rows (at most `DECODE_ROWS`) whose CTAs see at most `keys` keys; `None` when no
    /// decode tile fits (the portable table then). The key-split 16-row tile serves at most 16
    /// rows over at most `KEY_SPLIT_MAX_KEYS` keys.
    pub fn decode(self, rows: usize, keys: usize) -> Option<KernelSpec> {
        self.decode_tiles().find(|s| match s.tile_m {
            16 => rows <= 16 && keys <= KEY_SPLIT_MAX_KEYS,
            _ => true,
        })
    }

    /// Every decode tile `decode` can pick (what a model plan ships for decode steps and
    /// small chunks): the first implementable key-split tile and the first other one.
    pub fn decode_tiles(self) -> impl Iterator<Item = KernelSpec> {
        let table = if self.q_stage == 1 {
            decode_candidates(self.d, self.dv)
        } else {
            &[]
        };
        let fits = table
            .iter()
            .map(move |&(m, n)| self.on_tile(m, n))
            .filter(|s| s.can_implement().is_ok());
        let key_split = fits.clone().find(|s| s.tile_m == 16);
        let rows = fits.clone().find(|s| s.tile_m != 16);
        key_split.into_iter().chain(rows)
    }
}

/// The spec of least `TileShape::cost` for `shape`; the first of equal costs wins, so the
/// table's order breaks ties.
fn cheapest(specs: impl Iterator<Item = KernelSpec>, shape: TileShape) -> Option<KernelSpec> {
    specs
        .fold(None, |best: Option<(f64, KernelSpec)>, s| {
            let c = shape.cost(&s);
            match best {
                Some((b, _)) if b <= c => best,
                _ => Some((c, s)),
            }
        })
        .map(|(_, s)| s)
}

/// Tiles of the wgmma kernel, best first: two 64-row consumer warpgroups, K/V tiles as wide as
/// the registers allow next to O. Measured on the H200 (`scripts/gpu-check.sh wgmma-tiles`,
/// bf16, S = 4096, B·S = 16k, H·d = 2048, TFLOP/s non-causal / causal, before persistence):
/// - d 64:      128x176 427/392, 128x128 417/395, 192x128 (three consumers) 381/389; after
///   the K/V release split 128x128 448/408, 128x160 434/397; after the tree-reduced softmax
///   (session 6) 192x128 505-520/437, 128x128 463-471/404-412
/// - d 128:     128x176 537/506, 128x128 524/492, 128x112 502/470, 128x64 424/413
/// - d 192/128: 128x128 538/524, 128x112 529/501, 128x96 513/494
/// - d 256:     128x80 (registers bound it) and 128x64 for local masks
///
/// Local masks take the narrower tile where the window test per element spilled. d 64 also
/// lists 192x64, and for local masks 192x80, which packed local masks choose by shape
/// (`SpecClass::flagship_by_shape`): a packed 192-row tile holds 24 queries, which under a
/// 128-key window span 151 keys, two blocks of 80 laid from the tile's first visible key
/// (`KernelSpec::window_blocks`). H200, B 1, S 16k, H 32/4, window 128, sustained, three
/// rounds, TFLOP/s on the visible pairs (`…-session19-window-blocks-ab.txt`): 192x80 220,
/// 64x144 218, 128x144 204, 192x96 201, 192x64 193 (180 with grid-aligned blocks, the old
/// default), 128x80 193, 192x128 169, 128x128 144. The cost model ranks 128x144 first (it
/// counts no per-tile work, which these one-block tiles are mostly made of), so the table
/// lists only the winner.
/// Packed GQA uses the same tables (`TileShape::group`: a packed tile holds tile_m / G queries).
/// Paged kernels pick among the same tiles by page size (`SpecClass::flagship_for_pages`).
fn wgmma_candidates(d: u32, dv: u32, mask: Mask) -> &'static [(u32, u32)] {
    match d.max(dv) {
        // (192x64 and 192x80 last: paged K/V takes the first tile its pages hold, 128x64 as
        // before.) 192x80 for local masks only: no other shape takes it.
        0..=64 if mask == Mask::Local => &[(192, 128), (128, 128), (128, 64), (192, 64), (192, 80)],
        0..=64 => &[(192, 128), (128, 128), (128, 64), (192, 64)],
        65..=128 => &[(128, 160), (128, 128), (128, 64)],
        129..=192 => &[(128, 128), (128, 112), (128, 64)],
        // 128x80 spilled 48-56 bytes with a local mask (NVRTC 13.5).
        _ if mask == Mask::Local => &[(128, 64)],
        _ => &[(128, 80), (128, 64)],
    }
}

/// Decode-shaped problems (at most 64 packed query rows: Sq * G for decode steps, small
/// chunks): a 64-row tile wastes half the MMA rows of a 128-row one, and 128-key blocks keep
/// twice the K/V bytes in flight per CTA. Measured on the H200 (bf16, d128, H32/Hkv8, Sq 1,
/// Sk 32k, split heuristic; docs/BENCHMARKS.md): B=1 2.34 TB/s (128x64) -> 2.90 (64x128),
/// B=64 3.57 -> 4.28 TB/s; 64x64 2.76 / 3.99, 64x32 and 128x32 slower.
/// The 16-row tile, whose four warps split each block's keys (`Geometry::warps_n`), serves
/// short key ranges (`KEY_SPLIT_MAX_KEYS`); longer ones and more rows take the first 64-row tile.
fn decode_candidates(d: u32, dv: u32) -> &'static [(u32, u32)] {
    if d.max(dv) <= 128 {
        &[(16, 128), (64, 128), (64, 64)]
    } else {
        &[(16, 64), (64, 64), (64, 32)]
    }
}

/// What a K block costs beyond its keys, in keys (`TileShape::cost`): fitted to the d 128
/// measurements of `SpecClass::flagship_for_shape` (128x128 and 128x160 even at 4k keys,
/// 128x128 ahead by the padding of a last 160-key block at 512 and 1k).
pub const BLOCK_OVERHEAD_KEYS: usize = 10;

/// A wgmma tile's work per cycle relative to two consumer warpgroups (`TileShape::cost`):
/// three consumers (192 rows) keep the tensor cores busier while the others run their
/// softmax. Under a mask 1.06-1.12x at d 64 (H200, S 4k and 16k, 192x128 against 128x128 in
/// one run, sixth session). Unmasked, since the eleventh session's consumer bookkeeping,
/// 1.25x and more per row (H200, same run: 533 against 424 TFLOP/s at S 2k, 463 against 402
/// at 1k and 404 against 363 at 512, whose 192-row tiles pad 1152 and 576 rows).
fn tile_rate(tile_m: u32, dense: bool) -> f64 {
    match (tile_m >= 192, dense) {
        (true, true) => 1.25,
        (true, false) => 1.1,
        (false, _) => 1.0,
    }
}

/// The shape a flagship tile is chosen for (`SpecClass::flagship_for_shape`): the longest
/// sequence's queries and keys, and the visible keys of query row r, [r + Sk - Sq -
/// `left`, r + Sk - Sq + `right`] (bottom-right aligned; causal: `right` = 0 and `left`
/// unbounded; no mask: both unbounded, e.g. Sq + Sk).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileShape {
    pub seqlen_q: usize,
    pub seqlen_k: usize,
    pub left: i64,
    pub right: i64,
    /// Heads per KV head: a packed-GQA tile of tile_m rows holds tile_m / group queries.
    pub group: usize,
}

impl TileShape {
    /// Every key visible to every query.
    pub fn dense(seqlen_q: usize, seqlen_k: usize) -> TileShape {
        let all = (seqlen_q + seqlen_k) as i64;
        TileShape {
            seqlen_q,
            seqlen_k,
            left: all,
            right: all,
            group: 1,
        }
    }

    /// The K blocks a kernel on `(tile_m, tile_n)` visits over all its Q tiles, as the kernel
    /// bounds them (`BottomRightMask::block_lo/block_hi`): Q tile i spans rows [i tm,
    /// min(i tm + tm, Sq)) and visits blocks floor(lo / n) .. ceil(hi / n) of its keys [lo,
    /// hi), both clamped to [0, Sk]. (The kernel clamps lo at 0 only: with a negative left
    /// window a tile whose keys start past Sk visits nothing, counted here as one block.)
    /// Closed form (sums of floors, O(log)): selection runs per call.
    pub fn visited_blocks(&self, tile_m: usize, tile_n: usize) -> u64 {
        let (sq, sk) = (self.seqlen_q as i64, self.seqlen_k as i64);
        let (tm, n) = (tile_m as i64, tile_n as i64);
        if sq == 0 || sk == 0 {
            return 0;
        }
        let m_blocks = (sq + tm - 1) / tm;
        let off = sk - sq;
        // Key bounds of Q tile i: lo = first row + off - left, hi = last row + off + right + 1.
        // All but the last tile are full, so both are linear in i there.
        let full = m_blocks - 1;
        let hi_sum = sum_div_clamped(full, tm + off + self.right, tm, sk, n, n - 1)
            + div_clamped(sq + off + self.right, sk, n, n - 1);
        let lo_sum = sum_div_clamped(full, off - self.left, tm, sk, n, 0)
            + div_clamped(full * tm + off - self.left, sk, n, 0);
        (hi_sum - lo_sum).max(0) as u64
    }

    /// The K blocks a kernel that lays each Q tile's blocks from its first visible key
    /// (`KernelSpec::window_blocks`) visits: ceil((hi - lo) / n) per tile, its keys [lo,
    /// hi) clamped to [0, Sk]. (A paged wgmma kernel starts at the TMA box boundary at or
    /// before lo, which can cost a tile one block more; selection ranks tiles on this count
    /// all the same.) Closed form, like `visited_blocks`: the full tiles' bounds are
    /// lo = i tm + a and hi = i tm + b (b - a = tm + left + right), so a tile's span is hi
    /// (while lo clamps at 0), the constant b - a, Sk (both clamp) or Sk - lo (hi clamps),
    /// in that order along i.
    pub fn visited_window_blocks(&self, tile_m: usize, tile_n: usize) -> u64 {
        let (sq, sk) = (self.seqlen_q as i64, self.seqlen_k as i64);
        let (tm, n) = (tile_m as i64, tile_n as i64);
        if sq == 0 || sk == 0 {
            return 0;
        }
        let blocks = |span: i64| (span.max(0) + n - 1) / n;
        let m_blocks = (sq + tm - 1) / tm;
        let off = sk - sq;
        let full = m_blocks - 1;
        let (a, b) = (off - self.left, tm + off + self.right);
        // Full tiles whose lo clamps at 0 (a + i tm <= 0), and whose hi does not reach Sk.
        let lo_at_0 = if a > 0 { 0 } else { ((-a) / tm + 1).min(full) };
        let hi_in = if b > sk {
            0
        } else {
            ((sk - b) / tm + 1).min(full)
        };
        let first = lo_at_0.min(hi_in);
        let both_free = (hi_in - lo_at_0).max(0); // lo > 0, hi < Sk: the constant span
        let both_clamped = (lo_at_0 - hi_in).max(0); // lo = 0, hi = Sk
        let rest = full - first - both_free - both_clamped; // lo > 0, hi = Sk: Sk - lo
        let last_lo = (full * tm + a).clamp(0, sk);
        let last_hi = (sq + off + self.right).clamp(0, sk);
        let total = sum_div_clamped(first, b, tm, sk, n, n - 1)
            + both_free * blocks(b - a)
            + both_clamped * blocks(sk)
            + sum_div_clamped(rest, sk - a - (full - 1) * tm, tm, sk, n, n - 1)
            + blocks(last_hi - last_lo);
        total.max(0) as u64
    }

    /// The shape as a kernel whose Q blocks of `tile_m` rows (`group` rows a query, packed)
    /// end near the last query sees it (`KernelSpec::wgmma_q_from_end`): the grid's spare
    /// rows, rounded down to whole 64-row consumers, come before query 0, which is the shape
    /// with Sq padded at the front (the visible keys of the rows that were there stay where
    /// they were: Sk - Sq moves with Sq).
    pub fn end_aligned(&self, tile_m: usize, group: usize) -> TileShape {
        let g = group.max(1);
        let pad = rows_before_first(self.seqlen_q * g, tile_m);
        TileShape {
            seqlen_q: self.seqlen_q + pad / g,
            ..*self
        }
    }

    /// The K blocks kernel `s` visits over its Q tiles of `queries` queries each (its rows;
    /// tile_m / G packed): from each tile's first visible key under a window, on the grid
    /// of tile_n keys otherwise, with the Q blocks from the end where the kernel lays them so.
    pub fn kernel_blocks(&self, s: &KernelSpec, queries: usize) -> u64 {
        let n = s.tile_n as usize;
        if s.window_blocks() {
            self.visited_window_blocks(queries, n)
        } else if s.wgmma_q_from_end() {
            let group = (s.tile_m as usize / queries.max(1)).max(1);
            self.end_aligned(s.tile_m as usize, group)
                .visited_blocks(queries, n)
        } else {
            self.visited_blocks(queries, n)
        }
    }

    /// Every key visible to every query (no mask).
    pub fn is_dense(&self) -> bool {
        let all = (self.seqlen_q + self.seqlen_k) as i64;
        self.left >= all && self.right >= all
    }

    /// What running this shape on `s` costs, in key-rows at the rate of a two-consumer tile
    /// (packed GQA: each tile's rows are tile_m / group queries of `group` heads).
    pub fn cost(&self, s: &KernelSpec) -> f64 {
        let queries = if s.pack_gqa {
            (s.tile_m as usize / self.group.max(1)).max(1)
        } else {
            s.tile_m as usize
        };
        let blocks = self.kernel_blocks(s, queries) as f64;
        blocks * (s.tile_m as f64) * (s.tile_n as usize + BLOCK_OVERHEAD_KEYS) as f64
            / tile_rate(s.tile_m, self.is_dense())
    }
}

/// Whether a causal wgmma kernel of this tile lays its Q blocks from the end
/// (`KernelSpec::wgmma_q_from_end`, where the measurements are): only where tile_m is over 64
/// (a 64-row tile has no whole consumer of spare rows) and not a multiple of tile_n (there a
/// 64-row shift moves no tile end past a K block boundary at Sq = Sk, and cost 0.4-1.3%).
pub fn q_from_end_tile(tile_m: usize, tile_n: usize) -> bool {
    tile_m > 64 && !tile_m.is_multiple_of(tile_n.max(1))
}

/// The rows a Q grid of `tile_m`-row blocks laid from the end puts before row 0
/// (`KernelSpec::wgmma_q_from_end`; `Tiles::make`'s `pad` in fwd_sm90.cu): the grid's spare
/// rows, rounded down to whole 64-row consumers.
pub fn rows_before_first(rows: usize, tile_m: usize) -> usize {
    let tm = tile_m.max(1);
    (rows.div_ceil(tm) * tm - rows) / 64 * 64
}

/// floor((clamp(x, 0, cap) + add) / n) for n > 0, 0 <= add < n.
fn div_clamped(x: i64, cap: i64, n: i64, add: i64) -> i64 {
    (x.clamp(0, cap) + add) / n
}

/// The sum of `div_clamped(first + i * step, cap, n, add)` over i < count (step > 0): zero
/// below 0, the capped value above `cap`, and between them a sum of floors of a linear
/// function (`floor_sum`).
fn sum_div_clamped(count: i64, first: i64, step: i64, cap: i64, n: i64, add: i64) -> i64 {
    if count <= 0 {
        return 0;
    }
    // i < i0: first + i step <= 0; i >= i1: first + i step >= cap.
    let i0 = if first > 0 {
        0
    } else {
        ((-first) / step + 1).min(count)
    };
    let i1 = if first >= cap {
        0
    } else {
        ((cap - first + step - 1) / step).min(count)
    }
    .max(i0);
    let middle = floor_sum(
        (i1 - i0) as u64,
        n as u64,
        step as u64,
        (first + i0 * step + add) as u64,
    );
    middle as i64 + (count - i1) * ((cap + add) / n)
}

/// The sum of floor((a + i * b) / m) over i < count (the classic reduction: swap the roles
/// of the axes until the slope is below 1; O(log m) steps).
fn floor_sum(mut count: u64, mut m: u64, mut b: u64, mut a: u64) -> u64 {
    let mut total = 0u64;
    loop {
        if b >= m {
            total += count.saturating_sub(1) * count / 2 * (b / m);
            b %= m;
        }
        if a >= m {
            total += count * (a / m);
            a %= m;
        }
        let y_max = b * count + a;
        if y_max < m {
            return total;
        }
        count = y_max / m;
        a = y_max % m;
        std::mem::swap(&mut m, &mut b);
    }
}

/// The largest packed row count that selects a decode tile.
pub const DECODE_ROWS: usize = 64;

/// The most keys a CTA sees for which decode takes the key-split 16-row tile: one or two blocks,
/// where its four warps share a block's math instead of one warp doing it while three wait.
/// H200, bf16, the kernel's µs per call under torch.profiler, 64-row -> 16-row tile, same run
/// (`…-session22-swizzle-ab.jsonl`): gpt-oss's 128-key window (d 64, H 64/8, B 1, sinks)
/// 3.54 -> 3.25 µs (cuDNN 3.12); through the drop-in at B 64, 9.5 -> 6.1 µs per step
/// (`…-window-decode-ab.jsonl`). Over long caches, where the 64-row tile's one busy warp keeps
/// up with the loads, the 16-row tile was slower (d 128 H 32/8 Sk 32k B 1: 34.8 -> 35.3 µs plus
/// a dearer combine over more splits; B 8 4k 35.0 -> 36.1; Gemma-3's d 256 1k window 7.0 -> 7.2).
pub const KEY_SPLIT_MAX_KEYS: usize = 256;

/// The keys past which an unsplit decode step (`num_splits = 1`) of `rows` packed rows leaves
/// the decode tile for the sm90 flagship's TMA ring (select.rs, `unsplit_decode`): the key-split
/// tile's own bound, except for the key-split tile's rows (at most 16) at d 256 (qk and v),
/// whose blocks cost the one-block-in-flight tile more. H200, Sq 1, causal, H 16/8, GB/s,
/// key-split tile -> flagship: 256 keys B 1 205 -> 229 and B 8 1409 -> 1625 (1.12 / 1.15x),
/// 128 keys 134 -> 129 and 965 -> 964, level (forty-eighth session); 160 and 200 keys B 1
/// 1.18 / 1.17x, B 8 1.14 / 1.24x (fiftieth). So those start past 128. At d 64 and 128 the
/// flagship loses there (fifty-first, 144-256 keys, B 1-16, contiguous: d 64 0.71-0.86x,
/// d 128 0.83-0.97x; at 256 keys over pages of 16: d 128 1.23-1.24x, d 64 0.95-1.02x), so
/// they keep 256.
/// Not measured: more rows (the 64-row decode tile), pages at d 256.
pub fn unsplit_decode_after_keys(d: u32, dv: u32, rows: usize) -> usize {
    if d.min(dv) >= 256 && rows <= 16 {
        128
    } else {
        KEY_SPLIT_MAX_KEYS
    }
}

/// Whether the sm90 flagship packs GQA by default at every query length for these head dims
/// (select.rs: packed measured 1.06-1.19x unpacked at d 64, 0.95-1.02x at d 128, where only
/// short queries pack). Selection and model plans both read it, so a plan ships what
/// selection takes.
pub fn flagship_packs_any_length(d: u32, dv: u32) -> bool {
    d.max(dv) <= 64
}

/// The q_stage values FA4's selection can ask for on a family: sm100f uses 2 Q tiles per CTA
/// once `max_seqlen_q * G > 128`, the others always 1.
pub fn q_stages(arch: Arch) -> &'static [u32] {
    match arch {
        Arch::Sm100f => &[1, 2],
        Arch::Sm90 | Arch::Sm120 => &[1],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{Problem, Varlen, combine_spec};

    #[test]
    fn the_fill_tile_is_d_65_to_128_unmasked_or_causal_unsplit_on_sm90() {
        let class = |d: u32, mask: Mask, feat: Features| SpecClass {
            arch: Arch::Sm90,
            dtype: DType::Bf16,
            d,
            dv: d,
            q_stage: 1,
            mask,
            lse: true,
            pack_gqa: true,
            feat,
        };
        let dense = Features::default();
        let serving = Features {
            varlen: true,
            paged: true,
            sink: true,
            softcap: true,
            split: false,
        };
        for feat in [dense, serving] {
            for d in [96, 128] {
                for mask in [Mask::None, Mask::Causal] {
                    let s = class(d, mask, feat).flagship_fill().unwrap();
                    assert_eq!((s.imp, s.tile_m, s.tile_n), (Impl::Wgmma, 64, 128));
                    assert_eq!(s.feat, feat);
                }
                assert_eq!(class(d, Mask::Local, feat).flagship_fill(), None);
            }
            for d in [64, 192, 256] {
                assert_eq!(class(d, Mask::Causal, feat).flagship_fill(), None);
            }
        }
        let split = Features {
            split: true,
            ..dense
        };
        assert_eq!(class(128, Mask::Causal, split).flagship_fill(), None);
        let sm100 = SpecClass {
            arch: Arch::Sm100f,
            ..class(128, Mask::Causal, dense)
        };
        assert_eq!(sm100.flagship_fill(), None);
    }

    #[test]
    fn one_combine_module_per_combine_key() {
        for arch in Arch::ALL {
            for dv in [8, 40, 64, 96, 128, 256] {
                let s = SpecClass::split_combine(arch, DType::Fp16, dv, true, false, true)
                    .unwrap_or_else(|| panic!("{arch} dv {dv}"));
                s.can_implement().unwrap();
                assert_eq!((s.d, s.dv, s.mask, s.pack_gqa), (dv, dv, Mask::None, false));
                assert!(s.feat.split && s.feat.varlen && !s.feat.paged && !s.feat.softcap);
                assert_eq!((s.imp, s.q_stage, s.lse), (Impl::Portable, 1, true));
            }
        }
        // Whatever forward wrote the partials (mask, d, packing, K side), the same module;
        // ragged K alone does not make the rows ragged.
        let mut p = Problem::new(DType::Bf16, 2, 100, 300, 8, 2, 192, 128);
        p.causal = true;
        p.pack_gqa = Some(true);
        p.varlen = Some(Varlen {
            total_k: Some(600),
            ..Varlen::default()
        });
        let plain = combine_spec(Arch::Sm90, &p).unwrap();
        assert_eq!(
            Some(plain),
            SpecClass::split_combine(Arch::Sm90, DType::Bf16, 128, false, false, false)
        );
        p.varlen = Some(Varlen {
            seqused_q: true,
            ..Varlen::default()
        });
        assert!(combine_spec(Arch::Sm90, &p).unwrap().feat.varlen);
    }
}
