//! CPU reference attention and FA4's correctness oracle (DESIGN.md §7).
//!
//! - [`attention_f64`]: attention in f64 from the 16-bit inputs (FA4's `upcast=True` reference);
//! - [`attention_lowp`]: the same in the input precision with the scale applied to K, rounding
//!   where torch's bf16/fp16 path rounds (FA4's `upcast=False, reorder_ops=True`), which
//!   measures how much error 16-bit arithmetic itself brings;
//! - [`check_oracle`]: pass iff `max|out - ref| <= 2 * max|pt - ref| + 2 * ulp-ish(0.3)`.
//!
//! Tensors are contiguous: q `(B, Sq, H, D)`, k `(B, Sk, Hkv, D)`, v `(B, Sk, Hkv, Dv)`,
//! out `(B, Sq, H, Dv)`, lse `(B, H, Sq)`. Values are f32 holding 16-bit-representable numbers.

use crate::runtime::resolve_mask;
use crate::spec::{DType, Mask};
use rayon::prelude::*;

/// Shapes and options of a reference computation.
#[derive(Clone, Debug)]
pub struct RefProblem {
    pub batch: usize,
    pub seqlen_q: usize,
    pub seqlen_k: usize,
    pub heads: usize,
    pub heads_kv: usize,
    pub d: usize,
    pub dv: usize,
    pub scale: f64,
    pub causal: bool,
    pub window: (Option<i64>, Option<i64>),
    /// Softcap c (0: off): scores `c * tanh(scale * qk / c)`.
    pub softcap: f64,
    /// Per-head sink logits (H), in the denominator only.
    pub sinks: Option<Vec<f64>>,
}

impl RefProblem {
    /// Whether key j is visible to query i (FA4's bottom-right rule after canonicalisation).
    pub fn visible(&self, i: usize, j: usize) -> bool {
        let (mask, wl, wr) = resolve_mask(self.causal, self.window);
        let diag = i as i64 + self.seqlen_k as i64 - self.seqlen_q as i64;
        let j = j as i64;
        match mask {
            Mask::None => true,
            Mask::Causal => j <= diag,
            Mask::Local => wl.is_none_or(|l| j >= diag - l) && wr.is_none_or(|r| j <= diag + r),
        }
    }
}

/// Round an f32 to the nearest value of `dtype` (round-to-nearest-even), back as f32.
pub fn round_to(dtype: DType, x: f32) -> f32 {
    match dtype {
        DType::Bf16 => half::bf16::from_f32(x).to_f32(),
        DType::Fp16 => half::f16::from_f32(x).to_f32(),
    }
}

/// 16-bit encodings of f32 values (rounded), for upload.
pub fn encode(dtype: DType, xs: &[f32]) -> Vec<u16> {
    match dtype {
        DType::Bf16 => xs
            .iter()
            .map(|&x| half::bf16::from_f32(x).to_bits())
            .collect(),
        DType::Fp16 => xs
            .iter()
            .map(|&x| half::f16::from_f32(x).to_bits())
            .collect(),
    }
}

/// f32 values of 16-bit encodings.
pub fn decode(dtype: DType, bits: &[u16]) -> Vec<f32> {
    match dtype {
        DType::Bf16 => bits
            .iter()
            .map(|&b| half::bf16::from_bits(b).to_f32())
            .collect(),
        DType::Fp16 => bits
            .iter()
            .map(|&b| half::f16::from_bits(b).to_f32())
            .collect(),
    }
}

/// The NaN of a dtype, for poisoning outputs.
pub fn nan_bits(dtype: DType) -> u16 {
    match dtype {
        DType::Bf16 => half::bf16::NAN.to_bits(),
        DType::Fp16 => half::f16::NAN.to_bits(),
    }
}

/// Every query index, for the `queries` argument of the reference functions.
pub fn all_queries(p: &RefProblem) -> Vec<usize> {
    (0..p.seqlen_q).collect()
}

/// (b, h, query-slot, query) for each output row of a reference computation.
fn row_list(p: &RefProblem, queries: &[usize]) -> Vec<(usize, usize, usize, usize)> {
    let mut rows = Vec::with_capacity(p.batch * p.heads * queries.len());
    for b in 0..p.batch {
        for h in 0..p.heads {
            for (slot, &i) in queries.iter().enumerate() {
                rows.push((b, h, slot, i));
            }
        }
    }
    rows
}

