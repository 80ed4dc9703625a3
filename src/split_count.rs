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
//! leaves unsplit) and 3 for d 128 causal S 6k H 2/1 (1.22x); it kept FA4's count on four, and
//! took 3 for S 3k H 4/1, which lost (1.06x slower): the bar for uneven tiles below came from
//! that run, so that shape is fitted now.
//!
//! The model: each of the `n` copies of the schedule (the split slowest, as `Tiles::at` in
//! fwd_sm90.cu) deals its tiles' shares of K blocks, heaviest tile first, to the persistent
//! CTAs by the kernel's snake; a CTA's time is its blocks plus a fixed cost per unit
//! ([`UNIT_OVERHEAD_BLOCKS`]), at the tile's FLOPs per block over [`SM_FLOP_PER_US`]; the
//! call's time is the busiest CTA's plus, split, the combine's ([`COMBINE_FIXED_US`] and the
//! fp32 partials written and read at [`PARTIAL_BYTES_PER_US`]). Fitted to the sweep above
//! (14 shapes x counts 2-8, log error 0.14 rms). It picks another count than FA4's only where it
//! predicts [`MIN_PREDICTED_GAIN`] or more: its one miss in the sweep, d 128 causal S 4k H 2/1
//! (4 splits 0.0315, FA4's and the model's 2 0.0351), keeps FA4's count.

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
/// The same where the tiles' work is uneven (the heaviest more than twice the lightest: a
/// causal square's triangle). There the model's unsplit time runs 9-18% over the H200's (the
/// unsplit kernel's causal runs hide what the model charges per tile): d 128 causal S 3k H 4/1
/// predicted 0.81 with 3 splits and ran 1.06x slower (0.0406 against 0.0384 ms), S 6k H 2/1
/// predicted 0.66 and ran 1.22x faster (0.0577 against 0.0704).
pub const MIN_PREDICTED_GAIN_UNEVEN: f64 = 0.78;
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
    /// Persistent CTAs (the SMs: one flagship CTA each).
    pub slots: usize,
}

impl SplitCall {
    fn m_blocks(&self) -> usize {
        (self.seqlen_q * self.group.max(1)).div_ceil(self.tile_m.max(1))
    }

    pub fn tiles(&self) -> usize {
        self.m_blocks() * self.heads_batch
    }

