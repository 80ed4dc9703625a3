//! Time fa4gen's forward on the DESIGN.md §8 shapes (B·S = 16k tokens, H·d = 2048): median of
//! per-launch CUDA-event times after warm-up, inputs rotated through enough copies to exceed
//! L2. One JSON line per shape on stdout, for scripts/bench_report.py to set beside torch SDPA
//! measured in the same run.
//!
//! usage: bench_fwd <kernels root> [d,s,causal[,tile_m,tile_n][,option ...] ...]   (default: the issue-2 set)
//!        options (serving calls at the same shape and memory): gN (GQA: H / N KV heads, packed
//!        as selection decides, or as pack / nopack say), varlen (the batch as packed rows with
//!        cu_seqlens, equal lengths; with pages, seqused_k), ragged (varlen with lengths S, then
//!        uniform in [S/16, S] from a fixed generator, over the dense call's tokens or 4 S if
//!        more; FLOPs per sequence), pageN (K/V as pages of N keys, in order), sink (a per-head sink logit),
//!        wN (a sliding window of N keys: window_size (N - 1, 0); FLOPs on the visible pairs)
//!        bench_fwd <kernels root> --once d,s,causal  (one launch, for compute-sanitizer)
//!        bench_fwd <kernels root> --one d,s,causal   (one launch at the benchmark shape, for ncu)
//!        bench_fwd --stems d,s,causal ...   (the kernels the shapes select on the H200; no GPU)
//! FA4GEN_JIT=1 (built with the `jit` feature): kernels the library lacks compile at first use.
//! FA4GEN_BENCH_WARM_S / FA4GEN_BENCH_WINDOW_S: the sustained protocol (below).
//! FA4GEN_BENCH_DATA=uniform: inputs uniform in [-2, 2) (the default is standard normal, as the peers').

use fa4gen::DType;
use fa4gen::runtime::{self, FlashAttention, Problem};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;
use std::time::Instant;

#[derive(Clone, Default)]
struct Shape {
    d: usize,
    dv: usize,
    s: usize,
    causal: bool,
    tile: Option<(u32, u32)>,
    /// Query heads per KV head.
    group: usize,
    varlen: bool,
    /// Varlen with ragged lengths (the same tokens as the dense call, the longest S).
    ragged: bool,
    page: Option<usize>,
    sink: bool,
    /// GQA packing forced on or off (else selection decides).
    pack: Option<bool>,
    /// A sliding window of this many keys, the query's own and those before it.
    window: Option<usize>,
    /// The options as given (`g8,varlen`), empty for a dense call.
    tag: String,
}

/// `d,s,causal[,tile_m,tile_n][,gN][,varlen][,pageN][,sink][,wN]`
fn parse_shape(arg: &str) -> Option<Shape> {
    let v: Vec<&str> = arg.split(',').collect();
    let d: usize = v.first()?.parse().ok()?;
    let mut shape = Shape {
        d,
        dv: if d == 192 { 128 } else { d },
        s: v.get(1)?.parse().ok()?,
        causal: v.get(2)? == &"1",
        group: 1,
        ..Shape::default()
    };
    let mut rest = &v[3.min(v.len())..];
    if let [m, n, more @ ..] = rest
        && let (Ok(m), Ok(n)) = (m.parse(), n.parse())
    {
        shape.tile = Some((m, n));
        rest = more;
    }
    for opt in rest {
        match *opt {
            "varlen" => shape.varlen = true,
            "ragged" => {
                shape.varlen = true;
                shape.ragged = true;
            }
            "pack" => shape.pack = Some(true),
            "nopack" => shape.pack = Some(false),
            "sink" => shape.sink = true,
            o if o.starts_with('g') => shape.group = o[1..].parse().ok().filter(|&g| g > 0)?,
            o if o.starts_with('w') => shape.window = Some(o[1..].parse().ok().filter(|&w| w > 0)?),
            o if o.starts_with("page") => {
                shape.page = Some(o[4..].parse().ok().filter(|&p| p > 0)?)
            }
            _ => return None,
        }
    }
    shape.tag = rest.join(",");
    Some(shape)
}

