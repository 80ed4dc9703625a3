//! Selection: a pure function from (problem, device) to the kernel spec and its grid. It uses
//! the same tile tables as the plans (tiles.rs), so what a plan ships is what selection asks for.
//!
//! FA4's rules where FA4 has them (DESIGN.md §5):
//! - q_stage on sm100f: 2 iff `max_seqlen_q * (pack_gqa ? G : 1) > 128`, else 1 (1 elsewhere);
//! - pack_gqa: the caller's choice, default on when G = H / Hkv > 1;
//! - num_splits: the caller's when >= 1; when < 1 FA4's heuristic (`heuristic_splits`), exactly
//!   on sm100f, over CTA slots instead of SMs on sm90 / sm120 (where FA4 does not split),
//!   rounded there to equal shares of K blocks (no empty split); on sm90 the flagship splits
//!   itself (unmasked, causal) from `FLAGSHIP_SPLIT_MIN_BLOCKS` K blocks, on calls of known
//!   lengths with the count of a model of its schedule where that predicts a gain
//!   (`split_count`); a library without the flagship's split runs splits on the portable
//!   kernel and a call whose flagship tiles fill 45% of the SMs unsplit (`FLAGSHIP_SPLIT_FILL`);
//! - tiles: the family's table, or the decode table for at most 64 packed query rows (with the
//!   table's kernel as the runtime's fallback when a library does not ship the decode tile).
//!
//! Families: the sm90 flagship (wgmma) where it implements the class (`Prefer::flagship`),
//! else the portable kernel; split windows and the decode tile are portable.

use crate::arch::Arch;
use crate::runtime::{Error, Problem, Validated};
use crate::spec::{Features, KernelSpec, Mask};
use crate::split_count::SplitCall;
use crate::tiles::{SpecClass, TileShape};

/// What selection needs to know about the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    pub major: i32,
    pub minor: i32,
    pub sm_count: u32,
}

impl DeviceInfo {
    pub fn arch(&self) -> Result<Arch, Error> {
        Arch::for_device(self.major, self.minor).ok_or(Error::UnsupportedDevice {
            major: self.major,
            minor: self.minor,
        })
    }
}

/// The kernel for a call and its launch grid `(m_blocks, heads or heads_kv, batch)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Selection {
    pub spec: KernelSpec,
    /// Forward grid; with split-KV its z is `batch * num_splits`.
    pub grid: (u32, u32, u32),
    /// K ranges per (query block, head); > 1 only for split kernels.
    pub num_splits: u32,
    /// Launch the wgmma kernel in CTA pairs (`KernelSpec::wgmma_pairs`): the call has an even
    /// number of Q blocks (causal: in whole, even runs), so a pair's tiles are two Q blocks of
    /// one head, and the grid is even.
    pub pairs: bool,
    /// Split the persistent schedule's tail (`KernelSpec::wgmma_split_tail`): the runtime
    /// plans it for the grid it launches ([`tail_plan`]) and gives the kernel a workspace.
    pub split_tail: bool,
    /// Deal the wgmma kernel's causal runs (`KernelSpec::wgmma_q_run` > 0) Q block major: a
    /// run's schedule units (tiles, or a pair's two) heaviest first with the (head, batch)
    /// pairs fastest, instead of each (head, batch)'s blocks of the run together. The rounds
    /// then fall in cost monotonically, which the snake deals evenly
    /// ([`M_MAJOR_RUNS_MIN_KEYS`]: long calls whose run of every (head, batch) fits in a
    /// round of the grid).
    pub m_major_runs: bool,
    /// Deal the wgmma kernel's causal runs (dense calls) by the host's round-by-round order
    /// (`schedule::lpt_order`, passed as `FwdParams::unit_order`): each round's units keep
    /// their head-major set, heaviest first to the CTAs of least work so far. By default
    /// from [`LPT_ROUNDS_MIN_KEYS`] keys over more than one round, and then the runtime
    /// passes the order only where it evens the modelled work enough
    /// (`schedule::plan`); never with `m_major_runs`.
    pub lpt_rounds: bool,
    /// Deal the wgmma kernel's varlen tiles by the list its schedule kernel makes on the device
    /// just before it (`fwd_sm90.cu` `_schedule`): the batch's real (sequence, Q block) units,
    /// heaviest first, so the snake deals real tiles evenly. Over the padded schedule (every
    /// sequence with the longest's Q blocks) a mixed batch's real tiles fall on the CTAs by
    /// the index arithmetic: a chunk beside decodes left one CTA twice the mean work. Varlen
    /// batches of more than one sequence whose query lengths may differ
    /// (`query_lengths_vary`), never in pairs (the list takes their place).
    pub varlen_schedule: bool,
    /// The list's capacity in units: batch x the longest sequence's Q blocks (0 without it).
    pub schedule_units: usize,
    /// The portable split kernel over a varlen batch gives each sequence its own split count
    /// on the device (`sequence_splits.cuh`), at most `num_splits`: the grid's z axis holds
    /// [`sequence_split_units`] (sequence, split) units, one per sequence and the rest dealt
    /// by the sequences' K blocks. FA4's one count sees only the batch's upper bounds, so a
    /// mixed decode step either leaves its longest sequence alone at the end or cuts every
    /// short one into slivers. By default for mixed decode batches with the heuristic's count
    /// (`mixed_decode_batch`), or as `Problem::sequence_splits` says; the runtime passes
    /// `FwdParams::split_slots` and `split_units` and sizes the grid.
    pub sequence_splits: bool,
    /// The wgmma kernel's schedule: (Q block, head, batch) tiles.
    pub tiles: usize,
    /// The spec is on the decode tile table (at most `tiles::DECODE_ROWS` packed rows). A
    /// library without it falls back to `select_table` (see `FlashAttention::plan`).
    pub decode_tile: bool,
    /// A short call without causal runs ([`PROGRAMMATIC_MAX_BLOCKS_PER_CTA`]): the runtime
    /// launches it as the previous kernel's programmatic dependent (where the handle allows it).
    pub programmatic: bool,
}

/// K blocks per CTA slot up to which a call without causal runs launches as the previous
/// kernel's programmatic dependent: its CTAs start, set up their shared memory and wait
/// (`griddepcontrol.wait`) while that kernel's last CTAs run, which pays where the launch and
/// prologue are a visible part of the call. H200, CUDA graphs of 20 calls, on and off
/// replayed alternately 40 times in one process (`python/tests/pdl_ab.py`), median paired
/// gain in three runs: decode B 1 4k split +2.1-2.5% (10.26 -> 10.00 us), window 128 at S 16k
/// (41 blocks a CTA) +1.1-1.2%, gpt-oss's sliding layer +0.4-0.5%, decode B 8 4k and d 128 512
/// full 0.0-0.4%. Where the CTAs' placement matters it loses: they land on the SMs in the order
/// the previous kernel's CTAs leave rather than the launch's own, which the causal runs' L2
/// sharing feels (d 128 1k causal -0.35%; 16k causal, 993 blocks a CTA, -2.3% event-timed), as
/// does an unsplit long decode (B 1 32k, 512 blocks a CTA, -3.6%).
pub const PROGRAMMATIC_MAX_BLOCKS_PER_CTA: u64 = 128;

/// Keys from which dense calls, unmasked or causal, run in CTA pairs by default (`Problem::cta_pairs`).
/// The halved L2 -> SM traffic pays where the calls run at the power cap, which sustained
/// work reaches from a few K blocks on (the SM clock falls to ~1.5-1.8 GHz at 700 W); the
/// partners' lockstep costs where it does not. H200, B·S 16k, H·d 2048, TFLOP/s alone -> pairs:
/// sustained (0.6 s of calls before a 0.5 s window, medians of three rounds, session 12)
/// d 128 2k 594 -> 605, 4k 620 -> 632, 8k 635 -> 650; d 192/128 2k 642 -> 632, 4k 670 ->
/// 677, 8k 674 -> 697; d 256 2k 655 -> 655, 4k 687 -> 688, 8k 713 -> 714. Bursts of 60 calls (session 10):
/// 16k d 128 648 -> 670, d 192/128 689 -> 702, d 256 743 -> 744; 4k and 8k even; d 128 2k
/// 684 -> 679, 1k 630 -> 621. So pairs from 4k keys, where neither protocol loses. Causal
/// calls (session 13, sustained, alone -> pairs): 1k d 128 447 -> 430, d 256 466 -> 460; 4k
/// d 128 587 -> 590, d 192/128 608 -> 620, d 256 623 -> 635; 16k +2.3-4.3%: the same rule.
pub const PAIRS_MIN_KEYS: usize = 4096;

/// Keys from which dense causal calls are dealt by the host's order by default
/// (`Selection::lpt_rounds`; the runtime then checks `schedule::plan`'s modelled gain).
/// Shorter calls lose by the order more than its modelled balance gives: H200, causal,
/// sustained, three rounds, snake -> order: d 128 1k 421.4 -> 417.1 (-1.0%), d 64 1k 319.6
/// -> 314.0 (-1.8%; modelled +1.4%); session 26 (`…-session26-ab-order-prefetch.txt`): d 64
/// 512 251.0 -> 247.4 (-1.4%; +2.1%), d 128 512 325.7 -> 313.6 (-3.7%; +1.4%), d 192/128
/// 512 324.9 -> 308.4 (-5.1%; +1.4%), d 128 1k 417.5 -> 412.3. Not the table read: with each
/// CTA's entries prefetched into L1 at the start the same calls read 247.2, 312.2, 308.1 and
/// 411.7 (and d 128 4k 584.7 -> 584.0). The cost is locality: the snake gives a run's Q blocks
/// consecutive CTAs, which the hardware places on one GPC, and the order scatters them (ncu,
/// d 192/128 512: +36% L2 sectors across the partitions, +16% DRAM reads; at ncu's fixed
/// clock the order is as fast, at the power cap it lost 5%: the likely cost is that
/// traffic's energy).
pub const LPT_ROUNDS_MIN_KEYS: usize = 4096;

/// Keys from which causal runs are dealt Q block major by default (`Problem::m_major_runs`),
/// where one run of every (head, batch) fits in a round of the grid (heads x batch x run <=
/// CTAs): there the order only changes which CTA takes which tile of the round, not which
/// tiles are in flight together, so the K/V the round shares in L2 is the same.
/// Head-major, a round's costs rise and fall in a saw tooth (each (head, batch)'s run of 16
/// Q blocks, lightest first) that the snake's reversal does not cancel: simulated max / mean
/// work per CTA at the #4 causal cells (cost = K blocks + 2 per tile, H200's 132 SMs, pairs
/// where the call pairs; `m_major_runs_decode_and_balance`) 1.026-1.032 at 16k, Q block
/// major 1.002-1.003. Measured (H200, B·S 16k, H·d 2048, sustained, three rounds, TFLOP/s
/// head-major -> Q block major): d 256 16k (8 heads: a run group fits a round) 672.9 ->
/// 693.8 (+3.1%), 8k (B 2: it does not) 641.5 -> 647.2; where a round then spans more heads
/// the L2 loses more than the balance gains: d 128 16k 634.8 -> 618.1, d 192/128 16k 672.0
/// -> 672.4, 8k 641.9 -> 623.4, d 64 16k 483.8 -> 476.6, d 256 4k (B 4) 595.8 -> 571.0.
pub const M_MAJOR_RUNS_MIN_KEYS: usize = 8192;

/// The split tail's plan for `units` equal schedule units (tiles; in pairs, a pair's two) of
/// `blocks` K blocks each on `slots` persistent CTAs (or pairs): `Some((round, tail_units))`,
/// whole tiles for `round` rounds, then the last `tail_units` as equal shares of their blocks
/// (fwd_sm90.cu `Tiles::nth`); `None` where the grid divides the units (nothing idles), there
/// is no full round, or the shares' 32-bit arithmetic would overflow.
pub fn tail_plan(units: usize, slots: usize, blocks: usize) -> Option<(u32, u32)> {
    if slots == 0 || units <= slots || units.is_multiple_of(slots) || blocks < 2 {
        return None;
    }
    let tail = units % slots + slots;
    let work = (slots as u64 + 1) * tail as u64 * blocks as u64;
    (work < 1 << 31).then_some(((units / slots - 1) as u32, tail as u32))
}

/// Keys from which unmasked calls at d >= 128 split the schedule's tail by default (with
/// [`split_tail_pays`]). H200, B·S 16k, H·d 2048, sustained, three rounds, whole -> split
/// (session 17): 16k d 128 707 -> 719 (+1.6%), d 192/128 736 -> 749 (+1.8%), d 256 743 ->
/// 749 (+0.8%); but 4k d 128 662 -> 662, d 192/128 694 -> 701, d 256 698 -> 680 (-2.5%), and
/// d 96 16k 534 -> 526 (-1.4%, within its rounds' spread). ncu: the SMs' idle share of the
/// launch fell from 5% to 1-1.6% (max/mean active cycles per SM 1.032 -> 1.002); the clock,
/// at the power cap, gives back much of the rest.
pub const SPLIT_TAIL_MIN_KEYS: usize = 8192;

/// Whether the split tail pays by default: the last round of whole tiles would leave at
/// least 1% of the call's CTA time idle, counted in K blocks with one block more per share
/// for a split tile's second Q load and its merge. H200, B·S 16k, H·d 2048 (2048 tiles of
/// 128 rows on 132 CTAs, 15.5 rounds) idles 3%; ncu measured max/mean active cycles per SM
/// at 1.032 (session 16).
pub fn split_tail_pays(units: usize, slots: usize, blocks: usize) -> bool {
    let Some((round, tail)) = tail_plan(units, slots, blocks) else {
        return false;
    };
    let whole = units.div_ceil(slots) * blocks;
    let split = round as usize * blocks + (tail as usize * blocks).div_ceil(slots) + 1;
    split * 100 <= whole * 99
}

/// Mean query rows per sequence (total_q / batch, known when cu_seqlens_q is passed) from
/// which varlen calls run in CTA pairs by default. A sequence with an odd number of Q blocks
/// pairs its last one with a ghost that holds a CTA for that block's K range, about 64 / L
/// of an L-row sequence's work on average (half the sequences, 128 / L each). H200, causal
/// unless said, sustained, medians of three rounds, TFLOP/s alone -> pairs (session 18,
/// `bench_fwd` `ragged`: lengths S, then uniform in [S/16, S]): S 16k, 10 sequences of mean
/// 6.6k rows, 5 with odd block counts: d 128 558 -> 586 (+4.9%), full 610 -> 640 (+4.9%),
/// d 192/128 592 -> 630 (+6.4%), d 256 592 -> 628 (+6.0%); S 8k, mean 3.3k: d 128 534 ->
/// 533; S 4k, mean 2.7k: d 192/128 560 -> 567 (+1.2%); equal lengths, 16k: d 128 645 ->
/// 661 (+2.4%). No batch measured lost, so from 2k rows on average; below that, ghosts of
/// short sequences are a larger share (`Problem::cta_pairs` forces either way).
pub const VARLEN_PAIRS_MIN_MEAN_ROWS: usize = 2048;

/// Whether a varlen batch's query lengths may differ: packed queries fewer than batch x the
/// longest, or lengths on the device (`seqused_q`). Where they may not, the padded schedule
/// has no empty tiles and keeps its L2 locality (causal runs, CTA pairs): H200, d 128 H 16,
/// 2 x 16k causal, 3.35 ms padded (in pairs) against 3.67 on the list.
fn query_lengths_vary(p: &Problem) -> bool {
    p.varlen.is_some_and(|v| {
        v.seqused_q
            || v.total_q
                .is_some_and(|total| total < p.batch.saturating_mul(p.seqlen_q))
    })
}

