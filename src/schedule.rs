//! The sm90 flagship's persistent schedule, host side: the order in which its CTAs take the
//! units of a dense causal call (`FwdParams::unit_order`, read by `Tiles::at`).
//!
//! The kernel's static snake deals round j's units to the CTAs in order, every other round
//! reversed. A causal call's units cost what their Q block sees (K blocks), and head-major
//! runs make each round's costs a saw tooth that the reversal does not cancel: max / mean
//! work per CTA 1.03 at the #4 cells, the same as a whole tile of quantisation. Dealing each
//! round's units heaviest first to the CTAs with the least work so far (LPT, round by round)
//! keeps every round's set of units, and so the heads whose K/V the CTAs at work share, and
//! evens the work to 1.004-1.011 at 8k-16k keys, 1.011-1.023 at 4k
//! (`tests::lpt_balances_the_causal_cells`). It does not keep which SMs run a head's tiles:
//! the snake gives them consecutive CTAs, on one GPC, and the order spreads them over both L2
//! partitions (session 26, ncu: +36-43% L2 traffic across them and +9-16% DRAM reads at 512
//! keys, +3-5% at 4k), which is what short calls lose by it (`select::LPT_ROUNDS_MIN_KEYS`).

/// A dense causal call's schedule as `Tiles::at` decodes it head-major: runs of `run` Q
/// blocks of one (head, batch), heaviest run first, a run's blocks fastest, then the
/// `m_blocks % run` lowest blocks with the (head, batch) pairs fastest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CausalRuns {
    pub seqlen_q: usize,
    pub seqlen_k: usize,
    pub tile_m: usize,
    pub tile_n: usize,
    /// Q blocks per run (`KernelSpec::wgmma_q_run`, at most the call's Q blocks).
    pub run: usize,
    /// (head, batch) pairs.
    pub heads_batch: usize,
    /// Tiles per schedule unit: 2 in CTA pairs (Q blocks 2k and 2k + 1), else 1.
    pub pair: usize,
}

/// A CTA's fixed cost of a tile beside its K blocks (Q load, epilogue), in K blocks.
const TILE_OVERHEAD_BLOCKS: u64 = 2;

/// The least modelled gain (max / mean work per slot, plain snake over the order's) for which
/// the order is used by default ([`Plan::pays`]). The H200 gave about a point less than the model
/// (sustained, three rounds, causal, B·S 16k, H·d 2048; snake -> order, TFLOP/s, modelled
/// gain in brackets): d 128 4k 587.5 -> 595.3 (+1.3%; 2.0%), 8k 621.1 -> 634.8 (+2.2%;
/// 2.4%), 16k 652.2 -> 658.9 (+1.0%; 2.7%); d 192/128 4k 617.2 -> 625.0 (+1.3%; 2.0%), 8k
/// 663.1 -> 670.4 (+1.1%; 2.6%), 16k 694.4 -> 705.0 (+1.5%; 2.7%); d 256 16k 695.8 -> 704.3
/// (+1.2%; 2.2%); d 64 16k 493.7 -> 497.3 (+0.7%; 1.8%), 4k 431.8 -> 432.3 (+0.1%; 1.2%);
/// d 256 4k 618.2 -> 610.1 (-1.3%; 0.9%).
pub const MIN_MODELLED_GAIN: f64 = 0.015;

/// Units beyond which no order is made (4 MiB of table, a host plan of milliseconds): such a
/// call's rounds are many, and its last round a small share of its work.
pub const MAX_UNITS: usize = 1 << 20;

impl CausalRuns {
    pub fn m_blocks(&self) -> usize {
        self.seqlen_q.div_ceil(self.tile_m)
    }

    pub fn tiles(&self) -> usize {
        self.m_blocks() * self.heads_batch
    }

    /// The Q block of tile `t` in the head-major order (`Tiles::at` with no order given).
    pub fn m_block(&self, t: usize) -> usize {
        let (m_blocks, run) = (self.m_blocks(), self.run.clamp(1, self.m_blocks().max(1)));
        let run_tiles = (m_blocks - m_blocks % run) * self.heads_batch;
        if t < run_tiles {
            let slow = t / run / self.heads_batch;
            m_blocks - (slow + 1) * run + t % run
        } else {
            m_blocks % run - 1 - (t - run_tiles) / self.heads_batch
        }
    }

