//! GPU tests of the serving features (#5) and split-KV (#6) against the DESIGN.md oracle:
//! ragged batches (cu_seqlens / seqused, zero-length sequences), paged K/V with shuffled page
//! tables, windows, sinks, softcap, GQA packing, and num_splits with the combine kernel.
//!
//! Skipped, with the reason printed, where there is no GPU. Kernels come from
//! `$FA4GEN_KERNELS/<arch>/`; with the `jit` feature (how `scripts/gpu-check.sh` builds the
//! tests) the ones a plan lacks are compiled first, in parallel, into the jit cache.
//!
//! Each case draws fresh random inputs per sequence, poisons out and LSE with NaN, runs twice
//! and requires bit-identical results, and checks every sequence's rows against the f64
//! reference by FA4's rule (rtol 3 with softcap) and the LSE to 1e-3 relative.

use cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use fa4gen::DType;
use fa4gen::reference::{self, RefProblem};
use fa4gen::runtime::{
    self, CombineKernel, FlashAttention, Paged, Problem, SeqBuffers, Strides, Varlen,
};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

fn kernels_root() -> PathBuf {
    std::env::var_os("FA4GEN_KERNELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/generated")))
}

fn setup() -> Option<(Arc<CudaContext>, Arc<CudaStream>, FlashAttention)> {
    let ctx = match runtime::context(0) {
        Ok(c) => c,
        Err(e) if e.is_no_gpu() => {
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED GPU test: no GPU to run on ({e})"
            );
            return None;
        }
        // A driver that sees a device but gives no context is a failure, not a skip.
        Err(e) => panic!("a GPU is present but no context opens: {e}"),
    };
    let fa = FlashAttention::from_root(ctx.clone(), kernels_root())
        .unwrap_or_else(|e| panic!("a GPU is present but the kernel library is not usable: {e}"));
    #[cfg(feature = "jit")]
    let fa = fa.with_jit(runtime::jit::Jit::new(runtime::jit::Jit::default_dir()));
    let stream = ctx.default_stream();
    Some((ctx, stream, fa))
}

fn run_seed() -> u64 {
    std::env::var("FA4GEN_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
}

fn randn(rng: &mut StdRng, dtype: DType, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| reference::round_to(dtype, rng.sample::<f32, _>(StandardNormal)))
        .collect()
}

/// How K/V are laid out.
#[derive(Clone, Copy, Debug, PartialEq)]
enum KLayout {
    /// `(B, max_sk, Hkv, D)`, with `seqused_k` when the lengths differ.
    Batched,
    /// Packed `(total_k, Hkv, D)` with `cu_seqlens_k`.
    Packed,
    /// Pages of this many keys, shuffled, with `seqused_k`.
    Paged(usize),
    /// The same, pages two pages' rows apart: K (or V) of a `(pages, 2, page_size, Hkv, D)`
    /// cache, the rows between (the other tensor's) NaN.
    PagedSpaced(usize),
}

/// The combine kernels cases take in turn: by shape, then each forced.
const COMBINES: [CombineKernel; 3] = [
    CombineKernel::Auto,
    CombineKernel::PerRow,
    CombineKernel::Rows,
];

#[derive(Clone, Debug)]
struct Case {
    dtype: DType,
    d: usize,
    dv: usize,
    heads: usize,
    heads_kv: usize,
    /// (Sq, Sk) of each sequence.
    seqs: Vec<(usize, usize)>,
    /// q/out packed `(total_q, H, D)` with `cu_seqlens_q`; else batched (with `seqused_q`
    /// when the lengths differ).
    q_packed: bool,
    k: KLayout,
    causal: bool,
    window: (Option<i64>, Option<i64>),
    pack_gqa: Option<bool>,
    softcap: f32,
    sinks: bool,
    num_splits: i32,
    /// Keys scaled by this factor in every sequence (`scale_late_keys`): rows whose max
    /// jumps after a tile's first blocks, for the stale max's check and recompute.
    late: Option<f32>,
    /// `Problem::cta_pairs`: CTA pairs forced on or off (else selection's rule).
    pairs: Option<bool>,
    /// `Problem::tile_mn`: the kernel's tile (else selection's).
    tile: Option<(u32, u32)>,
    /// `Problem::fill_tile`: the 64-row fill tile forced on or off (else selection's rule).
    fill: Option<bool>,
    /// The split's combine kernel (`FlashAttention::set_combine_kernel`).
    combine: CombineKernel,
    /// `Problem::varlen_schedule`: the device's list of units forced off (else selection's rule).
    schedule: Option<bool>,
    /// `Problem::sequence_splits`: each sequence's own split count forced on or off (else
    /// selection's rule).
    sequence_splits: Option<bool>,
    /// `FlashAttention::set_sequence_splits`: waves of (sequence, split) units.
    shares: u32,
}

impl Case {
    fn base(seqs: Vec<(usize, usize)>) -> Case {
        Case {
            dtype: DType::Bf16,
            d: 128,
            dv: 128,
            heads: 4,
            heads_kv: 2,
            seqs,
            q_packed: false,
            k: KLayout::Batched,
            causal: false,
            window: (None, None),
            pack_gqa: None,
            softcap: 0.0,
            sinks: false,
            num_splits: 1,
            late: None,
            pairs: None,
            tile: None,
            fill: None,
            combine: CombineKernel::Auto,
            schedule: None,
            sequence_splits: None,
            shares: fa4gen::select::SEQUENCE_SPLIT_SHARES,
        }
    }

    /// A flagship test's case `i`: dtype by `i`, head dims, a group of `g` heads per each of 2
    /// KV heads, the (q packed, k layout) pair.
    fn flagship_layout(
        seqs: Vec<(usize, usize)>,
        i: usize,
        (d, dv): (usize, usize),
        g: usize,
        (q_packed, k): (bool, KLayout),
    ) -> Case {
        Case {
            dtype: DType::ALL[i % 2],
            d,
            dv,
            heads: 2 * g,
            heads_kv: 2,
            q_packed,
            k,
            ..Case::base(seqs)
        }
    }

    /// The mask of case `i`: causal, a random window (left below `left_max`, right at most
    /// `right_max`), or none, in turn.
    fn mask_by_index(&mut self, i: usize, rng: &mut StdRng, left_max: i64, right_max: i64) {
        match i % 3 {
            0 => self.causal = true,
            1 => {
                self.window = (
                    Some(rng.random_range(0..left_max)),
                    Some(rng.random_range(0..=right_max)),
                )
            }
            _ => {}
        }
    }

    fn name(&self) -> String {
        let seqs = if self.seqs.len() > 6 {
            format!("{} seqs {:?}..", self.seqs.len(), &self.seqs[..4])
        } else {
            format!("{:?}", self.seqs)
        };
        format!(
            "{:?} d{}x{} H{}/{} {seqs} q_packed={} k={:?} causal={} window={:?} pack={:?} softcap={} sinks={} splits={} late={:?} pairs={:?} tile={:?} fill={:?} combine={:?} schedule={:?} seq_splits={:?} shares={}",
            self.dtype,
            self.d,
            self.dv,
            self.heads,
            self.heads_kv,
            self.q_packed,
            self.k,
            self.causal,
            self.window,
            self.pack_gqa,
            self.softcap,
            self.sinks,
            self.num_splits,
            self.late,
            self.pairs,
            self.tile,
            self.fill,
            self.combine,
            self.schedule,
            self.sequence_splits,
            self.shares
        )
    }
}

/// Each sequence's keys sk / 2 - 3 .. sk / 2 + 2 (mid-sequence: blocks are visited last to
/// first, so a tile meets them after its first blocks set the running max) and its last two
/// (the first visited), scaled by `factor` in every KV head: 8 puts P past the stale max's
/// 2^8 bound, 40 overflows its exponentials.
fn scale_late_keys(c: &Case, mut data: Vec<SeqData>, factor: f32) -> Vec<SeqData> {
    let row = c.heads_kv * c.d;
    for (sd, &(_, sk)) in data.iter_mut().zip(&c.seqs) {
        let mid = sk / 2;
        for key in (mid.saturating_sub(3)..(mid + 2).min(sk)).chain(sk.saturating_sub(2)..sk) {
            for x in &mut sd.k[key * row..][..row] {
                *x = reference::round_to(c.dtype, *x * factor);
            }
        }
    }
    data
}

/// The device-side problem and buffers of a case, plus where each sequence's rows live.
struct Built {
    problem: Problem,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    cu_q: Option<Vec<i32>>,
    cu_k: Option<Vec<i32>>,
    used_q: Option<Vec<i32>>,
    used_k: Option<Vec<i32>>,
    page_table: Option<Vec<i32>>,
    sinks: Option<Vec<f32>>,
    /// First row of each sequence in q/out.
    q_row0: Vec<usize>,
    out_len: usize,
    lse_len: usize,
}

struct SeqData {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
}

fn build(c: &Case, data: &[SeqData], rng: &mut StdRng) -> Built {
    let (h, hkv, d, dv) = (c.heads, c.heads_kv, c.d, c.dv);
    let b = c.seqs.len();
    let max_sq = c.seqs.iter().map(|s| s.0).max().unwrap_or(0);
    let max_sk = c.seqs.iter().map(|s| s.1).max().unwrap_or(0);
    let total_q: usize = c.seqs.iter().map(|s| s.0).sum();
    let total_k: usize = c.seqs.iter().map(|s| s.1).sum();
    let prefix = |xs: Vec<usize>| -> Vec<i32> {
        let mut acc = vec![0i32];
        for x in xs {
            acc.push(acc.last().unwrap() + x as i32);
        }
        acc
    };
    let cu_q = prefix(c.seqs.iter().map(|s| s.0).collect());
    let cu_k = prefix(c.seqs.iter().map(|s| s.1).collect());
    // q: packed rows or a (B, max_sq) batch whose padding rows hold noise (must be ignored).
    let (q_rows, q_row0): (usize, Vec<usize>) = if c.q_packed {
        (total_q, cu_q[..b].iter().map(|&x| x as usize).collect())
    } else {
        (b * max_sq, (0..b).map(|i| i * max_sq).collect())
    };
    let mut q = randn(rng, c.dtype, q_rows * h * d);
    for (s, sd) in data.iter().enumerate() {
        q[q_row0[s] * h * d..][..sd.q.len()].copy_from_slice(&sd.q);
    }
    let mut problem = Problem::new(c.dtype, b, max_sq, max_sk, h, hkv, d, dv);
    let mut varlen = Varlen::default();
    if c.q_packed {
        varlen.total_q = Some(total_q);
    } else if c.seqs.iter().any(|s| s.0 != max_sq) {
        varlen.seqused_q = true;
    }
    let (mut k, mut v);
    let mut page_table = None;
    match c.k {
        // Keys past a sequence's end (batch padding, a page's slack, spare pages) are NaN: a
        // kernel must neither read them into a result nor let 0 * NaN through.
        KLayout::Batched => {
            k = vec![f32::NAN; b * max_sk * hkv * d];
            v = vec![f32::NAN; b * max_sk * hkv * dv];
            for (s, sd) in data.iter().enumerate() {
                k[s * max_sk * hkv * d..][..sd.k.len()].copy_from_slice(&sd.k);
                v[s * max_sk * hkv * dv..][..sd.v.len()].copy_from_slice(&sd.v);
            }
            if c.seqs.iter().any(|s| s.1 != max_sk) {
                varlen.seqused_k = true;
            }
        }
        KLayout::Packed => {
            k = data.iter().flat_map(|sd| sd.k.iter().copied()).collect();
            v = data.iter().flat_map(|sd| sd.v.iter().copied()).collect();
            varlen.total_k = Some(total_k);
            problem.k_strides = Strides::contiguous(total_k, hkv, d);
            problem.v_strides = Strides::contiguous(total_k, hkv, dv);
        }
        KLayout::Paged(ps) | KLayout::PagedSpaced(ps) => {
            let span = if matches!(c.k, KLayout::PagedSpaced(_)) {
                2 * ps
            } else {
                ps
            };
            // A table wider than the longest sequence needs (an engine's, as wide as the
            // model's longest context) on every other case, Sk then the longest sequence's.
            let wide = c.seqs.len() % 2 == 1;
            let pps = max_sk.div_ceil(ps).max(1) + if wide { 7 } else { 0 };
            let num_pages = b * pps + 3; // spare pages
            let mut perm: Vec<usize> = (0..num_pages).collect();
            perm.shuffle(rng);
            k = vec![f32::NAN; num_pages * span * hkv * d];
            v = vec![f32::NAN; num_pages * span * hkv * dv];
            let mut table = vec![0i32; b * pps];
            for s in 0..b {
                for pg in 0..pps {
                    table[s * pps + pg] = perm[s * pps + pg] as i32;
                }
                for j in 0..c.seqs[s].1 {
                    let page = table[s * pps + j / ps] as usize;
                    let row = page * span + j % ps;
                    k[row * hkv * d..][..hkv * d]
                        .copy_from_slice(&data[s].k[j * hkv * d..][..hkv * d]);
                    v[row * hkv * dv..][..hkv * dv]
                        .copy_from_slice(&data[s].v[j * hkv * dv..][..hkv * dv]);
                }
            }
            problem.seqlen_k = if wide { max_sk } else { pps * ps };
            problem.paged = Some(Paged {
                page_size: ps,
                num_pages,
                pages_per_seq: pps,
                page_table_stride: pps,
            });
            problem.k_strides = Strides::contiguous(span, hkv, d);
            problem.v_strides = Strides::contiguous(span, hkv, dv);
            varlen.seqused_k = true;
            page_table = Some(table);
        }
    }
    if c.q_packed {
        problem.q_strides = Strides::contiguous(total_q, h, d);
        problem.o_strides = Strides::contiguous(total_q, h, dv);
    }
    problem.varlen = (varlen != Varlen::default()).then_some(varlen);
    problem.causal = c.causal;
    problem.window = c.window;
    problem.return_lse = true;
    problem.pack_gqa = c.pack_gqa;
    problem.softcap = c.softcap;
    problem.sinks = c.sinks;
    problem.num_splits = c.num_splits;
    problem.cta_pairs = c.pairs;
    problem.tile_mn = c.tile;
    problem.fill_tile = c.fill;
    problem.varlen_schedule = c.schedule;
    problem.sequence_splits = c.sequence_splits;
    let sinks = c.sinks.then(|| {
        (0..h)
            .map(|_| 2.0 * rng.sample::<f32, _>(StandardNormal))
            .collect()
    });
    Built {
        problem,
        q,
        k,
        v,
        cu_q: c.q_packed.then(|| cu_q.clone()),
        cu_k: (c.k == KLayout::Packed).then(|| cu_k.clone()),
        used_q: varlen
            .seqused_q
            .then(|| c.seqs.iter().map(|s| s.0 as i32).collect()),
        used_k: varlen
            .seqused_k
            .then(|| c.seqs.iter().map(|s| s.1 as i32).collect()),
        page_table,
        sinks,
        q_row0,
        out_len: q_rows * h * dv,
        lse_len: h * q_rows,
    }
}