/// Whether a call's sequences pair by default as far as their query lengths go: dense calls
/// and equal query lengths (no ghosts) yes; packed queries if their mean is long enough
/// (`VARLEN_PAIRS_MIN_MEAN_ROWS`); `seqused_q` no (the lengths are on the device).
fn varlen_rows_pair(p: &Problem) -> bool {
    let Some(v) = p.varlen else {
        return true;
    };
    match v.total_q {
        Some(total) => total >= VARLEN_PAIRS_MIN_MEAN_ROWS * p.batch.max(1),
        None => !v.seqused_q,
    }
}

/// The share of the SMs (numerator, denominator) from which the sm90 flagship's tiles, one per
/// CTA, run a call unsplit where the split heuristic (num_splits < 1) would split it onto the
/// portable kernel. H200, chunked prefill through the drop-in, CUDA graphs (`bench_serving.py
/// chunked`), ms unsplit flagship / heuristic split on the portable kernel: 32 tiles (d 128
/// H 32/8, Sq 128) 0.090 / 0.076 at Sk 8k, 0.330 / 0.222 at 32k; 64 tiles (Sq 256) 0.092 /
/// 0.130 at 8k, 0.334 / 0.423 at 32k, unmasked 0.327 / 0.428 (cuDNN 0.381); packed G 8, B 4 × Sq 32
/// over 8k 0.090 / 0.135; Sq 192 over 32k 0.334 / 0.340; the one loss, d 64 H 64/8 packed, Sq
/// 128 over 16k (64 tiles of the 128x128 tile), 0.151 / 0.146. The portable kernel's rate per
/// SM is about 0.45 of the flagship's, so the split pays below 45% of the SMs.
pub const FLAGSHIP_SPLIT_FILL: (usize, usize) = (9, 20);

/// Keys from which a call whose 128-row flagship tiles fill at most half the SMs takes the
/// 64-row fill tile (`SpecClass::flagship_fill`). H200, d 128 H 32/8, CUDA graphs, ms on the
/// 128-row tile / the fill tile (`…-session31-chunked-fill.jsonl`): Sq 256 causal over 4k
/// 0.050 / 0.040, over 8k 0.093 / 0.073, over 32k 0.345 / 0.264; unmasked over 32k 0.342 /
/// 0.265 (cuDNN 0.381); d 96 0.345 / 0.254. Shorter calls keep the tile by shape: a tile's
/// fixed costs weigh more there (not measured below 4k).
pub const FILL_MIN_KEYS: usize = 4096;

/// K blocks (of the flagship tile's tile_n keys) below which the split heuristic leaves a
/// flagship call unsplit: a split's fixed costs (its fp32 partials, the combine) outweigh what
/// it saves on tiles this short. H200, CUDA graphs, ms unsplit / two-way split with the rows
/// combine (`…-session33-combine.jsonl`): d 128 causal S 1k H 8/1 (8 blocks) 0.0179 / 0.0211;
/// S 2k H 4/1 (16) 0.0285 / 0.0261; d 256 S 1k H 4/1 (16 blocks of 64 keys) 0.0263 / 0.0227.
/// (Before the rows combine, a CTA per (query, head) row, the split lost at 16 blocks too:
/// 0.0285 / 0.0352, and calls under 4k keys stayed unsplit.) Two-way splits beat the fill tile
/// from here up: Sq 256 over 4k 0.0408 / 0.0389, over 8k 0.0774 / 0.0623, B 4 x Sq 32 packed
/// over 8k 0.0715 / 0.0634 (before: 0.0483, 0.0741, 0.0735, so two-way splits under 8k keys
/// ran on the fill tile).
pub const FLAGSHIP_SPLIT_MIN_BLOCKS: usize = 16;

/// Whether causal runs go Q block major (`Selection::m_major_runs`) as far as the call says:
/// as `Problem::m_major_runs` forces; not beside a forced host order nor under
/// `M_MAJOR_RUNS_MIN_KEYS` keys; else `None`, where the grid decides (the run of every
/// (head, batch) fits in one round).
fn m_major_runs_by_keys(p: &Problem) -> Option<bool> {
    match p.m_major_runs {
        Some(forced) => Some(forced),
        None if p.lpt_rounds == Some(true) || p.seqlen_k < M_MAJOR_RUNS_MIN_KEYS => Some(false),
        None => None,
    }
}

/// Where each sequence's own count is off (`Problem::sequence_splits`,
/// `FlashAttention::set_sequence_splits(0)`): keys per split of the longest sequence (its keys
/// over this, rounded) from which a decode batch of per-sequence key lengths
/// (`mixed_decode_batch`) takes more splits than FA4's count, up to
/// [`MIXED_DECODE_MAX_SPLITS`], every sequence the same count. FA4's count sees only the
/// batch's upper bounds (B sequences of `max_seqlen_k` keys: B x Hkv tiles, enough to fill
/// the SMs from B 33 at Hkv 8, so one split), but an engine's decode step mixes context
/// lengths, and its longest sequence's tile then runs alone while the rest finish. H200,
/// pages of 16, one query per sequence, by hand, 1 split -> 4 (`bench_serving.py
/// decode-batches`, session 35): d 128 H 32/8, B 32 over 1k..32k 0.961 -> 0.661 ms; one
/// sequence of 32k beside 31 of 1k 0.905 -> 0.250 (8 splits 0.141); gpt-oss (d 64, H 64/8,
/// sinks) B 32 over 1k..32k 0.657 -> 0.442; but
/// B 32 all of 32k 1.161 -> 1.181 (-2%, within that shape's 1.16-1.25 between rounds), and
/// shorter batches lose where split: B 64 all 4k 0.293 -> 0.302 at 2 splits, 0.319 at 4, so
/// batches whose longest sequence is under 12k keys keep FA4's count (B 64 over 256..8k: 0.386,
/// 0.330 at 4 splits, left).
pub const MIXED_DECODE_KEYS_PER_SPLIT: usize = 8192;

/// The most splits [`MIXED_DECODE_KEYS_PER_SPLIT`] gives a decode batch.
pub const MIXED_DECODE_MAX_SPLITS: u32 = 4;

/// Keys a split of a mixed decode batch's longest sequence holds at least, where each sequence
/// takes its own count (`Selection::sequence_splits`): the call's count, the most a sequence
/// takes, is the longest's keys over this, at most [`SEQUENCE_SPLIT_MAX`] and
/// [`SEQUENCE_SPLIT_PARTIALS_PER_SLOT`] per slot.
pub const SEQUENCE_SPLIT_MIN_KEYS: usize = 2048;

/// The most splits a mixed decode batch's grid gives a sequence (`Selection::sequence_splits`).
pub const SEQUENCE_SPLIT_MAX: u32 = 16;

/// Partials per CTA slot, counting every sequence at the call's count, that a mixed decode
/// batch's split workspace may hold (`Selection::sequence_splits`): the grid holds only
/// [`sequence_split_units`], but the partials are laid out by split for every sequence. 16
/// per slot is 17 MB at d 128 for eight packed query heads a CTA; it lets a batch of 32 split
/// its longest sequence 16 times (one of 32k keys beside 31 of 1k, H 32/8, H200: 0.118 ms,
/// against 0.139 at 8).
pub const SEQUENCE_SPLIT_PARTIALS_PER_SLOT: usize = 16;

/// Waves of CTA slots' worth of (sequence, split) units, by default, where each sequence takes
/// its own split count ([`sequence_split_units`]; `FlashAttention::set_sequence_splits`): past
/// one unit per sequence, the units are dealt by the sequences' K blocks. H200, decode steps
/// (pages of 16, d 128 H 32/8 unless named; `bench_serving.py decode-batches`, session 37), ms
/// at 2 / **4** / 8 waves against FA4's one count (the rule before): B 32 over 1k..32k 0.70 /
/// **0.63** / 0.62 (0.66), B 8 over 1k..32k 0.186 / **0.178** / 0.178 (0.256), B 64 over
/// 256..8k 0.350 / **0.325** / 0.332 (0.386), one of 32k beside 31 of 1k 0.097 / **0.100** /
/// 0.105 (0.254), gpt-oss B 32 over 1k..32k 0.465 / **0.429** / 0.421 (0.445); equal lengths
/// take one wave's count at any: B 8 all 8k 0.088 (0.083), gpt-oss B 64 all 4k 0.201 (0.195).
/// Fewer waves leave pieces as large as a slot's mean work, which the CTAs that launch last
/// leave as a tail; more cut every sequence finer.
pub const SEQUENCE_SPLIT_SHARES: u32 = 4;

/// The forward's grid z extent where each sequence takes its own split count
/// (`Selection::sequence_splits`, `sequence_splits.cuh`): one (sequence, split) unit per
/// sequence and `shares` waves of the CTA slots' worth more, each unit `cta_heads` CTAs, at
/// most `num_splits` per sequence. At least the batch, which the device's counts rely on.
pub fn sequence_split_units(
    batch: usize,
    num_splits: u32,
    cta_heads: u32,
    slots: u64,
    shares: u32,
) -> u32 {
    let batch = batch as u64;
    let extra = slots
        .saturating_mul(u64::from(shares))
        .div_ceil(u64::from(cta_heads.max(1)));
    batch
        .saturating_add(extra)
        .min(batch.saturating_mul(u64::from(num_splits.max(1))))
        .min(u64::from(u32::MAX)) as u32
}

/// A decode batch whose sequences' key lengths are their own (on the device: `seqused_k`, or
/// packed K), on sm90, unmasked or causal (a window bounds every sequence's keys).
fn mixed_decode_batch(p: &Problem, mask: Mask, arch: Arch) -> bool {
    arch == Arch::Sm90
        && p.batch > 1
        && matches!(mask, Mask::None | Mask::Causal)
        && p.varlen.is_some_and(|v| v.seqused_k || v.total_k.is_some())
}

/// Whether the split tail may even out `spec`'s unsplit call: where the kernel has it, as
/// `Problem::split_tail` forces, else from `SPLIT_TAIL_MIN_KEYS` keys at d >= 128 (and then
/// where `split_tail_pays` for the launch's grid).
fn split_tail_may_run(spec: &KernelSpec, p: &Problem) -> bool {
    spec.wgmma_split_tail()
        && p.split_tail
            .unwrap_or(p.seqlen_k >= SPLIT_TAIL_MIN_KEYS && spec.d.max(spec.dv) >= 128)
}

/// FA4's num_splits heuristic (DESIGN.md §5): no split at 4 K blocks or fewer, else enough
/// splits to fill the SMs, at most 128 and at most one per K block. `sk_eff` counts only the
/// keys a window lets a query block see.
pub fn heuristic_splits(
    batch: usize,
    heads_kv: usize,
    m_blocks: usize,
    sk_eff: usize,
    tile_n: u32,
    sm_count: u32,
) -> u32 {
    let n_blocks = sk_eff.div_ceil(tile_n as usize);
    if n_blocks <= 4 {
        return 1;
    }
    let ctas = (batch * heads_kv * m_blocks).max(1);
    ((sm_count as usize / ctas).min(128).min(n_blocks)).max(1) as u32
}

/// Which kernels selection may prefer. `Prefer::ALL` is the choice for a complete library;
/// the runtime walks `Prefer::FALLBACKS` when a library lacks the preferred kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefer {
    /// The decode tile table for decode-shaped problems.
    pub decode: bool,
    /// The sm90 flagship (`Impl::Wgmma`) for the classes it implements.
    pub flagship: bool,
    /// The flagship's tile by the problem's shape (`SpecClass::flagship_for_shape`), else its
    /// table's first tile (all that libraries built before the shape rule ship).
    pub by_shape: bool,
    /// Packed GQA on the flagship where selection packs (else it runs unpacked, all that
    /// libraries built before the packed flagship ship).
    pub pack: bool,
    /// The flagship's 64-row fill tile (`SpecClass::flagship_fill`) where a long call's
    /// 128-row tiles fill at most half the SMs, and at d <= 64 its one-round 128-row tile
    /// (`SpecClass::flagship_one_round`) where those fit one per SM (libraries built before
    /// them lack them: paged, the 128-row d 64 tile came in the forty-ninth session).
    pub fill: bool,
    /// Split-KV on the flagship (with the canonical combine module), else on the portable
    /// kernel (all that libraries built before it ship).
    pub split: bool,
}

impl Prefer {
    pub const ALL: Prefer = Prefer {
        decode: true,
        flagship: true,
        by_shape: true,
        pack: true,
        fill: true,
        split: true,
    };
    /// Best first: everything; no fill tile nor flagship split (a call takes at most one of
    /// them: the fill tile only unsplit); no decode tile; the flagship unpacked; the
    /// flagship's table tile (unpacked); the portable table alone.
    pub const FALLBACKS: [Prefer; 6] = [
        Prefer::ALL,
        Prefer {
            fill: false,
            split: false,
            ..Prefer::ALL
        },
        Prefer {
            decode: false,
            fill: false,
            split: false,
            ..Prefer::ALL
        },
        Prefer {
            decode: false,
            pack: false,
            fill: false,
            split: false,
            ..Prefer::ALL
        },
        Prefer {
            decode: false,
            flagship: true,
            by_shape: false,
            pack: false,
            fill: false,
            split: false,
        },
        Prefer {
            decode: false,
            flagship: false,
            by_shape: false,
            pack: false,
            fill: false,
            split: false,
        },
    ];
}

/// The preferred kernel: on the decode tile table for decode-shaped problems, the flagship
/// where it implements the class.
pub fn select(p: &Problem, v: &Validated, device: &DeviceInfo) -> Result<Selection, Error> {
    select_with(p, v, device, Prefer::ALL)
}

/// The kernel on the family's main tile table (the fallback for decode-shaped problems).
pub fn select_table(p: &Problem, v: &Validated, device: &DeviceInfo) -> Result<Selection, Error> {
    select_with(
        p,
        v,
        device,
        Prefer {
            decode: false,
            ..Prefer::ALL
        },
    )
}