    /// K blocks a Q block visits under the bottom-right causal mask, the Q blocks ending near
    /// the last query where the kernel lays them so (`KernelSpec::wgmma_q_from_end`: its
    /// spare rows before row 0 in whole 64-row consumers), else from row 0.
    pub fn blocks(&self, m: usize) -> usize {
        let pad = if crate::tiles::q_from_end_tile(self.tile_m, self.tile_n) {
            crate::tiles::rows_before_first(self.seqlen_q, self.tile_m)
        } else {
            0
        };
        let last_row = ((m + 1) * self.tile_m - pad).min(self.seqlen_q);
        (last_row + self.seqlen_k)
            .saturating_sub(self.seqlen_q)
            .min(self.seqlen_k)
            .div_ceil(self.tile_n)
    }

    /// Each unit's cost in K blocks: a pair loads its heavier tile's range.
    pub fn unit_costs(&self) -> Vec<u64> {
        let pair = self.pair.max(1);
        (0..self.tiles() / pair)
            .map(|u| {
                (0..pair)
                    .map(|r| self.blocks(self.m_block(u * pair + r)) as u64)
                    .max()
                    .unwrap_or(0)
                    + TILE_OVERHEAD_BLOCKS
            })
            .collect()
    }
}

/// max / mean work per slot when the snake deals `costs` through `order` (`None`: unit i at
/// place i, the kernel's plain snake).
pub fn balance(costs: &[u64], slots: usize, order: Option<&[i32]>) -> f64 {
    if slots == 0 || costs.is_empty() {
        return 1.0;
    }
    let mut load = vec![0u64; slots];
    for i in 0..costs.len() {
        let (j, s) = (i / slots, i % slots);
        let c = if j % 2 == 1 { slots - 1 - s } else { s };
        let u = order.map_or(i, |o| o.get(i).map_or(i, |&u| u as usize));
        load[c] += costs.get(u).copied().unwrap_or(0);
    }
    let mean = costs.iter().sum::<u64>() as f64 / slots as f64;
    load.iter().copied().max().unwrap_or(0) as f64 / mean
}

/// A call's unit order ([`lpt_order`]) and what the model says it gains.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub order: Vec<i32>,
    /// max / mean work per slot of the plain snake over the order's, minus 1.
    pub gain: f64,
}

impl Plan {
    /// Whether the order is used by default: it evens the modelled work by
    /// [`MIN_MODELLED_GAIN`] or more (else the plain snake: the model over-predicts by about
    /// a point, and short calls lose by the order, `select::LPT_ROUNDS_MIN_KEYS`).
    pub fn pays(&self) -> bool {
        self.gain >= MIN_MODELLED_GAIN
    }
}

/// The order for `runs` over `slots` and its modelled gain; `None` for no units, no slots or
/// more than [`MAX_UNITS`] units.
pub fn plan(runs: &CausalRuns, slots: usize) -> Option<Plan> {
    if runs.tiles() / runs.pair.max(1) > MAX_UNITS || slots == 0 {
        return None;
    }
    let costs = runs.unit_costs();
    if costs.is_empty() {
        return None;
    }
    let order = lpt_order(&costs, slots);
    let gain = balance(&costs, slots, None) / balance(&costs, slots, Some(&order)) - 1.0;
    Some(Plan { order, gain })
}