struct Outcome {
    err_over_bound: f64,
    /// The worst LSE error over its bound (`reference::lse_bound`).
    lse_err_bound: f64,
}

fn up16(stream: &Arc<CudaStream>, dtype: DType, x: &[f32]) -> Result<CudaSlice<u16>, String> {
    let mut bits = reference::encode(dtype, x);
    bits.resize(bits.len().max(1), 0);
    stream.clone_htod(&bits).map_err(|e| e.to_string())
}

fn up_i32(
    stream: &Arc<CudaStream>,
    x: &Option<Vec<i32>>,
) -> Result<Option<CudaSlice<i32>>, String> {
    x.as_ref()
        .map(|x| stream.clone_htod(x).map_err(|e| e.to_string()))
        .transpose()
}

fn run_case(
    stream: &Arc<CudaStream>,
    fa: &FlashAttention,
    c: &Case,
    rng: &mut StdRng,
) -> Result<Outcome, String> {
    let (h, hkv) = (c.heads, c.heads_kv);
    let data: Vec<SeqData> = c
        .seqs
        .iter()
        .map(|&(sq, sk)| SeqData {
            q: randn(rng, c.dtype, sq * h * c.d),
            k: randn(rng, c.dtype, sk * hkv * c.d),
            v: randn(rng, c.dtype, sk * hkv * c.dv),
        })
        .collect();
    let data = match c.late {
        Some(factor) => scale_late_keys(c, data, factor),
        None => data,
    };
    let bt = build(c, &data, rng);
    fa.set_combine_kernel(c.combine);
    fa.set_sequence_splits(c.shares);
    let (dq, dk, dv) = (
        up16(stream, c.dtype, &bt.q)?,
        up16(stream, c.dtype, &bt.k)?,
        up16(stream, c.dtype, &bt.v)?,
    );
    let (cq, ck, uq, uk, pt) = (
        up_i32(stream, &bt.cu_q)?,
        up_i32(stream, &bt.cu_k)?,
        up_i32(stream, &bt.used_q)?,
        up_i32(stream, &bt.used_k)?,
        up_i32(stream, &bt.page_table)?,
    );
    let ds = bt
        .sinks
        .as_ref()
        .map(|s| stream.clone_htod(s).map_err(|e| e.to_string()))
        .transpose()?;
    let extra = SeqBuffers {
        cu_seqlens_q: cq.as_ref(),
        cu_seqlens_k: ck.as_ref(),
        seqused_q: uq.as_ref(),
        seqused_k: uk.as_ref(),
        page_table: pt.as_ref(),
        sinks: ds.as_ref(),
    };
    let mut results = Vec::new();
    for _ in 0..2 {
        let mut dout = stream
            .clone_htod(&vec![reference::nan_bits(c.dtype); bt.out_len.max(1)])
            .map_err(|e| e.to_string())?;
        let mut dlse = stream
            .clone_htod(&vec![f32::NAN; bt.lse_len.max(1)])
            .map_err(|e| e.to_string())?;
        fa.forward_varlen(
            stream,
            &bt.problem,
            &dq,
            &dk,
            &dv,
            &mut dout,
            Some(&mut dlse),
            &extra,
        )
        .map_err(|e| format!("forward: {e}"))?;
        let out_bits = stream.clone_dtoh(&dout).map_err(|e| e.to_string())?;
        let lse = stream.clone_dtoh(&dlse).map_err(|e| e.to_string())?;
        results.push((out_bits, lse));
    }
    let lse_bits = |l: &[f32]| l.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    if results[0].0 != results[1].0 || lse_bits(&results[0].1) != lse_bits(&results[1].1) {
        return Err("two runs on the same inputs differ: a race".into());
    }
    let (out_bits, lse) = &results[0];
    let out = reference::decode(c.dtype, out_bits);
    let q_rows = bt.out_len / (h * c.dv).max(1);
    let (mut got, mut r_all, mut pt_all, mut lse_got, mut lse_ref) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut lse_at = Vec::new(); // (sequence, head, query) of each LSE checked
    let mut lse_mag = Vec::new(); // the magnitude of each LSE's largest score's terms
    for (s, &(sq, sk)) in c.seqs.iter().enumerate() {
        if sq == 0 {
            continue;
        }
        let rp = RefProblem {
            batch: 1,
            seqlen_q: sq,
            seqlen_k: sk,
            heads: h,
            heads_kv: hkv,
            d: c.d,
            dv: c.dv,
            scale: 1.0 / (c.d as f64).sqrt(),
            causal: c.causal,
            window: c.window,
            softcap: c.softcap as f64,
            sinks: bt
                .sinks
                .as_ref()
                .map(|s| s.iter().map(|&x| x as f64).collect()),
        };
        let queries: Vec<usize> = if sq * sk > 1 << 20 {
            let mut qs: Vec<usize> = (0..48).map(|_| rng.random_range(0..sq)).collect();
            qs.extend([0, sq - 1]);
            qs.sort_unstable();
            qs.dedup();
            qs
        } else {
            (0..sq).collect()
        };
        let row0 = bt.q_row0[s];
        let seq_out = &out[row0 * h * c.dv..][..sq * h * c.dv];
        if let Some(i) = seq_out.iter().position(|x| !x.is_finite()) {
            return Err(format!(
                "sequence {s}: out[{i}] = {} (unwritten or NaN)",
                seq_out[i]
            ));
        }
        let (r, rl, mags) =
            reference::attention_f64_magnitudes(&rp, &data[s].q, &data[s].k, &data[s].v, &queries);
        let pt =
            reference::attention_lowp(&rp, c.dtype, &data[s].q, &data[s].k, &data[s].v, &queries);
        got.extend(reference::gather_queries(&rp, seq_out, &queries));
        r_all.extend(r);
        pt_all.extend(pt);
        for hh in 0..h {
            for &i in &queries {
                // LSE (H, total_q) when q is packed, else (B, H, max_sq).
                let idx = if c.q_packed {
                    hh * q_rows + row0 + i
                } else {
                    (s * h + hh) * (q_rows / c.seqs.len()) + i
                };
                lse_got.push(lse[idx]);
                lse_at.push((s, hh, i));
            }
        }
        lse_ref.extend(rl);
        lse_mag.extend(mags);
    }
    let rep = reference::check_oracle(c.dtype, &got, &r_all, &pt_all, c.softcap > 0.0);
    if !rep.pass() {
        return Err(format!(
            "oracle: max|out-ref| {:.3e} > bound {:.3e} (max|pt-ref| {:.3e}, non-finite {})",
            rep.err, rep.bound, rep.pt_err, rep.non_finite
        ));
    }
    if let Some(i) = lse_got.iter().position(|x| x.is_nan()) {
        return Err(format!("lse[{i}] is NaN (unwritten)"));
    }
    let lse_err_bound = reference::check_lse(&lse_got, &lse_ref, &lse_mag, c.d, 1e-3)?;
    // FA4GEN_CASE_DETAIL=1: each case's errors and its worst LSE's place (what a worst number
    // across a test cannot say).
    if std::env::var_os("FA4GEN_CASE_DETAIL").is_some() {
        let worst = (0..lse_got.len())
            .filter(|&i| lse_ref[i].is_finite())
            .max_by(|&a, &b| {
                let e =
                    |i: usize| reference::lse_error(lse_got[i], lse_ref[i], lse_mag[i], c.d, 1e-3);
                e(a).total_cmp(&e(b))
            });
        if let Some(i) = worst {
            let (s, hh, q) = lse_at[i];
            println!(
                "  {}: err/bound {:.3}, LSE err/bound {lse_err_bound:.3}; worst LSE at sequence {s} {:?} head {hh} query {q}: {} vs {:.6}",
                c.name(),
                rep.err / rep.bound.max(f64::MIN_POSITIVE),
                c.seqs[s],
                lse_got[i],
                lse_ref[i]
            );
        }
    }
    Ok(Outcome {
        err_over_bound: if rep.bound > 0.0 {
            rep.err / rep.bound
        } else {
            0.0
        },
        lse_err_bound,
    })
}

fn run_all(label: &str, cases: &[Case]) {
    run_all_selecting(label, cases, |_, _| {});
}