pub fn select_with(
    p: &Problem,
    v: &Validated,
    device: &DeviceInfo,
    prefer: Prefer,
) -> Result<Selection, Error> {
    let arch = device.arch()?;
    let pack_gqa = p.pack_gqa.unwrap_or(v.group > 1);
    let rows = p.seqlen_q * if pack_gqa { v.group } else { 1 };
    let q_stage = match arch {
        Arch::Sm100f if rows > 128 => 2,
        _ => 1,
    };
    let (d, dv) = (p.head_dim as u32, p.head_dim_v as u32);
    let mut class = SpecClass {
        arch,
        dtype: p.dtype,
        d,
        dv,
        q_stage,
        mask: v.mask,
        lse: p.return_lse,
        pack_gqa,
        feat: Features {
            varlen: p.is_varlen(),
            paged: p.paged.is_some(),
            sink: p.sinks,
            softcap: p.softcap > 0.0,
            split: false,
        },
    };
    // The flagship serves prefill-shaped calls (dense, varlen, paged) whose tensors TMA can
    // describe. It packs GQA where its 64-row consumer tiles hold whole groups (G divides 64)
    // and packing is asked for, or by default where packing measured faster (H200, H64/Hkv8,
    // same runs): d <= 64, where a packed 192-row tile holds 24 queries and loses little to
    // the diagonal (causal 512 1.09x, 1k 1.19x, 4k 1.06x, window 128 1.08x unpacked), and
    // Sq <= 64, which the unpacked flagship leaves to the portable kernel (d 128, Sk 8k, Sq
    // 32: 2.36x). Wider heads stay unpacked (d 128, Sq 128-1k, causal: packed 0.92-1.00x). A
    // packing request the flagship cannot honour goes to the portable kernel. With varlen, Sq
    // is the longest sequence. Its rows must outnumber a decode tile's (unpacked, Sq = 9 with
    // a group of 8 would run 9 valid rows per tile). An empty K (Sk = 0, which reaches a
    // kernel only with sinks or a strided output) has no tensor map.
    let flagship_packs = prefer.pack
        && pack_gqa
        && v.group > 1
        && crate::runtime::tma::packs_group(v.group)
        && (p.pack_gqa == Some(true)
            || crate::tiles::flagship_packs_any_length(d, dv)
            || p.seqlen_q <= crate::tiles::DECODE_ROWS);
    let flagship_rows = if flagship_packs { rows } else { p.seqlen_q };
    let flagship_fits = prefer.flagship
        && p.seqlen_k > 0
        && (flagship_packs || p.pack_gqa != Some(true) || v.group == 1)
        && crate::runtime::tma::problem_fits(p);
    // What the flagship's tile is chosen for (`SpecClass::flagship_for_shape`).
    let dense = TileShape {
        group: if flagship_packs { v.group } else { 1 },
        ..TileShape::dense(p.seqlen_q, p.seqlen_k)
    };
    let shape = match v.mask {
        Mask::None => dense,
        Mask::Causal => TileShape {
            left: (p.seqlen_q + p.seqlen_k) as i64,
            right: 0,
            ..dense
        },
        Mask::Local => TileShape {
            left: v.params.window_left as i64,
            right: v.params.window_right as i64,
            ..dense
        },
    };
    // The keys a decode CTA can see: a window bounds them (its queries' windows' union).
    let decode_keys = match v.mask {
        Mask::Local => p.seqlen_k.min(
            (v.params.window_left.max(0) as usize)
                .saturating_add(v.params.window_right.max(0) as usize)
                .saturating_add(p.seqlen_q),
        ),
        _ => p.seqlen_k,
    };
    // The flagship's kernel for a class (packed as the flagship packs), or None where it has no
    // tile for the call.
    let flagship_tile = |class: SpecClass| -> Option<KernelSpec> {
        let fclass = SpecClass {
            pack_gqa: flagship_packs,
            ..class
        };
        match p.tile_mn {
            Some((m, n)) => Some(KernelSpec {
                imp: crate::spec::Impl::Wgmma,
                ..fclass.on_tile(m, n)
            })
            .filter(|s| {
                s.can_implement().is_ok()
                    && p.paged
                        .is_none_or(|pg| crate::runtime::tma::page_fits(pg.page_size, s.tile_n))
            }),
            None => match p.paged {
                Some(pg) if prefer.by_shape => fclass.flagship_for_paged_shape(pg.page_size, shape),
                Some(pg) => fclass.flagship_for_pages(pg.page_size),
                None if prefer.by_shape => fclass.flagship_for_shape(shape),
                None => fclass.flagship(),
            },
        }
    };
    // An unsplit decode step (num_splits = 1, FA4's default) past the key-split tile's keys
    // (`tiles::unsplit_decode_after_keys`) on at most one CTA per SM is bound by each CTA's own
    // load rate: the decode tile keeps one K or V block in flight, the flagship's TMA ring
    // several (on its 64-row fill tile where it has one and the tiles fit one round, at any
    // length). H200, Sq 1, causal, GB/s of K + V, decode tile -> flagship (`bench_serving.py
    // decode-unsplit`, forty-eighth session): d 128 H 32/8 B 1 248 -> 472 (4k) and 269 -> 525
    // (32k), B 8 1946 -> 3555 and 2060 -> 4008, B 16 (128 CTAs) 3521 -> 3833; pages of 16 139
    // -> 367 (B 1) and 1089 -> 2768 (B 8); d 64 H 64/8 B 1-16 1.43-1.82x; d 256 H 16/8 B 1-8
    // 1.89-2.53x; at 511 keys 0.99-1.59x, at 1k 1.08-1.99x; MHA (group 1) d 128 with 1-64
    // queries, B 1 and 4, 1.06-2.07x (forty-ninth session). At 128 and 256 keys the 16-row
    // key-split tile is faster at d 64 and 128 (d 128 B 8: 922 against 749 and 1244 against
    // 1165); at d 256 the flagship leads it from 160 keys and draws level at 128, so there a
    // step of at most 16 rows leaves it past 128 keys (`tiles::unsplit_decode_after_keys`).
    // With more CTAs than SMs the decode tile's own CTAs fill the SMs (B 32: the flagship
    // 0.91x). Where the flagship has no tile for the call (pages TMA cannot load at these head
    // dims) the decode tile stays; the first fallback (`Prefer::fill` off) gives a library
    // without the flagship's kernel the decode tile back.
    let unsplit_decode = flagship_fits
        && prefer.fill
        && p.tile_mn.is_none()
        && v.num_splits == 1
        && rows <= crate::tiles::DECODE_ROWS
        && matches!(v.mask, Mask::None | Mask::Causal)
        && (flagship_packs || v.group == 1)
        && p.seqlen_k > crate::tiles::unsplit_decode_after_keys(d, dv, rows)
        && p.batch.saturating_mul(p.heads_kv) <= device.sm_count as usize
        && flagship_tile(class).is_some();
    let flagship = flagship_fits && (flagship_rows > crate::tiles::DECODE_ROWS || unsplit_decode);
    let decode = prefer.decode
        && p.tile_mn.is_none()
        && rows <= crate::tiles::DECODE_ROWS
        && !unsplit_decode;
    let pick = |class: SpecClass| -> Result<KernelSpec, Error> {
        if decode && let Some(s) = class.decode(rows, decode_keys) {
            return Ok(s);
        }
        if flagship && let Some(s) = flagship_tile(class) {
            return Ok(s);
        }
        match p.tile_mn {
            // The caller's tile (FA4's `tile_mn`), checked like any spec.
            Some((tile_m, tile_n)) => {
                let s = class.on_tile(tile_m, tile_n);
                s.can_implement()?;
                Ok(s)
            }
            None => class.portable().ok_or_else(|| {
                Error::invalid(
                    "head_dim",
                    format!("{d}x{dv}"),
                    format!("head dims the {arch} portable kernel can tile"),
                )
            }),
        }
    };
    let mut spec = pick(class)?;
    let (rows, pack_gqa) = if spec.pack_gqa == pack_gqa {
        (rows, pack_gqa)
    } else {
        (p.seqlen_q, false) // the flagship took the class unpacked
    };
    let mut m_blocks = rows.div_ceil(spec.block_m() as usize);
    let heads = if pack_gqa { p.heads_kv } else { p.heads };
    // FA4's heuristic, exactly, on sm100f. FA4 never splits on sm90 / sm120; fa4gen does, with
    // the same rule counting CTA slots instead of SMs: the portable kernel holds 2 CTAs of 128
    // threads per SM and one CTA keeps only one K and one V tile in flight, so filling every
    // slot doubles the loads in flight (decode B=1 Sk=32k H32/8 on the H200: 1.69 TB/s with
    // 16 splits, see docs/BENCHMARKS.md for 2x).
    let flagship_splits = prefer.split
        && spec.imp == crate::spec::Impl::Wgmma
        && KernelSpec {
            feat: Features {
                split: true,
                ..spec.feat
            },
            ..spec
        }
        .can_implement()
        .is_ok();
    // The heuristic's count for a mixed decode batch is the most each sequence takes.
    let mut per_sequence = false;
    let num_splits = if v.num_splits < 1 {
        let sk_eff = match v.mask {
            Mask::Local => p.seqlen_k.min(
                (v.params.window_left.max(0) as usize)
                    .saturating_add(v.params.window_right.max(0) as usize)
                    .saturating_add(1 + spec.tile_m as usize),
            ),
            _ => p.seqlen_k,
        };
        let ctas_heads = if pack_gqa { p.heads_kv } else { p.heads };
        let slots = match arch {
            Arch::Sm100f => device.sm_count,
            Arch::Sm90 | Arch::Sm120 => device.sm_count * spec.ctas_per_sm(),
        };
        let n = heuristic_splits(p.batch, ctas_heads, m_blocks, sk_eff, spec.tile_n, slots);
        match arch {
            Arch::Sm100f => n,
            // Equal shares, no empty split: 256 blocks over 33 splits is 8 blocks in 32 of
            // them (B=1 Sk=32k d128 H32/8 on the H200: 32 splits 2.95 TB/s, 33 2.66 TB/s).
            Arch::Sm90 | Arch::Sm120 => {
                let n_blocks = sk_eff.div_ceil(spec.tile_n as usize).max(1) as u32;
                let fa4 = n_blocks.div_ceil(n_blocks.div_ceil(n));
                // The flagship's split (no window: it does not split one) where the host knows
                // the lengths: dense calls, and one sequence of varlen (an engine's chunk,
                // max_seqlen_q / max_seqlen_k its lengths): the schedule model's count.
                let dense =
                    (!p.is_varlen() || p.batch == 1) && matches!(v.mask, Mask::None | Mask::Causal);
                // An unsplit call the split tail may even out (unmasked, unpacked, long) is
                // not the model's n = 1: FA4's count stands there.
                let tail = fa4 == 1 && split_tail_may_run(&spec, p);
                if mixed_decode_batch(p, v.mask, arch)
                    && decode
                    && class.decode(rows, decode_keys) == Some(spec)
                {
                    // A decode batch of per-sequence key lengths: the longest may stand
                    // alone, so it is split whatever the other sequences fill.
                    let n = if p.sequence_splits != Some(false) {
                        // Each sequence takes its own count on the device; this one is
                        // the most the longest may take: splits of at least
                        // SEQUENCE_SPLIT_MIN_KEYS keys, as many as the partials' bound allows.
                        per_sequence = true;
                        let ctas = p.batch * ctas_heads * m_blocks;
                        let room = SEQUENCE_SPLIT_PARTIALS_PER_SLOT * slots as usize / ctas.max(1);
                        p.seqlen_k
                            .div_ceil(SEQUENCE_SPLIT_MIN_KEYS)
                            .min(room)
                            .min(SEQUENCE_SPLIT_MAX as usize) as u32
                    } else {
                        let per = MIXED_DECODE_KEYS_PER_SPLIT;
                        (p.seqlen_k.saturating_add(per / 2) / per)
                            .min(MIXED_DECODE_MAX_SPLITS as usize) as u32
                    };
                    let n = fa4.max(n);
                    n_blocks.div_ceil(n_blocks.div_ceil(n))
                } else if flagship_splits && dense && !tail {
                    SplitCall {
                        seqlen_q: p.seqlen_q,
                        seqlen_k: p.seqlen_k,
                        group: if pack_gqa { v.group.max(1) } else { 1 },
                        heads_batch: ctas_heads * p.batch,
                        query_heads_batch: p.heads * p.batch,
                        causal: v.mask == Mask::Causal,
                        tile_m: spec.block_m() as usize,
                        tile_n: spec.tile_n as usize,
                        d: spec.d as usize,
                        dv: spec.dv as usize,
                        slots: slots as usize,
                        q_run: spec.wgmma_q_run(),
                        m_major: m_major_runs_by_keys(p),
                    }
                    .best(fa4)
                } else {
                    fa4
                }
            }
        }
    } else {
        v.num_splits as u32
    };
    // The flagship splits K itself where the library has it (`Prefer::split`): the heuristic's
    // count, from its own CTA slots, as FA4 on sm100f, or the schedule model's
    // (`split_count`). Else the split runs on the portable kernel, at under half the
    // flagship's rate per SM: the flagship unsplit, on one CTA per tile, is faster from
    // FLAGSHIP_SPLIT_FILL of the SMs up. (FA4 never splits here; a caller's explicit count is
    // honoured.)
    // The tiles of the spec chosen so far, counted by both rules below.
    let flagship_tiles = m_blocks * heads * p.batch;
    // Unsplit after all: without the flagship's split, from FLAGSHIP_SPLIT_FILL of the SMs;
    // with it, under FLAGSHIP_SPLIT_MIN_BLOCKS K blocks.
    let unsplit = if flagship_splits {
        p.seqlen_k.div_ceil(spec.tile_n as usize) < FLAGSHIP_SPLIT_MIN_BLOCKS
    } else {
        spec.imp == crate::spec::Impl::Wgmma
            && flagship_tiles * FLAGSHIP_SPLIT_FILL.1
                >= device.sm_count as usize * FLAGSHIP_SPLIT_FILL.0
    };
    // The grid's z is batch * splits, at most 65535: validation holds a caller's count to it,
    // and the heuristic's is capped alike (a decode batch of 20000 sequences took 4).
    let num_splits = if v.num_splits < 1 && unsplit {
        1
    } else if v.num_splits < 1 {
        num_splits.min((65535 / p.batch.max(1)).max(1) as u32)
    } else {
        num_splits
    };
    // The two rules below share their test (an unsplit flagship call on the table's tile of
    // `tile_m` rows, without a caller's tile, long enough or forced by `Problem::fill_tile`,
    // in a library that prefers the rule's tiles) and take the rule's tile where pages fit it.
    let rule_applies = |tile_m: u32| {
        num_splits == 1
            && prefer.fill
            && p.tile_mn.is_none()
            && spec.imp == crate::spec::Impl::Wgmma
            && spec.tile_m == tile_m
            && p.fill_tile
                .unwrap_or(p.seqlen_k >= FILL_MIN_KEYS || unsplit_decode)
    };
    let sclass = SpecClass {
        pack_gqa: spec.pack_gqa,
        ..class
    };
    let pages_fit = |s: &KernelSpec| {
        p.paged
            .is_none_or(|pg| crate::runtime::tma::page_fits(pg.page_size, s.tile_n))
    };
    // A call of FILL_MIN_KEYS keys or more whose 128-row flagship tiles fill at most half the
    // SMs runs on the 64-row fill tile instead: twice the tiles, still one round
    // (`SpecClass::flagship_fill`). With varlen the count is an upper bound (the longest
    // sequence's blocks in every sequence), so a ragged batch takes it only where its tiles
    // are surely few. Unsplit calls only: the default num_splits=1, and the heuristic's where
    // it leaves the call unsplit (in a library without the flagship's split, where 128-row
    // tiles fill FLAGSHIP_SPLIT_FILL of the SMs).
    // An unsplit decode step (`unsplit_decode`) takes it at any length: its few rows make
    // the 64-row tile the cheaper.
    let fill = (rule_applies(128) && 2 * flagship_tiles <= device.sm_count as usize)
        .then(|| sclass.flagship_fill())
        .flatten()
        .filter(pages_fit);
    // A d <= 64 call (the table's 192-row tile; measured at d 64) of FILL_MIN_KEYS keys or
    // more whose 128-row tiles fit one per SM runs on them rather than on 192 rows
    // (`SpecClass::flagship_one_round`): one round either way, so the call takes one tile's
    // time, and a 128-row tile's is the shorter (chunked prefill, d 64 H 64/8 causal, Sq 256
    // over 16k: 0.183 -> 0.160 ms). An unsplit decode step takes it at any length, as it
    // takes the fill tile: unpaged, its tile by shape is already 128 rows at d 64, and paged
    // (pages of 16 and 128, B 1 and 8, 4k and 32k keys) 128 rows ran level with 192 to +2%.
    let narrow = (rule_applies(192)
        && rows.div_ceil(128) * heads * p.batch <= device.sm_count as usize)
        .then(|| sclass.flagship_one_round())
        .flatten()
        .filter(pages_fit);
    let fill = fill.or(narrow);
    if let Some(fill) = fill {
        spec = fill;
        m_blocks = rows.div_ceil(spec.block_m() as usize);
    }
    if num_splits > 1 && flagship_splits {
        spec.feat.split = true;
    } else if num_splits > 1 {
        if spec.imp == crate::spec::Impl::Wgmma {
            // Without the flagship's split the portable kernel serves split calls, with the
            // split count worked out for its own tile.
            return select_with(
                p,
                v,
                device,
                Prefer {
                    flagship: false,
                    ..prefer
                },
            );
        }
        class.feat.split = true;
        spec = pick(class)?;
    }
    // The flagship is persistent: one CTA per SM (two for tile_m 64) walks the (Q block, head,
    // batch) tiles, split-KV's num_splits times over.
    let tiles = m_blocks
        * heads
        * p.batch
        * if spec.imp == crate::spec::Impl::Wgmma {
            num_splits as usize
        } else {
            1
        };
    // The flagship counts its tiles (splits included) in int.
    if spec.imp == crate::spec::Impl::Wgmma && tiles > i32::MAX as usize {
        return Err(Error::invalid(
            "num_splits",
            num_splits,
            format!("tiles ({m_blocks} Q blocks x {heads} heads x batch) x splits below 2^31"),
        ));
    }
    // A causal pair is two Q blocks of one run: runs even and whole (`KernelSpec::wgmma_q_run`).
    // The kernel relies on it without checking (`Tiles::at` in fwd_sm90.cu takes the partner
    // of Q block m as m | 1): break it and pairs mix heads' K/V or hang.
    let runs_pair = match spec.wgmma_q_run() {
        Some(run) if run > 0 => m_blocks.is_multiple_of((run as usize).min(m_blocks).max(1)),
        _ => true,
    };
    let varlen_schedule = spec.imp == crate::spec::Impl::Wgmma
        && spec.feat.varlen
        && p.batch > 1
        && p.cta_pairs != Some(true)
        && p.varlen_schedule.unwrap_or_else(|| query_lengths_vary(p));
    let pairs = !varlen_schedule
        && spec.wgmma_pairs()
        && m_blocks.is_multiple_of(2)
        && runs_pair
        && tiles >= 2
        && device.sm_count >= 2
        && p.cta_pairs
            .unwrap_or(p.seqlen_k >= PAIRS_MIN_KEYS && varlen_rows_pair(p));
    let grid = if spec.imp == crate::spec::Impl::Wgmma {
        let mut ctas = tiles
            .max(1)
            .min((device.sm_count * spec.ctas_per_sm()).max(1) as usize);
        if pairs {
            ctas &= !1; // whole pairs (tiles is even)
        }
        (ctas as u32, 1, 1)
    } else {
        (
            m_blocks as u32,
            heads as u32,
            (p.batch * num_splits as usize) as u32,
        )
    };
    let pair = if pairs { 2 } else { 1 };
    let split_tail = split_tail_may_run(&spec, p)
        && (p.split_tail.is_some()
            || split_tail_pays(
                tiles / pair,
                grid.0 as usize / pair,
                p.seqlen_k.div_ceil(spec.tile_n as usize),
            ));
    // The wgmma kernel's causal runs, which either order deals (the portable kernel has none:
    // `wgmma_q_run` reads only the mask and packing).
    let run = match spec.wgmma_q_run() {
        Some(run) if run > 0 && spec.imp == crate::spec::Impl::Wgmma => run as usize,
        _ => 0,
    };
    // (A forced host order takes the place of the default Q block major runs.)
    let m_major_runs = run > 0
        && m_major_runs_by_keys(p)
            .unwrap_or(heads * p.batch * run.min(m_blocks) <= grid.0 as usize);
    let lpt_rounds = run > 0
        && !m_major_runs
        && p.varlen.is_none()
        && !spec.feat.split // (the kernel reads no host order under split-KV)
        && p.lpt_rounds
            .unwrap_or(p.seqlen_k >= LPT_ROUNDS_MIN_KEYS && tiles / pair > grid.0 as usize / pair);
    // The K blocks the call's CTAs visit, per CTA slot (varlen: every sequence as the longest).
    let queries_per_tile = if pack_gqa {
        spec.block_m() as usize / v.group.max(1)
    } else {
        spec.block_m() as usize
    }
    .max(1);
    let blocks_per_head = shape.kernel_blocks(&spec, queries_per_tile);
    let ctas = grid.0 as u64 * grid.1 as u64 * grid.2 as u64;
    let slots = (device.sm_count * spec.ctas_per_sm()).max(1) as u64;
    let blocks_per_cta =
        blocks_per_head.saturating_mul((heads * p.batch) as u64) / ctas.clamp(1, slots);
    Ok(Selection {
        spec,
        grid,
        num_splits,
        pairs,
        split_tail,
        m_major_runs,
        lpt_rounds,
        varlen_schedule,
        schedule_units: if varlen_schedule {
            m_blocks * p.batch
        } else {
            0
        },
        sequence_splits: spec.imp == crate::spec::Impl::Portable
            && spec.feat.split
            && p.is_varlen()
            && num_splits > 1
            && p.sequence_splits.unwrap_or(per_sequence),
        tiles,
        decode_tile: decode && class.decode(rows, decode_keys) == Some(spec),
        programmatic: run == 0 && blocks_per_cta <= PROGRAMMATIC_MAX_BLOCKS_PER_CTA,
    })
}

