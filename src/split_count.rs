//! How many ways the sm90 flagship splits K when the caller leaves it to fa4gen
//! (`num_splits < 1`): a model of its persistent schedule, host side.
//!
//! FA4's heuristic (`select::heuristic_splits`) fills the SMs: `slots / tiles` splits. That is
//! right where the tiles are equal and divide the slots, but it never splits a call of more
//! tiles than slots, and fills the slots however unevenly the splits deal out. The H200 sweep
//! (`bench_serving.py split-sweep`, session 34, ms, FA4's count / best count by hand):
//! gpt-oss chunks, d 64 H 64/8 packed on 192-row tiles, Sq 256 over 16k (88 tiles) 0.1837
//! unsplit / **0.1427 with 3 splits**, Sq 512 over 16k (176 tiles) 0.3669 / **0.2851 with 3**;
//! where FA4's count was already the best (11 of the other 12 shapes) the model keeps it.
//! On 11 shapes it was not fitted on (the section's second part) it took 3 for d 64 chunks of
//! 256 over 8k and 32k and B 4 x 250 over 4133 (1.18x, 1.38x, 1.07x), 2 and 4 for d 128
//! chunks of 768 over 16k and 640 over 32k (1.17x, 1.33x: tiles past the SMs, which FA4's rule
//! leaves unsplit) and 3 for d 128 causal S 6k H 2/1 (1.22x), and kept FA4's count on four.
//! On the eleventh, S 3k H 4/1, the first model (heads fastest, heaviest Q block first: the
//! kernel's order only for Q-block-major runs) took 3 splits, which lost 1.06x; and it kept 2
//! at S 4k H 2/1, where 4 ran 1.11x faster. Dealt in the kernel's order (head-major runs of
//! 16 Q blocks below 8k keys), it takes 1 and 4 there: every shape of the sweep now gets the
//! count that ran fastest by hand, or one within the noise (`tests::follows_the_h200_sweep`).
//!
//! The model: each of the `n` copies of the schedule (the split slowest, as `Tiles::at` in
//! fwd_sm90.cu) deals its tiles' shares of K blocks, in the kernel's order (`SplitCall::deal`),
//! to the persistent CTAs by the kernel's snake; a CTA's time is its blocks plus a fixed cost
//! per unit ([`UNIT_OVERHEAD_BLOCKS`]), at the tile's FLOPs per block over [`SM_FLOP_PER_US`];
//! the call's time is the busiest CTA's plus, split, the combine's ([`COMBINE_FIXED_US`] and
//! the fp32 partials written and read at [`PARTIAL_BYTES_PER_US`]). The constants were fitted
//! to the sweep's first 14 shapes (counts 2-8, log error 0.14 rms). The model's count replaces
//! FA4's only where it predicts [`MIN_PREDICTED_GAIN`] or better.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// A split unit's cost beside its K blocks (Q load, the fp32 epilogue), in K blocks.
pub const UNIT_OVERHEAD_BLOCKS: u64 = 1;
/// A flagship CTA's tensor-core rate, FLOP per microsecond (5 TFLOP/s per SM: 660 over 132).
pub const SM_FLOP_PER_US: f64 = 5.0e6;
/// The combine's fixed cost beside its bytes: a launch behind the forward and its tail.
pub const COMBINE_FIXED_US: f64 = 4.0;
/// The rate at which the fp32 partials are written (forward) and read (combine), bytes per
/// microsecond, as fitted (the L2 keeps much of them).
pub const PARTIAL_BYTES_PER_US: f64 = 6.0e6;
/// The model's count replaces FA4's only where it predicts at most this share of its time
/// (its error per call is 11-15% rms, but mostly shared by the counts it compares).
pub const MIN_PREDICTED_GAIN: f64 = 0.92;
/// The most CTAs the model deals to (its difference array lives on the stack); a device with
/// more SMs keeps FA4's count.
pub const MAX_SLOTS: usize = 512;
/// The counts the model tries beside FA4's: those the sweep measured (more split a few tiles'
/// blocks no further than the combine's bytes grow; 1 only where FA4's count is 1).
pub const MODELLED_SPLITS: [u32; 6] = [1, 2, 3, 4, 6, 8];