/// Gather the rows `queries` of a `(B, Sq, H, Dv)` output into `(B, queries.len(), H, Dv)`,
/// the layout the reference functions return.
pub fn gather_queries(p: &RefProblem, out: &[f32], queries: &[usize]) -> Vec<f32> {
    let mut g = Vec::with_capacity(p.batch * queries.len() * p.heads * p.dv);
    for b in 0..p.batch {
        for &i in queries {
            g.extend_from_slice(&out[(b * p.seqlen_q + i) * p.heads * p.dv..][..p.heads * p.dv]);
        }
    }
    g
}

/// Gather the rows `queries` of a `(B, H, Sq)` LSE into `(B, H, queries.len())`.
pub fn gather_lse(p: &RefProblem, lse: &[f32], queries: &[usize]) -> Vec<f32> {
    let mut g = Vec::with_capacity(p.batch * p.heads * queries.len());
    for bh in 0..p.batch * p.heads {
        g.extend(queries.iter().map(|&i| lse[bh * p.seqlen_q + i]));
    }
    g
}

/// Attention in f64 for the query rows `queries` (all of them: [`all_queries`]):
/// `(out (B, Q, H, Dv), lse (B, H, Q))` with Q = queries.len(). Rows that see no key give 0
/// and LSE -inf. Checking a sample of rows keeps the oracle exact on long sequences at a
/// fraction of the CPU time.
pub fn attention_f64(
    p: &RefProblem,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    queries: &[usize],
) -> (Vec<f64>, Vec<f64>) {
    let (out, lse, _) = attention_f64_magnitudes(p, q, k, v, queries);
    (out, lse)
}

/// [`attention_f64`], and per LSE entry the magnitude of the row's largest score's terms:
/// max over visible keys of scale · Σ |q_i k_i|, what [`lse_bound`] scales f32 accumulation's
/// error by (0 where the row sees no key).
pub fn attention_f64_magnitudes(
    p: &RefProblem,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    queries: &[usize],
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let g = p.heads / p.heads_kv;
    let nq = queries.len();
    let rows = row_list(p, queries);
    let results: Vec<(Vec<f64>, f64, f64)> = rows
        .par_iter()
        .map(|&(b, h, _, i)| {
            let hk = h / g;
            let qrow = &q[((b * p.seqlen_q + i) * p.heads + h) * p.d..][..p.d];
            let mut s: Vec<f64> = vec![f64::NEG_INFINITY; p.seqlen_k];
            let mut magnitude = 0f64;
            for (j, sj) in s.iter_mut().enumerate() {
                if p.visible(i, j) {
                    let krow = &k[((b * p.seqlen_k + j) * p.heads_kv + hk) * p.d..][..p.d];
                    let (dot, abs) =
                        qrow.iter()
                            .zip(krow)
                            .fold((0f64, 0f64), |(d, a), (&x, &y)| {
                                let t = x as f64 * y as f64;
                                (d + t, a + t.abs())
                            });
                    magnitude = magnitude.max(abs * p.scale);
                    *sj = dot * p.scale;
                    if p.softcap > 0.0 {
                        *sj = p.softcap * (*sj / p.softcap).tanh();
                    }
                }
            }
            let sink = p.sinks.as_ref().map(|s| s[h]);
            let m = s
                .iter()
                .cloned()
                .chain(sink)
                .fold(f64::NEG_INFINITY, f64::max);
            let mut o = vec![0f64; p.dv];
            if m == f64::NEG_INFINITY {
                return (o, f64::NEG_INFINITY, 0.0);
            }
            let mut l = sink.map_or(0.0, |s| (s - m).exp());
            for (j, &sj) in s.iter().enumerate() {
                if sj == f64::NEG_INFINITY {
                    continue;
                }
                let w = (sj - m).exp();
                l += w;
                let vrow = &v[((b * p.seqlen_k + j) * p.heads_kv + hk) * p.dv..][..p.dv];
                for (od, &vd) in o.iter_mut().zip(vrow) {
                    *od += w * vd as f64;
                }
            }
            for od in &mut o {
                *od /= l;
            }
            (o, m + l.ln(), magnitude)
        })
        .collect();
    let mut out = vec![0f64; p.batch * nq * p.heads * p.dv];
    let mut lse = vec![0f64; p.batch * p.heads * nq];
    let mut magnitudes = vec![0f64; p.batch * p.heads * nq];
    for (&(b, h, slot, _), (o, l, mag)) in rows.iter().zip(results) {
        out[((b * nq + slot) * p.heads + h) * p.dv..][..p.dv].copy_from_slice(&o);
        lse[(b * p.heads + h) * nq + slot] = l;
        magnitudes[(b * p.heads + h) * nq + slot] = mag;
    }
    (out, lse, magnitudes)
}