    /// K blocks the i-th heaviest Q block visits (the last Q block is the heaviest).
    fn blocks(&self, i: usize) -> u64 {
        let m = self.m_blocks().saturating_sub(i + 1);
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

    /// Each Q block's K blocks, heaviest first, into `buf` (`None` if it is too short).
    fn fill_blocks<'a>(&self, buf: &'a mut [u64; 2 * MAX_SLOTS]) -> Option<&'a [u64]> {
        let blocks = buf.get_mut(..self.m_blocks())?;
        for (i, b) in blocks.iter_mut().enumerate() {
            *b = self.blocks(i);
        }
        Some(blocks)
    }

    /// `time_us` over the Q blocks' counts with a scratch difference array: selection runs on
    /// every call, so the model allocates nothing and divides per Q block, not per unit.
    fn time_of(&self, blocks: &[u64], n: u32, diff: &mut [i64; MAX_SLOTS + 1]) -> Option<f64> {
        let n = n.max(1) as u64;
        let hb = self.heads_batch.max(1);
        let grid = (blocks.len() * hb * n as usize).clamp(1, self.slots.max(1));
        if grid > MAX_SLOTS {
            return None;
        }
        // The kernel's snake deals place u to CTA u % grid in even rounds and grid - 1 - u %
        // grid in odd ones; a Q block's heads_batch equal units are consecutive places, so
        // they land on one or a few CTA ranges: added through a difference array.
        diff[..=grid].fill(0);
        let (mut c, mut odd) = (0usize, false); // the next place's CTA position and round parity
        for s in 0..n {
            for &b in blocks {
                // Split s's share of b blocks (fwd_sm90.cu `Tiles::at`): ceil(b / n) each, the
                // last ones what is left.
                let per = b.div_ceil(n);
                let share = (per.min(b.saturating_sub(s * per)) + UNIT_OVERHEAD_BLOCKS) as i64;
                let mut left = hb;
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
            }
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
    /// model's best of FA4's and [`MODELLED_SPLITS`] (1 only where FA4's is 1: with
    /// more, the unsplit call is the fill tile's or under `FLAGSHIP_SPLIT_MIN_BLOCKS`, which
    /// selection rules on), where it predicts [`MIN_PREDICTED_GAIN`] (uneven tiles:
    /// [`MIN_PREDICTED_GAIN_UNEVEN`]); else FA4's. Counts are
    /// rounded to equal shares of the K blocks, as FA4's is on sm90.
    pub fn best(&self, fa4: u32) -> u32 {
        let n_blocks = self.seqlen_k.div_ceil(self.tile_n.max(1)).max(1) as u32;
        let equal = |n: u32| n_blocks.div_ceil(n_blocks.div_ceil(n.clamp(1, n_blocks)));
        // Where the tiles fill the SMs twice, a split evens little of the last round.
        if self.tiles() >= 2 * self.slots || n_blocks < 2 {
            return fa4;
        }
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
        let uneven = match (blocks.first(), blocks.last()) {
            (Some(&heaviest), Some(&lightest)) => heaviest > 2 * lightest,
            _ => false,
        };
        let bar = if uneven {
            MIN_PREDICTED_GAIN_UNEVEN
        } else {
            MIN_PREDICTED_GAIN
        };
        if best_time <= bar * fa4_time {
            best
        } else {
            fa4
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(
        sq: usize,
        sk: usize,
        h: usize,
        hkv: usize,
        d: usize,
        causal: bool,
        tile: (usize, usize),
    ) -> SplitCall {
        let g = h / hkv;
        SplitCall {
            seqlen_q: sq,
            seqlen_k: sk,
            group: g,
            heads_batch: if g > 1 { hkv } else { h },
            query_heads_batch: h,
            causal,
            tile_m: tile.0,
            tile_n: tile.1,
            d,
            dv: d,
            slots: 132,
        }
    }

    /// The sweep's shapes (`bench_serving.py split-sweep`, H200, session 34): the model keeps
    /// FA4's count where it was the best by hand, and takes 3 for the gpt-oss chunks.
    #[test]
    fn follows_the_h200_sweep() {
        // (call, FA4's count on sm90, the best measured)
        let cases = [
            (call(2048, 2048, 4, 1, 128, true, (128, 128)), 2, 2),
            (call(8192, 8192, 1, 1, 128, true, (128, 128)), 2, 2),
            (call(1024, 1024, 4, 1, 256, true, (128, 64)), 4, 4),
            (call(128, 8192, 32, 8, 128, true, (128, 128)), 4, 4),
            (call(256, 4096, 32, 8, 128, true, (128, 160)), 2, 2),
            (call(256, 8192, 32, 8, 128, true, (128, 160)), 2, 2),
            (call(128, 32768, 32, 8, 128, true, (128, 160)), 4, 4),
            (call(512, 32768, 32, 8, 128, true, (128, 160)), 1, 1),
            (call(128, 16384, 64, 8, 64, true, (128, 128)), 2, 2),
            (call(256, 16384, 64, 8, 64, true, (192, 128)), 1, 3),
            (call(512, 16384, 64, 8, 64, true, (192, 128)), 1, 3),
            (call(1024, 8192, 16, 2, 128, false, (128, 128)), 1, 1),
            // The second run's shapes, not fitted on.
            (call(256, 8192, 64, 8, 64, true, (192, 128)), 1, 3),
            (call(256, 32768, 64, 8, 64, true, (192, 128)), 1, 3),
            (call(384, 16384, 64, 8, 64, true, (192, 128)), 1, 1),
            (call(768, 16384, 32, 8, 128, true, (128, 160)), 1, 2),
            (call(640, 32768, 32, 8, 128, true, (128, 160)), 1, 4),
            (call(1024, 16384, 32, 8, 128, true, (128, 160)), 1, 1),
            (call(3072, 3072, 4, 1, 128, true, (128, 128)), 1, 1),
            (call(6144, 6144, 2, 1, 128, true, (128, 128)), 1, 3),
            (call(1536, 1536, 4, 4, 256, true, (128, 64)), 2, 2),
        ];
        for (c, fa4, measured) in cases {
            assert_eq!(c.best(fa4), measured, "{c:?}");
        }
        // B 4 x Sq 32 over 8k, H 64/8 packed, and B 4 x Sq 250 over 4133, d 64, H 16/2: four
        // sequences' heads.
        let mut c = call(32, 8192, 64, 8, 128, true, (128, 128));
        c.heads_batch *= 4;
        c.query_heads_batch *= 4;
        assert_eq!(c.best(2), 2);
        let mut c = call(250, 4133, 16, 2, 64, true, (192, 128));
        c.heads_batch *= 4;
        c.query_heads_batch *= 4;
        assert_eq!(c.best(1), 3);
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
        c = call(128, 0, 32, 8, 128, true, (128, 128));
        assert_eq!(c.best(1), 1); // no keys
        c = call(128, 8192, 32, 8, 128, true, (128, 128));
        c.slots = 0;
        assert_eq!(c.best(2), 2);
        c = call(1, 1 << 31, 1, 1, 256, false, (128, 64));
        let n = c.best(8);
        assert!((1..=8).contains(&n));
        assert!(c.time_us(n).is_some_and(f64::is_finite));
        // Sq > Sk under the bottom-right mask: the first queries see no key.
        c = call(4096, 1000, 4, 1, 128, true, (128, 128));
        assert!((1..=8).contains(&c.best(2)));
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