/// A dense call (unmasked, or causal bottom-right) as the flagship's split tiles it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SplitCall {
    pub seqlen_q: usize,
    pub seqlen_k: usize,
    /// Query rows per query: packed GQA's group, else 1.
    pub group: usize,
    /// (head or KV head, batch) pairs: the tiles per Q block.
    pub heads_batch: usize,
    /// Query heads x batch: the combine's rows per query.
    pub query_heads_batch: usize,
    pub causal: bool,
    pub tile_m: usize,
    pub tile_n: usize,
    pub d: usize,
    pub dv: usize,
    /// CTA slots of the persistent grid (SMs x CTAs per SM).
    pub slots: usize,
    /// The kernel's causal runs (`KernelSpec::wgmma_q_run`): `None` none, `Some(0)` runs of the
    /// packed group, `Some(r)` runs of r Q blocks.
    pub q_run: Option<u32>,
    /// Runs dealt Q block major (`Selection::m_major_runs`): `Some` as the caller forces or
    /// the key count rules out, `None` where the grid decides (the run of every (head, batch)
    /// fits in one round).
    pub m_major: Option<bool>,
}

impl SplitCall {
    fn m_blocks(&self) -> usize {
        (self.seqlen_q * self.group.max(1)).div_ceil(self.tile_m.max(1))
    }

    pub fn tiles(&self) -> usize {
        self.m_blocks() * self.heads_batch
    }

    /// K blocks Q block m visits.
    fn blocks(&self, m: usize) -> u64 {
        let keys = if self.causal {
            let (g, rows) = (self.group.max(1), self.seqlen_q * self.group.max(1));
            let q1 = ((m + 1) * self.tile_m).min(rows).saturating_sub(1) / g + 1;
            (q1 + self.seqlen_k)
                .saturating_sub(self.seqlen_q)
                .min(self.seqlen_k)
        } else {
            self.seqlen_k
        };
        keys.div_ceil(self.tile_n.max(1)) as u64
    }

    /// Modelled time of the call in `n` splits, microseconds (`None` past [`MAX_SLOTS`] CTAs
    /// or `2 * MAX_SLOTS` Q blocks).
    pub fn time_us(&self, n: u32) -> Option<f64> {
        let mut blocks = [0u64; 2 * MAX_SLOTS];
        let blocks = self.fill_blocks(&mut blocks)?;
        self.time_of(blocks, n, &mut [0; MAX_SLOTS + 1])
    }