/// `run_all`, where on the H200 (sm90, 132 SMs: the device the cases are sized for) each case's
/// selection by the loaded library, fallbacks included, must also pass `check`: the kernel the
/// CPU twin expects is the one that runs.
fn run_all_selecting(
    label: &str,
    cases: &[Case],
    check: impl Fn(&Case, &fa4gen::select::Selection),
) {
    let Some((_ctx, stream, fa)) = setup() else {
        return;
    };
    // FA4GEN_CASE_STRIDE=k runs every k-th case (compute-sanitizer runs: 10-100x slower).
    let stride = std::env::var("FA4GEN_CASE_STRIDE")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(1)
        .max(1);
    let cases: Vec<Case> = cases.iter().step_by(stride).cloned().collect();
    let cases = &cases[..];
    let seed = run_seed();
    println!(
        "{label}: {} cases, seed {seed} (FA4GEN_SEED={seed} reproduces)",
        cases.len()
    );
    #[cfg(feature = "jit")]
    {
        // Compile what the library lacks up front, in parallel (problems built from a
        // throwaway rng: selection depends on shapes only).
        let t = std::time::Instant::now();
        let mut r = StdRng::seed_from_u64(0);
        let problems: Vec<Problem> = cases
            .iter()
            .map(|c| build_problem_only(c, &mut r))
            .collect();
        match fa.prepare(&problems) {
            Ok(n) => println!(
                "{label}: jit-compiled {n} kernels the library lacks in {:.1} s",
                t.elapsed().as_secs_f64()
            ),
            Err(e) => panic!("jit: {e}"),
        }
    }
    // Which implementation selection sends the cases to (the sm90 flagship takes the dense
    // prefill-shaped ones, sinks and softcap included).
    let mut kernels = std::collections::BTreeMap::<String, usize>::new();
    let mut r = StdRng::seed_from_u64(0);
    let on_h200 = fa.device().major == 9 && fa.device().sm_count == 132;
    for c in cases {
        let planned = fa.plan(&build_problem_only(c, &mut r));
        if let (true, Ok((_, s))) = (on_h200, &planned) {
            check(c, s);
        }
        let name = match planned {
            Ok((_, s)) if s.spec.pack_gqa => format!("{}/packed", s.spec.imp.name()),
            Ok((_, s)) => s.spec.imp.name().to_string(),
            Err(_) => "none".to_string(),
        };
        *kernels.entry(name).or_default() += 1;
    }
    println!("{label}: kernels {kernels:?}");
    if label.starts_with("flagship") && fa.device().major == 9 {
        assert!(
            kernels.keys().all(|k| k.starts_with("wgmma")),
            "every {label} case must select the flagship on sm90"
        );
        if label.starts_with("flagship_packed") {
            assert_eq!(
                kernels.keys().collect::<Vec<_>>(),
                ["wgmma/packed"],
                "every {label} case must pack GQA on the flagship"
            );
        }
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let mut failures = Vec::new();
    let (mut worst, mut worst_lse) = (0f64, 0f64);
    let t = std::time::Instant::now();
    for c in cases {
        match run_case(&stream, &fa, c, &mut rng) {
            Ok(o) => {
                worst = worst.max(o.err_over_bound);
                worst_lse = worst_lse.max(o.lse_err_bound);
            }
            Err(e) => failures.push(format!("{}: {e}", c.name())),
        }
    }
    println!(
        "{label}: {} passed, {} failed; worst err/bound {worst:.3}, worst LSE err/bound {worst_lse:.3}; {:.1} s",
        cases.len() - failures.len(),
        failures.len(),
        t.elapsed().as_secs_f64()
    );
    for f in &failures {
        println!("FAIL {f}");
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed",
        failures.len(),
        cases.len()
    );
}

/// The problem of a case without its data (for selection / jit preparation).
fn build_problem_only(c: &Case, rng: &mut StdRng) -> Problem {
    // Selection depends on the lengths, not the values.
    let data: Vec<SeqData> = c
        .seqs
        .iter()
        .map(|&(sq, sk)| SeqData {
            q: vec![0.0; sq * c.heads * c.d],
            k: vec![0.0; sk * c.heads_kv * c.d],
            v: vec![0.0; sk * c.heads_kv * c.dv],
        })
        .collect();
    build(c, &data, rng).problem
}

/// What selection picks for a case on the H200 (CPU only: selection reads no GPU).
fn h200_selection(c: &Case, rng: &mut StdRng) -> fa4gen::select::Selection {
    let h200 = fa4gen::select::DeviceInfo {
        major: 9,
        minor: 0,
        sm_count: 132,
    };
    let p = build_problem_only(c, rng);
    let v = p.validate().expect("a valid call");
    fa4gen::select::select(&p, &v, &h200).expect("a kernel")
}

fn random_seqs(rng: &mut StdRng, n: usize, max: usize, same: bool) -> Vec<(usize, usize)> {
    (0..n)
        .map(|_| {
            let sq = rng.random_range(0..=max);
            let sk = if same { sq } else { rng.random_range(0..=max) };
            (sq, sk)
        })
        .collect()
}

/// The sm90 flagship's serving features (#4/#5): sinks and softcap on dense prefill-shaped
/// batches (equal lengths, unpacked GQA), every flagship head dim x mask x dtype, Sq != Sk both
/// ways. On an sm90 device every case must run on the flagship.
#[test]
fn flagship_features() {
    let mut rng = StdRng::seed_from_u64(23);
    let mut cases = Vec::new();
    let mut i = 0usize;
    for (d, dv) in [(64, 64), (128, 128), (192, 128), (256, 256)] {
        for dtype in DType::ALL {
            for mask in 0..3 {
                let (sq, sk) = [(65, 300), (113, 113), (300, 129), (1000, 1031)][i % 4];
                let g = [1, 2, 4][i % 3];
                let mut c = Case::base(vec![(sq, sk); 1 + i % 2]);
                c.dtype = dtype;
                c.d = d;
                c.dv = dv;
                c.heads = 2 * g;
                c.heads_kv = 2;
                c.causal = mask == 1;
                if mask == 2 {
                    c.window = (
                        Some(rng.random_range(0..=sk as i64)),
                        Some(rng.random_range(0..=64)),
                    );
                }
                c.sinks = i % 3 != 1;
                c.softcap = [0.0, 15.0, 30.0][(i / 2) % 3];
                if !c.sinks && c.softcap == 0.0 {
                    c.softcap = 30.0;
                }
                cases.push(c);
                i += 1;
            }
        }
    }
    run_all("flagship_features", &cases);
}

/// The sm90 flagship on ragged batches and pages (#5): every flagship head dim, q packed or
/// batched, k packed, batched or paged (pages of 8 to 256 keys incl. 48, shuffled, slack rows NaN; pages two
/// pages apart, as in a (pages, 2, page_size, Hkv, D) cache),
/// lengths 0, 1 and up to 1000 with Sq != Sk both ways, the three masks, sinks and softcap,
/// unpacked GQA. On an sm90 device every case must run on the flagship.
#[test]
fn flagship_serving() {
    let mut rng = StdRng::seed_from_u64(31);
    let layouts = [
        (true, KLayout::Packed),
        (false, KLayout::Batched),
        (true, KLayout::Batched),
        (false, KLayout::Packed),
        (true, KLayout::Paged(16)),
        (false, KLayout::Paged(128)),
        (true, KLayout::Paged(64)),
        (false, KLayout::Paged(8)),
        (true, KLayout::Paged(256)),
        (false, KLayout::Paged(48)),
        (true, KLayout::PagedSpaced(16)),
    ];
    let mut cases = Vec::new();
    let mut i = 0usize;
    for (d, dv) in [(64, 64), (128, 128), (192, 128), (256, 256)] {
        for (q_packed, k) in layouts {
            let mut seqs = random_seqs(&mut rng, 4, 700, false);
            seqs.extend(
                [(0, 50), (1, 1), (200, 0), (129, 1000)][..1 + i % 4]
                    .iter()
                    .copied(),
            );
            seqs.push((1000, 700 + i % 300));
            let g = [1, 2, 4][i % 3];
            let mut c = Case::flagship_layout(seqs, i, (d, dv), g, (q_packed, k));
            c.mask_by_index(i, &mut rng, 300, 64);
            c.sinks = i % 4 == 1;
            c.softcap = if i % 5 == 2 { 30.0 } else { 0.0 };
            cases.push(c);
            i += 1;
        }
    }
    run_all("flagship_serving", &cases);
}

/// Packed GQA on the sm90 flagship (#5): groups of 2 to 64 heads (rows (query, head in
/// group), boxes of whole groups), every flagship head dim, dense, ragged and paged batches,
/// short queries (Sq 1..64, which only packing brings to the flagship) and long, Sq != Sk both
/// ways, the three masks (at d > 64 on Q blocks in runs of G and a tail), sinks (per row's
/// head) and softcap, LSE per row. On an sm90 device every case must run packed on the
/// flagship.
#[test]
fn flagship_packed_gqa() {
    let mut rng = StdRng::seed_from_u64(47);
    let layouts = [
        (false, KLayout::Batched),
        (true, KLayout::Packed),
        (true, KLayout::Paged(16)),
        (false, KLayout::Paged(128)),
        (true, KLayout::Batched),
        (false, KLayout::Paged(64)),
    ];
    let mut cases = Vec::new();
    let mut i = 0usize;
    for (d, dv) in [(64, 64), (128, 128), (192, 128), (256, 256)] {
        for (q_packed, k) in layouts {
            // Groups of 2 to 64; the largest (32, 64: MQA-like) once per head dim.
            let g = [8, 2, 4, 16, 32, 64][(i + i / 6) % 6];
            // Short queries (all of them at most 64, with at least 65 packed rows) or long
            // ones with ends of 0 and 1 rows. Under a mask at d > 64 the Q blocks run in runs
            // of G; these lengths leave a tail of m_blocks % G blocks after the whole runs.
            let mut seqs = if i.is_multiple_of(2) {
                let short = 65usize.div_ceil(g).max(1);
                vec![
                    (
                        short + rng.random_range(0..=64 - short),
                        rng.random_range(1..=900),
                    ),
                    (64, 7),
                    (short, 300),
                ]
            } else {
                let mut seqs = random_seqs(&mut rng, 3, 500, false);
                seqs.extend([(0, 40), (1, 1), (113, 0)][..1 + i % 3].iter().copied());
                seqs.push((333, 250 + i % 300));
                seqs
            };
            if !q_packed && matches!(k, KLayout::Batched) {
                let first = seqs.iter().copied().max_by_key(|s| s.0).unwrap_or((1, 1));
                seqs = vec![first; 2]; // dense: equal lengths, no seqused
            }
            let mut c = Case::flagship_layout(seqs, i, (d, dv), g, (q_packed, k));
            c.pack_gqa = Some(true);
            c.mask_by_index(i, &mut rng, 200, 48);
            c.sinks = i % 3 != 2;
            c.softcap = if i % 4 == 3 { 30.0 } else { 0.0 };
            cases.push(c);
            i += 1;
        }
    }
    run_all("flagship_packed_gqa", &cases);
}

/// Cases that force a flagship tile rule (`Problem::fill_tile`) with the serving features: per
/// head dim in `dims`, unmasked and causal over each (q, k) layout, three sequences (random
/// lengths up to 250 queries over up to 2000 keys, one of 0 or 1 queries or keys, one long),
/// equal lengths where both are batched; GQA by turns from `groups`, packed where `packed(i)`,
/// sinks, softcap 0 / 15 / 30, both dtypes by turns.
fn forced_tile_cases(
    seed: u64,
    dims: &[usize],
    layouts: &[(bool, KLayout)],
    groups: &[usize],
    packed: impl Fn(usize) -> bool,
) -> Vec<Case> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut cases = Vec::new();
    let mut i = 0usize;
    for &d in dims {
        for &(q_packed, k) in layouts {
            for causal in [false, true] {
                let mut seqs = vec![
                    (rng.random_range(0..=250), rng.random_range(0..=2000)),
                    [(0, 50), (1, 1), (200, 0), (129, 1500)][i % 4],
                    (250, 1000 + 37 * i),
                ];
                if !q_packed && matches!(k, KLayout::Batched) {
                    seqs = vec![(250, 1000 + 37 * i); 2]; // dense: equal lengths
                }
                let g = groups[i % groups.len()];
                let mut c = Case::flagship_layout(seqs, i, (d, d), g, (q_packed, k));
                c.causal = causal;
                c.pack_gqa = Some(packed(i) && g > 1);
                c.sinks = i % 3 != 1;
                c.softcap = [0.0, 15.0, 30.0][(i / 2) % 3];
                c.fill = Some(true);
                cases.push(c);
                i += 1;
            }
        }
    }
    cases
}

/// The flagship's 64-row fill tile (`SpecClass::flagship_fill`) with the serving features:
/// d 96 and 128, unmasked and causal, q packed or batched, k packed, batched or paged (pages of
/// 8 to 256 keys incl. 48, shuffled, and pages two pages apart), lengths 0, 1 and up to 250
/// queries over up to 2000 keys with Sq != Sk both ways, sinks and softcap 15 / 30, GQA packed
/// and not; `Problem::fill_tile` forces the tile (at most half the SMs' worth of 128-row tiles;
/// `expect_fill_tile` checks every case takes it, on the CPU twin below and on the GPU).
fn fill_serving_cases() -> Vec<Case> {
    let layouts = [
        (true, KLayout::Packed),
        (false, KLayout::Batched),
        (true, KLayout::Paged(16)),
        (false, KLayout::Paged(128)),
        (true, KLayout::Batched),
        (true, KLayout::Paged(48)),
        (false, KLayout::Packed),
        (true, KLayout::Paged(256)),
        (false, KLayout::Paged(8)),
        (true, KLayout::PagedSpaced(16)),
    ];
    forced_tile_cases(67, &[96, 128], &layouts, &[1, 2, 4], |i| i % 4 == 3)
}

#[test]
fn flagship_fill_serving() {
    run_all_selecting(
        "flagship_fill_serving",
        &fill_serving_cases(),
        expect_fill_tile,
    );
}

/// What selection picks on the H200 for each case, checked by `check` (CPU only).
fn each_h200_selection(cases: &[Case], check: impl Fn(&Case, &fa4gen::select::Selection)) {
    let mut rng = StdRng::seed_from_u64(0);
    for c in cases {
        let s = h200_selection(c, &mut rng);
        assert_eq!(s.spec.imp, fa4gen::spec::Impl::Wgmma, "{}", c.name());
        assert_eq!(s.spec.pack_gqa, c.pack_gqa == Some(true), "{}", c.name());
        check(c, &s);
    }
}

/// CPU: every fill-serving case selects the flagship's 64x128 fill tile with its features.
#[test]
fn fill_serving_cases_select_the_fill_tile() {
    each_h200_selection(&fill_serving_cases(), expect_fill_tile);
}

/// The fill tile, unsplit, with the case's sink (on the CPU twin and on the GPU).
fn expect_fill_tile(c: &Case, s: &fa4gen::select::Selection) {
    let got = (s.spec.tile_m, s.spec.tile_n, s.num_splits, s.spec.feat.sink);
    assert_eq!(got, (64, 128, 1, c.sinks), "{}", c.name());
}

/// The flagship's one-round 128-row tile at d 64 (`SpecClass::flagship_one_round`: chunked
/// prefill whose 128-row tiles fit one per SM takes them rather than the table's 192 rows) with
/// the serving features: unmasked and causal, q packed or batched, k packed, batched or paged
/// (pages of 16, 128, 48 and 8, shuffled, and pages two pages apart), lengths 0, 1 and up to
/// 250 queries over up to 2000 keys with Sq != Sk both ways, sinks and softcap 15 / 30, GQA
/// packed and not; `Problem::fill_tile` forces the rule (`expect_one_round_tile` checks every
/// case takes 128x128 unsplit, on the CPU twin below and on the GPU).
fn one_round_serving_cases() -> Vec<Case> {
    let layouts = [
        (true, KLayout::Packed),
        (false, KLayout::Batched),
        (true, KLayout::Paged(16)),
        (false, KLayout::Paged(128)),
        (true, KLayout::Batched),
        (true, KLayout::Paged(48)),
        (false, KLayout::Paged(8)),
        (true, KLayout::PagedSpaced(16)),
    ];
    forced_tile_cases(73, &[64], &layouts, &[1, 2, 4, 8], |i| i % 5 != 3)
}

#[test]
fn flagship_one_round_serving() {
    run_all_selecting(
        "flagship_one_round_serving",
        &one_round_serving_cases(),
        expect_one_round_tile,
    );
}

/// CPU: every one-round case selects the flagship's 128x128 tile, unsplit, with its features.
#[test]
fn one_round_serving_cases_select_128_rows() {
    each_h200_selection(&one_round_serving_cases(), expect_one_round_tile);
}

/// The one-round 128x128 tile, unsplit, with the case's sink (on the CPU twin and on the GPU).
fn expect_one_round_tile(c: &Case, s: &fa4gen::select::Selection) {
    let got = (s.spec.tile_m, s.spec.tile_n, s.num_splits, s.spec.feat.sink);
    assert_eq!(got, (128, 128, 1, c.sinks), "{}", c.name());
}