/// Attention as torch computes it in a 16-bit dtype with the scale folded into K: K·scale,
/// the scores, the probabilities and the output each rounded to `dtype` (the dot products
/// accumulate in f32, as tensor cores do). Rows and layout as [`attention_f64`].
pub fn attention_lowp(
    p: &RefProblem,
    dtype: DType,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    queries: &[usize],
) -> Vec<f32> {
    let g = p.heads / p.heads_kv;
    let nq = queries.len();
    let ks: Vec<f32> = k
        .iter()
        .map(|&x| round_to(dtype, x * p.scale as f32))
        .collect();
    let rows = row_list(p, queries);
    let results: Vec<Vec<f32>> = rows
        .par_iter()
        .map(|&(b, h, _, i)| {
            let hk = h / g;
            let qrow = &q[((b * p.seqlen_q + i) * p.heads + h) * p.d..][..p.d];
            let mut s = vec![f32::NEG_INFINITY; p.seqlen_k];
            for (j, sj) in s.iter_mut().enumerate() {
                if p.visible(i, j) {
                    let krow = &ks[((b * p.seqlen_k + j) * p.heads_kv + hk) * p.d..][..p.d];
                    let dot: f32 = qrow.iter().zip(krow).map(|(&a, &c)| a * c).sum();
                    *sj = round_to(dtype, dot);
                    if p.softcap > 0.0 {
                        let c = p.softcap as f32;
                        *sj = round_to(dtype, c * round_to(dtype, (*sj / c).tanh()));
                    }
                }
            }
            let sink = p.sinks.as_ref().map(|s| s[h] as f32);
            let m = s
                .iter()
                .cloned()
                .chain(sink)
                .fold(f32::NEG_INFINITY, f32::max);
            let mut o = vec![0f32; p.dv];
            if m == f32::NEG_INFINITY {
                return o; // FA4's reference zeroes rows with nothing visible
            }
            let l: f32 =
                s.iter().map(|&x| (x - m).exp()).sum::<f32>() + sink.map_or(0.0, |s| (s - m).exp());
            for (j, &sj) in s.iter().enumerate() {
                let pj = round_to(dtype, (sj - m).exp() / l);
                if pj == 0.0 {
                    continue;
                }
                let vrow = &v[((b * p.seqlen_k + j) * p.heads_kv + hk) * p.dv..][..p.dv];
                for (od, &vd) in o.iter_mut().zip(vrow) {
                    *od += pj * vd;
                }
            }
            o.iter().map(|&x| round_to(dtype, x)).collect()
        })
        .collect();
    let mut out = vec![0f32; p.batch * nq * p.heads * p.dv];
    for (&(b, h, slot, _), o) in rows.iter().zip(results) {
        out[((b * nq + slot) * p.heads + h) * p.dv..][..p.dv].copy_from_slice(&o);
    }
    out
}

/// The oracle's verdict on one output.
#[derive(Clone, Copy, Debug)]
pub struct OracleReport {
    /// max |out - ref|
    pub err: f64,
    /// max |pt - ref|: the error 16-bit arithmetic itself makes
    pub pt_err: f64,
    /// the bound err must not exceed
    pub bound: f64,
    pub non_finite: usize,
}

impl OracleReport {
    pub fn pass(&self) -> bool {
        self.non_finite == 0 && self.err <= self.bound
    }
}