    /// Each Q block's K blocks into `buf` (`None` if it is too short).
    fn fill_blocks<'a>(&self, buf: &'a mut [u64; 2 * MAX_SLOTS]) -> Option<&'a [u64]> {
        let blocks = buf.get_mut(..self.m_blocks())?;
        for (m, b) in blocks.iter_mut().enumerate() {
            *b = self.blocks(m);
        }
        Some(blocks)
    }

    /// Calls `f(m, count)` for runs of `count` consecutive units of Q block `m`, in the order
    /// one copy of the schedule deals them (fwd_sm90.cu `Tiles::at`): unmasked, any order
    /// (all visit the same K blocks; a last Q block whose idle consumers make it cheaper,
    /// `kIdleConsumers`, is costed as whole here); causal, (head, batch) fastest and the
    /// heaviest Q block first; in runs of r Q blocks, the heaviest run first and, Q block major, its blocks heaviest
    /// first with (head, batch) fastest, else head-major: a run's blocks fastest, lightest
    /// first; then the m_blocks % r lowest blocks, (head, batch) fastest.
    fn deal(&self, m_blocks: usize, grid: usize, mut f: impl FnMut(usize, usize)) {
        let hb = self.heads_batch.max(1);
        if !self.causal {
            return f(m_blocks.saturating_sub(1), m_blocks * hb);
        }
        let Some(q_run) = self.q_run else {
            return (0..m_blocks).rev().for_each(|m| f(m, hb));
        };
        let run = if q_run > 0 {
            (q_run as usize).clamp(1, m_blocks.max(1))
        } else {
            self.group.max(1)
        };
        let rest = m_blocks % run;
        let m_major = q_run > 0 && self.m_major.unwrap_or(hb * run.min(m_blocks) <= grid);
        for r in 0..(m_blocks - rest) / run {
            let first = m_blocks - (r + 1) * run; // the run's lowest Q block
            if m_major {
                (first..first + run).rev().for_each(|m| f(m, hb));
            } else {
                for _ in 0..hb {
                    (first..first + run).for_each(|m| f(m, 1));
                }
            }
        }
        (0..rest).rev().for_each(|m| f(m, hb));
    }

    /// `time_us` over the Q blocks' counts with a scratch difference array: selection runs on
    /// every call, so the model allocates nothing.
    fn time_of(&self, blocks: &[u64], n: u32, diff: &mut [i64; MAX_SLOTS + 1]) -> Option<f64> {
        let n = n.max(1) as u64;
        let m_blocks = blocks.len();
        let grid = (m_blocks * self.heads_batch.max(1) * n as usize).clamp(1, self.slots.max(1));
        if grid > MAX_SLOTS {
            return None;
        }
        // The kernel's snake deals place u to CTA u % grid in even rounds and grid - 1 - u %
        // grid in odd ones; a run of equal units takes consecutive places, so it lands on one
        // or a few CTA ranges: added through a difference array.
        diff[..=grid].fill(0);
        let (mut c, mut odd) = (0usize, false); // the next place's CTA position and round parity
        for s in 0..n {
            self.deal(m_blocks, grid, |m, count| {
                // Split s's share of b blocks (`Tiles::at`): ceil(b / n) each, the last ones
                // what is left.
                let b = blocks.get(m).copied().unwrap_or(0);
                let per = b.div_ceil(n);
                let share = (per.min(b.saturating_sub(s * per)) + UNIT_OVERHEAD_BLOCKS) as i64;
                let mut left = count;
                while left > 0 {
                    let len = (grid - c).min(left);
                    let (lo, hi) = if odd {
                        (grid - c - len, grid - c)
                    } else {
                        (c, c + len)
                    };
                    diff[lo] += share;
                    diff[hi] -= share;
                    left -= len;
                    c += len;
                    if c == grid {
                        (c, odd) = (0, !odd);
                    }
                }
            });
        }
        let (mut load, mut busiest) = (0i64, 0i64);
        for d in &diff[..grid] {
            load += d;
            busiest = busiest.max(load);
        }
        let block_us = (2 * self.tile_m * self.tile_n * (self.d + self.dv)) as f64 / SM_FLOP_PER_US;
        let busiest = busiest as f64 * block_us;
        if n == 1 {
            return Some(busiest);
        }
        // fp32 partials, written by the forward and read by the combine.
        let partials = (n as usize * self.seqlen_q * self.query_heads_batch * self.dv * 8) as f64;
        Some(busiest + COMBINE_FIXED_US + partials / PARTIAL_BYTES_PER_US)
    }

    /// The count for the call given FA4's (`fa4`, already rounded to equal shares): the
    /// model's best of FA4's and [`MODELLED_SPLITS`] (1 only where FA4's is 1: selection's own
    /// rules, the fill tile and `FLAGSHIP_SPLIT_MIN_BLOCKS`, decide when a split call runs
    /// unsplit), where it predicts [`MIN_PREDICTED_GAIN`]; else FA4's. Counts are rounded to
    /// equal shares of the K blocks, as FA4's is on sm90.
    pub fn best(&self, fa4: u32) -> u32 {
        let n_blocks = self.seqlen_k.div_ceil(self.tile_n.max(1)).max(1) as u32;
        // Where the tiles fill the SMs twice, a split evens little of the last round.
        if self.tiles() >= 2 * self.slots || n_blocks < 2 {
            return fa4;
        }
        let key = (*self, fa4);
        if let Some(&n) = memo().lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return n;
        }
        let n = self.model_best(fa4, n_blocks);
        let mut memo = memo().lock().unwrap_or_else(|e| e.into_inner());
        if memo.len() >= MEMO_ENTRIES {
            memo.clear();
        }
        memo.insert(key, n);
        n
    }

    /// `best` worked out: the model over FA4's count and the others.
    fn model_best(&self, fa4: u32, n_blocks: u32) -> u32 {
        let equal = |n: u32| n_blocks.div_ceil(n_blocks.div_ceil(n.clamp(1, n_blocks)));
        let (mut buf, mut diff) = ([0u64; 2 * MAX_SLOTS], [0i64; MAX_SLOTS + 1]);
        let Some(blocks) = self.fill_blocks(&mut buf) else {
            return fa4;
        };
        let Some(fa4_time) = self.time_of(blocks, fa4, &mut diff) else {
            return fa4;
        };
        let (mut best, mut best_time) = (fa4, fa4_time);
        let mut last = 0;
        for n in MODELLED_SPLITS
            .into_iter()
            .filter(|&n| n > 1 || fa4 <= 1)
            .map(equal)
        {
            if n == last || n == fa4 {
                continue; // (equal shares map several counts to one)
            }
            last = n;
            let t = self.time_of(blocks, n, &mut diff).unwrap_or(f64::INFINITY);
            if t < best_time {
                (best, best_time) = (n, t);
            }
        }
        if best_time <= MIN_PREDICTED_GAIN * fa4_time {
            best
        } else {
            fa4
        }
    }
}

