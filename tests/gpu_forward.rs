//! GPU tests: the portable kernels against the DESIGN.md oracle on the device.
//!
//! Skipped, with the reason printed, where no CUDA driver or device is found (CI). On a GPU
//! host they read kernels from `$FA4GEN_KERNELS/<arch>/` (default: this checkout's
//! `generated/`), which must hold cubins: run `cargo xtask gen --arch <arch>` first, or use
//! `scripts/gpu-check.sh`, which stages everything for a host without cargo.
//!
//! Every case draws fresh random normal inputs (the run seed is printed), poisons out and LSE
//! with NaN, runs twice and requires bit-identical results (a difference is a race), then checks
//! out against the f64 reference by FA4's rule and the LSE to 1e-3 relative.

use cudarc::driver::{CudaContext, CudaStream};
use fa4gen::DType;
use fa4gen::reference::{self, RefProblem};
use fa4gen::runtime::{self, FlashAttention, Problem, Strides};
use rand::rngs::StdRng;
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

/// The device and library, or None (with the reason printed) where there is no GPU.
fn setup() -> Option<(Arc<CudaContext>, Arc<CudaStream>, FlashAttention)> {
    let ctx = match runtime::context(0) {
        Ok(c) => c,
        Err(e) if e.is_no_gpu() => {
            // Straight to stderr: the test harness captures print!/eprint!, not this.
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
    let stream = ctx.default_stream();
    Some((ctx, stream, fa))
}

/// `setup`, plus the jit where the tests are built with it: for kernels no plan ships.
fn setup_jit() -> Option<(Arc<CudaContext>, Arc<CudaStream>, FlashAttention)> {
    let (ctx, stream, fa) = setup()?;
    #[cfg(feature = "jit")]
    let fa = fa.with_jit(fa4gen::runtime::jit::Jit::new(
        fa4gen::runtime::jit::Jit::default_dir(),
    ));
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

#[derive(Clone, Debug)]
struct Case {
    dtype: DType,
    d: usize,
    dv: usize,
    batch: usize,
    sq: usize,
    sk: usize,
    heads: usize,
    heads_kv: usize,
    causal: bool,
    window: (Option<i64>, Option<i64>),
    lse: bool,
    pack_gqa: Option<bool>,
    /// Row-stride padding (elements) on q, k, v and out: non-contiguous layouts.
    pad: usize,
    /// A tile instead of the table's (FA4's `tile_mn`).
    tile_mn: Option<(u32, u32)>,
    /// `Problem::cta_pairs` (`None`: selection's default).
    pairs: Option<bool>,
    /// Keys `first .. first + n` of every (batch, KV head) multiplied by `factor`: their
    /// scores jump far above the rest, where the visiting order meets them late.
    late_keys: Option<(usize, usize, f32)>,
    /// `Problem::split_tail` (`None`: selection's default).
    split_tail: Option<bool>,
    /// `Problem::m_major_runs` (`None`: selection's default).
    m_major: Option<bool>,
    /// `Problem::lpt_rounds` (`None`: selection's default).
    lpt: Option<bool>,
    /// Run the case in every order of its causal runs on the same inputs, bit-compared
    /// (`in_every_run_order`); `m_major` and `lpt` are then ignored.
    every_order: bool,
    /// `Problem::fill_tile` (`None`: selection's default). Cases that count CTA pairs or
    /// place the stale max's slow path keep the 128-row tiles their shapes were made for.
    fill: Option<bool>,
}

impl Case {
    fn name(&self) -> String {
        format!(
            "{:?} d{}x{} B{} Sq{} Sk{} H{}/{} causal={} window={:?} lse={} pack={:?} pad={} tile={:?} pairs={:?} late={:?} split_tail={:?} m_major={:?} lpt={:?} every_order={} fill={:?}",
            self.dtype,
            self.d,
            self.dv,
            self.batch,
            self.sq,
            self.sk,
            self.heads,
            self.heads_kv,
            self.causal,
            self.window,
            self.lse,
            self.pack_gqa,
            self.pad,
            self.tile_mn,
            self.pairs,
            self.late_keys,
            self.split_tail,
            self.m_major,
            self.lpt,
            self.every_order,
            self.fill
        )
    }
}

struct Outcome {
    err_over_bound: f64,
    /// The worst LSE error over its bound (`reference::lse_bound`).
    lse_err_bound: f64,
    /// The implementation selection ran the case on (empty for degenerate calls).
    kernel: &'static str,
    /// Selection launched it in CTA pairs (`KernelSpec::wgmma_pairs`).
    paired: bool,
    /// Selection split its schedule's tail (`Selection::split_tail`).
    split_tail: bool,
    /// Selection dealt the causal runs Q block major (`Selection::m_major_runs`), in the
    /// case's order or one of them (`Case::every_order`).
    m_major: bool,
    /// Selection asked for the host's order of the causal runs (`Selection::lpt_rounds`): the
    /// runtime passes it wherever forced, as `in_every_run_order` forces it, and by default
    /// only where it pays (`schedule::Plan::pays`); in the case's order or one of them.
    lpt: bool,
}

fn randn(rng: &mut StdRng, dtype: DType, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| reference::round_to(dtype, rng.sample::<f32, _>(StandardNormal)))
        .collect()
}

/// Pad the row stride of a contiguous (B, S, H, D) tensor by `pad` elements per row.
fn with_row_pad(
    x: &[f32],
    b: usize,
    s: usize,
    h: usize,
    d: usize,
    pad: usize,
) -> (Vec<f32>, Strides) {
    let row = h * d + pad;
    let mut out = vec![0f32; b * s * row];
    for bi in 0..b {
        for si in 0..s {
            out[(bi * s + si) * row..][..h * d]
                .copy_from_slice(&x[(bi * s + si) * h * d..][..h * d]);
        }
    }
    (
        out,
        Strides {
            batch: (s * row) as i64,
            row: row as i64,
            head: d as i64,
        },
    )
}

/// The case's call, its tensors contiguous (`run_case` then sets the padded strides).
fn problem(c: &Case) -> Problem {
    let mut p = Problem::new(c.dtype, c.batch, c.sq, c.sk, c.heads, c.heads_kv, c.d, c.dv);
    p.causal = c.causal;
    p.window = c.window;
    p.return_lse = c.lse;
    p.pack_gqa = c.pack_gqa;
    p.tile_mn = c.tile_mn;
    p.cta_pairs = c.pairs;
    p.fill_tile = c.fill;
    p.split_tail = c.split_tail;
    p.m_major_runs = c.m_major;
    p.lpt_rounds = c.lpt;
    p
}

fn run_case(
    stream: &Arc<CudaStream>,
    fa: &FlashAttention,
    c: &Case,
    rng: &mut StdRng,
) -> Result<Outcome, String> {
    let (b, sq, sk, h, hkv) = (c.batch, c.sq, c.sk, c.heads, c.heads_kv);
    let q = randn(rng, c.dtype, b * sq * h * c.d);
    let mut k = randn(rng, c.dtype, b * sk * hkv * c.d);
    if let Some((first, n, factor)) = c.late_keys {
        for key in (0..b).flat_map(|bi| (first..(first + n).min(sk)).map(move |j| bi * sk + j)) {
            for x in &mut k[key * hkv * c.d..][..hkv * c.d] {
                *x = reference::round_to(c.dtype, *x * factor);
            }
        }
    }
    let v = randn(rng, c.dtype, b * sk * hkv * c.dv);
    let mut p = problem(c);
    let (qp, qs) = with_row_pad(&q, b, sq, h, c.d, c.pad);
    let (kp, ks) = with_row_pad(&k, b, sk, hkv, c.d, c.pad);
    let (vp, vs) = with_row_pad(&v, b, sk, hkv, c.dv, c.pad);
    let o_row = h * c.dv + c.pad;
    p.q_strides = qs;
    p.k_strides = ks;
    p.v_strides = vs;
    p.o_strides = Strides {
        batch: (sq * o_row) as i64,
        row: o_row as i64,
        head: c.dv as i64,
    };
    // At least one element: a zero-byte allocation is an error, and an empty K must still be a
    // valid pointer.
    let up = |x: &[f32]| {
        let mut bits = reference::encode(c.dtype, x);
        bits.resize(bits.len().max(1), 0);
        stream.clone_htod(&bits).map_err(|e| e.to_string())
    };
    let (dq, dk, dv) = (up(&qp)?, up(&kp)?, up(&vp)?);
    let o_len = (b * sq * o_row).max(1);
    let lse_len = (b * h * sq).max(1);

    // The orders to run: the case's own, or (every_order) the snake, Q block major and the
    // host's order on these same inputs. A tile's arithmetic does not depend on the CTA or
    // the round that runs it, so every order must give the snake's bits.
    let orders: &[(Option<bool>, Option<bool>)] = if c.every_order {
        &[
            (Some(false), Some(false)),
            (Some(true), Some(false)),
            (Some(false), Some(true)),
        ]
    } else {
        &[(c.m_major, c.lpt)]
    };
    let (mut kernel, mut paired, mut split_tail, mut m_major, mut lpt) =
        ("", false, false, false, false);
    let mut results = Vec::new();
    for (i, &(order_m_major, order_lpt)) in orders.iter().enumerate() {
        p.m_major_runs = order_m_major;
        p.lpt_rounds = order_lpt;
        if let Ok((_, sel)) = fa.plan(&p) {
            if i == 0 {
                (kernel, paired, split_tail) = (sel.spec.imp.name(), sel.pairs, sel.split_tail);
            }
            m_major |= sel.m_major_runs;
            lpt |= sel.lpt_rounds;
        }
        // The first order REPEATS times (a moving result is a race), the others once each.
        for _ in 0..if i == 0 { REPEATS } else { 1 } {
            let mut dout = stream
                .clone_htod(&vec![reference::nan_bits(c.dtype); o_len])
                .map_err(|e| e.to_string())?;
            let mut dlse = stream
                .clone_htod(&vec![f32::NAN; lse_len])
                .map_err(|e| e.to_string())?;
            fa.forward(stream, &p, &dq, &dk, &dv, &mut dout, Some(&mut dlse))
                .map_err(|e| format!("forward: {e}"))?;
            let out_bits = stream.clone_dtoh(&dout).map_err(|e| e.to_string())?;
            let lse = stream.clone_dtoh(&dlse).map_err(|e| e.to_string())?;
            results.push((i, out_bits, lse));
        }
    }
    let lse_bits = |l: &[f32]| l.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for (i, out_bits, lse) in &results[1..] {
        if results[0].1 != *out_bits || (c.lse && lse_bits(&results[0].2) != lse_bits(lse)) {
            return Err(if *i == 0 {
                format!("{REPEATS} runs on the same inputs differ: a race")
            } else {
                format!(
                    "order (m_major, lpt) = {:?} differs from {:?} on the same inputs",
                    orders[*i], orders[0]
                )
            });
        }
    }
    let (_, out_bits, lse) = &results[0];
    // Unpad the output; every element of the (B, Sq, H, Dv) view must have been written.
    let all = reference::decode(c.dtype, out_bits);
    let mut out = Vec::with_capacity(b * sq * h * c.dv);
    for r in 0..b * sq {
        out.extend_from_slice(&all[r * o_row..][..h * c.dv]);
    }
    if sq == 0 || b == 0 {
        return Ok(Outcome {
            err_over_bound: 0.0,
            lse_err_bound: 0.0,
            kernel,
            paired,
            split_tail,
            m_major,
            lpt,
        });
    }
    let rp = RefProblem {
        batch: b,
        seqlen_q: sq,
        seqlen_k: sk,
        heads: h,
        heads_kv: hkv,
        d: c.d,
        dv: c.dv,
        scale: 1.0 / (c.d as f64).sqrt(),
        causal: c.causal,
        window: c.window,
        softcap: 0.0,
        sinks: None,
    };
    // Long sequences: check a random sample of query rows (plus the first and last) exactly.
    let queries: Vec<usize> = if sq * sk > 1 << 20 {
        let mut qs: Vec<usize> = (0..192).map(|_| rng.random_range(0..sq)).collect();
        qs.extend([0, sq - 1]);
        qs.sort_unstable();
        qs.dedup();
        qs
    } else {
        reference::all_queries(&rp)
    };
    if let Some(i) = out.iter().position(|x| !x.is_finite()) {
        return Err(format!("out[{i}] = {} (unwritten or NaN)", out[i]));
    }
    let (r, rl, mags) = reference::attention_f64_magnitudes(&rp, &q, &k, &v, &queries);
    let pt = reference::attention_lowp(&rp, c.dtype, &q, &k, &v, &queries);
    let got = reference::gather_queries(&rp, &out, &queries);
    let rep = reference::check_oracle(c.dtype, &got, &r, &pt, false);
    if !rep.pass() {
        return Err(format!(
            "oracle: max|out-ref| {:.3e} > bound {:.3e} (max|pt-ref| {:.3e}, non-finite {})",
            rep.err, rep.bound, rep.pt_err, rep.non_finite
        ));
    }
    let mut lse_err_bound = 0.0;
    if c.lse {
        if let Some(i) = lse.iter().position(|x| x.is_nan()) {
            return Err(format!("lse[{i}] is NaN (unwritten)"));
        }
        lse_err_bound = reference::check_lse(
            &reference::gather_lse(&rp, lse, &queries),
            &rl,
            &mags,
            c.d,
            1e-3,
        )?;
    }
    Ok(Outcome {
        err_over_bound: if rep.bound > 0.0 {
            rep.err / rep.bound
        } else {
            0.0
        },
        lse_err_bound,
        kernel,
        paired,
        split_tail,
        m_major,
        lpt,
    })
}

/// Runs of each case on the same inputs, bit-compared (a moving result is a race).
const REPEATS: usize = 3;

/// Run cases, print a summary line and every failure, and fail if any case failed.
fn run_all(label: &str, cases: &[Case]) {
    run_all_on(label, cases, None);
}

/// `run_all`, and with `want` every non-degenerate case must run on that implementation.
fn run_all_on(label: &str, cases: &[Case], want: Option<&str>) {
    run_all_with(label, cases, want, setup);
}

type Setup = fn() -> Option<(Arc<CudaContext>, Arc<CudaStream>, FlashAttention)>;

/// Returns how many cases ran in CTA pairs (0 where the tests skip).
fn run_all_with(label: &str, cases: &[Case], want: Option<&str>, setup: Setup) -> usize {
    let Some((_ctx, stream, fa)) = setup() else {
        return 0;
    };
    let seed = run_seed();
    println!(
        "{label}: {} cases, seed {seed} (FA4GEN_SEED={seed} reproduces)",
        cases.len()
    );
    let mut rng = StdRng::seed_from_u64(seed);
    let mut failures = Vec::new();
    let (mut worst, mut worst_lse) = (0f64, 0f64);
    let mut kernels = std::collections::BTreeMap::<&str, usize>::new();
    let mut paired = 0;
    let mut split = 0;
    let mut m_major = 0;
    let mut lpt = 0;
    let t = std::time::Instant::now();
    for c in cases {
        match run_case(&stream, &fa, c, &mut rng) {
            Ok(o) => {
                worst = worst.max(o.err_over_bound);
                worst_lse = worst_lse.max(o.lse_err_bound);
                *kernels.entry(o.kernel).or_default() += 1;
                paired += usize::from(o.paired);
                split += usize::from(o.split_tail);
                m_major += usize::from(o.m_major);
                lpt += usize::from(o.lpt);
                if let Some(w) = want
                    && !o.kernel.is_empty()
                    && o.kernel != w
                {
                    failures.push(format!("{}: ran on {}, not {w}", c.name(), o.kernel));
                }
            }
            Err(e) => failures.push(format!("{}: {e}", c.name())),
        }
    }
    println!(
        "{label}: {} passed, {} failed; worst err/bound {worst:.3}, worst LSE err/bound {worst_lse:.3}; kernels {kernels:?} ({paired} in CTA pairs, {split} with split tails, {m_major} with Q-block-major runs, {lpt} in the host's order); {:.1} s",
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
    paired
}

const SIZES: [usize; 6] = [1, 7, 113, 128, 1000, 4096];
const HEAD_DIMS: [(usize, usize); 5] = [(64, 64), (96, 96), (128, 128), (192, 128), (256, 256)];

/// The matrix, sampled: every head dim x dtype x mask kind x LSE combination meets
/// seven (Sq, Sk) pairs from SIZES x SIZES (both ways round), rotating through all 36 pairs,
/// GQA groups 1/3/6 and packed/unpacked GQA.
#[test]
fn oracle_matrix() {
    let pairs: Vec<(usize, usize)> = SIZES
        .iter()
        .flat_map(|&a| SIZES.iter().map(move |&b| (a, b)))
        .collect();
    let mut cases = Vec::new();
    let mut rng = StdRng::seed_from_u64(7);
    let mut combo = 0;
    for (d, dv) in HEAD_DIMS {
        for dtype in DType::ALL {
            for mask in 0..3 {
                for lse in [false, true] {
                    for j in 0..7 {
                        let (sq, sk) = pairs[(combo * 5 + j * 11) % pairs.len()];
                        let g = [1, 3, 6][(combo + j) % 3];
                        let big = sq * sk > 1 << 20;
                        let heads_kv = if big { 1 } else { 2 };
                        let window = match (mask, j % 3) {
                            (2, 0) => (
                                Some(rng.random_range(0..sk as i64)),
                                Some(rng.random_range(0..sk as i64)),
                            ),
                            (2, 1) => (None, Some(-rng.random_range(0..=sk as i64 / 2))),
                            (2, _) => (Some(-rng.random_range(0..=sk as i64 / 2)), None),
                            _ => (None, None),
                        };
                        cases.push(Case {
                            dtype,
                            d,
                            dv,
                            batch: if sq * sk <= 128 * 1000 { 2 } else { 1 },
                            sq,
                            sk,
                            heads: g * heads_kv,
                            heads_kv,
                            causal: mask == 1,
                            window,
                            lse,
                            pack_gqa: if g > 1 && j % 2 == 1 {
                                Some(false)
                            } else {
                                None
                            },
                            pad: 0,
                            tile_mn: None,
                            pairs: None,
                            late_keys: None,
                            split_tail: None,
                            m_major: None,
                            lpt: None,
                            every_order: false,
                            fill: None,
                        });
                    }
                    combo += 1;
                }
            }
        }
    }
    run_all("oracle_matrix", &cases);
}

/// The sm90 flagship (wgmma) on every head dim it implements x dtype x mask x LSE, with
/// prefill-shaped Sq (> 64 rows, odd and tile-straddling sizes) against Sk both shorter and
/// longer, GQA unpacked; each case run REPEATS times and bit-compared. On other GPUs the
/// portable kernel runs the same cases.
#[test]
fn oracle_flagship() {
    let sqs = [65, 113, 127, 129, 191, 193, 1000, 1031, 4096];
    let sks = [1, 7, 64, 113, 128, 200, 1000, 1031, 4096];
    let mut rng = StdRng::seed_from_u64(11);
    let mut cases = Vec::new();
    let mut i = 0;
    for (d, dv) in [(64, 64), (128, 128), (192, 128), (256, 256)] {
        for dtype in DType::ALL {
            for mask in 0..3 {
                for lse in [false, true] {
                    for _ in 0..3 {
                        let (sq, sk) = (sqs[i % sqs.len()], sks[(i * 7 + 3) % sks.len()]);
                        i += 1;
                        let big = sq * sk > 1 << 20;
                        let window = random_window(&mut rng, mask, sq, sk);
                        let g = [1, 2, 4][i % 3];
                        cases.push(Case {
                            dtype,
                            d,
                            dv,
                            batch: if big { 1 } else { 2 },
                            sq,
                            sk,
                            heads: g * if big { 1 } else { 2 },
                            heads_kv: if big { 1 } else { 2 },
                            causal: mask == 1,
                            window,
                            lse,
                            pack_gqa: None,
                            pad: if i % 4 == 0 { 8 } else { 0 },
                            tile_mn: None,
                            pairs: None,
                            late_keys: None,
                            split_tail: None,
                            m_major: None,
                            lpt: None,
                            every_order: false,
                            fill: None,
                        });
                    }
                }
            }
        }
    }
    let on_hopper = setup().is_some_and(|(_, _, fa)| fa.device().major == 9);
    run_all_on("oracle_flagship", &cases, on_hopper.then_some("wgmma"));
}

/// Mask 2 (local): a random window (left in 0..=Sk, right from -Sq/2 to Sk/4, so some rows
/// see nothing); masks 0 and 1: none.
fn random_window(
    rng: &mut StdRng,
    mask: usize,
    sq: usize,
    sk: usize,
) -> (Option<i64>, Option<i64>) {
    if mask != 2 {
        return (None, None);
    }
    (
        Some(rng.random_range(0..=sk as i64)),
        Some(rng.random_range(-(sq as i64) / 2..=sk as i64 / 4)),
    )
}

/// The flagship's tiles that selection picks only for some shapes, or not at all: 64 rows (one
/// consumer warpgroup, two CTAs per SM; no table has them) at d 64 and 128, and d 64's 192x128
/// (three consumers; long sequences) and 128x128 (short causal ones, windows); the three masks,
/// Sq != Sk both ways, odd sizes; each case run REPEATS times and bit-compared (the CTAs
/// sharing an SM share nothing, and three consumers take turns at the tensor cores).
#[test]
fn oracle_flagship_tiles() {
    let sizes = [
        (200, 1),
        (65, 1031),
        (1000, 113),
        (4096, 4096),
        (191, 7),
        (127, 200),
    ];
    let mut rng = StdRng::seed_from_u64(13);
    let mut cases = Vec::new();
    let mut i = 0;
    for (d, tile) in [
        (64, (64, 128)),
        (64, (64, 64)),
        (128, (64, 128)),
        (128, (64, 64)),
        (96, (64, 128)), // the fill tile (`SpecClass::flagship_fill`) at d 96 too
        (64, (192, 128)),
        (64, (128, 128)),
    ] {
        for mask in 0..3 {
            for _ in 0..2 {
                let (sq, sk) = sizes[i % sizes.len()];
                i += 1;
                let big = sq * sk > 1 << 20;
                let window = random_window(&mut rng, mask, sq, sk);
                cases.push(Case {
                    dtype: DType::ALL[i % 2],
                    d,
                    dv: d,
                    batch: if big { 1 } else { 3 },
                    sq,
                    sk,
                    heads: 4,
                    heads_kv: [4, 2, 1][i % 3],
                    causal: mask == 1,
                    window,
                    lse: i % 2 == 0,
                    pack_gqa: None,
                    pad: if i % 3 == 0 { 8 } else { 0 },
                    tile_mn: Some(tile),
                    pairs: None,
                    late_keys: None,
                    split_tail: None,
                    m_major: None,
                    lpt: None,
                    every_order: false,
                    fill: None,
                });
            }
        }
    }
    let on_hopper = setup().is_some_and(|(_, _, fa)| fa.device().major == 9);
    run_all_with(
        "oracle_flagship_tiles",
        &cases,
        on_hopper.then_some("wgmma"),
        setup_jit,
    );
}

/// Idle consumers: a consumer warpgroup whose 64 rows all lie outside the sequence (past the
/// end in a call's last Q block, or before row 0 where causal Q blocks are laid from the end)
/// takes its peers' turns and releases their stages but computes and stores nothing, and
/// unmasked calls deal their last Q block's tiles after all the others (fwd_sm90.cu
/// `kIdleConsumers`, `Tiles::kPartialLast`). Last blocks that leave one and two of three
/// consumers idle, first blocks with one and two idle, the reordered schedule over several
/// rounds (d 64 S 4096: 2 x 22 x 8 tiles), packed GQA rows, a window, Sq != Sk both ways,
/// CTA pairs whose second Q block has an idle consumer; each case runs REPEATS times,
/// bit-compared, outputs poisoned: a skipped turn or release hangs or races, a stored idle
/// row overwrites the next head's or sequence's.
#[test]
fn oracle_flagship_idle_consumers() {
    let base = Case {
        dtype: DType::Bf16,
        d: 64,
        dv: 64,
        batch: 1,
        sq: 1,
        sk: 1,
        heads: 4,
        heads_kv: 4,
        causal: false,
        window: (None, None),
        lse: true,
        pack_gqa: None,
        pad: 0,
        tile_mn: None,
        pairs: None,
        late_keys: None,
        split_tail: None,
        m_major: None,
        lpt: None,
        every_order: false,
        fill: None,
    };
    let d64 = |sq, sk, causal, tile: (u32, u32)| Case {
        sq,
        sk,
        causal,
        tile_mn: Some(tile),
        ..base.clone()
    };
    let mut cases = vec![
        // Unmasked 192x128, last block 64 rows (two idle), the partial tiles dealt last.
        Case {
            batch: 2,
            heads: 8,
            heads_kv: 2,
            ..d64(4096, 4096, false, (192, 128))
        },
        // Last block 128 rows (one idle), Sk > Sq; 8 rows (two idle), one key.
        Case {
            dtype: DType::Fp16,
            batch: 3,
            heads_kv: 2,
            lse: false,
            ..d64(320, 1031, false, (192, 128))
        },
        Case {
            heads: 5,
            heads_kv: 5,
            pad: 8,
            ..d64(200, 1, false, (192, 128))
        },
        // Packed GQA rows (G divides 64): 4088 x 8 = 170 blocks of 192 and 64 rows.
        Case {
            batch: 2,
            heads: 8,
            heads_kv: 1,
            pack_gqa: Some(true),
            ..d64(4088, 700, false, (192, 128))
        },
        // Two consumers, last block 32 rows.
        Case {
            dtype: DType::Fp16,
            batch: 2,
            ..d64(4000, 333, false, (128, 128))
        },
        // Causal from the end: the first block's 128 (S 4096) and 128 (Sq 1000) spare rows
        // before row 0, two consumers idle; Sq > Sk (rows that see no key).
        d64(4096, 4096, true, (192, 128)),
        Case {
            batch: 2,
            ..d64(1000, 3000, true, (192, 128))
        },
        Case {
            heads_kv: 1,
            ..d64(3000, 1000, true, (192, 128))
        },
        // A window over packed rows: 1000 x 8 = 41 blocks of 192 and 128 rows.
        Case {
            heads: 32,
            heads_kv: 4,
            pack_gqa: Some(true),
            window: (Some(127), Some(0)),
            ..d64(1000, 1000, false, (192, 80))
        },
    ];
    for (d, dv, sq, sk, tile) in [
        (256, 256, 900, 900, (128, 80)), // causal from the end, pad 64: consumer 0 idle
        (192, 128, 700, 1500, (128, 112)), // pad 64, Sk > Sq
    ] {
        cases.push(Case {
            d,
            dv,
            causal: true,
            ..d64(sq, sk, true, tile)
        });
    }
    // CTA pairs (32 Q blocks of 128, the last of 32 rows: its second consumer idle).
    cases.push(Case {
        d: 128,
        dv: 128,
        pairs: Some(true),
        ..d64(4000, 4000, true, (128, 128))
    });
    let on_hopper = setup().is_some_and(|(_, _, fa)| fa.device().major == 9);
    run_all_with(
        "oracle_flagship_idle_consumers",
        &cases,
        on_hopper.then_some("wgmma"),
        setup_jit,
    );
}

/// Each case in three orders on the same inputs, bit-compared (`Case::every_order`): its
/// causal runs dealt head major by the plain snake, Q block major
/// (`Problem::m_major_runs`), and head major in the host's order (`Problem::lpt_rounds`).
fn in_every_run_order(cases: Vec<Case>) -> Vec<Case> {
    cases
        .into_iter()
        .map(|c| Case {
            every_order: true,
            ..c
        })
        .collect()
}

/// The flagship's causal schedule in runs of 16 Q blocks of one (head, batch)
/// (`KernelSpec::wgmma_q_run`) needs 16 blocks or more to form a run: sequences of 17-24
/// blocks (one run and a ragged rest), 32+ (two runs), Sq != Sk both ways, odd head counts,
/// GQA unpacked, on every head dim; each case in every order of the runs
/// (`in_every_run_order`). A tile the decode skipped or dealt twice leaves poisoned
/// rows or races; each case runs REPEATS times and is bit-compared.
#[test]
fn oracle_flagship_causal_runs() {
    let shapes = [(2100, 2100), (2049, 3001), (4200, 2500), (3000, 3000)];
    let mut cases = Vec::new();
    for (i, (d, dv)) in [(64, 64), (128, 128), (192, 128), (256, 256)]
        .into_iter()
        .enumerate()
    {
        for j in 0..2 {
            let (sq, sk) = shapes[(i + 2 * j) % shapes.len()];
            cases.push(Case {
                dtype: DType::ALL[(i + j) % 2],
                d,
                dv,
                batch: 1 + j,
                sq,
                sk,
                heads: 3 * (1 + j),
                heads_kv: 3,
                causal: true,
                window: (None, None),
                lse: j == 0,
                pack_gqa: Some(false),
                pad: if i % 2 == 1 { 8 } else { 0 },
                tile_mn: None,
                pairs: None,
                late_keys: None,
                split_tail: None,
                m_major: None,
                lpt: None,
                every_order: false,
                fill: None,
            });
        }
    }
    let cases = in_every_run_order(cases);
    let on_hopper = setup().is_some_and(|(_, _, fa)| fa.device().major == 9);
    run_all_on(
        "oracle_flagship_causal_runs",
        &cases,
        on_hopper.then_some("wgmma"),
    );
}

/// CTA pairs (`KernelSpec::wgmma_pairs`): unmasked dense calls with an even number of Q blocks
/// run in clusters of two that take a head's Q blocks 2i and 2i + 1 and share every K/V block,
/// each CTA loading half of it into both. One pair (most of the grid idle), pairs over odd
/// head counts and batches, more pairs than the device holds (several rounds), Sq != Sk both
/// ways, K shorter than one block, every head dim, GQA unpacked (pairs forced below 16k keys,
/// `Problem::cta_pairs`); an odd number of Q blocks runs the same kernel alone, and d 64 and
/// 96 (no pair code) ignore the request. A half block loaded into the wrong CTA or a stage released too
/// early shows as a wrong or a moving result (each case runs REPEATS times, bit-compared).
#[test]
fn oracle_flagship_pairs() {
    // (sq, sk, batch, heads, heads_kv)
    let shapes = [
        (256, 16384, 1, 1, 1),
        (1000, 113, 2, 3, 3),
        (4096, 1000, 1, 5, 5),
        (130, 4097, 3, 4, 2),
        (2048, 2048, 2, 7, 7),
        (1000, 37, 1, 6, 3),
        (113, 1000, 2, 2, 2),
    ];
    let mut cases = Vec::new();
    for (i, (d, dv)) in [(64, 64), (96, 96), (128, 128), (192, 128), (256, 256)]
        .into_iter()
        .enumerate()
    {
        for j in 0..3 {
            let (sq, sk, batch, heads, heads_kv) = shapes[(i + 2 * j) % shapes.len()];
            cases.push(Case {
                dtype: DType::ALL[(i + j) % 2],
                d,
                dv,
                batch,
                sq,
                sk,
                heads,
                heads_kv,
                causal: false,
                window: (None, None),
                lse: j != 1,
                pack_gqa: Some(false),
                pad: if j == 2 { 8 } else { 0 },
                tile_mn: None,
                pairs: (sk < fa4gen::select::PAIRS_MIN_KEYS).then_some(true), // else the default
                late_keys: None,
                split_tail: None,
                m_major: None,
                lpt: None,
                every_order: false,
                fill: None,
            });
        }
    }
    // Those at d >= 128 (d 64 and 96 have no pair code) with an even number of Q blocks of
    // 128 rows pair.
    run_pairs("oracle_flagship_pairs", &cases, 6, |c| {
        c.d >= 128 && c.sq.div_ceil(128).is_multiple_of(2)
    });
}

/// Runs `cases` on the flagship (on Hopper) and checks that exactly those `pairable` says
/// launched in CTA pairs, at least `min_paired` of them and not all.
fn run_pairs(label: &str, cases: &[Case], min_paired: usize, pairable: impl Fn(&Case) -> bool) {
    let on_hopper = setup().is_some_and(|(_, _, fa)| fa.device().major == 9);
    let paired = run_all_with(label, cases, on_hopper.then_some("wgmma"), setup);
    let expect = cases.iter().filter(|c| pairable(c)).count();
    assert!(
        expect >= min_paired && expect < cases.len(),
        "cover pairs and lone CTAs"
    );
    if on_hopper {
        assert_eq!(paired, expect, "cases launched in CTA pairs");
    }
}

/// Causal CTA pairs: partners are Q blocks 2k and 2k + 1 of a run, so the heavier one visits a
/// block or two past the lighter one's diagonal; the pair loads that range and the lighter one
/// releases its extra blocks unread. Runs whole and even pair (m_blocks even, and under 16 or a
/// multiple of 16), others run alone; Sq != Sk both ways (Sq > Sk: the lighter partner may see
/// no key at all while the heavier one does), K shorter than one block, GQA unpacked, 80- and
/// 160-key tiles (the partners' diagonals one or two blocks apart), each case in every order
/// of a run's tiles (`in_every_run_order`). A released stage the partner still reads, or
/// rings out of step, shows as a wrong, moving or hung result.
#[test]
fn oracle_flagship_causal_pairs() {
    // (sq, sk, batch, heads, heads_kv)
    let shapes = [
        (1000, 1000, 2, 3, 3),
        (256, 16384, 1, 1, 1),
        (2048, 2048, 1, 5, 5),
        (1000, 113, 2, 2, 2),
        (130, 4097, 3, 4, 2),
        (3000, 3000, 1, 2, 2),
        (1100, 37, 1, 6, 3),
        (4096, 4096, 1, 2, 2),
        // Q block 6's rows see no key, block 7's see some: a lighter partner that only skips.
        (1024, 100, 1, 2, 2),
    ];
    let mut cases = Vec::new();
    for (i, (d, dv, tile)) in [
        (128, 128, None),
        (192, 128, None),
        (256, 256, None),
        (128, 128, Some((128, 160))),
        (256, 256, Some((128, 64))),
    ]
    .into_iter()
    .enumerate()
    {
        for (j, &(sq, sk, batch, heads, heads_kv)) in shapes.iter().enumerate() {
            if tile.is_some() && j % 2 == 1 {
                continue;
            }
            cases.push(Case {
                dtype: DType::ALL[(i + j) % 2],
                d,
                dv,
                batch,
                sq,
                sk,
                heads,
                heads_kv,
                causal: true,
                window: (None, None),
                lse: (i + j) % 3 != 1,
                pack_gqa: Some(false),
                pad: if j == 4 { 8 } else { 0 },
                tile_mn: tile,
                pairs: Some(true),
                late_keys: None,
                split_tail: None,
                m_major: None,
                lpt: None,
                every_order: false,
                fill: Some(false),
            });
        }
    }
    // A pair's two tiles must stay Q blocks 2k and 2k + 1 of one head in either order.
    let cases = in_every_run_order(cases);
    // 128-row Q blocks: pairs where the runs of min(16, m_blocks) are whole and even.
    run_pairs("oracle_flagship_causal_pairs", &cases, 20, |c| {
        let m = c.sq.div_ceil(128);
        m.is_multiple_of(2) && (m < 16 || m.is_multiple_of(16))
    });
}

/// The stale max (`KernelSpec::wgmma_stale_max`) meets rows whose max jumps late: blocks are
/// visited last to first, so keys scaled up in the middle of the sequence reach a tile after
/// its first blocks set the running max, and their P would exceed 2^slack (factor 8) or
/// overflow (factor 40: scores around 100 above the rest, 2^140 and more) on the fast path;
/// those warps must recompute the block. Also such keys at key 0 (the exact update's block)
/// and among the first visited keys; Sq != Sk both ways; unmasked and causal (the stale max
/// runs causal below d 256; d 256 causal is the exact kernel's control); both dtypes with both
/// factors. The shapes put the slow path in CTA pairs (its K stage held while the partner's
/// producer waits for the release), in CTAs that run several tiles (Q buffer and ring
/// positions past the first tile's) and in both at once. `late_max_cases_run_the_stale_max`
/// checks on the CPU that selection picks what this relies on.
/// The split tail (`KernelSpec::wgmma_split_tail`, forced on): the persistent schedule deals
/// its last tiles as equal shares of K blocks, so a tile may be computed in two parts by two
/// CTAs, merged and stored by the second to finish. Shapes whose tiles outnumber the grid by
/// a remainder (round 0: all of the schedule is tail; round 1+: whole tiles first), parts of
/// one block (2-block tiles) and of hundreds, K not a multiple of the tile (the partial block
/// in one part only), a partial last Q block, GQA unpacked, CTA pairs (a pair's two tiles split
/// alike), LSE, padded strides; d 64 (chained tiles) and packed GQA have no split tail.
/// A part merged twice, lost, or read before it was written shows as a wrong or moving result.
#[test]
fn oracle_flagship_split_tail() {
    // (d, dv, sq, sk, batch, heads, heads_kv, pack, pairs)
    let shapes = [
        (128, 128, 2048, 1000, 1, 20, 20, false, None), // 320 tiles on 132: round 1, tail 188
        (128, 128, 4096, 3000, 1, 10, 5, false, Some(true)), // 160 pairs on 66
        (256, 256, 3000, 4097, 2, 3, 3, false, None),   // 144 tiles: round 0, 52 blocks of 80
        (192, 128, 300, 777, 1, 70, 70, false, None),   // 210 tiles, round 0
        (128, 128, 1000, 200, 3, 50, 50, false, None),  // 2-block tiles: parts of one block
        (128, 128, 16384, 16384, 1, 2, 2, false, Some(false)), // parts of ~100 blocks
        (128, 128, 700, 2500, 1, 32, 4, true, None),    // packed GQA: whole
        (96, 96, 1100, 1300, 2, 9, 3, false, None),     // 162 tiles
        (256, 256, 2048, 2048, 1, 18, 18, false, Some(true)), // 144 pairs on 66: round 1
        (64, 64, 2000, 3000, 1, 30, 30, false, None),   // chained tiles: whole
    ];
    let mut cases = Vec::new();
    for (i, &(d, dv, sq, sk, batch, heads, heads_kv, pack, pairs)) in shapes.iter().enumerate() {
        cases.push(Case {
            dtype: DType::ALL[i % 2],
            d,
            dv,
            batch,
            sq,
            sk,
            heads,
            heads_kv,
            causal: false,
            window: (None, None),
            lse: i % 3 != 1,
            pack_gqa: Some(pack),
            pad: if i % 4 == 3 { 8 } else { 0 },
            tile_mn: None,
            pairs,
            late_keys: None,
            split_tail: Some(true),
            m_major: None,
            lpt: None,
            every_order: false,
            fill: None,
        });
    }
    // The same shapes with the tail whole: the control.
    let whole: Vec<Case> = cases
        .iter()
        .map(|c| Case {
            split_tail: Some(false),
            m_major: None,
            lpt: None,
            every_order: false,
            fill: None,
            ..c.clone()
        })
        .collect();
    let Some((_ctx, stream, fa)) = setup() else {
        return;
    };
    if fa.device().major == 9 {
        for c in &cases {
            let (_, sel) = fa.plan(&problem(c)).expect("plan");
            assert_eq!(sel.spec.imp.name(), "wgmma", "{}", c.name());
            assert_eq!(
                sel.split_tail,
                c.d != 64 && c.pack_gqa != Some(true),
                "{}",
                c.name()
            );
            let pair = if sel.pairs { 2 } else { 1 };
            let plan = fa4gen::select::tail_plan(
                sel.tiles / pair,
                sel.grid.0 as usize / pair,
                c.sk.div_ceil(sel.spec.tile_n as usize),
            );
            assert!(plan.is_some(), "{}: no tail to split", c.name());
        }
    }
    drop((stream, fa));
    run_all_on("oracle_flagship_split_tail", &cases, Some("wgmma"));
    run_all_on("oracle_flagship_split_tail (whole)", &whole, Some("wgmma"));
}

fn late_max_cases() -> Vec<Case> {
    // (sq, sk, heads, heads_kv, pairs): 8 Q blocks in a pair; 3 (an odd count: alone) at
    // 4k keys; 16 Q blocks x 10 heads = 160 tiles, more than the H200's 132 CTAs, alone or
    // in pairs.
    let shapes = [
        (1000, 2048, 2, 1, Some(true)),
        (333, 4100, 2, 1, None),
        (2048, 1500, 10, 5, Some(false)),
        (2048, 1500, 10, 5, Some(true)),
    ];
    let mut cases = Vec::new();
    let mut i = 0;
    for (d, dv) in [(128, 128), (192, 128), (256, 256)] {
        for causal in [false, true] {
            for (s, &(sq, sk, heads, heads_kv, pairs)) in shapes.iter().enumerate() {
                // (first key, count): mid-sequence, key 0, the last keys (first visited).
                for (first, n) in [(sk / 2 - 3, 5), (0, 1), (sk - 2, 2)] {
                    if s >= 2 && first == 0 {
                        continue; // (the many-tile shapes: the slow path's positions only)
                    }
                    for factor in [8.0, 40.0] {
                        i += 1;
                        cases.push(Case {
                            dtype: DType::ALL[(i / 2) % 2],
                            d,
                            dv,
                            batch: 1,
                            sq,
                            sk,
                            heads,
                            heads_kv,
                            causal,
                            window: (None, None),
                            lse: i % 3 != 0,
                            pack_gqa: Some(false),
                            pad: 0,
                            tile_mn: None,
                            pairs,
                            late_keys: Some((first, n, factor)),
                            split_tail: None,
                            m_major: None,
                            lpt: None,
                            every_order: false,
                            fill: Some(false),
                        });
                    }
                }
            }
        }
    }
    cases
}

#[test]
fn oracle_flagship_late_max() {
    let cases = late_max_cases();
    let on_hopper = setup().is_some_and(|(_, _, fa)| fa.device().major == 9);
    let paired = run_all_with(
        "oracle_flagship_late_max",
        &cases,
        on_hopper.then_some("wgmma"),
        setup,
    );
    if on_hopper {
        let want = cases.iter().filter(|c| c.pairs == Some(true)).count();
        assert_eq!(paired, want, "cases launched in CTA pairs");
    }
}

/// On the CPU (no GPU needed): the late-max cases select the stale-max kernels (all but d 256
/// causal), in CTA pairs exactly where they ask for them, on the H200.
#[test]
fn late_max_cases_run_the_stale_max() {
    use fa4gen::select::{DeviceInfo, select};
    let h200 = DeviceInfo {
        major: 9,
        minor: 0,
        sm_count: 132,
    };
    let cases = late_max_cases();
    for dtype in DType::ALL {
        for factor in [8.0, 40.0] {
            assert!(
                cases
                    .iter()
                    .any(|c| c.dtype == dtype && c.late_keys.is_some_and(|k| k.2 == factor)),
                "{dtype:?} x factor {factor}"
            );
        }
    }
    for c in &cases {
        let p = problem(c);
        let v = p.validate().expect("a valid call");
        let sel = select(&p, &v, &h200).expect("a kernel");
        assert_eq!(
            sel.spec.wgmma_stale_max(),
            !(c.causal && c.d == 256),
            "{}: {}",
            c.name(),
            sel.spec.stem()
        );
        assert_eq!(sel.pairs, c.pairs == Some(true), "{}", c.name());
    }
}

/// Shapes the matrix does not reach: strided (padded-row) tensors, local windows with causal,
/// windows that empty whole rows, Sk = 0 (memset path), Sq = 0, odd sizes, GQA 8.
#[test]
fn oracle_edges() {
    let base = Case {
        dtype: DType::Bf16,
        d: 128,
        dv: 128,
        batch: 2,
        sq: 239,
        sk: 127,
        heads: 4,
        heads_kv: 2,
        causal: false,
        window: (None, None),
        lse: true,
        pack_gqa: None,
        pad: 0,
        tile_mn: None,
        pairs: None,
        late_keys: None,
        split_tail: None,
        m_major: None,
        lpt: None,
        every_order: false,
        fill: None,
    };
    let cases = vec![
        Case {
            pad: 24,
            ..base.clone()
        },
        Case {
            pad: 8,
            causal: true,
            dtype: DType::Fp16,
            d: 64,
            dv: 64,
            ..base.clone()
        },
        Case {
            causal: true,
            window: (Some(16), None),
            ..base.clone()
        },
        Case {
            window: (Some(3), Some(-1)),
            sq: 300,
            sk: 300,
            ..base.clone()
        },
        Case {
            window: (Some(-50), Some(60)),
            sq: 7,
            sk: 1000,
            ..base.clone()
        },
        Case {
            window: (Some(0), Some(0)),
            sq: 128,
            sk: 128,
            ..base.clone()
        },
        Case {
            causal: true,
            sq: 1000,
            sk: 3,
            ..base.clone()
        },
        Case {
            sk: 0,
            ..base.clone()
        },
        Case {
            sk: 0,
            pad: 8,
            ..base.clone()
        },
        Case {
            sq: 0,
            ..base.clone()
        },
        Case {
            heads: 64,
            heads_kv: 8,
            sq: 33,
            sk: 517,
            d: 64,
            dv: 64,
            ..base.clone()
        },
        Case {
            heads: 64,
            heads_kv: 8,
            sq: 1,
            sk: 4096,
            d: 128,
            dv: 128,
            causal: true,
            ..base.clone()
        },
        Case {
            heads: 64,
            heads_kv: 8,
            sq: 1,
            sk: 4096,
            pack_gqa: Some(false),
            ..base.clone()
        },
        Case {
            heads: 6,
            heads_kv: 1,
            sq: 3,
            sk: 799,
            d: 256,
            dv: 256,
            ..base.clone()
        },
        Case {
            sq: 1023,
            sk: 1024,
            d: 192,
            dv: 128,
            causal: true,
            ..base.clone()
        },
        Case {
            sq: 4224,
            sk: 4224,
            d: 96,
            dv: 96,
            batch: 1,
            heads: 2,
            heads_kv: 1,
            causal: true,
            ..base.clone()
        },
    ];
    run_all("oracle_edges", &cases);
}

/// Bad calls are refused before any launch, with the field named.
#[test]
fn bad_buffers_are_refused() {
    let Some((_ctx, stream, fa)) = setup() else {
        return;
    };
    let p = Problem::new(DType::Bf16, 1, 64, 64, 2, 2, 64, 64);
    let small = stream.alloc_zeros::<u16>(100).unwrap();
    let ok = stream.alloc_zeros::<u16>(64 * 2 * 64).unwrap();
    let mut out = stream.alloc_zeros::<u16>(64 * 2 * 64).unwrap();
    let e = fa
        .forward(&stream, &p, &small, &ok, &ok, &mut out, None)
        .unwrap_err();
    assert!(e.to_string().contains("`q`"), "{e}");
    let mut p2 = p.clone();
    p2.return_lse = true;
    let e = fa
        .forward(&stream, &p2, &ok, &ok, &ok, &mut out, None)
        .unwrap_err();
    assert!(e.to_string().contains("`lse`"), "{e}");
    let mut lse = stream.alloc_zeros::<f32>(3).unwrap();
    let e = fa
        .forward(&stream, &p2, &ok, &ok, &ok, &mut out, Some(&mut lse))
        .unwrap_err();
    assert!(e.to_string().contains("`lse`"), "{e}");
    let e = FlashAttention::new(_ctx.clone(), kernels_root().join("sm100f")).err();
    assert!(e.is_some_and(|e| e.to_string().contains("sm100f")));
}

/// A call binds the handle's context for itself and puts the caller's back: an engine (or
/// PyTorch, whose current device is the driver's current context) keeps its own. Buffers of
/// another context are refused before anything runs.
#[test]
fn current_context_is_restored() {
    let Some((_ctx, stream, fa)) = setup() else {
        return;
    };
    let p = Problem::new(DType::Bf16, 1, 64, 64, 2, 2, 64, 64);
    let ok = stream.alloc_zeros::<u16>(64 * 2 * 64).unwrap();
    let mut out = stream.alloc_zeros::<u16>(64 * 2 * 64).unwrap();
    // A second stream turns on cudarc's event tracking: the buffers' guards then bind the
    // handle's context too, before the call and after it.
    let side = _ctx.new_stream().unwrap();
    let theirs = CudaContext::new_non_primary(0, 0).unwrap();
    let foreign = theirs
        .default_stream()
        .alloc_zeros::<u16>(64 * 2 * 64)
        .unwrap();
    let current = || cudarc::driver::result::ctx::get_current().unwrap();
    for s in [&stream, &side] {
        theirs.bind_to_thread().unwrap();
        fa.forward(s, &p, &ok, &ok, &ok, &mut out, None).unwrap();
        assert_eq!(
            current(),
            Some(theirs.cu_ctx()),
            "the caller's context was not put back"
        );
    }
    // Opening and dropping a handle (its modules unload, its context releases) too.
    theirs.bind_to_thread().unwrap();
    let other = FlashAttention::from_root(runtime::context(0).unwrap(), kernels_root()).unwrap();
    assert_eq!(
        current(),
        Some(theirs.cu_ctx()),
        "opening moved the context"
    );
    let mut out2 = side.alloc_zeros::<u16>(64 * 2 * 64).unwrap();
    theirs.bind_to_thread().unwrap();
    other
        .forward(&side, &p, &ok, &ok, &ok, &mut out2, None)
        .unwrap();
    side.synchronize().unwrap();
    theirs.bind_to_thread().unwrap();
    drop(other);
    assert_eq!(
        current(),
        Some(theirs.cu_ctx()),
        "dropping a handle moved the context"
    );
    let e = fa
        .forward(&stream, &p, &foreign, &ok, &ok, &mut out, None)
        .unwrap_err();
    assert!(
        e.to_string().contains("`q`") && e.to_string().contains("context"),
        "{e}"
    );
    stream.synchronize().unwrap();
}

/// Short forwards launched as programmatic dependents (the default) start while the kernel
/// before them still runs, so each must wait for it before touching global memory. A chain in
/// which each call's output is the next call's Q (and its V, where the shapes agree), and each
/// call overwrites the buffer the one before it read, gives a kernel that touched memory before
/// its wait every chance to read a half-written input or clobber one still being read: its
/// outputs and LSE must equal the same chain's in plain stream order, bit for bit. The chain is
/// queued behind a long call (a gate), so its calls reach the device back to back rather than
/// as fast as the host issues them. (Not covered: paged and varlen metadata, which no call
/// here rewrites.)
#[test]
fn programmatic_chains_match_stream_order() {
    // (The jit: no plan ships the decode case's split kernel.)
    let Some((_ctx, stream, fa)) = setup_jit() else {
        return;
    };
    let mut rng = StdRng::seed_from_u64(run_seed());
    // (label, problem): d == dv so that an output can be the next Q.
    let mut cases = Vec::new();
    // (Causal runs launch in stream order: see select::PROGRAMMATIC_MAX_BLOCKS_PER_CTA.)
    let mut p = Problem::new(DType::Bf16, 2, 2048, 2048, 8, 8, 128, 128);
    p.causal = true;
    p.pack_gqa = Some(false);
    cases.push((
        "d128 full 2k (flagship)",
        Problem {
            causal: false,
            ..p.clone()
        },
    ));
    let mut p = Problem::new(DType::Bf16, 1, 4096, 4096, 8, 2, 128, 128);
    p.causal = true;
    p.pack_gqa = Some(true);
    cases.push(("d128 G4 causal 4k (flagship, packed)", p));
    cases.push((
        "d128 full 4k (flagship, pairs)",
        Problem::new(DType::Bf16, 1, 4096, 4096, 4, 4, 128, 128),
    ));
    let mut p = Problem::new(DType::Bf16, 1, 4096, 4096, 16, 2, 64, 64);
    p.window = (Some(127), Some(0));
    cases.push(("d64 G8 window 128 (flagship, packed)", p));
    cases.push((
        "d256 full 1k (flagship)",
        Problem::new(DType::Bf16, 1, 1024, 1024, 4, 4, 256, 256),
    ));
    let mut p = Problem::new(DType::Bf16, 1, 1, 8192, 8, 8, 128, 128);
    p.num_splits = 0; // as many as selection likes
    cases.push(("d128 decode 8k keys (split-KV + combine)", p));
    cases.push((
        "d128 12 x 300 (portable)",
        Problem::new(DType::Bf16, 3, 12, 300, 4, 4, 128, 128),
    ));
    const STEPS: usize = 6;
    let mut failures = Vec::new();
    for (label, mut p) in cases {
        p.return_lse = true;
        let (_, sel) = fa.plan(&p).unwrap_or_else(|e| panic!("{label}: {e}"));
        let kernel = format!("{} ({} splits)", sel.spec.stem(), sel.num_splits);
        if !fa.can_load(&sel.spec) {
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED {label}: {kernel} is in no shipped plan (build the tests with --features jit)"
            );
            continue;
        }
        if !sel.programmatic {
            failures.push(format!("{label} ({kernel}): not a programmatic launch"));
        }
        let (b, sq, sk, h, hkv, d) = (
            p.batch, p.seqlen_q, p.seqlen_k, p.heads, p.heads_kv, p.head_dim,
        );
        let q0 = reference::encode(p.dtype, &randn(&mut rng, p.dtype, b * sq * h * d));
        let k = stream
            .clone_htod(&reference::encode(
                p.dtype,
                &randn(&mut rng, p.dtype, b * sk * hkv * d),
            ))
            .unwrap();
        let v = stream
            .clone_htod(&reference::encode(
                p.dtype,
                &randn(&mut rng, p.dtype, b * sk * hkv * d),
            ))
            .unwrap();
        // The previous output can be V too where V has Q's shape (Sq = Sk, H = Hkv).
        let v_from_chain = sq == sk && h == hkv;
        // The gate: a long call on buffers of its own (not programmatic: 1k+ blocks a CTA).
        let gate = Problem::new(DType::Bf16, 1, 8192, 8192, 16, 16, 128, 128);
        let gate_in = stream.alloc_zeros::<u16>(8192 * 16 * 128).unwrap();
        let mut gate_out = stream.alloc_zeros::<u16>(8192 * 16 * 128).unwrap();
        let mut chain = |programmatic: bool| -> (Vec<u16>, Vec<u32>) {
            fa.set_programmatic_launch(programmatic);
            let mut x = stream.clone_htod(&q0).unwrap();
            let mut y = stream
                .clone_htod(&vec![reference::nan_bits(p.dtype); q0.len()])
                .unwrap();
            let mut lse = stream.alloc_zeros::<f32>(b * h * sq).unwrap();
            // Modules loaded and workspace made by a first call of each shape; then the gate,
            // which the chain queues behind while it runs (~1 ms), so the chain's calls reach
            // the device back to back rather than at the host's pace.
            let mut scratch = stream.alloc_zeros::<u16>(q0.len()).unwrap();
            fa.forward(&stream, &p, &x, &k, &v, &mut scratch, Some(&mut lse))
                .unwrap();
            for first in [true, false] {
                fa.forward(
                    &stream,
                    &gate,
                    &gate_in,
                    &gate_in,
                    &gate_in,
                    &mut gate_out,
                    None,
                )
                .unwrap();
                if first {
                    stream.synchronize().unwrap();
                }
            }
            for i in 0..STEPS {
                let (src, dst) = if i.is_multiple_of(2) {
                    (&x, &mut y)
                } else {
                    (&y, &mut x)
                };
                let vv = if v_from_chain { src } else { &v };
                fa.forward(&stream, &p, src, &k, vv, dst, Some(&mut lse))
                    .unwrap_or_else(|e| panic!("{label}: forward: {e}"));
            }
            let last = if STEPS.is_multiple_of(2) { &x } else { &y };
            let lse_bits = stream
                .clone_dtoh(&lse)
                .unwrap()
                .iter()
                .map(|x| x.to_bits())
                .collect();
            (stream.clone_dtoh(last).unwrap(), lse_bits)
        };
        let (plain, plain_lse) = chain(false);
        let overlapped: Vec<(Vec<u16>, Vec<u32>)> = (0..3).map(|_| chain(true)).collect();
        fa.set_programmatic_launch(true);
        let vals = reference::decode(p.dtype, &plain);
        if let Some(i) = vals.iter().position(|x| !x.is_finite()) {
            failures.push(format!(
                "{label} ({kernel}): plain chain out[{i}] = {}",
                vals[i]
            ));
        }
        for (r, (got, got_lse)) in overlapped.iter().enumerate() {
            if *got_lse != plain_lse {
                failures.push(format!(
                    "{label} ({kernel}): programmatic chain {r}'s LSE differs from stream order"
                ));
            }
            if *got != plain {
                let n = got.iter().zip(&plain).filter(|(a, b)| a != b).count();
                failures.push(format!(
                    "{label} ({kernel}): programmatic chain {r} differs from stream order in {n} of {} elements",
                    plain.len()
                ));
            }
        }
        println!(
            "{label}: {kernel}: {STEPS} chained calls (V chained too: {v_from_chain}) behind a gate, 3 programmatic chains = stream order"
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