fn shapes(args: &[String]) -> Result<Vec<Shape>, String> {
    if !args.is_empty() {
        return args
            .iter()
            .map(|a| parse_shape(a).ok_or_else(|| format!("bad shape {a:?}")))
            .collect();
    }
    let mut out = Vec::new();
    for d in [64, 128, 256, 192] {
        for s in [512, 1024, 4096, 16384] {
            for causal in [false, true] {
                out.extend(parse_shape(&format!("{d},{s},{}", causal as u8)));
            }
        }
    }
    Ok(out)
}

/// A shape's call: the problem, the host int32 arrays its options pass (cu_seqlens, then the
/// page table or seqused_k) and its sequences' lengths.
struct Call {
    problem: Problem,
    seq_i32: Vec<Vec<i32>>,
    lens: Vec<usize>,
}

/// The call a shape stands for (B·S = 16k tokens, H·d = 2048, H 16 for 192/128, as the
/// anchors; `small`: B 1, H 2, for compute-sanitizer).
fn problem_of(shape: &Shape, small: bool) -> Result<Call, String> {
    let &Shape {
        d,
        dv,
        s,
        causal,
        tile,
        ..
    } = shape;
    let b = if small { 1 } else { (16384 / s).max(1) };
    // --once: two KV heads, each with its group (H 2 dense; a grouped call keeps whole groups).
    let h = if small {
        2 * shape.group
    } else if d == 192 {
        16
    } else {
        2048 / d
    };
    if !h.is_multiple_of(shape.group) || shape.page.is_some_and(|pg| !s.is_multiple_of(pg)) {
        return Err(format!(
            "{}: H {h} / group, S {s} / page must divide",
            shape.tag
        ));
    }
    let hkv = h / shape.group;
    // Sequence lengths: b of s, or (ragged) s first, then uniform in [s/16, s] until max(b, 4)
    // * s tokens are spent (an LCG: the same lengths in every run).
    let mut lens = vec![s; b];
    if shape.ragged {
        if shape.page.is_some() || small {
            return Err(format!(
                "{}: ragged takes no pages and no --once",
                shape.tag
            ));
        }
        lens = vec![s];
        let mut x = 0x2545f4914f6cdd1du64;
        let mut left = b.max(4) * s - s; // at least 4 * S tokens: a batch, even at S = 16k
        while left > 0 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let l = (s / 16 + (x >> 33) as usize % (s - s / 16 + 1)).clamp(1, left);
            lens.push(l);
            left -= l;
        }
    }
    let mut p = Problem::new(DType::Bf16, lens.len(), s, s, h, hkv, d, dv);
    p.causal = causal;
    p.tile_mn = tile;
    // The serving options keep the dense call's memory: packed rows of equal sequences are
    // the batch's rows; pages in order are its K/V rows.
    let mut seq_i32 = Vec::new(); // host arrays: cu_seqlens, page table
    p.pack_gqa = shape.pack;
    if shape.varlen {
        // Packed rows; with pages, packed queries and each sequence's key count (seqused_k:
        // FA4 takes no cu_seqlens_k with a page table).
        let paged = shape.page.is_some();
        let total: usize = lens.iter().sum(); // b * s, or (ragged) at least 4 * s
        p.varlen = Some(runtime::Varlen {
            total_q: Some(total),
            total_k: (!paged).then_some(total),
            seqused_k: paged,
            ..Default::default()
        });
        p.q_strides = runtime::Strides::contiguous(total, h, d);
        p.o_strides = runtime::Strides::contiguous(total, h, dv);
        if !paged {
            p.k_strides = runtime::Strides::contiguous(total, hkv, d);
            p.v_strides = runtime::Strides::contiguous(total, hkv, dv);
        }
        let mut cu = vec![0i32];
        for &l in &lens {
            cu.push(cu[cu.len() - 1] + l as i32);
        }
        seq_i32.push(cu);
        if paged {
            seq_i32.push(vec![s as i32; b]);
        }
    }
    if let Some(page) = shape.page {
        let pps = s / page;
        p.paged = Some(runtime::Paged {
            page_size: page,
            num_pages: b * pps,
            pages_per_seq: pps,
            page_table_stride: pps,
        });
        p.k_strides = runtime::Strides::contiguous(page, hkv, d);
        p.v_strides = runtime::Strides::contiguous(page, hkv, dv);
        seq_i32.push((0..(b * pps) as i32).collect());
    }
    p.sinks = shape.sink;
    if let Some(w) = shape.window {
        p.window = (Some(w as i64 - 1), Some(0));
    }
    Ok(Call {
        problem: p,
        seq_i32,
        lens,
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let t_start = Instant::now();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = args
        .first()
        .ok_or("usage: bench_fwd <kernels root> [d,s,causal ...]")?;
    // --stems: the kernels these shapes select on the H200, no GPU needed (what a variant
    // root for scripts/ab.sh must hold).
    if args.first().is_some_and(|a| a == "--stems") {
        let h200 = fa4gen::select::DeviceInfo {
            major: 9,
            minor: 0,
            sm_count: 132,
        };
        for shape in shapes(&args[1..])? {
            let p = problem_of(&shape, false)?.problem;
            let v = p.validate()?;
            println!("{}", fa4gen::select::select(&p, &v, &h200)?.spec.stem());
        }
        return Ok(());
    }
    // --once: one small launch (B 1, two KV heads); --one: one launch at the benchmark's shape.
    let small = args.get(1).is_some_and(|a| a == "--once");
    let once = small || args.get(1).is_some_and(|a| a == "--one");
    let rest = if once { &args[2..] } else { &args[1..] };
    let ctx = runtime::context(0)?;
    let t_ctx = t_start.elapsed();
    let stream = ctx.default_stream();
    #[allow(unused_mut)]
    let mut fa = FlashAttention::from_root(ctx.clone(), root)?;
    // FA4GEN_JIT=1 (a `jit` build): kernels the library lacks, or holds in another rendering,
    // compile at first use (NVRTC), as in the PyTorch drop-in.
    #[cfg(feature = "jit")]
    if std::env::var("FA4GEN_JIT").is_ok_and(|v| v == "1") {
        use fa4gen::runtime::jit::Jit;
        fa.set_jit(Jit::new(Jit::default_dir()));
    }
    // FA4GEN_PDL=0: forwards launched in plain stream order rather than as programmatic
    // dependents of the kernel before them (the default).
    fa.set_programmatic_launch(std::env::var("FA4GEN_PDL").map_or(true, |v| v != "0"));
    let l2_bytes = ctx
        .attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?
        as usize;

    for (i, shape) in shapes(rest)?.into_iter().enumerate() {
        let Shape {
            d,
            dv,
            s,
            causal,
            tile,
            ..
        } = shape.clone();
        let Call {
            problem: mut p,
            seq_i32,
            lens,
        } = problem_of(&shape, small)?;
        let (h, hkv) = (p.heads, p.heads_kv);
        let b = lens.iter().sum::<usize>() / s; // the dense call's batch: its tokens and memory
        let seq_bufs = seq_i32
            .iter()
            .map(|x| stream.clone_htod(x))
            .collect::<Result<Vec<_>, _>>()?;
        let sink_buf = stream.clone_htod(&vec![1.5f32; h])?;
        let extra = runtime::SeqBuffers {
            cu_seqlens_q: shape.varlen.then(|| &seq_bufs[0]),
            cu_seqlens_k: (shape.varlen && shape.page.is_none()).then(|| &seq_bufs[0]),
            seqused_k: (shape.varlen && shape.page.is_some()).then(|| &seq_bufs[1]),
            page_table: shape.page.map(|_| &seq_bufs[seq_bufs.len() - 1]),
            sinks: shape.sink.then_some(&sink_buf),
            ..Default::default()
        };
        // FA4GEN_CTA_PAIRS=0/1 forces Problem::cta_pairs off/on (A/B of the pairs rule).
        p.cta_pairs = std::env::var("FA4GEN_CTA_PAIRS").ok().map(|v| v == "1");
        // FA4GEN_SPLIT_TAIL=0/1 forces Problem::split_tail off/on (A/B of the split tail).
        p.split_tail = std::env::var("FA4GEN_SPLIT_TAIL").ok().map(|v| v == "1");
        // FA4GEN_M_MAJOR=0/1 forces Problem::m_major_runs off/on (A/B of the causal order).
        p.m_major_runs = std::env::var("FA4GEN_M_MAJOR").ok().map(|v| v == "1");
        // FA4GEN_LPT=0/1 forces Problem::lpt_rounds off/on (the host's causal order).
        p.lpt_rounds = std::env::var("FA4GEN_LPT").ok().map(|v| v == "1");
        let why = match fa.plan(&p) {
            Err(e) => Some(e.to_string()),
            Ok((_, sel)) if !fa.can_load(&sel.spec) => Some(format!("{} is not built", sel.spec)),
            Ok(_) => None,
        };
        if let Some(why) = why {
            // A tile the family cannot build, or one this library lacks (sweeps ask for all
            // of them): say so, go on.
            println!(
                "{{\"skipped\":true,\"d\":{d},\"s\":{s},\"tile\":\"{tile:?}\",\"why\":\"{why}\"}}"
            );
            continue;
        }
        let (q_len, k_len, v_len, o_len) = (
            b * s * h * d,
            b * s * hkv * d,
            b * s * hkv * dv,
            b * s * h * dv,
        );
        let set_bytes = 2 * (q_len + k_len + v_len + o_len);
        let copies = if once {
            1
        } else {
            (3 * l2_bytes).div_ceil(set_bytes).clamp(1, 8)
        };
        // Random bf16 from a fixed LCG: real data, not zeros (zeros run faster), and by default
        // standard normal, as torch.randn gives the peers (scripts/bench_sdpa.py): the tensor
        // cores' power depends on the data, and fa4gen on uniform [-2, 2) inputs read 0.5-1.8%
        // faster at the 700 W cap than on normal ones (FA4GEN_BENCH_DATA=uniform: the old
        // inputs, for comparison with earlier sessions' numbers).
        let uniform_data = std::env::var("FA4GEN_BENCH_DATA").is_ok_and(|v| v == "uniform");
        let mut x = 0x9e3779b97f4a7c15u64 ^ i as u64;
        let mut next = move || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            x
        };
        // 2^16 standard normal samples, drawn from by the top 16 bits of each LCG step (a
        // normal sample per element would take seconds at these sizes).
        let mut rng = StdRng::seed_from_u64(i as u64);
        let normal: Vec<u16> = (0..1 << 16)
            .map(|_| half::bf16::from_f32(rng.sample::<f32, _>(StandardNormal)).to_bits())
            .collect();
        let mut fill = |n: usize| -> Vec<u16> {
            (0..n)
                .map(|_| {
                    let r = next();
                    if uniform_data {
                        half::bf16::from_f32(((r >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0)
                            .to_bits()
                    } else {
                        normal[(r >> 48) as usize]
                    }
                })
                .collect()
        };
        let mut sets = Vec::new();
        for _ in 0..copies {
            sets.push((
                stream.clone_htod(&fill(q_len))?,
                stream.clone_htod(&fill(k_len))?,
                stream.clone_htod(&fill(v_len))?,
                stream.alloc_zeros::<u16>(o_len)?,
            ));
        }
        let t_first = Instant::now();
        {
            let (q, k, v, o) = &mut sets[0];
            fa.forward_varlen(&stream, &p, q, k, v, o, None, &extra)?;
            stream.synchronize()?;
        }
        let first_ms = t_first.elapsed().as_secs_f64() * 1e3;
        if once {
            println!(
                "{{\"once\":true,\"d\":{d},\"s\":{s},\"causal\":{causal},\"first_call_ms\":{first_ms:.3},\"ctx_ms\":{:.1}}}",
                t_ctx.as_secs_f64() * 1e3
            );
            continue;
        }
        // Sustained mode (FA4GEN_BENCH_WARM_S = seconds > 0): the calls run that long first, so the
        // power limiter has settled (the long cells run at the 700 W cap, the clock ~1.5-1.8 GHz
        // there), then a window of FA4GEN_BENCH_WINDOW_S seconds is timed with no sync between
        // calls. Default: the burst protocol, 10 warm-ups and 60 calls each synced.
        let env_s = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<f64>().ok());
        let warm_s = env_s("FA4GEN_BENCH_WARM_S").unwrap_or(0.0);
        let timing = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
        let mut times = Vec::new();
        if warm_s > 0.0 {
            let t0 = Instant::now();
            let mut n = 0usize;
            while t0.elapsed().as_secs_f64() < warm_s || n < 10 {
                let (q, k, v, o) = &mut sets[n % copies];
                fa.forward_varlen(&stream, &p, q, k, v, o, None, &extra)?;
                n += 1;
                if n.is_multiple_of(16) {
                    stream.synchronize()?;
                }
            }
            stream.synchronize()?;
            let per_call = t0.elapsed().as_secs_f64() / n as f64;
            let window = env_s("FA4GEN_BENCH_WINDOW_S").unwrap_or(0.5);
            let iters = ((window / per_call) as usize).clamp(40, 2000);
            // FA4GEN_BENCH_BATCH=1: the window's calls back to back between one pair of events
            // (the mean per call: launch gaps and overlap between calls count as an engine sees
            // them), instead of a pair of events around each call (their median).
            if std::env::var("FA4GEN_BENCH_BATCH").is_ok_and(|v| v == "1") {
                let (a, b) = (ctx.new_event(timing)?, ctx.new_event(timing)?);
                a.record(&stream)?;
                for it in 0..iters {
                    let (q, k, v, o) = &mut sets[it % copies];
                    fa.forward_varlen(&stream, &p, q, k, v, o, None, &extra)?;
                }
                b.record(&stream)?;
                stream.synchronize()?;
                let per_call = a.elapsed_ms(&b)? as f64 / iters as f64;
                times.extend(std::iter::repeat_n(per_call, iters));
            } else {
                let mut events = Vec::with_capacity(iters);
                for it in 0..iters {
                    let (q, k, v, o) = &mut sets[it % copies];
                    let (a, b) = (ctx.new_event(timing)?, ctx.new_event(timing)?);
                    a.record(&stream)?;
                    fa.forward_varlen(&stream, &p, q, k, v, o, None, &extra)?;
                    b.record(&stream)?;
                    events.push((a, b));
                }
                stream.synchronize()?;
                for (a, b) in &events {
                    times.push(a.elapsed_ms(b)? as f64);
                }
            }
        } else {
            for it in 0..10 {
                let (q, k, v, o) = &mut sets[it % copies];
                fa.forward_varlen(&stream, &p, q, k, v, o, None, &extra)?;
            }
            let start = ctx.new_event(timing)?;
            let end = ctx.new_event(timing)?;
            for it in 0..60 {
                let (q, k, v, o) = &mut sets[it % copies];
                start.record(&stream)?;
                fa.forward_varlen(&stream, &p, q, k, v, o, None, &extra)?;
                end.record(&stream)?;
                end.synchronize()?;
                times.push(start.elapsed_ms(&end)? as f64);
            }
        }
        let iters = times.len();
        times.sort_by(f64::total_cmp);
        let ms = times[iters / 2];
        // Visible (query, key) pairs: all, half (causal), or under a window of w keys
        // sum over queries of min(q + 1, w).
        let pairs = |l: usize| -> f64 {
            match shape.window {
                Some(w) => {
                    let head = l.min(w);
                    (head * (head + 1) / 2 + (l - head) * w) as f64
                }
                None if causal => (l * l) as f64 / 2.0,
                None => (l * l) as f64,
            }
        };
        let flops = lens
            .iter()
            .map(|&l| 2.0 * h as f64 * pairs(l) * (d + dv) as f64)
            .sum::<f64>();
        let (_, sel) = fa.plan(&p)?;
        let tag = &shape.tag;
        println!(
            "{{\"impl\":\"fa4gen\",\"d\":{d},\"dv\":{dv},\"s\":{s},\"b\":{b},\"h\":{h},\"hkv\":{hkv},\"causal\":{causal},\"tag\":\"{tag}\",\"ms\":{ms:.4},\"tflops\":{:.1},\"spread\":{:.3},\"first_call_ms\":{first_ms:.2},\"warm_s\":{warm_s},\"kernel\":\"{}\"}}",
            flops / ms / 1e9,
            times[iters * 9 / 10] / times[iters / 10],
            sel.spec.stem()
        );
    }
    Ok(())
}