/// FA4's rule: `max|out - ref| <= rtol * max|pt - ref| + atol`, with ref rounded to `dtype`,
/// rtol 2 (3 with softcap) and atol twice the largest rounding error of `ref + 0.3 - 0.3` in
/// `dtype` (about 2 ulp at 0.3).
pub fn check_oracle(
    dtype: DType,
    out: &[f32],
    reference: &[f64],
    pt: &[f32],
    softcap: bool,
) -> OracleReport {
    let rtol = if softcap { 3.0 } else { 2.0 };
    let mut err = 0f64;
    let mut pt_err = 0f64;
    let mut atol = 0f64;
    let mut non_finite = 0;
    for ((&o, &r), &t) in out.iter().zip(reference).zip(pt) {
        let r16 = round_to(dtype, r as f32);
        if !o.is_finite() {
            non_finite += 1;
            continue;
        }
        err = err.max((o as f64 - r16 as f64).abs());
        pt_err = pt_err.max((t as f64 - r16 as f64).abs());
        let shifted = round_to(dtype, round_to(dtype, r16 + 0.3) - 0.3);
        atol = atol.max((shifted as f64 - r16 as f64).abs());
    }
    let bound = rtol * pt_err + 2.0 * atol;
    OracleReport {
        err,
        pt_err,
        bound,
        non_finite,
    }
}

/// The error `check_lse` allows an LSE: `rel` of max(|ref|, 1), plus what f32 accumulation
/// can lose in the row's scores: a score's d products are exact in f32 and its d sums each
/// round, towards zero at worst (as tensor cores may), by up to 2^-23 of the terms' magnitude
/// `magnitude` (scale · Σ |q_i k_i|, [`attention_f64_magnitudes`]); the LSE, a weighted mean of
/// the scores' errors, moves by no more. The second term matters only where a score cancels
/// large terms: a key scaled by 40 gave a one-key row's LSE of 0.0396 from terms of 10^2-10^3,
/// which f32 sums computed 4e-4 to 1e-3 off.
pub fn lse_bound(reference: f64, magnitude: f64, d: usize, rel: f64) -> f64 {
    rel * reference.abs().max(1.0) + magnitude * d as f64 * f64::powi(2.0, -23)
}

/// An LSE's error over its [`lse_bound`] (1 at the bound).
pub fn lse_error(lse: f32, reference: f64, magnitude: f64, d: usize, rel: f64) -> f64 {
    (lse as f64 - reference).abs() / lse_bound(reference, magnitude, d, rel)
}