/// Answers kept: the model deals up to a few thousand units per count (up to ~25 µs for a
/// causal square in head-major runs), and selection runs on every call, but a model's layers
/// call attention with one shape per step, so all but the first layer's call find theirs here.
/// Cleared when full.
const MEMO_ENTRIES: usize = 256;

fn memo() -> &'static Mutex<HashMap<(SplitCall, u32), u32>> {
    static MEMO: OnceLock<Mutex<HashMap<(SplitCall, u32), u32>>> = OnceLock::new();
    MEMO.get_or_init(|| Mutex::new(HashMap::new()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Problem;
    use crate::select::{H200, select};
    use crate::spec::DType;

    /// The heuristic's count for a bf16 call on the H200, through selection (its packing,
    /// tile and split rules).
    fn heuristic(
        b: usize,
        sq: usize,
        sk: usize,
        h: usize,
        hkv: usize,
        d: usize,
        causal: bool,
    ) -> u32 {
        let mut p = Problem::new(DType::Bf16, b, sq, sk, h, hkv, d, d);
        p.causal = causal;
        p.num_splits = 0;
        let v = p.validate().expect("a valid call");
        select(&p, &v, &H200).expect("a kernel").num_splits
    }

    /// The sweep's shapes (`bench_serving.py split-sweep`, H200, session 34): the heuristic
    /// takes the count that ran fastest by hand (within the runs' noise: ties noted).
    #[test]
    fn follows_the_h200_sweep() {
        // ((B, Sq, Sk, H, Hkv, d), causal, the best counts by hand: more than one where they
        // ran within the runs' noise)
        type Case = (
            (usize, usize, usize, usize, usize, usize),
            bool,
            &'static [u32],
        );
        let cases: [Case; 25] = [
            ((1, 4096, 4096, 2, 1, 128), true, &[4]),
            ((1, 2048, 2048, 4, 1, 128), true, &[2]),
            ((1, 8192, 8192, 1, 1, 128), true, &[2]),
            ((1, 1024, 1024, 4, 1, 256), true, &[4]),
            ((1, 128, 8192, 32, 8, 128), true, &[4]),
            ((1, 256, 4096, 32, 8, 128), true, &[2]),
            ((1, 256, 8192, 32, 8, 128), true, &[2]),
            ((1, 128, 32768, 32, 8, 128), true, &[4]),
            ((1, 512, 32768, 32, 8, 128), true, &[1]),
            ((4, 32, 8192, 64, 8, 128), true, &[2]),
            ((1, 128, 16384, 64, 8, 64), true, &[2]),
            ((1, 256, 16384, 64, 8, 64), true, &[3]),
            ((1, 512, 16384, 64, 8, 64), true, &[3]),
            ((1, 1024, 8192, 16, 2, 128), false, &[1]),
            // The second run's shapes, not fitted on.
            ((1, 256, 8192, 64, 8, 64), true, &[3]),
            ((1, 256, 32768, 64, 8, 64), true, &[3]),
            ((4, 250, 4133, 16, 2, 64), true, &[3]),
            ((1, 384, 16384, 64, 8, 64), true, &[1]),
            ((1, 768, 16384, 32, 8, 128), true, &[2]),
            ((1, 640, 32768, 32, 8, 128), true, &[3, 4]),
            ((1, 1024, 16384, 32, 8, 128), true, &[1]),
            ((1, 768, 8192, 32, 8, 128), false, &[1]), // the split tail
            ((1, 3072, 3072, 4, 1, 128), true, &[1]),
            ((1, 6144, 6144, 2, 1, 128), true, &[3]),
            ((1, 1536, 1536, 4, 4, 256), true, &[2, 3, 4]),
        ];
        let mut missed = Vec::new();
        for ((b, sq, sk, h, hkv, d), causal, best) in cases {
            let n = heuristic(b, sq, sk, h, hkv, d, causal);
            if !best.contains(&n) {
                missed.push(format!(
                    "B {b} Sq {sq} Sk {sk} H {h}/{hkv} d {d} causal {causal}: {n}, best {best:?}"
                ));
            }
        }
        assert!(missed.is_empty(), "{missed:#?}");
    }

    /// An engine's chunk (`bench_serving.py engine-chunks`): one sequence through varlen,
    /// packed queries, K/V in pages of 16 with `seqused_k`, causal (gpt-oss: sinks).
    #[test]
    fn engine_chunks_take_the_best_counts_by_hand() {
        // (Sq, Sk, H, Hkv, d, sinks) of a chunk, and its best counts by hand
        type Chunk = ((usize, usize, usize, usize, usize, bool), &'static [u32]);
        let cases: [Chunk; 6] = [
            ((256, 8192, 64, 8, 64, true), &[3]),
            ((256, 16384, 64, 8, 64, true), &[3]),
            ((512, 16384, 64, 8, 64, true), &[3]),
            ((1000, 4133, 64, 8, 64, true), &[1]), // 336 tiles: FA4's count
            ((768, 16384, 32, 8, 128, false), &[2, 4]),
            ((640, 32768, 32, 8, 128, false), &[3, 4]),
        ];
        for ((sq, sk, h, hkv, d, sinks), best) in cases {
            let mut p = Problem::new(DType::Bf16, 1, sq, sk, h, hkv, d, d);
            p.causal = true;
            p.sinks = sinks;
            p.num_splits = 0;
            p.varlen = Some(crate::runtime::Varlen {
                total_q: Some(sq),
                seqused_k: true,
                ..Default::default()
            });
            let pages = sk.div_ceil(16) + 1;
            p.paged = Some(crate::runtime::Paged {
                page_size: 16,
                num_pages: pages,
                pages_per_seq: pages,
                page_table_stride: pages,
            });
            p.k_strides = crate::runtime::Strides::contiguous(16, hkv, d);
            p.v_strides = p.k_strides;
            let v = p.validate().expect("a valid call");
            let s = select(&p, &v, &H200).expect("a kernel");
            assert!(
                best.contains(&s.num_splits),
                "Sq {sq} Sk {sk} d {d}: {}",
                s.num_splits
            );
        }
    }

    fn call(
        sq: usize,
        sk: usize,
        h: usize,
        hkv: usize,
        d: usize,
        causal: bool,
        tile: (usize, usize),
    ) -> SplitCall {
        SplitCall {
            seqlen_q: sq,
            seqlen_k: sk,
            group: h / hkv,
            heads_batch: hkv,
            query_heads_batch: h,
            causal,
            tile_m: tile.0,
            tile_n: tile.1,
            d,
            dv: d,
            slots: 132,
            q_run: None,
            m_major: None,
        }
    }

    #[test]
    fn counts_are_equal_shares_and_calls_that_fill_the_sms_twice_keep_fa4s() {
        let c = call(256, 16384, 64, 8, 64, true, (192, 128));
        let n = c.best(1);
        let blocks = 16384u32.div_ceil(128);
        assert_eq!(n, blocks.div_ceil(blocks.div_ceil(n)));
        // 264 tiles: two rounds of the SMs.
        assert_eq!(call(1024, 16384, 64, 8, 64, true, (128, 128)).best(1), 1);
    }

    /// Empty calls, no slots and huge lengths answer without panicking or overflowing.
    #[test]
    fn edge_calls_keep_fa4s_count_or_answer_sanely() {
        let mut c = call(0, 8192, 32, 8, 128, true, (128, 128));
        assert_eq!(c.best(4), 4); // no tiles: nothing to gain over FA4's count
        c.causal = false;
        assert_eq!(c.best(4), 4);
        c = call(128, 0, 32, 8, 128, true, (128, 128));
        assert_eq!(c.best(1), 1); // no keys
        c = call(128, 8192, 32, 8, 128, true, (128, 128));
        c.slots = 0;
        assert_eq!(c.best(2), 2);
        c = call(1, 1 << 31, 1, 1, 256, false, (128, 64));
        let n = c.best(8);
        assert!((1..=8).contains(&n));
        assert!(c.time_us(n).is_some_and(f64::is_finite));
        // Sq > Sk under the bottom-right mask: the first queries see no key; runs of 16 and
        // of the group.
        c = call(4096, 1000, 4, 1, 128, true, (128, 128));
        c.q_run = Some(16);
        assert!((1..=8).contains(&c.best(2)));
        c.q_run = Some(0);
        c.group = 3;
        assert!((1..=8).contains(&c.best(2)));
    }

    /// The deal follows `Tiles::at`: head-major runs give each CTA one Q block of a run
    /// (lightest first), Q block major runs the heaviest blocks of every head first.
    #[test]
    fn the_deal_follows_the_kernels_order() {
        let mut c = call(1024, 1024, 2, 2, 128, true, (128, 128)); // 8 Q blocks x 2 heads
        c.group = 1;
        c.q_run = Some(4);
        let mut order = Vec::new();
        c.m_major = Some(false);
        c.deal(8, 132, |m, count| order.push((m, count)));
        let head_major: Vec<(usize, usize)> = [4, 5, 6, 7, 4, 5, 6, 7, 0, 1, 2, 3, 0, 1, 2, 3]
            .into_iter()
            .map(|m| (m, 1))
            .collect();
        assert_eq!(order, head_major);
        order.clear();
        c.m_major = Some(true);
        c.deal(8, 132, |m, count| order.push((m, count)));
        assert_eq!(
            order,
            [
                (7, 2),
                (6, 2),
                (5, 2),
                (4, 2),
                (3, 2),
                (2, 2),
                (1, 2),
                (0, 2)
            ]
        );
        // 10 Q blocks in runs of 4: two runs, then blocks 1 and 0 with the heads fastest.
        order.clear();
        c.deal(10, 132, |m, count| order.push((m, count)));
        assert_eq!(&order[8..], [(1, 2), (0, 2)]);
    }

    #[test]
    fn time_grows_with_the_partials_and_the_busiest_cta() {
        let c = call(128, 8192, 32, 8, 128, true, (128, 128));
        // 32 tiles of 64 blocks: 4 splits deal 128 units of 16 (+1) blocks, one round.
        let block_us = (2 * 128 * 128 * 256) as f64 / SM_FLOP_PER_US;
        let partials = (4 * 128 * 32 * 128 * 8) as f64 / PARTIAL_BYTES_PER_US;
        let expect = 17.0 * block_us + COMBINE_FIXED_US + partials;
        assert!((c.time_us(4).unwrap_or(0.0) - expect).abs() < 1e-9);
        assert!((c.time_us(1).unwrap_or(0.0) - 65.0 * block_us).abs() < 1e-9);
    }
}