/// The unit each place of the snake takes (`FwdParams::unit_order`): slot `c` (a CTA, or a
/// pair's cluster) of `slots` takes place `j * slots + c` in even rounds j and
/// `j * slots + slots - 1 - c` in odd ones, and the kernel stops at the first place past the
/// units. So the last, partial round's slots are fixed: their units go first, as the loads
/// the whole rounds start from; each whole round then gives its units, heaviest first, to
/// the slots of least load (ties: the lower index, so the order is reproducible).
pub fn lpt_order(costs: &[u64], slots: usize) -> Vec<i32> {
    let n = costs.len();
    let mut order = vec![0i32; n];
    if slots == 0 {
        return order;
    }
    let place = |j: usize, c: usize| j * slots + if j % 2 == 1 { slots - 1 - c } else { c };
    let by_cost = |range: std::ops::Range<usize>| {
        let mut u: Vec<usize> = range.collect();
        u.sort_by_key(|&i| (std::cmp::Reverse(costs[i]), i));
        u
    };
    let (whole, rest) = (n / slots, n % slots);
    let mut load = vec![0u64; slots];
    if rest > 0 {
        // The places left in the last round are its first `rest`: slots 0.. (even) or the
        // last `rest` (odd).
        let j = whole;
        let fixed = (0..rest).map(|s| if j % 2 == 1 { slots - 1 - s } else { s });
        for (u, c) in by_cost(j * slots..n).into_iter().zip(fixed) {
            load[c] += costs[u];
            order[place(j, c)] = u as i32;
        }
    }
    let mut by_load: Vec<usize> = (0..slots).collect();
    for j in 0..whole {
        by_load.sort_by_key(|&c| (load[c], c));
        for (u, &c) in by_cost(j * slots..(j + 1) * slots).iter().zip(&by_load) {
            load[c] += costs[*u];
            order[place(j, c)] = *u as i32;
        }
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The order is a permutation of the units, and at the #4 causal cells (B·S 16k, H·d
    /// 2048, 132 SMs, the selected tiles, pairs at d >= 128) it evens the work the plain
    /// snake leaves at max / mean 1.02-1.03; `plan` gives it by default where the H200 measured
    /// a gain of about half a point or more (`MIN_MODELLED_GAIN`).
    #[test]
    fn lpt_balances_the_causal_cells() {
        // (d, S, tile_m, tile_n, heads, pairs, planned by default)
        for (d, s, tm, tn, h, pairs, planned) in [
            (64, 4096, 192, 128, 32, false, false),
            (64, 16384, 192, 128, 32, false, true),
            (128, 4096, 128, 128, 16, true, true),
            (128, 8192, 128, 128, 16, true, true),
            (128, 16384, 128, 160, 16, true, true),
            (192, 4096, 128, 128, 16, true, true),
            (192, 8192, 128, 128, 16, true, true),
            (192, 16384, 128, 128, 16, true, true),
            (256, 4096, 128, 80, 8, true, false),
            (256, 16384, 128, 80, 8, true, true),
        ] {
            let pair = if pairs { 2 } else { 1 };
            let runs = CausalRuns {
                seqlen_q: s,
                seqlen_k: s,
                tile_m: tm,
                tile_n: tn,
                run: 16,
                heads_batch: h * 16384 / s,
                pair,
            };
            let costs = runs.unit_costs();
            let slots = 132 / pair;
            let order = lpt_order(&costs, slots);
            let mut seen = vec![false; costs.len()];
            for &u in &order {
                assert!(
                    !std::mem::replace(&mut seen[u as usize], true),
                    "d {d} S {s}"
                );
            }
            let (snake, lpt) = (
                balance(&costs, slots, None),
                balance(&costs, slots, Some(&order)),
            );
            assert!(
                snake > 1.02 && lpt < 1.025 && lpt < snake,
                "d {d} S {s}: {snake} -> {lpt}"
            );
            if s == 16384 {
                assert!(lpt < 1.011, "d {d} S {s}: {snake} -> {lpt}");
            }
            let p = plan(&runs, slots).expect("a plan");
            assert_eq!(p.order, order, "d {d} S {s}");
            assert_eq!(p.pays(), planned, "d {d} S {s}: {snake} -> {lpt}");
        }
        // gpu_features' workspace_under_capture: d 128 8k, B 1, H 16 gets an order.
        let capture = CausalRuns {
            seqlen_q: 8192,
            seqlen_k: 8192,
            tile_m: 128,
            tile_n: 128,
            run: 16,
            heads_batch: 16,
            pair: 2,
        };
        assert!(plan(&capture, 66).is_some_and(|p| p.pays()));
        // Past MAX_UNITS no plan (2M tiles).
        let huge = CausalRuns {
            seqlen_q: 1 << 20,
            seqlen_k: 1 << 20,
            tile_m: 128,
            tile_n: 128,
            run: 16,
            heads_batch: 256,
            pair: 1,
        };
        assert_eq!(plan(&huge, 132), None);
    }

    /// On random costs, unit counts and slot counts (a partial last round or none, fewer
    /// units than slots, one slot) the order is a permutation of the units, never worse than
    /// the snake by more than one unit's cost.
    #[test]
    fn lpt_order_is_a_permutation() {
        use rand::{Rng, SeedableRng, rngs::StdRng};
        let mut rng = StdRng::seed_from_u64(26);
        for _ in 0..500 {
            let slots = rng.random_range(1..=140);
            let n = rng.random_range(1..=slots * 12);
            let costs: Vec<u64> = (0..n).map(|_| rng.random_range(1..=300)).collect();
            let order = lpt_order(&costs, slots);
            let mut seen = vec![false; n];
            for &u in &order {
                assert!(
                    !std::mem::replace(&mut seen[u as usize], true),
                    "{slots} {n}"
                );
            }
            let max = *costs.iter().max().unwrap_or(&0) as f64;
            let mean = costs.iter().sum::<u64>() as f64 / slots as f64;
            let (snake, lpt) = (
                balance(&costs, slots, None),
                balance(&costs, slots, Some(&order)),
            );
            assert!(
                lpt <= snake + max / mean + 1e-9,
                "{slots} {n}: {snake} -> {lpt}"
            );
        }
    }

    /// The head-major decode visits every (Q block, head) once, and the visited blocks
    /// follow the bottom-right mask, Q blocks ending near the last query (Sq < Sk: every
    /// row sees the prefix; Sq > Sk: the first Sq - Sk rows see nothing).
    #[test]
    fn causal_runs_decode_and_blocks() {
        for (sq, sk, hb) in [
            (1000, 1000, 3),
            (113, 4096, 2),
            (4096, 113, 5),
            (2048, 2048, 1),
        ] {
            let r = CausalRuns {
                seqlen_q: sq,
                seqlen_k: sk,
                tile_m: 128,
                tile_n: 80,
                run: 16,
                heads_batch: hb,
                pair: 1,
            };
            let mut count = vec![0; r.m_blocks()];
            for t in 0..r.tiles() {
                count[r.m_block(t)] += 1;
            }
            assert!(count.iter().all(|&c| c == hb), "{sq} {sk}: {count:?}");
            // The Q blocks end near the last query: the first one holds the grid's spare
            // rows, in whole 64-row consumers.
            let pad = (r.m_blocks() * 128 - sq) / 64 * 64;
            for m in 0..r.m_blocks() {
                let rows_end = ((m + 1) * 128 - pad).min(sq);
                let last_key = (rows_end as i64 - 1 + sk as i64 - sq as i64).min(sk as i64 - 1);
                let want = if last_key < 0 {
                    0
                } else {
                    (last_key as usize + 1).div_ceil(80)
                };
                assert_eq!(r.blocks(m), want, "{sq} {sk} m {m}");
            }
        }
    }

    /// An unmasked call's last Q block dealt after all the others (fwd_sm90.cu
    /// `Tiles::kPartialLast`), at d 64 S 4k (B 4, H 32, 192-row tiles: 22 Q blocks, the
    /// last of 64 rows, two of its three consumers idle), on 132 CTAs: the plain order
    /// (Q blocks fastest) leaves 44 CTAs 22 whole tiles whatever a partial tile costs; dealt
    /// last, no CTA has more than max(21, 20 + 2 alpha) whole tiles' work (alpha: a partial
    /// tile's cost over a whole one's). The H200 measured +2.8% (22 / 21.4: alpha about 0.7).
    #[test]
    fn partial_q_blocks_last_even_the_unfilled_round() {
        let (m_blocks, hb, slots) = (22usize, 128usize, 132usize);
        let max_load = |costs: &[u64]| {
            let mean = costs.iter().sum::<u64>() as f64 / slots as f64;
            balance(costs, slots, None) * mean
        };
        for alpha in [10u64, 7, 5] {
            // Costs in tenths of a whole tile, in the order each schedule deals the tiles.
            let plain: Vec<u64> = (0..m_blocks * hb)
                .map(|t| {
                    if t % m_blocks == m_blocks - 1 {
                        alpha
                    } else {
                        10
                    }
                })
                .collect();
            let last: Vec<u64> = (0..m_blocks * hb)
                .map(|t| if t >= (m_blocks - 1) * hb { alpha } else { 10 })
                .collect();
            let (a, b) = (max_load(&plain), max_load(&last));
            assert!((a - 220.0).abs() < 1e-6, "alpha {alpha}: plain {a}");
            let want = (210u64).max(200 + 2 * alpha) as f64;
            assert!(
                (b - want).abs() < 1e-6,
                "alpha {alpha}: last {b}, want {want}"
            );
        }
    }
}