/// Compare an LSE with the f64 reference: -inf exactly where the reference is -inf, else within
/// [`lse_bound`] (scores of head dim `d`). Returns the worst error over bound, or an error text.
pub fn check_lse(
    lse: &[f32],
    reference: &[f64],
    magnitudes: &[f64],
    d: usize,
    rel: f64,
) -> Result<f64, String> {
    let mut worst = 0f64;
    for (i, ((&l, &r), &mag)) in lse.iter().zip(reference).zip(magnitudes).enumerate() {
        if r == f64::NEG_INFINITY {
            if l != f32::NEG_INFINITY {
                return Err(format!("lse[{i}] = {l}, want -inf"));
            }
            continue;
        }
        if !l.is_finite() {
            return Err(format!("lse[{i}] = {l}, want {r}"));
        }
        let e = lse_error(l, r, mag, d, rel);
        worst = worst.max(e);
        if e > 1.0 {
            return Err(format!(
                "lse[{i}] = {l}, want {r} (error {:.2e}, {e:.2} of its bound)",
                (l as f64 - r).abs()
            ));
        }
    }
    Ok(worst)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prob(sq: usize, sk: usize, causal: bool, window: (Option<i64>, Option<i64>)) -> RefProblem {
        RefProblem {
            batch: 1,
            seqlen_q: sq,
            seqlen_k: sk,
            heads: 1,
            heads_kv: 1,
            d: 2,
            dv: 2,
            scale: 1.0,
            causal,
            window,
            softcap: 0.0,
            sinks: None,
        }
    }

    #[test]
    fn bottom_right_causal() {
        // Sq = 2, Sk = 4: query 0 sees keys 0..=2, query 1 sees 0..=3.
        let p = prob(2, 4, true, (None, None));
        assert!(p.visible(0, 2) && !p.visible(0, 3) && p.visible(1, 3));
        // Sq = 4, Sk = 2: queries 0 and 1 see nothing.
        let p = prob(4, 2, true, (None, None));
        assert!(!p.visible(0, 0) && !p.visible(1, 0) && p.visible(2, 0) && !p.visible(2, 1));
    }

    #[test]
    fn window_rule() {
        let p = prob(4, 4, false, (Some(1), Some(0)));
        assert!(p.visible(2, 1) && p.visible(2, 2) && !p.visible(2, 0) && !p.visible(2, 3));
        let p = prob(4, 4, false, (None, Some(-1)));
        assert!(p.visible(2, 0) && p.visible(2, 1) && !p.visible(2, 2));
    }

    #[test]
    fn sink_joins_the_denominator_and_the_lse() {
        // Scores 0 and ln 3, sink logit ln 4: weights 1/8 and 3/8 (the sink takes 4/8), and
        // LSE = ln(1 + 3 + 4). A row that sees no key gives 0 and LSE = the sink.
        let p = RefProblem {
            d: 1,
            dv: 1,
            sinks: Some(vec![4f64.ln()]),
            ..prob(1, 2, false, (None, None))
        };
        let (q, k, v) = ([1.0f32], [0.0f32, 3f32.ln()], [4.0f32, 8.0]);
        let (o, lse) = attention_f64(&p, &q, &k, &v, &all_queries(&p));
        assert!((o[0] - (4.0 / 8.0 + 8.0 * 3.0 / 8.0)).abs() < 1e-6, "{o:?}");
        assert!((lse[0] - 8f64.ln()).abs() < 1e-6, "{lse:?}");
        let lowp = attention_lowp(&p, DType::Bf16, &q, &k, &v, &[0]);
        assert!((lowp[0] - 3.5).abs() < 0.05, "{lowp:?}");
        let empty = RefProblem {
            window: (Some(-5), None),
            ..p.clone()
        };
        let (o, lse) = attention_f64(&empty, &q, &k, &v, &[0]);
        assert_eq!(o[0], 0.0);
        assert!((lse[0] - 4f64.ln()).abs() < 1e-12, "{lse:?}");
    }

    #[test]
    fn softcap_bounds_the_scores() {
        // Scores 100 and 0 capped at c = 2: c*tanh(50) ~ 2 and 0, weights e^2/(e^2+1), 1/(e^2+1).
        let p = RefProblem {
            d: 1,
            dv: 1,
            softcap: 2.0,
            ..prob(1, 2, false, (None, None))
        };
        let (q, k, v) = ([10.0f32], [10.0f32, 0.0], [1.0f32, 0.0]);
        let (o, lse) = attention_f64(&p, &q, &k, &v, &[0]);
        let e2 = 2f64.exp();
        assert!((o[0] - e2 / (e2 + 1.0)).abs() < 1e-9, "{o:?}");
        assert!((lse[0] - (e2 + 1.0).ln()).abs() < 1e-9, "{lse:?}");
        let lowp = attention_lowp(&p, DType::Bf16, &q, &k, &v, &[0]);
        assert!((lowp[0] as f64 - e2 / (e2 + 1.0)).abs() < 0.01, "{lowp:?}");
    }

    #[test]
    fn f64_reference_on_a_hand_example() {
        // One query, two keys with scores 0 and ln 3 (scale 1): weights 1/4 and 3/4.
        let p = RefProblem {
            d: 1,
            dv: 1,
            ..prob(1, 2, false, (None, None))
        };
        let q = [1.0f32];
        let k = [0.0f32, 3f32.ln()];
        let v = [4.0f32, 8.0];
        let (o, lse) = attention_f64(&p, &q, &k, &v, &all_queries(&p));
        assert!((o[0] - 7.0).abs() < 1e-6, "{o:?}");
        assert!((lse[0] - 4f64.ln()).abs() < 1e-6, "{lse:?}");
    }

    #[test]
    fn empty_rows_are_zero_with_neg_inf_lse() {
        let p = prob(3, 1, true, (None, None));
        let q = [1.0f32; 6];
        let k = [1.0f32; 2];
        let v = [2.0f32; 2];
        let (o, lse) = attention_f64(&p, &q, &k, &v, &all_queries(&p));
        assert_eq!(&o[..4], &[0.0; 4]);
        assert_eq!(lse[0], f64::NEG_INFINITY);
        assert!((o[4] - 2.0).abs() < 1e-12 && lse[2].is_finite());
        assert_eq!(
            &attention_lowp(&p, DType::Bf16, &q, &k, &v, &[0, 1, 2])[..4],
            &[0.0; 4]
        );
    }

    #[test]
    fn lowp_matches_f64_to_16_bit_precision() {
        let p = RefProblem {
            batch: 1,
            seqlen_q: 5,
            seqlen_k: 9,
            heads: 2,
            heads_kv: 1,
            d: 8,
            dv: 8,
            scale: 0.35,
            causal: true,
            window: (None, None),
            softcap: 0.0,
            sinks: None,
        };
        let fill = |n: usize, seed: u32| -> Vec<f32> {
            (0..n)
                .map(|i| {
                    round_to(
                        DType::Bf16,
                        (((i as u32).wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 500.0 - 1.0,
                    )
                })
                .collect()
        };
        let q = fill(5 * 2 * 8, 1);
        let k = fill(9 * 8, 2);
        let v = fill(9 * 8, 3);
        let all = all_queries(&p);
        let (r, _) = attention_f64(&p, &q, &k, &v, &all);
        let pt = attention_lowp(&p, DType::Bf16, &q, &k, &v, &all);
        // A subset of rows is the same rows of the full result.
        let (r_sub, lse_sub) = attention_f64(&p, &q, &k, &v, &[4, 1]);
        let (_, lse_all) = attention_f64(&p, &q, &k, &v, &all);
        let r32: Vec<f32> = r.iter().map(|&x| x as f32).collect();
        let want: Vec<f64> = gather_queries(&p, &r32, &[4, 1])
            .iter()
            .map(|&x| x as f64)
            .collect();
        assert!(r_sub.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-6));
        let lse32: Vec<f32> = lse_all.iter().map(|&x| x as f32).collect();
        let want_lse = gather_lse(&p, &lse32, &[4, 1]);
        assert!(
            lse_sub
                .iter()
                .zip(&want_lse)
                .all(|(a, &b)| (a - b as f64).abs() < 1e-5)
        );
        let rep = check_oracle(DType::Bf16, &pt, &r, &pt, false);
        assert!(rep.err < 0.02, "{rep:?}");
        // An output off by 0.1 fails; the reference itself passes.
        let bad: Vec<f32> = pt.iter().map(|x| x + 0.1).collect();
        assert!(!check_oracle(DType::Bf16, &bad, &r, &pt, false).pass());
        let r32: Vec<f32> = r.iter().map(|&x| round_to(DType::Bf16, x as f32)).collect();
        assert!(check_oracle(DType::Bf16, &r32, &r, &pt, false).pass());
        let mut nan = r32.clone();
        nan[3] = f32::NAN;
        assert!(!check_oracle(DType::Bf16, &nan, &r, &pt, false).pass());
    }

    #[test]
    fn lse_check() {
        let r = [f64::NEG_INFINITY, 2.0];
        let small = [0.0, 10.0];
        assert!(check_lse(&[f32::NEG_INFINITY, 2.0005], &r, &small, 128, 1e-3).is_ok());
        assert!(check_lse(&[0.0, 2.0], &r, &small, 128, 1e-3).is_err());
        assert!(check_lse(&[f32::NEG_INFINITY, 2.1], &r, &small, 128, 1e-3).is_err());
        assert!(check_lse(&[f32::NEG_INFINITY, f32::NAN], &r, &small, 128, 1e-3).is_err());
        // A score cancelling terms of ~10^3 (128 of them): f32 sums may be 2e-3 off, and the
        // bound (1e-3 + 128 * 2^-23 * 3000 = 4.7e-2) lets them; a row of ordinary terms
        // (1e-3 + 1.5e-4) does not.
        let one_key = [0.0396];
        assert!(check_lse(&[0.0416], &one_key, &[3000.0], 128, 1e-3).is_ok());
        assert!(check_lse(&[0.0416], &one_key, &[10.0], 128, 1e-3).is_err());
    }

    #[test]
    fn magnitudes_are_the_largest_scores_terms() {
        // One query (1, -2) against keys (3, 1) and (-1, -1): |terms| sum to 5 and 3.
        let p = RefProblem {
            scale: 0.5,
            ..prob(1, 2, false, (None, None))
        };
        let (q, k, v) = (vec![1.0, -2.0], vec![3.0, 1.0, -1.0, -1.0], vec![0.0; 4]);
        let (_, lse, mag) = attention_f64_magnitudes(&p, &q, &k, &v, &[0]);
        assert!((mag[0] - 2.5).abs() < 1e-12, "{mag:?}");
        let want = (0.5f64 * 1.0).exp() + (0.5f64 * 1.0).exp();
        assert!((lse[0] - want.ln()).abs() < 1e-12, "{lse:?}");
    }
}
