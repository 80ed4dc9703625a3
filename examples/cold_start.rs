//! Cold start and host cost, measured in one fresh process:
//! - process start → CUDA context → inputs on the GPU (the caller's part) → library opened →
//!   first correct result for a planned key (select, verify + load the cubin, launch, sync,
//!   download; checked against the CPU reference afterwards);
//! - host cost of `forward` (validation, selection, cached module, cuLaunchKernel) per call, on a
//!   tiny problem, without syncs in the timed loop;
//! - selection alone (validate + select), per call.
//!
//! - with `--jit` (built with the `jit` feature): the same for a key no plan ships (tile 64x128),
//!   compiled by NVRTC at first use into a fresh cache, then loaded from that cache by a new
//!   handle (what a second process sees).
//!
//! usage: cold_start <kernels root> [--jit]

use fa4gen::DType;
use fa4gen::reference::{self, RefProblem};
use fa4gen::runtime::{self, FlashAttention, Problem};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let t0 = Instant::now();
    let root = std::env::args()
        .nth(1)
        .ok_or("usage: cold_start <kernels root>")?;
    let ctx = runtime::context(0)?;
    let stream = ctx.default_stream();
    let t_ctx = t0.elapsed();
    let (b, s, h, d) = (1, 256, 2, 128);
    let mut p = Problem::new(DType::Bf16, b, s, s, h, h, d, d);
    p.causal = true;
    let n = b * s * h * d;
    let host: Vec<f32> = (0..3 * n)
        .map(|i| reference::round_to(DType::Bf16, ((i * 7919 % 1000) as f32 / 500.0) - 1.0))
        .collect();
    let (q, k, v) = (&host[..n], &host[n..2 * n], &host[2 * n..]);
    let dq = stream.clone_htod(&reference::encode(DType::Bf16, q))?;
    let dk = stream.clone_htod(&reference::encode(DType::Bf16, k))?;
    let dv = stream.clone_htod(&reference::encode(DType::Bf16, v))?;
    let mut dout = stream.alloc_zeros::<u16>(n)?;
    stream.synchronize()?;
    let t_inputs = t0.elapsed();
    let fa = FlashAttention::from_root(ctx.clone(), &root)?;
    let t_open = t0.elapsed();
    fa.forward(&stream, &p, &dq, &dk, &dv, &mut dout, None)?;
    let out = reference::decode(DType::Bf16, &stream.clone_dtoh(&dout)?);
    let t_first = t0.elapsed();
    let rp = RefProblem {
        batch: b,
        seqlen_q: s,
        seqlen_k: s,
        heads: h,
        heads_kv: h,
        d,
        dv: d,
        scale: 1.0 / (d as f64).sqrt(),
        causal: true,
        window: (None, None),
        softcap: 0.0,
        sinks: None,
    };
    let all = reference::all_queries(&rp);
    let (r, _) = reference::attention_f64(&rp, q, k, v, &all);
    let pt = reference::attention_lowp(&rp, DType::Bf16, q, k, v, &all);
    let rep = reference::check_oracle(DType::Bf16, &out, &r, &pt, false);
    if !rep.pass() {
        return Err(format!("first result is wrong: {rep:?}").into());
    }

    // Host cost per forward (module cached), tiny problem, queue drained every 256 calls.
    let mut tiny = Problem::new(DType::Bf16, 1, 16, 16, 1, 1, 64, 64);
    tiny.causal = true;
    let tq = stream.alloc_zeros::<u16>(16 * 64)?;
    let mut to = stream.alloc_zeros::<u16>(16 * 64)?;
    for _ in 0..100 {
        fa.forward(&stream, &tiny, &tq, &tq, &tq, &mut to, None)?;
    }
    stream.synchronize()?;
    let iters = 20_000;
    let mut host_ns = 0u128;
    for i in 0..iters {
        let t = Instant::now();
        fa.forward(&stream, &tiny, &tq, &tq, &tq, &mut to, None)?;
        host_ns += t.elapsed().as_nanos();
        if i % 256 == 255 {
            stream.synchronize()?;
        }
    }
    stream.synchronize()?;
    let t = Instant::now();
    let sel_iters = 1_000_000;
    let mut acc = 0u32;
    for _ in 0..sel_iters {
        let (_, sel) = fa.plan(std::hint::black_box(&p))?;
        acc = acc.wrapping_add(sel.grid.0);
    }
    let sel_ns = t.elapsed().as_nanos() as f64 / sel_iters as f64;
    std::hint::black_box(acc);

    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    println!(
        "{{\"cold_start\":{{\"context_ms\":{:.1},\"inputs_ms\":{:.2},\"open_library_ms\":{:.3},\"first_result_ms\":{:.3},\"after_context_ms\":{:.2},\"process_to_first_result_ms\":{:.1},\"kernel\":\"{}\",\"err_over_bound\":{:.3}}},\"host_us_per_forward\":{:.2},\"plan_ns_per_call\":{:.0}}}",
        ms(t_ctx),
        ms(t_inputs - t_ctx),
        ms(t_open - t_inputs),
        ms(t_first - t_open),
        ms(t_first - t_ctx),
        ms(t_first),
        fa.plan(&p)?.1.spec.stem(),
        rep.err / rep.bound.max(1e-30),
        host_ns as f64 / iters as f64 / 1e3,
        sel_ns
    );
    if std::env::args().any(|a| a == "--jit") {
        jit(&ctx, &root, &p, (&dq, &dk, &dv), &out)?;
    }
    Ok(())
}