/// The H200 as the tests model it: sm_90, 132 SMs.
#[cfg(test)]
pub(crate) const H200: DeviceInfo = DeviceInfo {
    major: 9,
    minor: 0,
    sm_count: 132,
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{Strides, Varlen};
    use crate::spec::{DType, Impl, Mask};

    const B200: DeviceInfo = DeviceInfo {
        major: 10,
        minor: 0,
        sm_count: 148,
    };

    fn sel(p: &Problem, dev: &DeviceInfo) -> Selection {
        select(p, &p.validate().unwrap(), dev).unwrap()
    }

    #[test]
    fn q_stage_follows_fa4_on_sm100f_only() {
        for (sq, g, pack, want) in [
            (1, 1, None, 1),
            (32, 1, None, 1),
            (128, 1, None, 1),
            (129, 1, None, 2),
            (16, 8, None, 1), // 16 * 8 = 128 packed rows
            (17, 8, None, 2), // 136 packed rows
            (17, 8, Some(false), 1),
        ] {
            let mut p = Problem::new(DType::Bf16, 1, sq, 512, 8 * g, 8, 128, 128);
            p.pack_gqa = pack;
            assert_eq!(
                sel(&p, &B200).spec.q_stage,
                want,
                "sq {sq} g {g} pack {pack:?}"
            );
            assert_eq!(sel(&p, &H200).spec.q_stage, 1);
        }
    }

    /// The grid's z (batch * splits) stays within 65535 when the heuristic picks the count,
    /// as validation holds a caller's count to it: a decode batch of 20000 sequences with
    /// counts per sequence off took 4 splits (z 80000, a launch error); and a window's
    /// negative side does not count as every key (it read as usize::MAX keys: 47 splits for
    /// tiles of about 8 keys).
    #[test]
    fn heuristic_splits_keep_the_grid_and_read_windows_as_visible_keys() {
        let mut p = Problem::new(DType::Bf16, 20000, 1, 32768, 8, 8, 128, 128);
        p.num_splits = 0;
        p.varlen = Some(Varlen {
            seqused_k: true,
            ..Varlen::default()
        });
        p.sequence_splits = Some(false);
        let s = sel(&p, &H200);
        assert!(s.grid.2 <= 65535, "{:?} at {} splits", s.grid, s.num_splits);
        let window = |left: i64| {
            let mut p = Problem::new(DType::Bf16, 1, 1, 65536, 8, 8, 128, 128);
            p.num_splits = 0;
            p.window = (Some(left), Some(10));
            sel(&p, &H200).num_splits
        };
        assert_eq!(window(-3), window(0));
    }

    #[test]
    fn short_calls_launch_programmatically() {
        let with = |b, sq, sk, h, hkv, d, mask: &dyn Fn(&mut Problem)| {
            let mut p = Problem::new(DType::Bf16, b, sq, sk, h, hkv, d, d);
            mask(&mut p);
            sel(&p, &H200).programmatic
        };
        let causal = |p: &mut Problem| p.causal = true;
        let window = |p: &mut Problem| p.window = (Some(127), Some(0));
        let none = |_: &mut Problem| {};
        let unsplit = |p: &mut Problem| p.num_splits = 1;
        // gpt-oss's sliding layer at 16k (41 blocks a CTA), decode, a short dense call.
        assert!(with(1, 16384, 16384, 32, 4, 64, &window));
        assert!(with(1, 1, 4096, 32, 8, 128, &none));
        assert!(with(32, 512, 512, 16, 16, 128, &none));
        // Long calls and causal runs keep the launch's own placement of their CTAs.
        assert!(!with(1, 16384, 16384, 16, 16, 128, &causal));
        assert!(!with(16, 1024, 1024, 16, 16, 128, &causal));
        assert!(!with(1, 1, 32768, 32, 8, 128, &unsplit));
    }

    #[test]
    fn pack_gqa_defaults_on_for_groups() {
        let mut p = Problem::new(DType::Bf16, 2, 100, 100, 64, 8, 64, 64);
        let s = sel(&p, &B200);
        assert!(s.spec.pack_gqa);
        assert_eq!(s.grid, (4, 8, 2)); // ceil(100 * 8 / 256) m-blocks (q_stage 2) over 8 KV heads
        let explicit = Problem {
            pack_gqa: Some(true),
            ..p.clone()
        };
        assert_eq!(sel(&explicit, &H200).spec, sel(&p, &H200).spec);
        // The sm90 flagship packs d 64 by default: 800 rows in 192-row tiles of 24 queries x
        // 8 heads, over 8 KV heads and 2 batches, one persistent CTA per tile.
        let s = sel(&p, &H200);
        assert_eq!((s.spec.imp, s.spec.pack_gqa), (Impl::Wgmma, true));
        assert_eq!((s.spec.tile_m, s.grid), (192, (5 * 8 * 2, 1, 1)));
        // Asked not to pack, it runs one CTA per (192 queries, head) instead.
        p.pack_gqa = Some(false);
        let s = sel(&p, &H200);
        assert_eq!(
            (s.spec.imp, s.spec.pack_gqa, s.grid),
            (Impl::Wgmma, false, (128, 1, 1))
        );
        // A group that does not divide 64 cannot pack on the flagship: unpacked by default,
        // the portable kernel when packing is asked for.
        let mut g3 = Problem::new(DType::Bf16, 2, 300, 300, 6, 2, 64, 64);
        let s = sel(&g3, &H200);
        assert_eq!((s.spec.imp, s.spec.pack_gqa), (Impl::Wgmma, false));
        g3.pack_gqa = Some(true);
        let s = sel(&g3, &H200);
        assert_eq!((s.spec.imp, s.spec.pack_gqa), (Impl::Portable, true));
        // d 128 packs by default only where the unpacked flagship cannot serve (Sq <= 64).
        // (Under FILL_MIN_KEYS keys: the 128-row tiles, not the fill tile.)
        let mut w = Problem::new(DType::Bf16, 2, 100, 4000, 64, 8, 128, 128);
        assert!(!sel(&w, &H200).spec.pack_gqa);
        w.seqlen_q = 40;
        let s = sel(&w, &H200);
        assert_eq!((s.spec.imp, s.spec.pack_gqa), (Impl::Wgmma, true));
        assert_eq!(s.grid, (3 * 8 * 2, 1, 1)); // 3 Q blocks of 320 rows, 8 KV heads, 2 batches
        // Under a causal mask its packed Q blocks run in runs of G, the m_blocks % G lowest
        // after the whole runs: every Q block is one tile, none padded.
        w.causal = true;
        let s = sel(&w, &H200);
        assert_eq!((s.spec.imp, s.spec.pack_gqa), (Impl::Wgmma, true));
        assert_eq!(s.spec.wgmma_q_run(), Some(0));
        assert_eq!(s.grid, (3 * 8 * 2, 1, 1));
        w.seqlen_q = 129; // 9 blocks: a whole run and one more
        w.pack_gqa = Some(true);
        let s = sel(&w, &H200);
        assert_eq!((s.spec.imp, s.spec.pack_gqa), (Impl::Wgmma, true));
        assert_eq!(s.grid, (132, 1, 1)); // 9 * 8 * 2 = 144 tiles, one persistent CTA per SM
        // Without the packing preference (a library of unpacked flagship kernels), the
        // flagship runs the call unpacked.
        let mut u = Problem::new(DType::Bf16, 2, 300, 300, 64, 8, 64, 64);
        u.causal = true;
        let s = select_with(&u, &u.validate().unwrap(), &H200, Prefer::FALLBACKS[3]).unwrap();
        assert_eq!((s.spec.imp, s.spec.pack_gqa), (Impl::Wgmma, false));
        // gpt-oss's sliding layer (window 128, packed d 64) takes the narrow 192x80 tile (24
        // queries span 151 keys: two blocks of 80); the same window unpacked (no group) stays
        // on a 128-key tile.
        let mut sw = Problem::new(DType::Bf16, 4, 4096, 4096, 64, 8, 64, 64);
        sw.causal = true;
        sw.window = (Some(127), Some(0));
        let s = sel(&sw, &H200);
        assert_eq!(
            (s.spec.pack_gqa, s.spec.tile_m, s.spec.tile_n),
            (true, 192, 80)
        );
        sw.heads = 8;
        assert_eq!(sel(&sw, &H200).spec.tile_n, 128);
        // A decode-shaped call (at most 64 packed rows) takes the decode tile with the split
        // heuristic, and unsplit over at most the key-split tile's keys (d 256: 128); unsplit
        // over more, on at most one CTA per SM, the packed flagship (`unsplit_decode`).
        let mut d = Problem::new(DType::Bf16, 2, 8, 1000, 64, 8, 64, 64);
        let s = sel(&d, &H200);
        assert_eq!((s.spec.imp, s.spec.pack_gqa), (Impl::Wgmma, true));
        d.num_splits = 0;
        let s = sel(&d, &H200);
        assert_eq!((s.spec.imp, s.spec.pack_gqa), (Impl::Portable, true));
        d.num_splits = 1;
        d.seqlen_k = crate::tiles::KEY_SPLIT_MAX_KEYS;
        assert_eq!(sel(&d, &H200).spec.imp, Impl::Portable);
        d.seqlen_k = 1000;
        d.batch = 132; // 132 x 8 CTAs
        assert_eq!(sel(&d, &H200).spec.imp, Impl::Portable);
        // 9 queries x a group of 8 packs to 72 rows: the packed flagship (unpacked, it would
        // run 9 valid rows per tile).
        let d = Problem::new(DType::Bf16, 2, 9, 1000, 64, 8, 64, 64);
        assert_eq!(sel(&d, &H200).spec.imp, Impl::Wgmma);
        // An empty K never meets a tensor map.
        let mut e = Problem::new(DType::Bf16, 2, 300, 0, 8, 8, 64, 64);
        e.sinks = true;
        assert_eq!(sel(&e, &H200).spec.imp, Impl::Portable);
    }

    #[test]
    fn flagship_falls_back_where_it_cannot_serve() {
        let portable = |p: &Problem| sel(p, &H200).spec.imp == Impl::Portable;
        let mut p = Problem::new(DType::Bf16, 2, 1000, 1000, 16, 16, 40, 40);
        assert!(portable(&p), "d 40 is not a multiple of the wgmma k step");
        p.head_dim = 128;
        p.head_dim_v = 128;
        assert!(!portable(&p));
        p.softcap = 30.0;
        p.sinks = true;
        assert!(!portable(&p), "the flagship takes sinks and softcap");
        p.softcap = 0.0;
        p.sinks = false;
        p.num_splits = 3;
        let s = sel(&p, &H200);
        assert_eq!(
            (s.spec.imp, s.num_splits),
            (Impl::Wgmma, 3),
            "the flagship splits K"
        );
        assert!(s.spec.feat.split);
        p.num_splits = 0;
        p.k_strides.head = 0; // broadcast K head: no tensor map
        p.heads_kv = 16;
        assert!(portable(&p));
        // Without the flagship preference the portable table is chosen.
        let p = Problem::new(DType::Bf16, 2, 1000, 1000, 16, 16, 128, 128);
        let prefer = Prefer {
            decode: false,
            flagship: false,
            by_shape: false,
            pack: true,
            fill: false,
            split: false,
        };
        let s = select_with(&p, &p.validate().unwrap(), &H200, prefer).unwrap();
        assert_eq!(s.spec.imp, Impl::Portable);
    }

    /// CTA pairs: dense calls, unmasked or causal (in whole runs), with an even number of Q
    /// blocks, over an even grid.
    #[test]
    fn pairs() {
        // On the 128-row tiles (a few Q blocks over 4k+ keys would take the fill tile:
        // `long_calls_on_half_the_sms_take_the_fill_tile`).
        let sel = |p: &Problem, dev: &DeviceInfo| {
            select_with(p, &p.validate().unwrap(), dev, Prefer::FALLBACKS[1]).unwrap()
        };
        let mut p = Problem::new(DType::Bf16, 1, 1000, 1000, 1, 1, 128, 128);
        assert!(!sel(&p, &H200).pairs); // default: 4k keys and more
        p.seqlen_k = PAIRS_MIN_KEYS;
        let s = sel(&p, &H200);
        assert!(s.pairs);
        assert_eq!(s.grid, (8, 1, 1)); // 8 Q blocks of 128: four pairs
        p.heads = 33; // 264 tiles: the grid is the SMs, an even 132
        p.heads_kv = 33;
        assert_eq!((sel(&p, &H200).pairs, sel(&p, &H200).grid.0), (true, 132));
        let odd_sms = DeviceInfo {
            sm_count: 131,
            ..H200
        };
        assert_eq!(sel(&p, &odd_sms).grid.0, 130);
        p.seqlen_q = 1100; // 9 Q blocks: alone
        assert!(!sel(&p, &H200).pairs);
        p.seqlen_q = 1000;
        p.causal = true; // 8 Q blocks: one run of 8, four pairs
        assert!(sel(&p, &H200).pairs);
        p.seqlen_q = 3000; // 24 Q blocks: a run of 16 and 8 blocks outside runs, alone
        assert!(!sel(&p, &H200).pairs);
        p.seqlen_q = 4096; // 32: two runs of 16
        assert!(sel(&p, &H200).pairs);
        p.window = (Some(256), Some(0)); // a window: the partners' ranges differ at both ends
        assert!(!sel(&p, &H200).pairs);
        p.window = (None, None);
        p.seqlen_q = 1000;
        p.causal = false;
        p.seqlen_q = 1; // one Q block
        p.heads = 1;
        p.heads_kv = 1;
        assert!(!sel(&p, &H200).pairs);
        p.seqlen_q = 1000;
        p.cta_pairs = Some(false);
        assert!(!sel(&p, &H200).pairs);
        p.seqlen_k = 7;
        p.cta_pairs = Some(true);
        assert!(sel(&p, &H200).pairs);
        p.head_dim = 64; // d 64 has no pair code
        p.head_dim_v = 64;
        assert!(!sel(&p, &H200).pairs);
    }

    /// Varlen calls pair by default only where their sequences are long on average (ghosts:
    /// `VARLEN_PAIRS_MIN_MEAN_ROWS`), or where their queries are all the same length.
    #[test]
    fn varlen_pairs_by_mean_length() {
        let mut p = Problem::new(DType::Bf16, 2, 16384, 16384, 16, 16, 128, 128);
        p.causal = true;
        p.varlen_schedule = Some(false); // (the list, by default, takes the pairs' place)
        p.varlen = Some(Varlen {
            total_q: Some(2 * 16384),
            total_k: Some(2 * 16384),
            ..Varlen::default()
        });
        assert!(sel(&p, &H200).pairs); // mean 16k rows
        p.varlen = Some(Varlen {
            total_q: Some(2 * 2048),
            total_k: Some(2 * 16384),
            ..Varlen::default()
        });
        assert!(sel(&p, &H200).pairs); // mean 2k rows (measured ragged batches gained)
        p.varlen = Some(Varlen {
            total_q: Some(2 * 2047),
            total_k: Some(2 * 16384),
            ..Varlen::default()
        });
        assert!(!sel(&p, &H200).pairs); // shorter: ghosts of short sequences weigh more
        p.cta_pairs = Some(true);
        assert!(sel(&p, &H200).pairs);
        p.cta_pairs = None;
        p.varlen = Some(Varlen {
            seqused_k: true,
            ..Varlen::default()
        });
        assert!(sel(&p, &H200).pairs); // equal query lengths: no ghosts
        p.varlen = Some(Varlen {
            seqused_q: true,
            ..Varlen::default()
        });
        assert!(!sel(&p, &H200).pairs); // query lengths on the device
    }

    #[test]
    fn mixed_varlen_batches_take_the_list_instead_of_pairs() {
        let mut p = Problem::new(DType::Bf16, 2, 16384, 16384, 16, 16, 128, 128);
        p.causal = true;
        p.varlen = Some(Varlen {
            total_q: Some(2 * 16384),
            total_k: Some(2 * 16384),
            ..Varlen::default()
        });
        // Equal query lengths: the padded schedule has no empty tiles (and pairs here).
        let s = sel(&p, &H200);
        assert!(!s.varlen_schedule && s.pairs && s.schedule_units == 0);
        p.varlen_schedule = Some(true);
        let s = sel(&p, &H200);
        // 128-row tiles: 128 Q blocks of the longest sequence, in each of 2.
        assert!(s.varlen_schedule && !s.pairs && s.schedule_units == 2 * 128);
        p.varlen_schedule = None;
        // Mixed query lengths (one sequence shorter): the list, instead of pairs.
        p.varlen = Some(Varlen {
            total_q: Some(16384 + 9000),
            total_k: Some(2 * 16384),
            ..Varlen::default()
        });
        let s = sel(&p, &H200);
        assert!(s.varlen_schedule && !s.pairs && s.schedule_units == 2 * 128);
        p.cta_pairs = Some(true); // forced pairs: the padded schedule
        let s = sel(&p, &H200);
        assert!(!s.varlen_schedule && s.pairs && s.schedule_units == 0);
        p.cta_pairs = None;
        p.varlen_schedule = Some(false);
        assert!(!sel(&p, &H200).varlen_schedule);
        // Query lengths on the device: they may differ, packed rows or not.
        p.varlen_schedule = None;
        p.varlen = Some(Varlen {
            seqused_q: true,
            ..Varlen::default()
        });
        assert!(sel(&p, &H200).varlen_schedule);
        p.varlen = Some(Varlen {
            total_q: Some(2 * 16384),
            seqused_q: true,
            ..Varlen::default()
        });
        assert!(sel(&p, &H200).varlen_schedule);
        // One sequence (an engine's chunk): nothing to even out.
        let mut one = Problem::new(DType::Bf16, 1, 512, 16384, 32, 8, 128, 128);
        one.causal = true;
        one.varlen = Some(Varlen {
            total_q: Some(512),
            seqused_k: true,
            ..Varlen::default()
        });
        assert!(!sel(&one, &H200).varlen_schedule);
        // Dense batches keep their schedule.
        let dense = Problem::new(DType::Bf16, 4, 2048, 2048, 16, 16, 128, 128);
        assert!(!sel(&dense, &H200).varlen_schedule);
    }

    #[test]
    fn grid_and_mask() {
        let mut p = Problem::new(DType::Fp16, 3, 1000, 4096, 16, 16, 128, 128);
        p.causal = true;
        let s = sel(&p, &H200);
        assert!(!s.spec.pack_gqa);
        assert_eq!(s.spec.mask, Mask::Causal);
        assert_eq!(s.grid, (132, 1, 1)); // persistent: 8 x 16 x 3 tiles over the SMs
        // Causal, Sq 1000 at the end of 4096 keys: the Q tiles visit 235 blocks of 128 or 187
        // of 160 (cost 4.15M against 4.07M key-rows): 160.
        assert_eq!(
            s.spec.stem(),
            "fwd.sm90.wgmma.fp16.d128x128.m128n160.q1.causal"
        );
        // Without a mask, by key length: longer, the table's wider tile (the fitted cost's
        // crossover lies between 8k and 16k keys); shorter, no padded 160-key block.
        p.causal = false;
        for (sk, tile_n) in [
            (16384, 160),
            (8192, 128),
            (4096, 128),
            (1024, 128),
            (512, 128),
            (160, 160),
        ] {
            p.seqlen_k = sk;
            assert_eq!(sel(&p, &H200).spec.tile_n, tile_n, "Sk {sk}");
        }
        p.causal = true;
        // A library built before the shape rule ships the table's tile only: the fallback
        // after the by-shape pick is that tile, still the flagship (not the portable kernel).
        p.seqlen_k = 4096;
        let v = p.validate().unwrap();
        let by_table = select_with(&p, &v, &H200, Prefer::FALLBACKS[4]).unwrap();
        assert_eq!(
            (by_table.spec.imp, by_table.spec.tile_n),
            (Impl::Wgmma, 160)
        );
        // A local window's keys are its span, not Sk: a 256-key window on 16k keys is short.
        p.seqlen_k = 16384;
        p.causal = false;
        p.window = (Some(255), Some(0));
        assert_eq!(sel(&p, &H200).spec.tile_n, 128);
        p.window = (Some(8191), Some(0));
        assert_eq!(sel(&p, &H200).spec.tile_n, 160);
        // d 256: registers bound the table's first tile to 80 keys, so 128x64 competes by
        // shape: short causal calls pad less on it (H200, sustained: S 512 causal 326 against
        // 308 TFLOP/s, 1k 445 against 430); long ones take 128x80.
        for (sk, causal, tile_n) in [
            (512, true, 64),
            (1024, true, 64),
            (4096, true, 80),
            (16384, false, 80),
            (16384, true, 80),
        ] {
            let mut p = Problem::new(DType::Bf16, 16384 / sk, sk, sk, 8, 8, 256, 256);
            p.causal = causal;
            assert_eq!(
                sel(&p, &H200).spec.tile_n,
                tile_n,
                "d 256 Sk {sk} causal {causal}"
            );
        }
        // d 64: three consumers (192 rows) where their rate pays for their padding: long
        // sequences and unmasked ones, not 1k causal (H200: 276-280 against 292-302 TFLOP/s; 284
        // against 327 in the eleventh session) nor a 128-key
        // window (a 192-row tile spans 3-4 blocks of keys where a 128-row one spans 2).
        let tile = |b: usize, s: usize, causal: bool, window: Option<i64>| {
            let mut p = Problem::new(DType::Bf16, b, s, s, 32, 32, 64, 64);
            p.causal = causal;
            if window.is_some() {
                p.window = (window, Some(0));
            }
            let s = sel(&p, &H200).spec;
            (s.tile_m, s.tile_n)
        };
        assert_eq!(tile(16, 1024, true, None), (128, 128));
        assert_eq!(tile(32, 512, true, None), (128, 128));
        // Unmasked, 192 rows from 512 keys (H200: 404 against 363 TFLOP/s at 512, 463
        // against 402 at 1k).
        assert_eq!(tile(32, 512, false, None), (192, 128));
        assert_eq!(tile(16, 1024, false, None), (192, 128));
        assert_eq!(tile(4, 4096, true, None), (192, 128));
        assert_eq!(tile(4, 4096, false, None), (192, 128));
        assert_eq!(tile(1, 16384, false, None), (192, 128));
        assert_eq!(tile(1, 16384, false, Some(127)), (128, 128));
        assert_eq!(tile(1, 100, false, None), (128, 128));
    }

    /// Random shapes for the visited-block counts' tests: lengths 1..=3000, each window side
    /// unbounded, 0, 127 or in -100..800; windows that leave some row nothing are outside the
    /// closed forms' promise and left out.
    fn random_tile_shapes(seed: u64, n: usize) -> Vec<TileShape> {
        let mut rng = seed;
        let mut next = |k: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % k
        };
        let mut shapes = Vec::new();
        while shapes.len() < n {
            let (sq, sk) = (1 + next(3000) as usize, 1 + next(3000) as usize);
            let all = (sq + sk) as i64;
            let mut side = || match next(4) {
                0 => all,
                1 => 0,
                2 => 127,
                _ => next(900) as i64 - 100,
            };
            let (left, right) = (side(), side());
            if left + right >= 0 {
                shapes.push(TileShape {
                    seqlen_q: sq,
                    seqlen_k: sk,
                    left,
                    right,
                    group: 1,
                });
            }
        }
        shapes
    }

    /// `TileShape::visited_blocks` and `visited_window_blocks` (closed forms) against counting
    /// each Q tile's blocks the way the kernels bound them: on the grid of n keys, and (the
    /// wgmma kernel under a window) from the tile's first visible key.
    #[test]
    fn visited_blocks_match_the_kernels_count() {
        let tiles = |sh: &TileShape, tm: i64| {
            let (sq, sk, left, right) = (sh.seqlen_q as i64, sh.seqlen_k as i64, sh.left, sh.right);
            (0..sq).step_by(tm as usize).map(move |m0| {
                let m1 = (m0 + tm).min(sq);
                // Tile keys [lo, hi): lo unclamped above as the kernel's max(0, .) leaves it.
                ((m0 + sk - sq - left).max(0), (m1 + sk - sq + right).min(sk))
            })
        };
        let grid = |sh: &TileShape, tm: i64, n: i64| -> u64 {
            let sk = sh.seqlen_k as i64;
            tiles(sh, tm)
                .map(|(lo, hi)| ((hi.max(0) + n - 1) / n - lo.min(sk) / n).max(0) as u64)
                .sum()
        };
        let window = |sh: &TileShape, tm: i64, n: i64| -> u64 {
            tiles(sh, tm)
                .map(|(lo, hi)| {
                    if hi > lo {
                        ((hi - lo + n - 1) / n) as u64
                    } else {
                        0
                    }
                })
                .sum()
        };
        for sh in random_tile_shapes(0x2545f4914f6cdd1d, 4000) {
            for (tm, n) in [
                (128, 128),
                (192, 128),
                (128, 160),
                (64, 80),
                (128, 64),
                (24, 80),
                (128, 144),
                (16, 64),
                (1, 16),
            ] {
                let (tm, n) = (tm as usize, n as usize);
                assert_eq!(
                    sh.visited_blocks(tm, n),
                    grid(&sh, tm as i64, n as i64),
                    "{sh:?} {tm}x{n}"
                );
                assert_eq!(
                    sh.visited_window_blocks(tm, n),
                    window(&sh, tm as i64, n as i64),
                    "{sh:?} {tm}x{n} window blocks"
                );
            }
        }
    }

    /// A dense causal wgmma kernel lays its Q blocks from the last query
    /// (`KernelSpec::wgmma_q_from_end`): `TileShape::kernel_blocks` counts its blocks as the
    /// kernel bounds them, tile i's rows [i tm - pad, min((i + 1) tm - pad, Sq)), pad the
    /// grid's spare rows in whole 64-row consumers, its keys up to its last row's, on the
    /// grid of n keys; and the partial block's move never adds blocks.
    #[test]
    fn q_blocks_from_the_end_match_the_kernels_count() {
        for sh in random_tile_shapes(0x9e3779b97f4a7c15, 2000) {
            let sh = TileShape {
                left: (sh.seqlen_q + sh.seqlen_k) as i64,
                right: 0,
                ..sh
            };
            for (tm, n) in [(192, 128), (128, 128), (128, 80), (64, 64), (128, 176)] {
                let spec = KernelSpec {
                    imp: Impl::Wgmma,
                    ..SpecClass {
                        arch: Arch::Sm90,
                        dtype: DType::Bf16,
                        d: 64,
                        dv: 64,
                        q_stage: 1,
                        mask: Mask::Causal,
                        lse: false,
                        pack_gqa: false,
                        feat: Features::default(),
                    }
                    .on_tile(tm, n)
                };
                // (A 64-row tile has no whole consumer of spare rows, and a multiple of the
                // K block gains nothing at Sq = Sk: the plain grid.)
                let from_end = tm > 64 && tm % n != 0;
                assert_eq!(spec.wgmma_q_from_end(), from_end);
                let (sq, sk, tm, n) = (sh.seqlen_q as i64, sh.seqlen_k as i64, tm as i64, n as i64);
                let pad = if from_end {
                    ((sq + tm - 1) / tm * tm - sq) / 64 * 64
                } else {
                    0
                };
                let want: i64 = (0..(sq + tm - 1) / tm)
                    .map(|i| {
                        let last = ((i + 1) * tm - pad).min(sq) - 1;
                        let hi = (last + sk - sq + 1).min(sk);
                        (hi.max(0) + n - 1) / n
                    })
                    .sum();
                let got = sh.kernel_blocks(&spec, tm as usize);
                assert_eq!(got, want as u64, "{sh:?} {tm}x{n}");
                assert!(
                    got <= sh.visited_blocks(tm as usize, n as usize),
                    "{sh:?} {tm}x{n}"
                );
            }
        }
    }

    /// vLLM's FA4 warm-up probes (fa4_cutedsl_config.py): (Sq, Sk) for batch 1 and 2, causal x
    /// LSE, on each family, for DeepSeek MLA prefill (d 192/128, 128 heads, MHA). Every
    /// selected kernel must be in that family's default plan, i.e. shipped.
    #[test]
    fn vllm_probe_table() {
        let probes = [(1, 128), (32, 128), (129, 512), (512, 4096), (1024, 8192)];
        let devices = [
            (H200, "sm90"),
            (B200, "sm100f"),
            (
                DeviceInfo {
                    major: 12,
                    minor: 0,
                    sm_count: 84,
                },
                "sm120",
            ),
        ];
        let mut seen = 0;
        for (dev, fam) in devices {
            let plan = crate::plan::plan("default", dev.arch().unwrap()).unwrap();
            for (sq, sk) in probes {
                for b in [1, 2] {
                    for causal in [false, true] {
                        for lse in [false, true] {
                            let mut p = Problem::new(DType::Bf16, b, sq, sk, 128, 128, 192, 128);
                            p.causal = causal;
                            p.return_lse = lse;
                            // Decode-shaped probes prefer the decode tile, which the default
                            // plan does not ship: the runtime then takes the table's kernel.
                            let s = sel(&p, &dev);
                            assert_eq!(s.decode_tile, sq <= 64, "{fam} sq {sq}");
                            if s.decode_tile {
                                // Key-split for a row per CTA and 128 keys (MHA: G = 1).
                                let tile = if sq == 1 { (16, 64) } else { (64, 64) };
                                assert_eq!((s.spec.tile_m, s.spec.tile_n), tile);
                            }
                            let s = select_table(&p, &p.validate().unwrap(), &dev).unwrap();
                            let q = if fam == "sm100f" && sq > 128 { 2 } else { 1 };
                            let kernel = if fam == "sm90" && sq > 64 {
                                "wgmma.bf16.d192x128.m128n128"
                            } else {
                                "portable.bf16.d192x128.m128n64"
                            };
                            let want = format!(
                                "fwd.{fam}.{kernel}.q{q}{}{}",
                                if causal { ".causal" } else { "" },
                                if lse { ".lse" } else { "" }
                            );
                            assert_eq!(s.spec.stem(), want);
                            let tiles = (sq as u32).div_ceil(128 * q) * 128 * b as u32;
                            let grid = if kernel.starts_with("wgmma") {
                                (tiles.min(dev.sm_count), 1, 1)
                            } else {
                                ((sq as u32).div_ceil(128 * q), 128, b as u32)
                            };
                            assert_eq!(s.grid, grid);
                            assert!(plan.contains(&s.spec), "{want} is not in the {fam} plan");
                            seen += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(seen, 3 * 5 * 2 * 2 * 2);
    }

    /// Selection (validate + select) must cost well under a microsecond: it runs per call.
    #[test]
    fn selection_latency() {
        let mut p = Problem::new(DType::Bf16, 4, 4096, 4096, 32, 8, 128, 128);
        p.causal = true;
        // The best of many short runs: this 2-core VM's neighbours move single runs 2x.
        let n = 100_000;
        let mut best = f64::MAX;
        for _ in 0..20 {
            let t = std::time::Instant::now();
            let mut acc = 0u32;
            for _ in 0..n {
                let pp = std::hint::black_box(&p);
                let v = pp.validate().unwrap();
                acc = acc.wrapping_add(select(pp, &v, &H200).unwrap().grid.0);
            }
            std::hint::black_box(acc);
            best = best.min(t.elapsed().as_nanos() as f64 / n as f64);
        }
        println!("validate + select: {best:.0} ns per call");
        assert!(best < 1000.0, "selection takes {best:.0} ns");
        // A chunk the split heuristic runs through the schedule model (`split_count`): a
        // gpt-oss chunk of 256 over 16k, d 64, H 64/8 (an engine's chunks grow Sk every step,
        // so no answer is kept).
        let mut p = Problem::new(DType::Bf16, 1, 256, 16384, 64, 8, 64, 64);
        p.causal = true;
        p.num_splits = 0;
        assert_eq!(
            select(&p, &p.validate().unwrap(), &H200)
                .unwrap()
                .num_splits,
            3
        );
        let mut best = f64::MAX;
        for _ in 0..20 {
            let t = std::time::Instant::now();
            let mut acc = 0u32;
            for _ in 0..n / 10 {
                let pp = std::hint::black_box(&p);
                let v = pp.validate().unwrap();
                acc = acc.wrapping_add(select(pp, &v, &H200).unwrap().num_splits);
            }
            std::hint::black_box(acc);
            best = best.min(t.elapsed().as_nanos() as f64 / (n / 10) as f64);
        }
        println!("validate + select, split heuristic: {best:.0} ns per call");
        assert!(best < 3000.0, "selection takes {best:.0} ns");
    }

    #[test]
    fn num_splits_follow_fa4_and_the_slot_rule() {
        let decode = |b: usize, sk: usize, splits: i32| {
            let mut p = Problem::new(DType::Bf16, b, 1, sk, 32, 8, 128, 128);
            p.causal = true;
            p.num_splits = splits;
            p
        };
        // FA4 on sm100f: min(SMs / (B * Hkv * m_blocks), 128, n_blocks), 1 at <= 4 blocks.
        let s = sel(&decode(1, 32768, 0), &B200);
        assert_eq!((s.num_splits, s.grid.2), (148 / 8, 148 / 8));
        assert!(s.spec.feat.split);
        // sm90: the same over CTA slots (2 per SM for 128-thread kernels).
        let s = sel(&decode(1, 32768, 0), &H200);
        assert!(s.decode_tile);
        assert_eq!((s.spec.tile_m, s.spec.tile_n), (64, 128)); // 4 packed rows: the decode tile
        assert_eq!(s.spec.ctas_per_sm(), 2);
        // 264 / 8 = 33 slots per head, equalised over 256 blocks: 8 blocks in each of 32.
        assert_eq!(s.num_splits, 32);
        assert_eq!(sel(&decode(64, 32768, 0), &H200).num_splits, 1);
        assert_eq!(sel(&decode(1, 256, 0), &H200).num_splits, 1); // 4 K blocks
        // Explicit values are honoured; 1 is unsplit and uses the unsplit kernel.
        let s = sel(&decode(3, 4096, 5), &H200);
        assert_eq!((s.num_splits, s.grid.2), (5, 15));
        assert!(s.spec.feat.split);
        let s = sel(&decode(3, 4096, 1), &H200);
        assert!(!s.spec.feat.split && s.num_splits == 1);
        // A window bounds the keys a block sees: few blocks, no split.
        let mut p = decode(1, 131072, 0);
        p.window = (Some(127), Some(0));
        assert_eq!(sel(&p, &H200).num_splits, 1);
    }

    #[test]
    fn long_calls_on_half_the_sms_take_the_fill_tile() {
        let call = |sq: usize, sk: usize, h: usize, d: usize| {
            let mut p = Problem::new(DType::Bf16, 1, sq, sk, h, h, d, d);
            p.causal = true;
            p
        };
        let tile = |p: &Problem| {
            let s = sel(p, &H200);
            (s.spec.imp, s.spec.tile_m, s.spec.tile_n, s.tiles)
        };
        // 2 Q blocks x 32 heads = 64 tiles of 128 rows over 32k keys: 128 tiles of 64 rows.
        assert_eq!(
            tile(&call(256, 32768, 32, 128)),
            (Impl::Wgmma, 64, 128, 128)
        );
        // 66 tiles of 128 rows fill exactly half of the 132 SMs: fill; 67 do not.
        assert_eq!(tile(&call(256, FILL_MIN_KEYS, 33, 128)).1, 64);
        assert_eq!(tile(&call(256, FILL_MIN_KEYS, 34, 128)).1, 128);
        // Shorter calls keep the tile by shape; so do d 64 and d 256, local windows, a
        // caller's tile and a library without the fill tile.
        assert_eq!(tile(&call(256, FILL_MIN_KEYS - 1, 32, 128)).1, 128);
        assert_eq!(tile(&call(256, 8192, 32, 96)).1, 64);
        assert_ne!(tile(&call(256, 32768, 32, 64)).1, 64);
        assert_ne!(tile(&call(256, 32768, 8, 256)).1, 64);
        let mut w = call(256, 32768, 32, 128);
        w.causal = false;
        w.window = (Some(4095), Some(0));
        assert_eq!(tile(&w).1, 128);
        let mut t = call(256, 32768, 32, 128);
        t.tile_mn = Some((128, 128));
        assert_eq!(tile(&t).1, 128);
        // `Problem::fill_tile` forces either way (still only where half the SMs or fewer).
        let mut f = call(256, 32768, 32, 128);
        f.fill_tile = Some(false);
        assert_eq!(tile(&f).1, 128);
        let mut f = call(256, 1000, 32, 128);
        f.fill_tile = Some(true);
        assert_eq!(tile(&f).1, 64);
        f.heads = 34;
        f.heads_kv = 34;
        assert_eq!(tile(&f).1, 128);
        let p = call(256, 32768, 32, 128);
        let s = select_with(&p, &p.validate().unwrap(), &H200, Prefer::FALLBACKS[1]).unwrap();
        assert_eq!((s.spec.imp, s.spec.tile_m), (Impl::Wgmma, 128));
    }

    /// An engine's chunked prefill: a ragged batch over a paged cache, with sinks and softcap.
    #[test]
    fn chunked_prefill_through_varlen_and_pages_takes_the_fill_tile() {
        let mut p = Problem::new(DType::Bf16, 2, 256, 16384, 16, 8, 128, 128);
        p.causal = true;
        p.sinks = true;
        p.softcap = 30.0;
        p.varlen = Some(Varlen {
            total_q: Some(300),
            total_k: None,
            seqused_k: true,
            ..Varlen::default()
        });
        let paged = |page_size: usize| crate::runtime::Paged {
            page_size,
            num_pages: 2 * 16384 / page_size,
            pages_per_seq: 16384 / page_size,
            page_table_stride: 16384 / page_size,
        };
        for page_size in [16, 128] {
            p.paged = Some(paged(page_size));
            p.k_strides = Strides::contiguous(page_size, 8, 128);
            p.v_strides = p.k_strides;
            // 2 sequences x 2 blocks of 128 rows x 16 heads = 64 tiles: 128 of 64 rows.
            let s = sel(&p, &H200);
            assert_eq!(
                (s.spec.imp, s.spec.tile_m, s.spec.tile_n, s.tiles),
                (Impl::Wgmma, 64, 128, 128),
                "page {page_size}"
            );
            assert!(s.spec.feat.varlen && s.spec.feat.paged && s.spec.feat.sink);
        }
        // More sequences: the upper bound passes half the SMs, the 128-row tile stays.
        p.batch = 3;
        p.paged = Some(paged(128));
        p.k_strides = Strides::contiguous(128, 8, 128);
        p.v_strides = p.k_strides;
        assert_eq!(sel(&p, &H200).spec.tile_m, 128);
    }

    #[test]
    fn d64_calls_of_one_round_take_128_rows() {
        // Chunked prefill, d 64 H 64/8 packed, causal: Sq 256 over 16k is 88 tiles of 192 rows
        // and 128 of 128 (one per SM): 128 rows. Sq 264: 136 of 128 rows, one round too many,
        // so 192 stays, as at Sq 512 (256). Under FILL_MIN_KEYS keys, or with the heuristic's
        // split, 192 stays too.
        let tile = |sq: usize, sk: usize, splits: i32| {
            let mut p = Problem::new(DType::Bf16, 1, sq, sk, 64, 8, 64, 64);
            p.causal = true;
            p.num_splits = splits;
            let s = sel(&p, &H200);
            (s.spec.imp, s.spec.tile_m, s.spec.tile_n, s.num_splits)
        };
        assert_eq!(tile(256, 16384, 1), (Impl::Wgmma, 128, 128, 1));
        assert_eq!(tile(128, 16384, 1), (Impl::Wgmma, 128, 128, 1));
        assert_eq!(tile(264, 16384, 1).1, 192);
        assert_eq!(tile(512, 16384, 1).1, 192);
        assert_eq!(tile(256, 2048, 1).1, 192);
        assert_eq!(tile(256, 16384, 0), (Impl::Wgmma, 192, 128, 3));
        // An unsplit decode step over pages takes 128 rows at any length (unpaged its tile by
        // shape already has 128); a library without it (the first fallback, `Prefer::fill`
        // off, which also drops `unsplit_decode`) gets the decode tile back.
        for sk in [1024, 8192] {
            let mut p = Problem::new(DType::Bf16, 2, 1, sk, 64, 8, 64, 64);
            p.causal = true;
            p.paged = Some(crate::runtime::Paged {
                page_size: 16,
                num_pages: 2 * sk / 16,
                pages_per_seq: sk / 16,
                page_table_stride: sk / 16,
            });
            p.k_strides = Strides::contiguous(16, 8, 64);
            p.v_strides = p.k_strides;
            let s = sel(&p, &H200);
            assert_eq!(
                (s.spec.imp, s.spec.tile_m, s.num_splits),
                (Impl::Wgmma, 128, 1)
            );
            let v = p.validate().unwrap();
            let old = select_with(&p, &v, &H200, Prefer::FALLBACKS[1]).unwrap();
            assert!(old.decode_tile, "{sk}: {}", old.spec.stem());
        }
    }

    #[test]
    fn unsplit_decode_takes_the_flagship_within_its_bounds() {
        // (batch, heads, heads_kv, keys, d) -> the flagship (on its fill tile) or the decode tile.
        let step = |b: usize, h: usize, hkv: usize, sk: usize, d: usize| {
            let mut p = Problem::new(DType::Bf16, b, 1, sk, h, hkv, d, d);
            p.causal = true;
            sel(&p, &H200)
        };
        let flagship = |s: &Selection| (s.spec.imp, s.decode_tile, s.num_splits);
        // The flagship, or else the decode tile, as `on_flagship` says.
        let expect = |s: &Selection, on_flagship: bool, what: &str| {
            assert_eq!(
                (s.spec.imp == Impl::Wgmma, s.decode_tile),
                (on_flagship, !on_flagship),
                "{what}: {}",
                s.spec.stem()
            );
        };
        // One CTA per SM at most: 33 x 4 KV heads = 132 CTAs; 133 x 1 is one too many.
        let s = step(33, 16, 4, 4096, 128);
        assert_eq!(flagship(&s), (Impl::Wgmma, false, 1));
        assert_eq!(
            s.spec.tile_m, 128,
            "66 x 2 tiles of 64 rows would not fit one round"
        );
        assert_eq!(
            flagship(&step(133, 4, 1, 4096, 128)),
            (Impl::Portable, true, 1)
        );
        // Past the key-split tile's keys, on the fill tile even under FILL_MIN_KEYS.
        let s = step(8, 32, 8, crate::tiles::KEY_SPLIT_MAX_KEYS + 1, 128);
        assert_eq!((flagship(&s), s.spec.tile_m), ((Impl::Wgmma, false, 1), 64));
        let s = step(8, 32, 8, crate::tiles::KEY_SPLIT_MAX_KEYS, 128);
        assert_eq!(
            (flagship(&s), s.spec.tile_m),
            ((Impl::Portable, true, 1), 16)
        );
        // d 256 leaves the key-split tile from 129 keys (`tiles::unsplit_decode_after_keys`),
        // where both head dims are 256 and the rows the key-split tile's (at most 16).
        for (sk, d, on_flagship) in [
            (129, 256, true),
            (256, 256, true),
            (128, 256, false),
            (129, 128, false),
        ] {
            expect(
                &step(8, 16, 8, sk, d),
                on_flagship,
                &format!("d {d} over {sk} keys"),
            );
        }
        for (sq, group, dv, on_flagship) in
            [(8, 2, 256, true), (16, 2, 256, false), (1, 2, 128, false)]
        {
            let mut p = Problem::new(DType::Bf16, 8, sq, 200, 8 * group, 8, 256, dv);
            p.causal = true;
            expect(
                &sel(&p, &H200),
                on_flagship,
                &format!("Sq {sq} x G {group}, dv {dv}"),
            );
        }
        // A window, a split, an unpacked group: the decode tile.
        let mut p = Problem::new(DType::Bf16, 2, 1, 8192, 32, 8, 128, 128);
        p.window = (Some(1024), Some(0));
        assert!(sel(&p, &H200).decode_tile);
        p.window = (None, None);
        p.num_splits = 0;
        assert!(sel(&p, &H200).decode_tile);
        p.num_splits = 1;
        p.pack_gqa = Some(false);
        assert!(sel(&p, &H200).decode_tile);
        // Pages the flagship cannot load keep the decode tile: one key at d 96 (TMA-describable
        // strides, but no flagship tile for them) and at d 128 (no tensor map at all); pages of
        // 16 take the flagship.
        for (d, page, on_flagship) in [(96, 1, false), (128, 1, false), (96, 16, true)] {
            let mut p = Problem::new(DType::Bf16, 2, 1, 4096, 32, 8, d, d);
            p.paged = Some(crate::runtime::Paged {
                page_size: page,
                num_pages: 2 * 4096 / page,
                pages_per_seq: 4096 / page,
                page_table_stride: 4096 / page,
            });
            p.k_strides = Strides::contiguous(page, 8, d);
            p.v_strides = p.k_strides;
            expect(
                &sel(&p, &H200),
                on_flagship,
                &format!("d {d} pages of {page}"),
            );
        }
    }

    #[test]
    fn sequence_split_units_hold_every_sequence_and_the_shares() {
        // B 32 at 8 CTA heads on 264 slots: 4 waves' worth is 132 units past the batch's.
        assert_eq!(sequence_split_units(32, 16, 8, 264, 4), 32 + 132);
        // At most the call's count for every sequence; at least one unit each.
        assert_eq!(sequence_split_units(8, 16, 8, 264, 4), 8 * 16);
        assert_eq!(sequence_split_units(1000, 2, 32, 264, 1), 1000 + 9);
        assert_eq!(sequence_split_units(5, 1, 8, 264, 4), 5);
        // No overflow at the extremes.
        assert_eq!(
            sequence_split_units(usize::MAX, u32::MAX, 0, u64::MAX, u32::MAX),
            u32::MAX
        );
    }

    #[test]
    fn mixed_decode_batches_split_their_longest_sequence() {
        // The decode-batches sweep's shapes (session 35) as the drop-in makes them: one query
        // per sequence (packed), pages of 16 behind 131072-key tables, seqused_k, Sk the
        // longest (max_seqlen_k), causal; and the count each took by hand at its best or
        // within 3% of it.
        let step = |b: usize, h: usize, hkv: usize, d: usize, sinks: bool, max_sk: usize| {
            let mut p = Problem::new(DType::Bf16, b, 1, max_sk, h, hkv, d, d);
            p.causal = true;
            p.sinks = sinks;
            p.num_splits = 0;
            p.varlen = Some(Varlen {
                total_q: Some(b),
                seqused_k: true,
                ..Varlen::default()
            });
            p.q_strides = Strides::contiguous(b, h, d);
            p.o_strides = p.q_strides;
            p.paged = Some(crate::runtime::Paged {
                page_size: 16,
                num_pages: b * 2048 + 7,
                pages_per_seq: 8192,
                page_table_stride: 8192,
            });
            p.k_strides = Strides::contiguous(16, hkv, d);
            p.v_strides = p.k_strides;
            let s = sel(&p, &H200);
            assert!(s.decode_tile, "{b} x {max_sk}: {}", s.spec.stem());
            assert!(s.sequence_splits, "{b} x {max_sk}: counts per sequence");
            p.sequence_splits = Some(false);
            let one = sel(&p, &H200);
            assert!(!one.sequence_splits);
            (s.num_splits, one.num_splits)
        };
        // (B, H, Hkv, d, sinks, longest keys, the call's count with counts per sequence (the
        // most a sequence takes: the longest's keys over 2048, at most 16 partials per slot
        // and 16), and FA4's one count for every sequence): mixed lengths first.
        let sweep = [
            (32, 32, 8, 128, false, 32024, 16, 4), // 1k..32k: 0.661 ms at 4 (6: 0.639, 1: 0.961)
            (8, 32, 8, 128, false, 31824, 16, 4),  // FA4's count already 4 (8: 0.202, -20%)
            (64, 32, 8, 128, false, 7942, 4, 1),   // under 12k keys: FA4's 1 (4: 0.330)
            (128, 32, 8, 128, false, 4037, 2, 1),  // 1: 0.343 (2 splits 0.336)
            (32, 32, 8, 128, false, 32768, 16, 4), // one of 32k, 31 of 1k: 0.250 (1: 0.905)
            (32, 64, 8, 64, true, 32024, 16, 4),   // gpt-oss 1k..32k: 0.442 (1: 0.657)
            (64, 32, 8, 128, false, 4096, 2, 1),   // all 4k: 0.293 (2: 0.302)
            (8, 32, 8, 128, false, 8192, 4, 4),    // all 8k: FA4's 4, 0.081
            (64, 64, 8, 64, true, 4096, 2, 1),     // gpt-oss all 4k: 0.195 (2: 0.200)
        ];
        for (b, h, hkv, d, sinks, max_sk, per_sequence, one) in sweep {
            assert_eq!(
                step(b, h, hkv, d, sinks, max_sk),
                (per_sequence, one),
                "B {b} over {max_sk}"
            );
        }
        // Equal lengths the host knows (no seqused_k: every sequence max_sk long): FA4's 1.
        let mut p = Problem::new(DType::Bf16, 32, 1, 32768, 32, 8, 128, 128);
        p.causal = true;
        p.num_splits = 0;
        assert_eq!(sel(&p, &H200).num_splits, 1);
    }

    #[test]
    fn heuristic_splits_run_on_the_flagship() {
        let chunk = |b: usize, sq: usize, h: usize, splits: i32| {
            let mut p = Problem::new(DType::Bf16, b, sq, 32768, h, 8, 128, 128);
            p.causal = true;
            p.num_splits = splits;
            p
        };
        // 64 tiles of 128 queries x 32 heads (48% of 132 SMs): split in 2 on the flagship's
        // 128-row tile, 128 CTAs (the fill tile runs unsplit only).
        let s = sel(&chunk(1, 256, 32, 0), &H200);
        assert_eq!(
            (
                s.spec.imp,
                s.spec.feat.split,
                s.num_splits,
                s.tiles,
                s.grid.0
            ),
            (Impl::Wgmma, true, 2, 128, 128)
        );
        assert_eq!(s.spec.tile_m, 128);
        assert!(!s.pairs && !s.split_tail && !s.lpt_rounds);
        // 32 tiles: 4 splits. Packed: 2 batches x 8 KV heads x 2 blocks of 128 rows.
        let s = sel(&chunk(1, 128, 32, 0), &H200);
        assert_eq!((s.spec.imp, s.num_splits, s.tiles), (Impl::Wgmma, 4, 128));
        let s = sel(&chunk(2, 32, 64, 0), &H200);
        assert_eq!(
            (s.spec.imp, s.spec.pack_gqa, s.num_splits),
            (Impl::Wgmma, true, 4)
        );
        // Two-way splits run from FLAGSHIP_SPLIT_MIN_BLOCKS blocks up, over the fill tile.
        let mut short = chunk(1, 256, 32, 0);
        short.seqlen_k = FILL_MIN_KEYS;
        let s = sel(&short, &H200);
        assert_eq!(
            (s.spec.imp, s.spec.feat.split, s.num_splits, s.spec.tile_m),
            (Impl::Wgmma, true, 2, 128)
        );
        short.seqlen_q = 128;
        assert_eq!(sel(&short, &H200).num_splits, 4);
        // Calls of fewer blocks stay unsplit (their tiles are short); a caller's count is
        // honoured. d 128 S 1k: 8 blocks of 128 keys; S 2k: 16.
        let mut few = Problem::new(DType::Bf16, 1, 1024, 1024, 8, 1, 128, 128);
        few.causal = true;
        few.num_splits = 0;
        let s = sel(&few, &H200);
        assert_eq!((s.spec.tile_n, s.num_splits), (128, 1));
        few.seqlen_q = 2048;
        few.seqlen_k = 2048;
        few.heads = 4;
        let s = sel(&few, &H200);
        assert_eq!(
            (
                s.spec.tile_n as usize * FLAGSHIP_SPLIT_MIN_BLOCKS,
                s.num_splits
            ),
            (2048, 2)
        );
        // d 256 counts its blocks of 64 keys: S 1k is 16.
        let mut wide = Problem::new(DType::Bf16, 1, 1024, 1024, 4, 1, 256, 256);
        wide.causal = true;
        wide.num_splits = 0;
        let s = sel(&wide, &H200);
        assert_eq!(
            (s.spec.tile_n, s.spec.feat.split, s.num_splits),
            (64, true, 4)
        );
        few.num_splits = 2;
        few.seqlen_k = 1024;
        few.seqlen_q = 1024;
        assert!(sel(&few, &H200).spec.feat.split);
        // Past half the SMs the heuristic does not split; a caller's count is honoured.
        let s = sel(&chunk(1, 512, 32, 0), &H200);
        assert_eq!(
            (s.spec.imp, s.spec.feat.split, s.num_splits),
            (Impl::Wgmma, false, 1)
        );
        let s = sel(&chunk(1, 512, 32, 3), &H200);
        assert_eq!(
            (s.spec.imp, s.spec.feat.split, s.num_splits),
            (Impl::Wgmma, true, 3)
        );
        // Windows split on the portable kernel.
        let mut w = chunk(1, 128, 32, 4);
        w.causal = false;
        w.window = (Some(8191), Some(0));
        assert_eq!(sel(&w, &H200).spec.imp, Impl::Portable);
        // B200 keeps FA4's rule exactly (no flagship there).
        assert!(sel(&chunk(1, 256, 32, 0), &B200).num_splits > 1);
    }

    /// A library without the flagship's split: the heuristic's split runs on the portable
    /// kernel below FLAGSHIP_SPLIT_FILL of the SMs, the flagship unsplit from there.
    #[test]
    fn without_the_flagship_split_heuristic_splits_leave_it_unsplit_from_45_percent_of_the_sms() {
        let chunk = |b: usize, sq: usize, h: usize, splits: i32| {
            let mut p = Problem::new(DType::Bf16, b, sq, 32768, h, 8, 128, 128);
            p.causal = true;
            p.num_splits = splits;
            p
        };
        let sel = |p: &Problem| {
            select_with(p, &p.validate().unwrap(), &H200, Prefer::FALLBACKS[1]).unwrap()
        };
        // 64 tiles of 128 queries x 32 heads (48% of 132 SMs): the flagship, unsplit.
        let s = sel(&chunk(1, 256, 32, 0));
        assert_eq!((s.spec.imp, s.num_splits), (Impl::Wgmma, 1));
        // Packed: 4 batches x 8 KV heads x 2 blocks of 128 rows (32 queries x G 8): 64 tiles.
        let s = sel(&chunk(4, 32, 64, 0));
        assert_eq!((s.spec.imp, s.num_splits), (Impl::Wgmma, 1));
        // 32 tiles (24%): split on the portable kernel.
        let s = sel(&chunk(1, 128, 32, 0));
        assert_eq!(s.spec.imp, Impl::Portable);
        assert!(s.num_splits > 1 && s.spec.feat.split);
        let s = sel(&chunk(2, 32, 64, 0));
        assert!(s.num_splits > 1 && s.spec.imp == Impl::Portable);
        // The boundary: 59 tiles (0.447 of the SMs) split, 60 (0.455) do not.
        assert!(59 * FLAGSHIP_SPLIT_FILL.1 < 132 * FLAGSHIP_SPLIT_FILL.0);
        assert!(60 * FLAGSHIP_SPLIT_FILL.1 >= 132 * FLAGSHIP_SPLIT_FILL.0);
        // A caller's explicit count is honoured.
        let s = sel(&chunk(1, 256, 32, 4));
        assert_eq!((s.spec.imp, s.num_splits), (Impl::Portable, 4));
    }

    #[test]
    fn tile_override() {
        let mut p = Problem::new(DType::Bf16, 1, 300, 300, 4, 4, 64, 64);
        p.tile_mn = Some((64, 128));
        let s = sel(&p, &H200);
        // The flagship on that tile: 5 Q blocks x 4 heads, one persistent CTA each.
        assert_eq!((s.spec.tile_m, s.spec.tile_n, s.grid.0), (64, 128, 20));
        // A head dim the flagship cannot take: the portable kernel on the same tile.
        let mut q = Problem::new(DType::Bf16, 1, 300, 300, 4, 4, 40, 40);
        q.tile_mn = Some((64, 128));
        let s = sel(&q, &H200);
        assert_eq!((s.spec.imp, s.grid), (Impl::Portable, (5, 4, 1)));
        p.tile_mn = Some((96, 64));
        assert!(matches!(
            select(&p, &p.validate().unwrap(), &H200),
            Err(Error::Unsupported(_))
        ));
    }

    #[test]
    fn unsupported_device() {
        let p = Problem::new(DType::Bf16, 1, 1, 1, 1, 1, 64, 64);
        let a100 = DeviceInfo {
            major: 8,
            minor: 0,
            sm_count: 108,
        };
        assert!(matches!(
            select(&p, &p.validate().unwrap(), &a100),
            Err(Error::UnsupportedDevice { major: 8, minor: 0 })
        ));
    }

    /// The kernel's split-tail schedule (fwd_sm90.cu `Tiles::nth` and `Tiles::part`, modelled
    /// here) covers every K block of every unit exactly once, splits a tile into at most two
    /// parts, and the two parts of a tile name each other's workspace entries, which no other
    /// part writes.
    #[test]
    fn split_tail_schedule_covers_each_block_once() {
        for (units, slots, blocks) in [
            (320, 132, 8),
            (160, 66, 24),
            (144, 132, 52),
            (210, 132, 7),
            (2048, 132, 128),
            (1024, 66, 103),
            (133, 132, 2),
            (263, 132, 3),
            (7, 3, 5),
        ] {
            let (round, tail) = tail_plan(units, slots, blocks).unwrap();
            let (round, tail) = (round as usize, tail as usize);
            assert_eq!(round * slots + tail, units);
            let w = tail * blocks;
            let mut seen = vec![0u8; units * blocks];
            // entry -> (unit, other entry) of the part written there
            let mut entries = std::collections::HashMap::new();
            for c in 0..slots {
                for j in 0..round {
                    let unit = j * slots + if j % 2 == 1 { slots - 1 - c } else { c };
                    seen[unit * blocks..][..blocks]
                        .iter_mut()
                        .for_each(|x| *x += 1);
                }
                let (b0, b1) = (c * w / slots, (c + 1) * w / slots);
                assert!(b1 - b0 >= blocks, "a share holds a whole tile");
                for k in 0.. {
                    let x0 = (b0 / blocks + k) * blocks;
                    if x0 >= b1 {
                        break;
                    }
                    let x = x0 / blocks;
                    let (v0, v1) = (b0.max(x0) - x0, (b1 - x0).min(blocks));
                    seen[(round * slots + x) * blocks..][v0..v1]
                        .iter_mut()
                        .for_each(|b| *b += 1);
                    if v1 - v0 < blocks {
                        let me = 2 * c + usize::from(k > 0);
                        let other = if v0 > 0 { 2 * (c - 1) + 1 } else { 2 * (c + 1) };
                        assert!(
                            entries.insert(me, (x, other)).is_none(),
                            "entry {me} reused"
                        );
                    }
                }
            }
            assert!(seen.iter().all(|&n| n == 1), "{units} units on {slots}");
            for (&me, &(x, other)) in &entries {
                assert_eq!(entries[&other], (x, me), "parts of unit {x} pair up");
            }
        }
        assert_eq!(tail_plan(264, 132, 8), None); // the grid divides the units
        assert_eq!(tail_plan(100, 132, 8), None); // no full round
        assert_eq!(tail_plan(200, 132, 1), None);
        assert!(split_tail_pays(2048, 132, 128));
        assert!(!split_tail_pays(2640 + 130, 132, 128)); // 21 + 130/132 rounds: 0.1% idle
    }

    /// Selection splits the tail of long (8k+ keys) unmasked dense calls at d >= 128 by
    /// default, not of masked, varlen or chained-tile (d 64) ones, and `Problem::split_tail`
    /// forces it either way.
    #[test]
    fn split_tail_by_default_where_it_pays() {
        let mut p = Problem::new(DType::Bf16, 1, 16384, 16384, 16, 16, 128, 128);
        let s = sel(&p, &H200);
        assert!(s.split_tail && s.pairs && s.tiles == 2048, "{s:?}");
        p.causal = true;
        assert!(!sel(&p, &H200).split_tail);
        p.causal = false;
        p.split_tail = Some(false);
        assert!(!sel(&p, &H200).split_tail);
        let mut p = Problem::new(DType::Bf16, 1, 16384, 16384, 32, 32, 64, 64);
        p.split_tail = Some(true);
        assert!(!sel(&p, &H200).split_tail, "d 64 chains its tiles");
        // 4k keys: whole by default (the 4k A/B lost at d 256), forced: split.
        let mut p = Problem::new(DType::Bf16, 4, 4096, 4096, 16, 16, 128, 128);
        assert!(!sel(&p, &H200).split_tail);
        p.split_tail = Some(true);
        assert!(sel(&p, &H200).split_tail);
        // d 96 at 16k: whole by default.
        let p = Problem::new(DType::Bf16, 1, 16384, 16384, 21, 21, 96, 96);
        assert!(!sel(&p, &H200).split_tail);
    }

    /// The kernel's causal run decode (fwd_sm90.cu `Tiles::at`, modelled here for the
    /// tiles of whole runs, `m_major` either way) is a bijection onto (Q block, head) whose
    /// pairs stay Q blocks 2k and 2k + 1 of one head; and dealt by the snake (`Tiles::nth`)
    /// at the #4 16k causal cells (cost: K blocks + 2 per tile, 132 SMs, pairs at d >= 128)
    /// the Q-block-major order's max / mean work per CTA is what `M_MAJOR_RUNS_MIN_KEYS`
    /// cites, against the head-major order's.
    #[test]
    fn m_major_runs_decode_and_balance() {
        // (run index, m_lo, hb) of tile t, as Tiles::at computes them.
        fn decode(
            t: usize,
            run: usize,
            hbs: usize,
            pair: usize,
            m_major: bool,
        ) -> (usize, usize, usize) {
            if m_major {
                let shift = pair - 1;
                let (q, hb) = ((t >> shift) / hbs, (t >> shift) % hbs);
                let (slow, r2) = ((q << shift) / run, (q << shift) % run);
                (slow, run - pair - r2 + (t & shift), hb)
            } else {
                let (rest, m_lo) = (t / run, t % run);
                (rest / hbs, m_lo, rest % hbs)
            }
        }
        // (d, S, tile_m, tile_n, heads, pairs)
        let cells: [(u32, usize, usize, usize, usize, bool); 4] = [
            (64, 16384, 192, 128, 32, false),
            (128, 16384, 128, 160, 16, true),
            (192, 16384, 128, 128, 16, true),
            (256, 16384, 128, 80, 8, true),
        ];
        for (d, s, tm, tn, hbs, pairs) in cells {
            let m_blocks = s.div_ceil(tm);
            let run = 16.min(m_blocks);
            let runs = m_blocks / run;
            let run_tiles = runs * run * hbs;
            let pair = if pairs { 2 } else { 1 };
            // The host's model of the head-major schedule, for its K block counts.
            let model = crate::schedule::CausalRuns {
                seqlen_q: s,
                seqlen_k: s,
                tile_m: tm,
                tile_n: tn,
                run,
                heads_batch: hbs,
                pair,
            };
            let cost = |m: usize| model.blocks(m) as u64 + 2;
            let mut balance = [0.0; 2];
            for (o, m_major) in [false, true].into_iter().enumerate() {
                let mut seen = vec![false; m_blocks * hbs];
                let mut costs = Vec::new();
                for t in 0..run_tiles {
                    let (slow, m_lo, hb) = decode(t, run, hbs, pair, m_major);
                    let m = m_blocks - (slow + 1) * run + m_lo;
                    assert!(m_lo < run && hb < hbs && !seen[m * hbs + hb], "d {d} t {t}");
                    seen[m * hbs + hb] = true;
                    if pair == 2 && t % 2 == 1 {
                        let (s0, m0, h0) = decode(t - 1, run, hbs, pair, m_major);
                        assert_eq!((s0, h0, m0 ^ 1), (slow, hb, m_lo), "d {d}: a pair split");
                        assert_eq!(m0 % 2, 0);
                    }
                    costs.push(cost(m));
                }
                // The rest (m_blocks % run lowest blocks) in the masked order, as before.
                for i in 0..m_blocks % run {
                    for _ in 0..hbs {
                        costs.push(cost(m_blocks % run - 1 - i));
                    }
                }
                let units: Vec<u64> = costs
                    .chunks(pair)
                    .map(|c| c.iter().copied().max().unwrap_or(0))
                    .collect();
                balance[o] = crate::schedule::balance(&units, 132 / pair, None);
            }
            assert!(
                balance[0] > 1.02 && balance[1] < 1.004,
                "d {d}: {balance:?}"
            );
        }
    }

    /// Q-block-major runs only where the kernel runs causal runs (unpacked causal), by
    /// default from `M_MAJOR_RUNS_MIN_KEYS` keys where a run of every (head, batch) fits in a
    /// round (d 256 16k: 8 heads x 16 blocks <= 132 CTAs; not 16 heads, not B 2, not 4k), and
    /// `Problem::m_major_runs` forces either way.
    #[test]
    fn m_major_runs_only_on_causal_runs() {
        for d in [64, 128, 192, 256] {
            let dv = if d == 192 { 128 } else { d };
            let mut p = Problem::new(DType::Bf16, 1, 16384, 16384, 16, 16, d, dv);
            p.causal = true;
            let s = sel(&p, &H200);
            assert!(
                !s.m_major_runs,
                "d {d}: 16 heads x 16 blocks span two rounds: {s:?}"
            );
            p.m_major_runs = Some(true);
            assert!(sel(&p, &H200).m_major_runs, "d {d}");
            p.m_major_runs = Some(false);
            assert!(!sel(&p, &H200).m_major_runs, "d {d}");
            // Unmasked calls have no runs; packed GQA's runs are of G blocks, not 16.
            p.m_major_runs = Some(true);
            p.causal = false;
            assert!(!sel(&p, &H200).m_major_runs, "d {d} unmasked");
            let mut p = Problem::new(DType::Bf16, 1, 4096, 4096, 16, 2, d, dv);
            p.causal = true;
            p.pack_gqa = Some(true);
            p.m_major_runs = Some(true);
            let s = sel(&p, &H200);
            assert!(s.spec.pack_gqa && !s.m_major_runs, "d {d}: {s:?}");
        }
        let at = |b: usize, s: usize, h: usize| {
            let mut p = Problem::new(DType::Bf16, b, s, s, h, h, 256, 256);
            p.causal = true;
            sel(&p, &H200).m_major_runs
        };
        assert!(at(1, 16384, 8), "d 256 16k, the measured gain");
        // The portable kernel (here: no flagship on sm_100) has no runs to order.
        let mut p = Problem::new(DType::Bf16, 1, 16384, 16384, 1, 1, 128, 128);
        p.causal = true;
        p.m_major_runs = Some(true);
        let s = sel(
            &p,
            &DeviceInfo {
                major: 10,
                minor: 0,
                ..H200
            },
        );
        assert!(s.spec.imp == Impl::Portable && !s.m_major_runs, "{s:?}");
        assert!(!at(2, 8192, 8) && !at(4, 4096, 8) && !at(1, 4096, 8) && !at(1, 16384, 16));
    }

    /// The host's order of causal runs (`Selection::lpt_rounds`): dense causal calls of more
    /// than one round whose runs are not dealt Q block major; never unmasked, packed, varlen
    /// or beside Q block major runs; `Problem::lpt_rounds` forces it either way.
    #[test]
    fn lpt_rounds_on_dense_causal_runs() {
        for d in [64, 128, 192, 256] {
            let dv = if d == 192 { 128 } else { d };
            let mut p = Problem::new(DType::Bf16, 1, 16384, 16384, 16, 16, d, dv);
            p.causal = true;
            let s = sel(&p, &H200);
            assert!(s.lpt_rounds && !s.m_major_runs, "d {d}: {s:?}");
            p.lpt_rounds = Some(false);
            assert!(!sel(&p, &H200).lpt_rounds, "d {d}");
            p.lpt_rounds = Some(true);
            p.m_major_runs = Some(true);
            let s = sel(&p, &H200);
            assert!(
                s.m_major_runs && !s.lpt_rounds,
                "d {d}: one order at a time"
            );
            p.m_major_runs = None;
            p.causal = false;
            assert!(
                !sel(&p, &H200).lpt_rounds,
                "d {d}: unmasked calls have no runs"
            );
            p.causal = true;
            p.varlen = Some(Varlen {
                total_q: Some(16384),
                total_k: Some(16384),
                ..Varlen::default()
            });
            assert!(
                !sel(&p, &H200).lpt_rounds,
                "d {d}: varlen costs are on the device"
            );
            // Packed GQA's runs are a KV head's G Q blocks: no host order (nor at d 64,
            // where the packed causal schedule has no runs).
            let mut p = Problem::new(DType::Bf16, 1, 8192, 8192, 16, 2, d, dv);
            p.causal = true;
            p.pack_gqa = Some(true);
            let s = sel(&p, &H200);
            assert!(s.spec.pack_gqa && !s.lpt_rounds, "d {d}: {s:?}");
            // One round at 4k keys (64 tiles on 132 SMs): the snake alone is as even.
            let mut p = Problem::new(DType::Bf16, 1, 4096, 4096, 2, 2, d, dv);
            p.causal = true;
            assert!(!sel(&p, &H200).lpt_rounds, "d {d}: one round");
            // Under 4k keys: tiles of a few K blocks.
            let mut p = Problem::new(DType::Bf16, 16, 1024, 1024, 16, 16, d, dv);
            p.causal = true;
            assert!(!sel(&p, &H200).lpt_rounds, "d {d}: 1k keys");
        }
        // d 256 16k, 8 heads: its runs go Q block major, unless the host order is forced.
        let mut p = Problem::new(DType::Bf16, 1, 16384, 16384, 8, 8, 256, 256);
        p.causal = true;
        let s = sel(&p, &H200);
        assert!(s.m_major_runs && !s.lpt_rounds, "{s:?}");
        p.lpt_rounds = Some(true);
        let s = sel(&p, &H200);
        assert!(!s.m_major_runs && s.lpt_rounds, "{s:?}");
    }
}