/// Unsplit decode steps (`num_splits = 1`, FA4's default) over caches past the key-split
/// tile's keys (256; d 256: 128) on fewer CTAs than SMs, which selection gives the flagship (its
/// TMA ring keeps several K/V blocks in flight per CTA; the decode tile one): every flagship
/// head dim, one to four queries per sequence (and one of none), longest sequences of 354 to
/// 6.2k keys (d 256: 168, 188 and 242, and 4.2k-6.0k) with one- and no-key sequences beside
/// them, K batched (equal lengths, and per-sequence lengths through `seqused_k`), packed, or in
/// shuffled pages of 16, 128 and 16 spaced; GQA 1, 4 and 8 packed, and 4 or 8 unpacked (the
/// decode tile); causal and not, sinks, softcap, both dtypes. Pages of one key keep the decode
/// tile (at d 96 TMA could describe them, but no flagship tile loads them).
/// `expect_unsplit_decode` checks each case's kernel, on the CPU twin below and on the GPU.
fn unsplit_decode_cases() -> Vec<Case> {
    let layouts = [
        (false, KLayout::Batched),
        (true, KLayout::Packed),
        (false, KLayout::Paged(16)),
        (true, KLayout::Paged(128)),
        (false, KLayout::PagedSpaced(16)),
        (true, KLayout::Batched),
        (false, KLayout::Paged(1)),
    ];
    let dims = [(128, 128), (64, 64), (256, 256), (96, 96), (192, 128)];
    let mut cases = Vec::new();
    for (i, (q_packed, k)) in layouts.into_iter().enumerate() {
        for (j, hd) in dims.into_iter().enumerate() {
            let n = i * dims.len() + j;
            let sq = 1 + n % 4;
            // Long caches, and short ones past the key-split tile's keys (on the fill tile
            // where the head dim has one); d 256's short ones from 129 keys, at most 16 rows
            // (`tiles::unsplit_decode_after_keys`), packed, causal and not, paged and not.
            let short256 = n % 2 == 1 && hd.0 >= 256;
            let long = if short256 {
                129 + (97 * n) % 128
            } else if n % 2 == 1 {
                257 + 97 * n
            } else {
                4096 + 61 * n
            };
            let seqs = if !q_packed && k == KLayout::Batched {
                vec![(sq, long); 3] // dense: equal lengths
            } else {
                // (The sequence of no queries stays within the call's longest cache.)
                let none = (0, 300.min(long));
                vec![(sq, long), (sq, 1), (sq, long / 2 + 3), none, (sq, 0)]
            };
            let g = [1, 4, 8][n % 3];
            let mut c = Case::flagship_layout(seqs, n, hd, g, (q_packed, k));
            c.causal = n % 2 == 0 || (short256 && n % 4 == 3);
            c.sinks = n % 3 == 1;
            c.softcap = if n % 5 == 2 && !(short256 && n % 3 != 1) {
                30.0
            } else {
                0.0
            };
            if n % 7 == 3 && g > 1 && !short256 {
                c.pack_gqa = Some(false);
            }
            cases.push(c);
        }
    }
    cases
}

#[test]
fn unsplit_decode() {
    run_all_selecting(
        "unsplit_decode",
        &unsplit_decode_cases(),
        expect_unsplit_decode,
    );
}

/// CPU: the unsplit decode cases run on the flagship, unsplit, except those the flagship cannot
/// take (pages of one key; GQA unpacked), which keep the decode tile.
#[test]
fn unsplit_decode_cases_select_the_flagship() {
    let mut rng = StdRng::seed_from_u64(0);
    let (mut on_flagship, mut on_decode_tile) = (0, 0);
    for c in &unsplit_decode_cases() {
        expect_unsplit_decode(c, &h200_selection(c, &mut rng));
        if unsplit_decode_on_flagship(c) {
            on_flagship += 1;
        } else {
            on_decode_tile += 1;
        }
    }
    assert!(
        on_flagship >= 25 && on_decode_tile >= 5,
        "{on_flagship} / {on_decode_tile}"
    );
}

/// Whether an unsplit decode case goes to the flagship: all but pages of one key and unpacked
/// GQA, which keep the decode tile.
fn unsplit_decode_on_flagship(c: &Case) -> bool {
    c.k != KLayout::Paged(1) && (c.pack_gqa != Some(false) || c.heads == c.heads_kv)
}

/// The flagship or the decode tile as `unsplit_decode_on_flagship` says, unsplit either way
/// (on the CPU twin and on the GPU).
fn expect_unsplit_decode(c: &Case, s: &fa4gen::select::Selection) {
    let got = (s.spec.imp, s.decode_tile, s.num_splits, s.spec.feat.split);
    let want = if unsplit_decode_on_flagship(c) {
        (fa4gen::spec::Impl::Wgmma, false, 1, false)
    } else {
        (fa4gen::spec::Impl::Portable, true, 1, false)
    };
    assert_eq!(got, want, "{}: {}", c.name(), s.spec.stem());
}

/// Split-KV on the sm90 flagship (`Features::split` on `Impl::Wgmma`: shares of each tile's
/// visited blocks, fp32 partials, the canonical combine module): every flagship head dim
/// (64, 96, 128, 192/128, 256), unmasked and causal, splits 2, 3, 5 and 17 (shares past a
/// tile's blocks are empty) and the heuristic (0), q packed or batched, k packed, batched or
/// paged (16, 48, 128, shuffled), lengths 0, 1 and up to 1200 queries over up to 3000 keys
/// (the heuristic's over 8k+)
/// with Sq != Sk both ways, GQA packed and not, sinks (added once, in the combine) and
/// softcap, LSE. Heads and lengths keep the tiles few (so the heuristic splits); the CPU test
/// below checks that every case runs the flagship's split.
fn flagship_split_cases() -> Vec<Case> {
    let mut rng = StdRng::seed_from_u64(71);
    let layouts = [
        (false, KLayout::Batched),
        (true, KLayout::Packed),
        (true, KLayout::Paged(16)),
        (false, KLayout::Paged(128)),
        (true, KLayout::Batched),
        (true, KLayout::Paged(48)),
    ];
    let mut cases = Vec::new();
    let mut i = 0usize;
    for (d, dv) in [(64, 64), (96, 96), (128, 128), (192, 128), (256, 256)] {
        for (q_packed, k) in layouts {
            let mut seqs = vec![
                (rng.random_range(0..=300), rng.random_range(0..=3000)),
                [(0, 50), (1, 1), (200, 0), (129, 1500)][i % 4],
                (300 + 75 * (i % 13), 2000 + 37 * i),
            ];
            if !q_packed && matches!(k, KLayout::Batched) {
                seqs = vec![(113 + 97 * (i % 12), 3000 - 17 * i); 2]; // dense: equal lengths
            }
            // (The heuristic's cases on 2 heads and over 4k keys, at least
            // FLAGSHIP_SPLIT_MIN_BLOCKS blocks of any tile: few enough tiles, and long
            // enough, that it splits.)
            let num_splits = [2, 3, 5, 17, 0][i % 5];
            if num_splits == 0 {
                let last = seqs.len() - 1;
                seqs[last].1 = 4096 + 100 + 37 * i;
            }
            let g = if num_splits == 0 { 1 } else { [1, 2, 4][i % 3] };
            let mut c = Case::flagship_layout(seqs, i, (d, dv), g, (q_packed, k));
            c.causal = i.is_multiple_of(2);
            c.pack_gqa = Some(i % 4 == 3 && g > 1);
            c.num_splits = num_splits;
            c.sinks = i % 3 != 1;
            c.softcap = if i % 4 == 2 { 30.0 } else { 0.0 };
            c.combine = COMBINES[i % 3];
            cases.push(c);
            i += 1;
        }
    }
    // The schedule model's count (split_count.rs): d 64, H 16/2 packed on 192-row tiles, B 4 x
    // Sq 250 over 4133 keys: 88 tiles, which FA4's rule leaves unsplit and the model splits 3
    // ways (`flagship_split_cases_select_the_flagship_split`); causal and unmasked.
    // An engine's chunk beside them: one sequence, packed queries over pages of 16, 1000
    // queries over 4133 keys (84 tiles).
    let chunk = (vec![(1000, 4133)], (true, KLayout::Paged(16)));
    for (causal, (seqs, layout)) in [
        (true, (vec![(250, 4133); 4], (false, KLayout::Batched))),
        (false, (vec![(250, 4133); 4], (false, KLayout::Batched))),
        (true, chunk),
    ] {
        let mut c = Case::flagship_layout(seqs, i, (64, 64), 8, layout);
        c.causal = causal;
        c.pack_gqa = Some(true);
        c.num_splits = 0;
        c.sinks = causal;
        c.combine = COMBINES[i % 3];
        cases.push(c);
        i += 1;
    }
    cases
}

#[test]
fn flagship_split() {
    run_all("flagship_split", &flagship_split_cases());
}

/// CPU: every flagship-split case selects the flagship with split-KV, packed as asked.
#[test]
fn flagship_split_cases_select_the_flagship_split() {
    each_h200_selection(&flagship_split_cases(), |c, s| {
        assert!(s.spec.feat.split && s.num_splits > 1, "{}", c.name());
        if c.num_splits == 0 && c.d == 64 && c.heads == 16 {
            assert_eq!((s.num_splits, s.spec.tile_m), (3, 192), "{}", c.name());
        }
    });
}