/// Run `p` on a tile no plan ships through a fresh jit cache: first use compiles, a second
/// handle on the same cache loads; both results must equal the planned kernel's `want`.
#[cfg(feature = "jit")]
fn jit(
    ctx: &std::sync::Arc<cudarc::driver::CudaContext>,
    root: &str,
    p: &Problem,
    (q, k, v): (
        &cudarc::driver::CudaSlice<u16>,
        &cudarc::driver::CudaSlice<u16>,
        &cudarc::driver::CudaSlice<u16>,
    ),
    want: &[f32],
) -> Result<(), Box<dyn std::error::Error>> {
    use fa4gen::runtime::jit::Jit;
    let stream = ctx.default_stream();
    let cache = std::env::temp_dir().join(format!("fa4gen-jit-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    let mut pj = p.clone();
    pj.tile_mn = Some((64, 128));
    let mut times = Vec::new();
    for _ in 0..2 {
        let t = Instant::now();
        let fa = FlashAttention::from_root(ctx.clone(), root)?.with_jit(Jit::new(&cache));
        let mut out = stream.alloc_zeros::<u16>(want.len())?;
        fa.forward(&stream, &pj, q, k, v, &mut out, None)?;
        let got = reference::decode(DType::Bf16, &stream.clone_dtoh(&out)?);
        times.push(t.elapsed().as_secs_f64() * 1e3);
        let diff = got
            .iter()
            .zip(want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        if diff > 1e-2 {
            return Err(format!("jit kernel differs from the planned one by {diff}").into());
        }
        println!(
            "{{\"jit\":{{\"kernel\":\"{}\",\"first_result_ms\":{:.1}}}}}",
            fa.plan(&pj)?.1.spec.stem(),
            times.last().unwrap_or(&0.0)
        );
    }
    Ok(())
}

#[cfg(not(feature = "jit"))]
fn jit(
    _: &std::sync::Arc<cudarc::driver::CudaContext>,
    _: &str,
    _: &Problem,
    _: (
        &cudarc::driver::CudaSlice<u16>,
        &cudarc::driver::CudaSlice<u16>,
        &cudarc::driver::CudaSlice<u16>,
    ),
    _: &[f32],
) -> Result<(), Box<dyn std::error::Error>> {
    Err("built without the `jit` feature".into())
}