/// Windows on the flagship's window blocks (`KernelSpec::window_blocks`: a tile's K
/// blocks laid from its first visible key, off the grid of tile_n keys): d 64 on the tiles
/// packed windows choose among and the narrow and one-block ones (192x80, 128x144, 64x144),
/// the wider head dims on theirs; windows of left 127 (gpt-oss), random below 400, or past
/// every sequence (block 0 at key 0 again), right random up to 64 or 0 with causal; dense,
/// ragged (a sequence ending inside a tile's last block: V's tail zeroed from a block start
/// off the grid) and paged at 16, 48 and 128 keys (blocks from the TMA box boundary at or
/// before that key: boxes of 16, 48 or whole blocks); lengths 1, 7, 113 and up to 1200,
/// Sq != Sk both ways; packed GQA (G 8) and unpacked (G 2), sinks. On an sm90 device every
/// case must run on the flagship.
fn window_block_cases() -> Vec<Case> {
    let mut rng = StdRng::seed_from_u64(59);
    // (head dims, tiles)
    type DimsTiles = ((usize, usize), &'static [(u32, u32)]);
    let tiles: [DimsTiles; 4] = [
        (
            (64, 64),
            &[
                (192, 80),
                (192, 64),
                (128, 144),
                (64, 144),
                (192, 128),
                (128, 128),
            ],
        ),
        ((128, 128), &[(128, 128), (128, 160), (128, 64)]),
        ((192, 128), &[(128, 112)]),
        ((256, 256), &[(128, 64)]),
    ];
    let layouts = [
        (false, KLayout::Batched),
        (true, KLayout::Packed),
        (true, KLayout::Paged(16)),
        (true, KLayout::Paged(48)),
        (true, KLayout::Paged(128)),
    ];
    let mut cases = Vec::new();
    let mut i = 0usize;
    for (dims, ts) in tiles {
        for &tile in ts {
            for (q_packed, k) in layouts {
                let seqs = if !q_packed {
                    vec![[(1000, 1031), (1100, 700), (113, 1000)][i % 3]; 2]
                } else {
                    let mut seqs = random_seqs(&mut rng, 3, 1200, false);
                    seqs.extend([(1, 1), (7, 300), (113, 113)]);
                    seqs
                };
                let packed = i.is_multiple_of(2);
                let mut c =
                    Case::flagship_layout(seqs, i, dims, if packed { 8 } else { 2 }, (q_packed, k));
                c.pack_gqa = Some(packed);
                c.tile = Some(tile);
                c.causal = i.is_multiple_of(4);
                let left = [127, rng.random_range(0..400), 2000][i % 3];
                c.window = (
                    Some(left),
                    Some(if c.causal {
                        0
                    } else {
                        rng.random_range(0..=64)
                    }),
                );
                c.sinks = i % 4 == 1;
                cases.push(c);
                i += 1;
            }
        }
    }
    cases
}

#[test]
fn flagship_window_blocks() {
    run_all("flagship_window_blocks", &window_block_cases());
}

/// The consumers' cache of boundary blocks' mask bits (`kCachedMasks` in fwd_sm90.cu), keyed
/// by a block's first key relative to its tile's diagonal: calls long enough that every CTA
/// runs several tiles, so a slot filled by one tile is read by later ones of other heads,
/// batches, Q blocks and (varlen) sequences with another Sk - Sq, and is evicted by sequences'
/// first tiles and by blocks that cross a sequence's end (computed, never cached). Causal on
/// 128x128 (unpacked; d 64, 128 and 192/128) with Sk - Sq of 0, +100, -100 (one diagonal
/// phase, two) and ragged varlen sequences, in CTA pairs too; windows on 192x80 packed
/// (gpt-oss's left 127, right 0 or 40, sinks) and 128x128 unpacked, dense and varlen.
fn mask_cache_cases() -> Vec<Case> {
    let causal = |seqs: Vec<(usize, usize)>,
                  (d, dv): (usize, usize),
                  heads: usize,
                  layout: (bool, KLayout),
                  i: usize| {
        let mut c = Case::flagship_layout(seqs, i, (d, dv), heads / 2, layout);
        c.causal = true;
        c.pack_gqa = Some(false);
        c.tile = Some((128, 128));
        c
    };
    let window = |seqs: Vec<(usize, usize)>,
                  tile: (u32, u32),
                  g: usize,
                  w: (i64, i64),
                  layout: (bool, KLayout),
                  i: usize| {
        let mut c = Case::flagship_layout(seqs, i, (64, 64), g, layout);
        c.window = (Some(w.0), Some(w.1));
        c.pack_gqa = Some(tile.0 == 192);
        c.tile = Some(tile);
        c.sinks = i.is_multiple_of(2);
        c
    };
    let dense = (false, KLayout::Batched);
    let varlen = (true, KLayout::Packed);
    let mut pairs = causal(vec![(2048, 2048); 2], (128, 128), 8, dense, 2);
    pairs.pairs = Some(true);
    vec![
        causal(vec![(2000, 2100); 2], (128, 128), 8, dense, 0),
        causal(vec![(2100, 2000); 2], (128, 128), 8, dense, 1),
        pairs,
        causal(vec![(1500, 1500); 3], (64, 64), 8, dense, 3),
        causal(vec![(1800, 1900); 2], (192, 128), 8, dense, 4),
        causal(
            vec![
                (700, 900),
                (1300, 1300),
                (513, 400),
                (1000, 1100),
                (1, 1),
                (0, 7),
            ],
            (128, 128),
            8,
            varlen,
            5,
        ),
        window(vec![(3000, 3000); 2], (192, 80), 8, (127, 0), dense, 6),
        window(vec![(2500, 2700); 2], (192, 80), 8, (127, 40), dense, 7),
        window(
            vec![(2500, 2600), (1200, 1100), (3000, 3000), (7, 300)],
            (192, 80),
            8,
            (127, 0),
            varlen,
            8,
        ),
        window(vec![(2000, 2000); 2], (128, 128), 4, (300, 40), dense, 9),
    ]
}

#[test]
fn flagship_mask_cache() {
    run_all("flagship_mask_cache", &mask_cache_cases());
}

/// Each case's H200 selection, asserted to be the flagship on the case's tile, packed as the
/// case asks (the cases name both).
fn flagship_on_case_tiles(cases: &[Case]) -> Vec<fa4gen::spec::KernelSpec> {
    let mut rng = StdRng::seed_from_u64(0);
    cases
        .iter()
        .map(|c| {
            let s = h200_selection(c, &mut rng).spec;
            assert_eq!(
                (s.imp, Some((s.tile_m, s.tile_n)), Some(s.pack_gqa)),
                (fa4gen::spec::Impl::Wgmma, c.tile, c.pack_gqa),
                "{}",
                c.name()
            );
            s
        })
        .collect()
}

/// CPU: every mask-cache case selects the flagship on its tile, unpacked or packed as asked.
#[test]
fn mask_cache_cases_select_their_tiles() {
    flagship_on_case_tiles(&mask_cache_cases());
}

/// CPU: every window-block case selects the flagship on its tile, packed as asked, with
/// window blocks.
#[test]
fn window_block_cases_select_window_blocks() {
    let cases = window_block_cases();
    for (c, s) in cases.iter().zip(flagship_on_case_tiles(&cases)) {
        assert!(s.window_blocks(), "{}", c.name());
    }
}

/// Windows on the portable kernel's window blocks (`KernelSpec::window_blocks`: a CTA's K
/// blocks laid from its first visible key), the calls sm90 sends there: decode steps (packed
/// rows of 1..8 queries: the decode tile, 64x128, or 64x64 past d 128), split-KV prefill and
/// page sizes TMA cannot box (1, 12). K/V dense, ragged and paged at 1, 12, 16, 48, 128 and 256
/// keys, tables shuffled: window blocks start inside pages, a block in one page where it fits
/// (`one_page`) and row by row where it crosses. Windows of left 127 (gpt-oss), random below
/// 1100, or past every key; right 0 (with causal too) or random up to 40; rows that see no key
/// (Sq > Sk, right 0); splits 1, 3 and the heuristic; lengths 0, 1, 7, 113 and up to 9000;
/// sinks; d 64 (G 8), 128 (G 4) and 256 (G 1 and 2).
fn portable_window_cases() -> Vec<Case> {
    let mut rng = StdRng::seed_from_u64(61);
    let layouts = [
        (false, KLayout::Batched),
        (true, KLayout::Packed),
        (true, KLayout::Paged(16)),
        (true, KLayout::Paged(128)),
        (true, KLayout::Paged(1)),
        (true, KLayout::Paged(48)),
        (true, KLayout::Paged(256)),
        (true, KLayout::Paged(12)),
    ];
    let mut cases = Vec::new();
    let mut i = 0usize;
    for (q_packed, k) in layouts {
        // Decode steps and short chunks over long caches (the decode tile), d 64 G 8 and d 128
        // G 4 by turns, the split heuristic or none.
        for j in 0..3 {
            let seqs = if q_packed {
                let mut seqs = vec![(1, 5000), (8 / (1 + j), 300), (1, 1), (3, 0), (1, 129)];
                seqs.push((rng.random_range(1..=4), rng.random_range(1..9000)));
                seqs
            } else {
                vec![(1 + 7 * j, 3000 + 511 * j); 2]
            };
            let mut c = Case::base(seqs);
            c.q_packed = q_packed;
            c.k = k;
            (c.d, c.dv, c.heads) = if i.is_multiple_of(2) {
                (64, 64, 16)
            } else {
                (128, 128, 8)
            };
            c.heads_kv = 2;
            c.num_splits = [0, 1, 3][j];
            c.causal = j == 1;
            c.window = (
                Some([127, rng.random_range(0..1100), 127][j]),
                Some(if c.causal {
                    0
                } else {
                    [0, 0, rng.random_range(0..=40)][j]
                }),
            );
            c.sinks = i % 3 != 1;
            c.dtype = DType::ALL[i % 2];
            cases.push(c);
            i += 1;
        }
        // Prefill, split in 3: Sq != Sk both ways, rows that see no key, odd lengths.
        let seqs = if q_packed {
            vec![(200, 500), (500, 200), (113, 113), (7, 1), (0, 40)]
        } else {
            vec![(257, 700); 2]
        };
        let mut c = Case::base(seqs);
        c.q_packed = q_packed;
        c.k = k;
        c.num_splits = 3;
        c.window = [
            (Some(127), Some(0)),
            (Some(0), Some(0)),
            (Some(2000), Some(17)),
        ][i % 3];
        c.sinks = i.is_multiple_of(2);
        cases.push(c);
        i += 1;
    }
    // d 256 (the decode tile 64x64), G 1 and 2.
    for (j, k) in [KLayout::Batched, KLayout::Paged(16), KLayout::Paged(1)]
        .into_iter()
        .enumerate()
    {
        let mut c = Case::base(vec![(1, 4000), (2, 777), (1, 64)]);
        c.q_packed = true;
        c.k = k;
        (c.d, c.dv, c.heads, c.heads_kv) = (256, 256, 4, 4 - 2 * (j % 2));
        c.num_splits = 0;
        c.window = (Some([1023, 127, 300][j]), Some(0));
        c.dtype = DType::ALL[j % 2];
        cases.push(c);
    }
    cases
}

#[test]
fn portable_window_blocks() {
    run_all("portable_window_blocks", &portable_window_cases());
}

/// CPU: every portable-window case selects the portable kernel with window blocks.
#[test]
fn portable_window_cases_select_window_blocks() {
    let mut rng = StdRng::seed_from_u64(0);
    let cases = portable_window_cases();
    assert!(cases.len() >= 30, "{} cases", cases.len());
    let mut wrong = Vec::new();
    for c in cases {
        let s = h200_selection(&c, &mut rng).spec;
        if (s.imp, s.window_blocks()) != (fa4gen::spec::Impl::Portable, true) {
            wrong.push(format!("{} -> {}", c.name(), s.stem()));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// The key-split decode tile (16 rows, four warps along each block's keys, merged at the end;
/// `Geometry::warps_n`), forced through `tile_mn` so that every case runs on it: head dims
/// 128, 64 and 40 on 16x128, 256, 96 and 192/128 on 16x64; decode steps and chunks whose
/// packed rows take several 16-row CTAs (Sq 7 and 40 with G up to 8), Sq > Sk and Sq < Sk,
/// keys 0, 1, 7, 60, 113, 129, 256 and 1000+ (a warp's quarter of the last block empty or
/// partial); no mask,
/// causal and windows; batched, packed and paged K (pages of 1, 16, 128); split and not;
/// sinks, softcap and both dtypes in turn. `decode_key_split_cases_select_it` checks on the
/// CPU that each case selects the key-split tile.
fn decode_key_split_cases() -> Vec<Case> {
    let mut rng = StdRng::seed_from_u64(97);
    let dims = [
        ((128, 128), 128),
        ((64, 64), 128),
        ((256, 256), 64),
        ((96, 96), 64),
        ((192, 128), 64),
        ((40, 40), 128),
    ];
    // Long caches and short ones (at most KEY_SPLIT_MAX_KEYS keys: where selection takes the
    // tile unforced).
    let seqs: [&[(usize, usize)]; 8] = [
        &[(1, 5000), (1, 1), (1, 7)],
        &[(1, 113), (1, 1200), (1, 0)],
        &[(7, 1000), (3, 130)],
        &[(1, 200), (1, 1), (2, 256)],
        &[(40, 7), (1, 64)],
        &[(16, 16), (2, 2049)],
        &[(1, 129), (2, 60), (1, 0)],
        &[(1, 33000)],
    ];
    let layouts = [
        (false, KLayout::Batched),
        (true, KLayout::Packed),
        (true, KLayout::Paged(16)),
        (false, KLayout::Paged(128)),
        (true, KLayout::Paged(1)),
    ];
    let mut cases = Vec::new();
    for i in 0..48 {
        let ((d, dv), tile_n) = dims[i % dims.len()];
        let g = [1, 4, 8][i % 3];
        let (q_packed, k) = layouts[(i / 2) % layouts.len()];
        let mut c = Case::flagship_layout(
            seqs[(i / 3) % seqs.len()].to_vec(),
            i,
            (d, dv),
            g,
            (q_packed, k),
        );
        // Unpacked G would leave one real row per 16: pack as decode does, except now and then.
        c.pack_gqa = Some(i % 7 != 3);
        c.mask_by_index(i / 6, &mut rng, 300, 20);
        c.num_splits = [0, 1, 3, 0][i % 4];
        c.sinks = i % 5 == 1;
        c.softcap = if i % 5 == 2 { 30.0 } else { 0.0 };
        c.tile = Some((16, tile_n));
        cases.push(c);
    }
    cases
}

#[test]
fn decode_key_split() {
    run_all("decode_key_split", &decode_key_split_cases());
}

/// CPU: every key-split case selects the portable kernel on a 16-row tile (four warps along
/// the keys). Unforced, the packed decode steps among them select it where a CTA sees at most
/// `KEY_SPLIT_MAX_KEYS` keys (the window's, or the longest sequence's), and the 64-row tile
/// where it sees more, except unsplit unwindowed steps past `tiles::unsplit_decode_after_keys`
/// (the 16-row tile's keys; d 256: 128), which take the flagship.
#[test]
fn decode_key_split_cases_select_it() {
    let mut rng = StdRng::seed_from_u64(0);
    let mut wrong = Vec::new();
    let (mut short, mut long) = (0, 0);
    for c in decode_key_split_cases() {
        let s = h200_selection(&c, &mut rng).spec;
        if (s.imp, s.tile_m, s.geometry().warps_n) != (fa4gen::spec::Impl::Portable, 16, 4) {
            wrong.push(format!("{} -> {}", c.name(), s.stem()));
        }
        let max_sq = c.seqs.iter().map(|s| s.0).max().unwrap_or(0);
        let max_sk = c.seqs.iter().map(|s| s.1).max().unwrap_or(0);
        let keys = match c.window {
            (Some(l), r) if !c.causal => {
                max_sk.min(l as usize + r.unwrap_or(0).max(0) as usize + max_sq)
            }
            _ => max_sk,
        };
        if c.pack_gqa == Some(true) && max_sq * c.heads / c.heads_kv <= 16 {
            let free = Case {
                tile: None,
                ..c.clone()
            };
            let s = h200_selection(&free, &mut rng).spec;
            // An unsplit step over a long cache goes to the flagship (`unsplit_decode_cases`),
            // which has no d 40.
            let rows = max_sq * c.heads / c.heads_kv;
            let flagship = c.num_splits == 1
                && c.d != 40
                && c.window == (None, None)
                && max_sk > fa4gen::tiles::unsplit_decode_after_keys(c.d as u32, c.dv as u32, rows)
                && c.k != KLayout::Paged(1);
            let ok = if flagship {
                s.imp == fa4gen::spec::Impl::Wgmma
            } else if keys <= fa4gen::tiles::KEY_SPLIT_MAX_KEYS {
                short += 1;
                (s.imp, s.tile_m) == (fa4gen::spec::Impl::Portable, 16)
            } else {
                long += 1;
                (s.imp, s.tile_m) == (fa4gen::spec::Impl::Portable, 64)
            };
            if !ok {
                wrong.push(format!(
                    "unforced {} ({keys} keys) -> {}",
                    free.name(),
                    s.stem()
                ));
            }
        }
    }
    assert!(
        short >= 3 && long >= 3,
        "{short} short and {long} long unforced decode cases"
    );
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// The stale max (`KernelSpec::wgmma_stale_max`) under the serving features that keep it:
/// packed GQA (groups of 4 and 8) and unpacked, ragged batches (packed q and k, with empty
/// and one-row sequences), pages of 16 keys (8-row groups in the K stage, which the recompute
/// addresses) and of 128, sinks; keys scaled 8x and 40x mid-sequence and at each sequence's
/// end (`scale_late_keys`), so warps take the recompute; unmasked and causal, d 128 and
/// d 192/128, both dtypes with both factors. Sequences of 1000+ keys give tiles of 8+ blocks
/// (where the stale max runs). `late_max_features_run_the_stale_max` checks on the CPU that
/// selection sends every case to a stale-max kernel.
fn late_max_feature_cases() -> Vec<Case> {
    let layouts = [
        (false, KLayout::Batched),
        (true, KLayout::Packed),
        (true, KLayout::Paged(16)),
        (false, KLayout::Paged(128)),
    ];
    let mut cases = Vec::new();
    let mut i = 0usize;
    for (d, dv) in [(128, 128), (192, 128)] {
        for causal in [false, true] {
            for (l, &(q_packed, k)) in layouts.iter().enumerate() {
                for factor in [8.0, 40.0] {
                    let seqs = if !q_packed && k == KLayout::Batched {
                        vec![(1100, 1500); 2] // dense: equal lengths
                    } else {
                        vec![(1500, 2000), (0, 40), (700, 1300), (1, 1100), (1030, 1030)]
                    };
                    let g = [4, 8][(i / 2) % 2];
                    let mut c = Case::flagship_layout(seqs, i / 2, (d, dv), g, (q_packed, k));
                    c.causal = causal;
                    c.pack_gqa = Some(l != 3 || factor == 8.0);
                    c.sinks = i % 3 == 1;
                    c.late = Some(factor);
                    cases.push(c);
                    i += 1;
                }
            }
        }
    }
    cases
}

#[test]
fn flagship_late_max_features() {
    run_all("flagship_late_max_features", &late_max_feature_cases());
}

/// On the CPU (no GPU needed): every late-max feature case selects a stale-max kernel on the
/// H200, packed where it asks to be, and the cases cover both dtypes with both factors.
#[test]
fn late_max_features_run_the_stale_max() {
    let cases = late_max_feature_cases();
    for dtype in DType::ALL {
        for factor in [8.0, 40.0] {
            assert!(
                cases
                    .iter()
                    .any(|c| c.dtype == dtype && c.late == Some(factor)),
                "{dtype:?} x factor {factor}"
            );
        }
    }
    let mut r = StdRng::seed_from_u64(0);
    for c in &cases {
        let sel = h200_selection(c, &mut r);
        assert!(
            sel.spec.wgmma_stale_max(),
            "{}: {}",
            c.name(),
            sel.spec.stem()
        );
        assert_eq!(sel.spec.pack_gqa, c.pack_gqa == Some(true), "{}", c.name());
    }
}

/// Varlen calls in CTA pairs (session 16): a pair is Q blocks 2k and 2k + 1 of one sequence,
/// and where a sequence has an odd number of Q blocks its last block's partner is a ghost that
/// loads half of each K/V block and computes nothing. Ragged batches with odd and even block
/// counts (1, 3, 5 and 8 blocks, an empty sequence, a one-row one, Sq != Sk both ways), packed
/// q and k and batched with seqused, unmasked and causal, every paired head dim, both dtypes,
/// GQA, sinks on some; keys scaled late on some (the stale max's recompute in a pair). Outputs
/// poisoned. `varlen_pairs_select_pairs` checks on the CPU that every case runs paired.
fn varlen_pair_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let mut i = 0usize;
    for (d, dv) in [(128, 128), (192, 128), (256, 256)] {
        for causal in [false, true] {
            for (q_packed, k) in [(true, KLayout::Packed), (false, KLayout::Batched)] {
                let seqs = if i.is_multiple_of(2) {
                    vec![
                        (1000, 1200),
                        (300, 1500),
                        (129, 129),
                        (0, 50),
                        (1, 700),
                        (640, 600),
                    ]
                } else {
                    vec![(333, 2100), (1024, 1000), (700, 1), (64, 64)]
                };
                let mut c = Case::flagship_layout(seqs, i, (d, dv), 1 + i % 3, (q_packed, k));
                c.causal = causal;
                c.pack_gqa = Some(false);
                c.pairs = Some(true);
                c.sinks = i % 3 == 2;
                c.late = (i % 4 == 1).then_some(40.0);
                cases.push(c);
                i += 1;
            }
        }
    }
    // After a review (not yet run on the GPU when added): runs of 16 (16 Q blocks), ghosts
    // of a sequence with Sq >> Sk (600 queries, 1 key) and with no keys (300, 0), and enough
    // heads that CTAs run several tiles, ghosts among them.
    for (j, (d, dv)) in [(128, 128), (256, 256)].into_iter().enumerate() {
        for (q_packed, k) in [(true, KLayout::Packed), (false, KLayout::Batched)] {
            let seqs = vec![(2048, 2300), (600, 1), (300, 0), (1100, 900), (129, 3000)];
            let mut c = Case::flagship_layout(seqs, i, (d, dv), 4, (q_packed, k));
            c.heads_kv = 6; // 24 heads
            c.heads = 24;
            c.causal = j == 0 || q_packed;
            c.pack_gqa = Some(false);
            c.pairs = Some(true);
            cases.push(c);
            i += 1;
        }
    }
    cases
}

#[test]
fn flagship_varlen_pairs() {
    run_all("flagship_varlen_pairs", &varlen_pair_cases());
}

/// On the CPU: every varlen pair case selects the flagship in CTA pairs on the H200.
#[test]
fn varlen_pairs_select_pairs() {
    let mut r = StdRng::seed_from_u64(0);
    for c in &varlen_pair_cases() {
        let sel = h200_selection(c, &mut r);
        assert!(
            sel.pairs && sel.spec.feat.varlen,
            "{}: {}",
            c.name(),
            sel.spec.stem()
        );
    }
}

/// Mixed batches as an engine's step calls them (a prefill chunk beside decodes, chunks of
/// several lengths, decodes over keys of many lengths, empty sequences), dealt by the device's
/// list of units (`Selection::varlen_schedule`) and, every fourth case, by the padded schedule:
/// packed or batched queries, packed, batched or paged K/V, causal, windows and none, sinks,
/// split-KV, GQA packed and not, and more sequences than the schedule kernel's warps.
fn varlen_schedule_cases() -> Vec<Case> {
    let mut rng = StdRng::seed_from_u64(35);
    let mut cases = Vec::new();
    let batches: Vec<Vec<(usize, usize)>> = vec![
        // A chunk beside decodes (keys past the chunk's on some).
        std::iter::once((300, 1400))
            .chain((0..9).map(|i| (1, 40 + 157 * i)))
            .collect(),
        // Chunks of several lengths, one empty, one without keys.
        vec![
            (129, 700),
            (0, 300),
            (513, 513),
            (64, 2000),
            (7, 0),
            (200, 1111),
        ],
        // Decodes over keys of many lengths beside a short chunk (a paged engine's step; with
        // decodes alone a decode tile, not the flagship, serves the call).
        std::iter::once((97, 2500))
            .chain((0..39).map(|i| (1, 1 + (i * 977) % 3000)))
            .collect(),
        // Many short sequences: more than 32 warps' worth.
        (0..70)
            .map(|i| (1 + (i * 37) % 90, 1 + (i * 53) % 400))
            .collect(),
    ];
    let layouts = [
        (true, KLayout::Packed),
        (true, KLayout::Paged(16)),
        (false, KLayout::Batched),
        (true, KLayout::Paged(128)),
    ];
    let mut i = 0usize;
    for seqs in &batches {
        for (d, dv, g) in [(64, 64, 4), (128, 128, 2), (192, 128, 1)] {
            let layout = layouts[i % layouts.len()];
            let mut c = Case::flagship_layout(seqs.clone(), i, (d, dv), g, layout);
            c.mask_by_index(i, &mut rng, 300, 40);
            c.sinks = i % 4 == 1;
            c.pack_gqa = (g > 1).then_some(i.is_multiple_of(2));
            // (The flagship's split takes no window.)
            c.num_splits = if i % 4 != 2 && i % 4 != 1 && c.window == (None, None) {
                3
            } else {
                1
            };
            c.schedule = (i % 4 == 2).then_some(false);
            cases.push(c);
            i += 1;
        }
    }
    cases
}

#[test]
fn flagship_varlen_schedule() {
    run_all("flagship_varlen_schedule", &varlen_schedule_cases());
}

/// On the CPU: the varlen schedule cases run the flagship, by the list unless forced off.
#[test]
fn varlen_schedule_cases_select_the_list() {
    let mut r = StdRng::seed_from_u64(0);
    for c in &varlen_schedule_cases() {
        let sel = h200_selection(c, &mut r);
        assert!(
            sel.spec.imp == fa4gen::spec::Impl::Wgmma
                && sel.spec.feat.varlen
                && sel.varlen_schedule == c.schedule.is_none()
                && (sel.schedule_units > 0) == c.schedule.is_none()
                && !sel.pairs,
            "{}: {} listed={} units={}",
            c.name(),
            sel.spec.stem(),
            sel.varlen_schedule,
            sel.schedule_units
        );
    }
}

/// Causal varlen batches on Q blocks laid from each sequence's end
/// (`KernelSpec::wgmma_q_from_end`): lengths that leave every spare-row count (pads of 0, 64
/// and 128 rows on 192-row tiles, 0 and 64 on 128-row ones), so a sequence's first tile holds
/// its predecessor's rows, never stored, their consumers idle (the oracle checks every
/// sequence, the outputs poisoned); zero-, one- and seven-row sequences, Sq > Sk and Sq < Sk. Tiles forced:
/// 192x128 (d 64, unpacked and packed G 8), 128x160 (d 128, split 3), 128x80 (d 256, O stored
/// from registers), 128x112 (d 192/128, in CTA pairs: a ghost past an odd count), and 128x128
/// (d 128 packed G 2, d 64 G 4), whose varlen kernels keep the plain grid; q packed and batched
/// (seqused_q), K packed, batched and paged; the device's list and the padded schedule; sinks
/// on some.
fn varlen_from_end_cases() -> Vec<Case> {
    let seqs = vec![
        (1, 300),
        (65, 65),
        (130, 500),
        (64, 64),
        (0, 10),
        (193, 193),
        (250, 1000),
        (7, 7),
        (450, 450),
        (129, 1),
        (383, 900),
    ];
    let layouts = [
        (true, KLayout::Packed),
        (false, KLayout::Batched),
        (true, KLayout::Paged(16)),
    ];
    // ((d, dv), G, packed, tile)
    let configs = [
        ((64, 64), 1, false, (192, 128)),
        ((64, 64), 8, true, (192, 128)),
        ((128, 128), 2, true, (128, 128)),
        ((128, 128), 1, false, (128, 160)),
        ((256, 256), 1, false, (128, 80)),
        ((192, 128), 1, false, (128, 112)),
        ((64, 64), 4, false, (128, 128)),
    ];
    let mut cases = Vec::new();
    for (i, (dims, g, pack, tile)) in configs.into_iter().enumerate() {
        let mut c = Case::flagship_layout(seqs.clone(), i, dims, g, layouts[i % layouts.len()]);
        c.causal = true;
        c.pack_gqa = Some(pack);
        c.tile = Some(tile);
        c.sinks = i % 3 == 1;
        c.num_splits = if i == 3 { 3 } else { 1 };
        c.pairs = Some(i == 5);
        c.schedule = (i % 2 == 1).then_some(false);
        cases.push(c);
    }
    cases
}

#[test]
fn flagship_varlen_from_end() {
    run_all("flagship_varlen_from_end", &varlen_from_end_cases());
}

/// CPU: every varlen from-end case runs the flagship on its tile, with its Q blocks from the
/// end unless tile_m is a multiple of tile_n (128x128: the plain grid, beside the others).
#[test]
fn varlen_from_end_cases_select_it() {
    let cases = varlen_from_end_cases();
    for (c, s) in cases.iter().zip(flagship_on_case_tiles(&cases)) {
        assert!(
            s.feat.varlen && s.wgmma_q_from_end() == (s.tile_m % s.tile_n != 0),
            "{}",
            c.name()
        );
    }
}

/// Split varlen batches whose sequences each take their own split count
/// (`Selection::sequence_splits`): decode steps of mixed context lengths (the default rule: the
/// heuristic's count the most a sequence takes, its own dealt on the device), with sequences
/// without keys, one key, one block and 100k keys, at 1, 4, 16 and 64 waves of units (64: every
/// count at the call's, units left over); and ragged prefill batches with the rule forced on an
/// explicit count (7, 17, 60) under windows, at 0 waves (one split each) too, through both
/// combine kernels. K
/// packed, batched (seqused_k) and in pages of 16, 64 and 128; GQA packed and not; sinks,
/// softcap, fp16.
fn sequence_split_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let decode_steps: Vec<Vec<(usize, usize)>> = vec![
        // One long sequence beside short ones: it takes many splits, they one.
        std::iter::once((1, 40_000))
            .chain((0..15).map(|i| (1, 300 + 61 * i)))
            .collect(),
        // Lengths spread 1..32k, with an empty sequence and one of no keys.
        (0..24)
            .map(|i| match i {
                5 => (0, 900),
                9 => (1, 0),
                _ => (1, 1 + (i * 1361) % 32_000),
            })
            .collect(),
        // Equal lengths: every sequence the same count.
        vec![(1, 9000); 6],
        // A 100k-key sequence beside one-key and one-block ones.
        vec![(1, 100_000), (1, 1), (1, 128), (1, 129), (1, 4096)],
        // A batch that fills the CTA slots alone: every sequence one split, written by its one
        // CTA (no partials) and skipped by the combines.
        vec![(1, 3000); 300],
    ];
    let layouts = [
        KLayout::Paged(16),
        KLayout::Packed,
        KLayout::Batched,
        KLayout::Paged(64),
    ];
    for (i, seqs) in decode_steps.iter().enumerate() {
        for (j, (d, g)) in [(128usize, 4usize), (64, 8)].into_iter().enumerate() {
            let n = 2 * i + j;
            let mut c = Case::base(seqs.clone());
            (c.d, c.dv) = (d, d);
            c.heads = 2 * g;
            c.heads_kv = 2;
            c.q_packed = true;
            c.k = layouts[n % layouts.len()];
            c.causal = n % 3 != 2;
            c.sinks = n % 2 == 1;
            c.num_splits = 0;
            c.dtype = DType::ALL[n % 2];
            c.combine = COMBINES[n % 3];
            c.shares = [4, 1, 16, 64][(i + j) % 4];
            cases.push(c.clone());
            // FA4's one count for the same batch (for the batch that fills the slots alone that
            // count is 1, an unsplit call, which the other suites cover).
            if n % 4 == 0 && seqs.len() < 300 {
                c.sequence_splits = Some(false);
                cases.push(c);
            }
        }
    }
    // Ragged prefill batches, the rule forced on an explicit count.
    let ragged: Vec<Vec<(usize, usize)>> = vec![
        vec![(37, 5000), (3, 200), (0, 70), (16, 12_000), (1, 1), (60, 0)],
        vec![(113, 20_000), (7, 7), (64, 1000)],
    ];
    for (i, seqs) in ragged.iter().enumerate() {
        for (k, ns) in [7, 17, 60].into_iter().enumerate() {
            let mut c = Case::base(seqs.clone());
            c.heads = 8;
            c.heads_kv = 2;
            c.q_packed = i == 0;
            c.k = [KLayout::Packed, KLayout::Paged(128), KLayout::Batched][k];
            // (Windows: the flagship splits the other masks itself.)
            c.window = (
                Some(300 + 700 * (k + i) as i64),
                Some(if k == 1 { 50 } else { 0 }),
            );
            if i == 1 {
                (c.d, c.dv) = (64, 64);
            }
            c.softcap = if k == 2 { 30.0 } else { 0.0 };
            c.pack_gqa = Some(k != 0);
            c.num_splits = ns;
            c.sequence_splits = Some(true);
            c.shares = [4, 0, 64][(i + 2 * k) % 3];
            c.combine = COMBINES[(i + k) % 3];
            cases.push(c);
        }
    }
    cases
}

#[test]
fn sequence_splits() {
    run_all("sequence_splits", &sequence_split_cases());
}

/// On the CPU: the sequence split cases run the portable split kernel with counts per sequence,
/// except those forced off.
#[test]
fn sequence_split_cases_select_them() {
    let mut r = StdRng::seed_from_u64(0);
    for c in &sequence_split_cases() {
        let sel = h200_selection(c, &mut r);
        assert!(
            sel.spec.imp == fa4gen::spec::Impl::Portable
                && sel.spec.feat.split
                && sel.num_splits > 1
                && sel.sequence_splits == (c.sequence_splits != Some(false)),
            "{}: {} splits={} per sequence={}",
            c.name(),
            sel.spec.stem(),
            sel.num_splits,
            sel.sequence_splits
        );
    }
}

/// #5: ragged batches, pages, windows, sinks, softcap and GQA, alone and together.
#[test]
fn serving_features() {
    let mut rng = StdRng::seed_from_u64(11);
    let mut cases = Vec::new();
    // GQA ratios 1/2/3/6/8, packed and unpacked, with sinks and a window.
    for (i, g) in [1usize, 2, 3, 6, 8].into_iter().enumerate() {
        for pack in [Some(false), Some(true)] {
            let mut c = Case::base(vec![(113, 239), (64, 64)]);
            c.d = 64;
            c.dv = 64;
            c.heads = 2 * g;
            c.heads_kv = 2;
            c.pack_gqa = pack;
            c.sinks = i % 2 == 0;
            c.causal = i % 3 == 1;
            if i >= 3 {
                c.window = (Some(rng.random_range(0..128)), Some(0));
            }
            cases.push(c);
        }
    }
    // varlen: random lengths incl. 0 and 1, a single long sequence, every mix of layouts.
    for (i, (q_packed, k)) in [
        (true, KLayout::Packed),
        (true, KLayout::Batched),
        (false, KLayout::Packed),
        (false, KLayout::Batched),
    ]
    .into_iter()
    .enumerate()
    {
        let mut seqs = random_seqs(&mut rng, 14, 600, false);
        seqs.extend([(0, 9), (1, 1), (5, 0), (1, 700)]);
        for causal in [false, true] {
            let mut c = Case::base(seqs.clone());
            c.q_packed = q_packed;
            c.k = k;
            c.causal = causal;
            c.dtype = if i % 2 == 0 { DType::Bf16 } else { DType::Fp16 };
            cases.push(c);
        }
        let mut c = Case::base(vec![(3000, 3000)]);
        c.q_packed = q_packed;
        c.k = k;
        c.causal = i % 2 == 0;
        cases.push(c);
    }
    // Paged K/V: page sizes 1, 16, 48 (not a tile multiple), 64 and 128 (one page per tile),
    // shuffled tables, prefill with a prefix cache (Sq < Sk) and chunked prefill.
    for (i, ps) in [1usize, 16, 48, 64, 128].into_iter().enumerate() {
        for (q_packed, causal) in [(true, true), (false, false), (true, false)] {
            let seqs = if q_packed {
                vec![(7, 300), (128, 1000), (0, 17), (333, 333), (1, 1)]
            } else {
                vec![(100, 517), (100, 64), (100, 3)]
            };
            let mut c = Case::base(seqs);
            c.q_packed = q_packed;
            c.k = KLayout::Paged(ps);
            c.causal = causal;
            if i % 2 == 1 {
                c.d = 64;
                c.dv = 64;
                c.heads = 8;
            }
            cases.push(c);
        }
    }
    // Windows: random left/right, one-sided, with and without causal; Sq != Sk both ways.
    for j in 0..8 {
        let (sq, sk) = [(200, 500), (500, 200), (257, 257), (1, 900)][j % 4];
        let mut c = Case::base(vec![(sq, sk), (sq / 2 + 1, sk)]);
        c.window = match j % 4 {
            0 => (
                Some(rng.random_range(0..200)),
                Some(rng.random_range(0..200)),
            ),
            1 => (Some(rng.random_range(0..64)), None),
            2 => (None, Some(rng.random_range(0..64))),
            _ => (Some(rng.random_range(0..300)), Some(0)),
        };
        c.causal = j >= 4;
        c.k = if j % 2 == 0 {
            KLayout::Batched
        } else {
            KLayout::Paged(16)
        };
        c.sinks = j % 3 == 0;
        cases.push(c);
    }
    // Sinks with causal and windows, incl. rows that see no key (LSE = the sink).
    for (j, window) in [(None, None), (Some(32), Some(0)), (Some(0), Some(0))]
        .into_iter()
        .enumerate()
    {
        let mut c = Case::base(vec![(300, 100), (64, 0), (129, 129)]);
        c.sinks = true;
        c.causal = j == 0;
        c.window = window;
        c.d = 64;
        c.dv = 64;
        c.heads = 16;
        c.heads_kv = 2;
        cases.push(c);
    }
    // Softcap 15 and 30 on every head dim class, both dtypes.
    for (j, (d, dv)) in [(64, 64), (128, 128), (192, 128), (256, 256)]
        .into_iter()
        .enumerate()
    {
        for (k, cap) in [15.0f32, 30.0].into_iter().enumerate() {
            let mut c = Case::base(vec![(190, 333), (77, 20)]);
            c.d = d;
            c.dv = dv;
            c.softcap = cap;
            c.dtype = if (j + k) % 2 == 0 {
                DType::Bf16
            } else {
                DType::Fp16
            };
            c.causal = k == 1;
            c.sinks = j == 0;
            c.q_packed = j % 2 == 1;
            c.k = if j == 2 {
                KLayout::Paged(128)
            } else {
                KLayout::Packed
            };
            cases.push(c);
        }
    }
    run_all("serving_features", &cases);
}

/// #6: split-KV with num_splits {1, 2, 3, 5, 17, 55, 133} and the heuristic (0), Sq in
/// {1, 3, 16, 64}, Sk in {1, 127, 4096, 32k, 128k}, paged and not, GQA 1/4/8, with LSE,
/// causal, windows and sinks (the sink counted once, in the combine).
#[test]
fn split_kv() {
    let mut cases = Vec::new();
    let splits = [1, 2, 3, 5, 17, 55, 133, 0];
    let sqs = [1usize, 3, 16, 64];
    let sks = [1usize, 127, 4096, 32768, 131072];
    let mut n = 0;
    for &ns in &splits {
        for j in 0..4 {
            let sq = sqs[(n + j) % sqs.len()];
            let sk = sks[(n * 3 + j) % sks.len()];
            let g = [1, 4, 8][(n + j) % 3];
            let mut c = Case::base(vec![(sq, sk)]);
            if sk <= 4096 {
                c.seqs.push((sq, (sk / 2).max(1)));
            }
            c.heads = g * 2;
            c.heads_kv = 2;
            c.num_splits = ns;
            c.k = if j % 2 == 1 {
                KLayout::Paged(128)
            } else {
                KLayout::Batched
            };
            c.causal = j == 2;
            c.sinks = j == 3 || ns == 17;
            if j == 3 {
                c.window = (Some(1000), Some(0));
            }
            if n % 3 == 2 {
                c.d = 64;
                c.dv = 64;
            }
            c.combine = COMBINES[(n / 3) % 3];
            cases.push(c);
            n += 1;
        }
    }
    // The combine at its limit: 256 and 255 non-empty splits (64-key blocks), and every small
    // count, reduced against the f64 reference.
    for ns in [256, 255, 2, 3, 4, 6, 7, 8] {
        let mut c = Case::base(vec![(2, 256 * 64 + 11)]);
        c.heads = 8;
        c.num_splits = ns;
        c.sinks = ns % 2 == 1;
        for combine in [CombineKernel::PerRow, CombineKernel::Rows] {
            c.combine = combine;
            cases.push(c.clone());
        }
    }
    // Head dims whose float4 chunks leave combine threads idle (96, 40) or take two per
    // split (256), and d 192 with dv 128: decode steps and a split prefill, dense and paged.
    for (i, (d, dv)) in [(96, 96), (40, 40), (256, 256), (192, 128)]
        .into_iter()
        .enumerate()
    {
        for (sq, ns) in [(1, 0), (37, 17)] {
            let mut c = Case::base(vec![(sq, 3000 + 111 * i)]);
            (c.d, c.dv) = (d, dv);
            c.heads = 8;
            c.heads_kv = 2;
            c.num_splits = ns;
            c.causal = sq > 1;
            c.sinks = i % 2 == 1;
            if i >= 2 {
                c.k = KLayout::Paged(16);
            }
            c.combine = COMBINES[(i + sq) % 3];
            cases.push(c);
        }
    }
    // A ragged decode batch: packed q of 1..16 rows per sequence, paged K of mixed lengths.
    let mut c = Case::base(vec![(1, 5000), (16, 300), (3, 0), (1, 1), (8, 20000)]);
    c.q_packed = true;
    c.k = KLayout::Paged(64);
    c.num_splits = 0;
    c.heads = 32;
    c.heads_kv = 8;
    cases.push(c.clone());
    c.num_splits = 7;
    c.dtype = DType::Fp16;
    c.softcap = 30.0;
    cases.push(c.clone());
    c.combine = CombineKernel::Rows;
    cases.push(c);
    run_all("split_kv", &cases);
}

/// #6: the combine kernels alone (FA4's `flash_attn_combine` layout) against an f64 reduction,
/// for every split count 1..=256 through each (a CTA per row, a group of lanes per row): random fp32 partials, some splits empty (LSE -inf), sinks
/// on every third count, head dims 128, 96, 256, 40, 64, 512 and 320 in turn (the last two in
/// column parts), fp32 output (FA4's default
/// for fp32 partials) on counts 1 and 2 mod 4, else bf16 / fp16; out within the rounding of the
/// f64 result itself (half an ulp: 2^-8 relative for bf16, 2^-11 for fp16, 2^-24 for fp32) +
/// 1e-4 for fp32 accumulation over 256 terms, LSE to 1e-5 relative. Outputs poisoned.
#[test]
fn combine_alone() {
    use cudarc::driver::{DevicePtr, DevicePtrMut};
    let Some((_ctx, stream, fa)) = setup() else {
        return;
    };
    let seed = run_seed();
    println!(
        "combine_alone: splits 1..=256, dv 128 / 96 / 256 / 40 / 64 / 512 / 320, fp32 / 16-bit out, seed {seed}"
    );
    let mut rng = StdRng::seed_from_u64(seed);
    let (b, sq, h) = (2usize, 3usize, 3usize);
    let mut failures = Vec::new();
    let mut worst = 0f64;
    // Every count through both kernels: one CTA per row, a group of lanes per row.
    let runs = (1..=256usize).flat_map(|s| [(s, CombineKernel::PerRow), (s, CombineKernel::Rows)]);
    for (splits, kernel) in runs {
        // Head dims whose float4 chunks divide the combine's 128 threads (128: 4 threads per
        // chunk over the splits; 256: 2) and ones that leave threads idle (96: 24 chunks of 5
        // threads, 8 idle; 40: 10 chunks of 12, 8 idle); 64 and 40 put two rows in a warp of
        // the rows kernel, whose second CTA per sequence (9 rows, 8 a CTA) holds one live row
        // beside a group past the end in one warp (its shuffles must not diverge).
        // 512 (MLA decode's) and 320 are rows wider than any module's: reduced as two column
        // parts, of 256 and of 160, a launch each (`runtime::column_parts`).
        let dv = [128usize, 96, 256, 40, 64, 512, 320][(splits / 3) % 7];
        let dtype = if splits % 2 == 0 {
            DType::Bf16
        } else {
            DType::Fp16
        };
        let sinks = splits % 3 == 0;
        // fp32 output (FA4's default for fp32 partials) on a bf16 and an fp16 module in turn.
        let output = if matches!(splits % 4, 1 | 2) {
            runtime::CombineOutput::F32
        } else {
            runtime::CombineOutput::Problem
        };
        let f32_out = output == runtime::CombineOutput::F32;
        let rows = b * sq * h;
        let o_part: Vec<f32> = (0..splits * rows * dv)
            .map(|_| rng.sample::<f32, _>(StandardNormal))
            .collect();
        // (splits, B, H, Sq); a quarter of the entries -inf (a split that saw no key).
        let lse_part: Vec<f32> = (0..splits * rows)
            .map(|_| {
                if rng.random_range(0..4) == 0 {
                    f32::NEG_INFINITY
                } else {
                    3.0 * rng.sample::<f32, _>(StandardNormal)
                }
            })
            .collect();
        let sink: Vec<f32> = (0..h)
            .map(|_| 2.0 * rng.sample::<f32, _>(StandardNormal))
            .collect();
        let mut p = Problem::new(dtype, b, sq, 1, h, h, dv, dv);
        p.return_lse = true;
        p.sinks = sinks;
        fa.set_combine_kernel(kernel);
        let run = || -> Result<(Vec<f64>, Vec<f32>), String> {
            let e = |e: cudarc::driver::DriverError| e.to_string();
            let d_o = stream.clone_htod(&o_part).map_err(e)?;
            let d_l = stream.clone_htod(&lse_part).map_err(e)?;
            let d_s = stream.clone_htod(&sink).map_err(e)?;
            // Poisoned output in either type (an fp32 run's buffer as 32-bit NaNs).
            let mut out16 = stream
                .clone_htod(&vec![
                    reference::nan_bits(dtype);
                    if f32_out { 0 } else { rows * dv }
                ])
                .map_err(e)?;
            let mut out32 = stream
                .clone_htod(&vec![f32::NAN; if f32_out { rows * dv } else { 0 }])
                .map_err(e)?;
            let mut lse = stream.clone_htod(&vec![f32::NAN; rows]).map_err(e)?;
            {
                let (po, _g1) = d_o.device_ptr(&stream);
                let (pl, _g2) = d_l.device_ptr(&stream);
                let (ps, _g3) = d_s.device_ptr(&stream);
                let (pout16, _g4) = out16.device_ptr_mut(&stream);
                let (pout32, _g6) = out32.device_ptr_mut(&stream);
                let pout = if f32_out { pout32 } else { pout16 };
                let (plse, _g5) = lse.device_ptr_mut(&stream);
                let ptrs = runtime::RawPtrs {
                    o: pout,
                    lse: plse,
                    sinks: if sinks { ps } else { 0 },
                    ..Default::default()
                };
                // SAFETY: every buffer above holds the extents of the problem and the layouts.
                unsafe {
                    fa.combine_raw(stream.cu_stream(), &p, splits as u32, po, pl, ptrs, output)
                }
                .map_err(|e| e.to_string())?;
            }
            let out = if f32_out {
                let v = stream.clone_dtoh(&out32).map_err(e)?;
                v.into_iter().map(f64::from).collect()
            } else {
                let v = stream.clone_dtoh(&out16).map_err(e)?;
                reference::decode(dtype, &v)
                    .into_iter()
                    .map(f64::from)
                    .collect()
            };
            Ok((out, stream.clone_dtoh(&lse).map_err(e)?))
        };
        let (out, lse) = match run() {
            Ok(r) => r,
            Err(e) => {
                failures.push(format!("{kernel:?} splits {splits} dv {dv}: {e}"));
                continue;
            }
        };
        for bi in 0..b {
            for hi in 0..h {
                for i in 0..sq {
                    let lse_at = |s: usize| lse_part[((s * b + bi) * h + hi) * sq + i] as f64;
                    let mut m = (0..splits).map(lse_at).fold(f64::NEG_INFINITY, f64::max);
                    if sinks {
                        m = m.max(sink[hi] as f64);
                    }
                    let mut total = (0..splits).map(|s| (lse_at(s) - m).exp()).sum::<f64>();
                    if sinks {
                        total += (sink[hi] as f64 - m).exp();
                    }
                    let ref_lse = if m == f64::NEG_INFINITY {
                        f64::NEG_INFINITY
                    } else {
                        m + total.ln()
                    };
                    let got_lse = lse[(bi * h + hi) * sq + i] as f64;
                    let lse_ok = if ref_lse == f64::NEG_INFINITY {
                        got_lse == f64::NEG_INFINITY
                    } else {
                        (got_lse - ref_lse).abs() <= 1e-5 * ref_lse.abs().max(1.0)
                    };
                    if !lse_ok {
                        failures.push(format!(
                            "{kernel:?} splits {splits} dv {dv}: lse {got_lse} vs {ref_lse}"
                        ));
                    }
                    for c in 0..dv {
                        let r: f64 = if ref_lse == f64::NEG_INFINITY {
                            0.0
                        } else {
                            (0..splits)
                                .map(|s| {
                                    (lse_at(s) - ref_lse).exp()
                                        * o_part[(((s * b + bi) * sq + i) * h + hi) * dv + c] as f64
                                })
                                .sum()
                        };
                        let got = out[((bi * sq + i) * h + hi) * dv + c];
                        // Half an ulp of the output (the rounding) plus fp32 noise.
                        let half_ulp = if f32_out {
                            2f64.powi(-24)
                        } else if dtype == DType::Bf16 {
                            2f64.powi(-8)
                        } else {
                            2f64.powi(-11)
                        };
                        let tol = half_ulp * r.abs() + 1e-4;
                        let err = (got - r).abs();
                        worst = worst.max(err / tol);
                        if err.is_nan() || err > tol {
                            failures.push(format!(
                                "{kernel:?} splits {splits} dv {dv}: out[{bi},{i},{hi},{c}] = {got}, want {r}"
                            ));
                        }
                    }
                }
            }
        }
    }
    println!(
        "combine_alone: 256 split counts x 2 kernels, {} failures; worst err/tolerance {worst:.3}",
        failures.len()
    );
    for f in failures.iter().take(20) {
        println!("FAIL {f}");
    }
    assert!(failures.is_empty());
}

/// Calls captured into a CUDA graph on a stream the handle holds no workspace for yet (an
/// allocation would break the capture): split-KV refuses with a typed error that names the
/// capture, and, once an eager call has made the workspace, its captured graph replays the
/// eager result bit for bit; a causal call whose host order (`Selection::lpt_rounds`) the
/// handle has not made yet runs the plain snake under capture, and once an eager call has made
/// it, a captured call uses it: both graphs replay the eager result bit for bit (each tile's
/// arithmetic does not depend on the CTA that runs it); the split tail runs without one, its
/// graph replaying the whole-tile result bit for bit. (Each stream gets its own copy of the
/// inputs.)
#[test]
fn workspace_under_capture() {
    let Some((ctx, stream0, fa)) = setup() else {
        return;
    };
    use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    // cudarc's per-buffer events would make a captured call wait on work recorded before the
    // capture (an isolation error): off for this test, each buffer used on one stream only.
    struct Tracking(Arc<CudaContext>);
    impl Drop for Tracking {
        fn drop(&mut self) {
            // SAFETY: back to cudarc's default; the test's streams are synchronized.
            unsafe { self.0.enable_event_tracking() };
        }
    }
    // SAFETY: every buffer below is used on the stream it was made on, and read back after a
    // synchronize.
    unsafe { ctx.disable_event_tracking() };
    let _tracking = Tracking(ctx.clone());
    let mode = CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
    let flags = CUgraphInstantiate_flags(0);
    let mut rng = StdRng::seed_from_u64(run_seed());
    let mut host_inputs = |p: &Problem| {
        let [qn, kn, vn, on, _] = p.extents().expect("extents");
        let x = [qn, kn, vn].map(|n| randn(&mut rng, p.dtype, n));
        (x, on)
    };
    let upload = |s: &Arc<CudaStream>, x: &[Vec<f32>; 3]| {
        x.clone().map(|x| up16(s, DType::Bf16, &x).expect("upload"))
    };
    let down = |s: &Arc<CudaStream>, o: &CudaSlice<u16>| -> Vec<u16> {
        s.synchronize().expect("sync");
        s.clone_dtoh(o).expect("download")
    };
    // One call captured into a graph on `s`, the graph launched, its output read back.
    let replay = |s: &Arc<CudaStream>, p: &Problem, qkv: &[CudaSlice<u16>; 3], what: &str| {
        let [_, _, _, on, _] = p.extents().expect("extents");
        let mut o = s.alloc_zeros::<u16>(on).expect("alloc");
        s.synchronize().expect("sync");
        s.begin_capture(mode).expect("begin capture");
        fa.forward(s, p, &qkv[0], &qkv[1], &qkv[2], &mut o, None)
            .expect(what);
        let graph = s.end_capture(flags).expect("end capture").expect("a graph");
        graph.launch().expect("graph launch");
        down(s, &o)
    };

    // Split-KV: a decode step over 32k keys, which the heuristic (num_splits 0) splits.
    let mut p = Problem::new(DType::Bf16, 2, 1, 32768, 8, 2, 128, 128);
    p.num_splits = 0;
    assert!(
        fa.plan(&p).expect("plan").1.num_splits > 1,
        "the decode step must split"
    );
    let (x, on) = host_inputs(&p);
    let [q, k, v] = upload(&stream0, &x);
    let mut eager = stream0.alloc_zeros::<u16>(on).expect("alloc");
    fa.forward(&stream0, &p, &q, &k, &v, &mut eager, None)
        .expect("eager split-KV call");
    let eager = down(&stream0, &eager);
    let s = ctx.new_stream().expect("stream");
    let qkv = upload(&s, &x);
    let [q, k, v] = &qkv;
    let mut o = s.alloc_zeros::<u16>(on).expect("alloc");
    s.synchronize().expect("sync");
    s.begin_capture(mode).expect("begin capture");
    let refused = fa.forward(&s, &p, q, k, v, &mut o, None);
    let _ = s.end_capture(flags);
    match refused {
        Err(e) => assert!(
            e.to_string().contains("being captured"),
            "unexpected error: {e}"
        ),
        Ok(()) => panic!("split-KV ran under capture without a workspace"),
    }
    fa.forward(&s, &p, q, k, v, &mut o, None)
        .expect("eager call on the new stream");
    assert_eq!(down(&s, &o), eager, "split-KV on a second stream");
    assert_eq!(
        replay(&s, &p, &qkv, "captured split-KV call"),
        eager,
        "split-KV replayed from a graph"
    );
    println!("workspace_under_capture: split-KV refused under capture, then replayed bit for bit");

    // The host's order of causal runs (forced, so made whatever the model says): none made
    // under capture (the snake), then made eagerly.
    let mut p = Problem::new(DType::Bf16, 1, 8192, 8192, 16, 16, 128, 128);
    p.causal = true;
    p.lpt_rounds = Some(true);
    let (_, sel) = fa.plan(&p).expect("plan");
    if fa.device().major == 9 && sel.lpt_rounds {
        let made = fa.unit_orders_made();
        let (x, on) = host_inputs(&p);
        let s = ctx.new_stream().expect("stream");
        let qkv = upload(&s, &x);
        let snake = replay(&s, &p, &qkv, "captured causal call before its order exists");
        assert_eq!(fa.unit_orders_made(), made, "an order made under capture");
        let [q0, k0, v0] = upload(&stream0, &x);
        let mut eager = stream0.alloc_zeros::<u16>(on).expect("alloc");
        fa.forward(&stream0, &p, &q0, &k0, &v0, &mut eager, None)
            .expect("eager causal call (makes the order)");
        let eager = down(&stream0, &eager);
        assert_eq!(
            fa.unit_orders_made(),
            made + 1,
            "the eager call made the order"
        );
        assert_eq!(snake, eager, "the snake's graph against the ordered call");
        assert_eq!(
            replay(&s, &p, &qkv, "captured causal call with its order"),
            eager,
            "the ordered call replayed from a graph"
        );
        println!(
            "workspace_under_capture: a causal call ran the snake under capture, then its host order, bit for bit"
        );
    } else {
        println!(
            "workspace_under_capture: no host order on this device ({}); that part skipped",
            sel.spec
        );
    }

    // The split tail: on a fresh stream under capture it runs whole tiles.
    let p = Problem::new(DType::Bf16, 1, 16384, 16384, 16, 16, 128, 128);
    let (_, sel) = fa.plan(&p).expect("plan");
    if fa.device().major != 9 || !sel.split_tail {
        println!(
            "workspace_under_capture: no split tail on this device ({}); that half skipped",
            sel.spec
        );
        return;
    }
    let (x, on) = host_inputs(&p);
    let whole_p = Problem {
        split_tail: Some(false),
        ..p.clone()
    };
    let [q, k, v] = upload(&stream0, &x);
    let mut whole = stream0.alloc_zeros::<u16>(on).expect("alloc");
    fa.forward(&stream0, &whole_p, &q, &k, &v, &mut whole, None)
        .expect("eager whole-tile call");
    let whole = down(&stream0, &whole);
    let s = ctx.new_stream().expect("stream");
    let qkv = upload(&s, &x);
    assert_eq!(
        replay(&s, &p, &qkv, "captured split-tail call"),
        whole,
        "the captured call ran whole tiles"
    );
    println!("workspace_under_capture: the split tail ran whole tiles under capture, bit for bit");
}
