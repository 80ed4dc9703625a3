//! `cargo xtask gen --arch {sm90|sm100f|sm120|all} [--plan NAME] [--jobs N] [--check]`

use fa4gen::codegen::{self, Rendered};
use fa4gen::compile;
use fa4gen::manifest::{CubinInfo, Manifest};
use fa4gen::model::ModelAttention;
use fa4gen::nvrtc::Nvrtc;
use fa4gen::render::sha256_hex;
use fa4gen::{Arch, KernelSpec, plan};
use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;
use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

#[derive(clap::Args)]
pub struct GenArgs {
    /// Arch family: sm90, sm100f, sm120 or all.
    #[arg(long)]
    arch: String,
    /// Plan to build: a name (default, tiles, a shipped model such as gpt-oss-20b), a Hugging
    /// Face config.json (its model plan) or a text file of kernel stems, one per line.
    #[arg(long, default_value = "default")]
    plan: String,
    /// Parallel NVRTC compiles (default: one per core).
    #[arg(long)]
    jobs: Option<usize>,
    /// Render only and compare with generated/: fail on stale, missing or orphaned files.
    #[arg(long)]
    check: bool,
    /// Recompile every kernel even if its cubin is up to date.
    #[arg(long)]
    force: bool,
}

/// A plan by name or file: (the name its directory takes, its specs for `arch`).
pub fn resolve_plan(plan: &str, arch: Arch) -> Result<(String, Vec<KernelSpec>), String> {
    let path = Path::new(plan);
    if !path.is_file() {
        // Named plans build into their canonical directory (`gpt-oss` -> plans/gpt-oss-20b).
        let name = plan::canonical_name(plan).unwrap_or(plan);
        return Ok((
            name.to_string(),
            plan::plan(plan, arch).map_err(|e| e.to_string())?,
        ));
    }
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .ok_or_else(|| format!("{plan}: no file name"))?;
    // A file builds into the directory its name gives; one named as a shipped plan would
    // overwrite that plan's kernels, and `gen` removes what the file does not list.
    if plan::plan_names().contains(&name.as_str()) {
        return Err(format!(
            "{plan}: a plan file named `{name}` would build into the shipped plan `{name}`'s \
             directory and replace its kernels: rename the file"
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{plan}: {e}"))?;
    let mut specs: Vec<KernelSpec> = if plan.ends_with(".json") {
        let model = ModelAttention::from_hf_config(&text).map_err(|e| format!("{plan}: {e}"))?;
        let specs = model.plan(arch);
        if specs.is_empty() {
            return Err(format!(
                "{plan}: the model's attention (head dims {} x {}) takes no kernel on {arch}",
                model.head_dim, model.head_dim_v
            ));
        }
        specs
    } else {
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|l| l.parse::<KernelSpec>().map_err(|e| e.to_string()))
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .filter(|s| s.arch == arch)
            .collect()
    };
    for s in &specs {
        s.can_implement().map_err(|e| format!("{plan}: {e}"))?;
    }
    specs.sort_by_key(|s| s.stem());
    specs.dedup();
    Ok((name, specs))
}

pub fn run(a: GenArgs) -> Result<(), String> {
    let arches: Vec<Arch> = if a.arch == "all" {
        Arch::ALL.to_vec()
    } else {
        vec![a.arch.parse()?]
    };
    let root = crate::root();
    let generated = root.join("generated");
    let wall = Instant::now();

    if a.check {
        let mut problems = Vec::new();
        for &arch in &arches {
            let (name, specs) = resolve_plan(&a.plan, arch)?;
            let rendered = codegen::render_all(&specs).map_err(|e| e.to_string())?;
            let dir = codegen::out_dir(&generated, &name, arch);
            problems.extend(codegen::check_dir(&dir, arch, &name, &rendered));
        }
        if problems.is_empty() {
            println!(
                "generated/ is fresh ({} arch(es), plan {})",
                arches.len(),
                a.plan
            );
            return Ok(());
        }
        for p in &problems {
            eprintln!("{p}");
        }
        return Err(format!(
            "{} file(s) differ from a fresh rendering: run `cargo xtask gen --arch {} --plan {}` and commit",
            problems.len(),
            a.arch,
            a.plan
        ));
    }

    let jobs = a
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(jobs)
        .build()
        .map_err(|e| e.to_string())?;
    let nvrtc = Nvrtc::locate(&root.join(".nvrtc")).map_err(|e| e.to_string())?;
    let (vmaj, vmin) = nvrtc.version();
    println!(
        "NVRTC {vmaj}.{vmin} ({}), {jobs} job(s)",
        nvrtc.path().display()
    );

    let mut all_seconds = Vec::new();
    for &arch in &arches {
        let (name, specs) = resolve_plan(&a.plan, arch)?;
        let rendered = codegen::render_all(&specs).map_err(|e| e.to_string())?;
        let dir = codegen::out_dir(&generated, &name, arch);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        remove_orphans(&dir, &rendered)?;
        let previous = Manifest::read(&dir).ok();
        let mut manifest = codegen::source_manifest(arch, &name, &rendered);
        manifest.nvrtc = format!("{vmaj}.{vmin}");
        manifest.nvrtc_options = fa4gen::compile::arch_options(arch);

        for r in &rendered {
            write_if_different(
                &dir.join(format!("{}.cu", r.spec.stem())),
                r.source.as_bytes(),
            )?;
        }

        // Reuse a cubin whose source, headers and NVRTC are unchanged and whose bytes still hash
        // to what the previous manifest recorded.
        let todo: Vec<(usize, &Rendered)> = rendered
            .iter()
            .enumerate()
            .filter(|(i, _)| {
                a.force || !up_to_date(&dir, previous.as_ref(), &manifest, &manifest.kernels[*i])
            })
            .collect();
        for (i, e) in manifest.kernels.iter_mut().enumerate() {
            if !todo.iter().any(|(j, _)| *j == i) {
                e.cubin = previous
                    .as_ref()
                    .and_then(|p| p.entry(&e.stem))
                    .and_then(|p| p.cubin.clone());
            }
        }

        let bar = ProgressBar::new(todo.len() as u64);
        bar.set_style(
            ProgressStyle::with_template("{prefix:>7} [{bar:40}] {pos}/{len} {elapsed} {msg}")
                .map_err(|e| e.to_string())?
                .progress_chars("=> "),
        );
        bar.set_prefix(arch.name());
        let results: Mutex<Vec<(usize, CubinInfo, f64)>> = Mutex::new(Vec::new());
        let failures: Mutex<Vec<String>> = Mutex::new(Vec::new());
        pool.install(|| {
            todo.par_iter().for_each(|(i, r)| {
                match compile::compile(&nvrtc, &r.spec, &r.source) {
                    Ok(k) => {
                        for w in &k.warnings {
                            bar.println(format!("{}: {w}", r.spec.stem()));
                        }
                        let path = dir.join(format!("{}.cubin", r.spec.stem()));
                        if let Some(w) = k.wgmma_serialization() {
                            // Correct but ~30% slow, and nothing else would say so: refused.
                            lock(&failures).push(format!(
                                "{}: ptxas serialised its wgmma (`{}`); refused, as such a \
                                 kernel runs its warpgroup MMAs one after another (a wait on one \
                                 path only, or an accumulator read between a wgmma and its wait)",
                                r.spec.stem(),
                                w.trim()
                            ));
                        } else if let Err(e) = std::fs::write(&path, &k.cubin) {
                            lock(&failures).push(format!("{}: {e}", path.display()));
                        } else {
                            let info = CubinInfo {
                                sha256: sha256_hex(&k.cubin),
                                bytes: k.cubin.len() as u64,
                                resources: k.resources,
                            };
                            lock(&results).push((*i, info, k.seconds));
                        }
                    }
                    Err(e) => lock(&failures).push(e.to_string()),
                }
                bar.set_message(r.spec.stem());
                bar.inc(1);
            })
        });
        bar.finish_with_message("done");
        let failures = failures.into_inner().unwrap_or_default();
        if !failures.is_empty() {
            return Err(failures.join("\n"));
        }
        for (i, info, secs) in results.into_inner().unwrap_or_default() {
            manifest.kernels[i].cubin = Some(info);
            all_seconds.push(secs);
        }
        write_if_different(
            &dir.join(fa4gen::manifest::FILE_NAME),
            manifest.to_json().as_bytes(),
        )?;
        let mut spills: Vec<(u32, &str)> = manifest
            .kernels
            .iter()
            .filter_map(|e| {
                let r = e.cubin.as_ref()?.resources?;
                let bytes = r.spill_store_bytes + r.spill_load_bytes + r.stack_frame_bytes;
                (bytes > 0).then_some((bytes, e.stem.as_str()))
            })
            .collect();
        spills.sort();
        println!(
            "{arch}: {} kernels in {} ({} compiled, {} up to date){}",
            manifest.kernels.len(),
            dir.strip_prefix(&root).unwrap_or(&dir).display(),
            todo.len(),
            manifest.kernels.len() - todo.len(),
            match spills.last() {
                None => "; no local memory".to_string(),
                Some((bytes, stem)) => format!(
                    "; {} use local memory (spills/stack; worst {stem}: {bytes} bytes; see manifest.json)",
                    spills.len()
                ),
            }
        );
    }
    all_seconds.sort_by(f64::total_cmp);
    if let Some(median) = all_seconds.get(all_seconds.len() / 2) {
        println!(
            "NVRTC per kernel: median {median:.2} s, max {:.2} s over {} compiles; wall {:.1} s",
            all_seconds.last().copied().unwrap_or(0.0),
            all_seconds.len(),
            wall.elapsed().as_secs_f64()
        );
    } else {
        println!(
            "nothing to compile; wall {:.1} s",
            wall.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn up_to_date(
    dir: &Path,
    previous: Option<&Manifest>,
    fresh: &Manifest,
    entry: &fa4gen::manifest::Entry,
) -> bool {
    let Some(prev) = previous else { return false };
    if prev.nvrtc != fresh.nvrtc
        || prev.nvrtc_options != fresh.nvrtc_options
        || prev.headers_sha256 != fresh.headers_sha256
    {
        return false;
    }
    let Some(old) = prev.entry(&entry.stem) else {
        return false;
    };
    let Some(cubin) = &old.cubin else {
        return false;
    };
    old.source_sha256 == entry.source_sha256
        && std::fs::read(dir.join(entry.cubin_file())).is_ok_and(|b| sha256_hex(&b) == cubin.sha256)
}

fn remove_orphans(dir: &Path, rendered: &[Rendered]) -> Result<(), String> {
    let keep: std::collections::BTreeSet<String> = rendered
        .iter()
        .flat_map(|r| {
            [
                format!("{}.cu", r.spec.stem()),
                format!("{}.cubin", r.spec.stem()),
            ]
        })
        .collect();
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if (name.ends_with(".cu") || name.ends_with(".cubin")) && !keep.contains(&name) {
            std::fs::remove_file(e.path()).map_err(|err| format!("{name}: {err}"))?;
        } else if e.path().is_file() && !keep.contains(&name) && name != fa4gen::manifest::FILE_NAME
        {
            // Not gen's to delete (an editor's swap file, a note), but `gen --check` fails on
            // any file it did not write: say so here rather than leave it to CI.
            eprintln!(
                "warning: {} is no generated file; `gen --check` reports it until it is removed",
                e.path().display()
            );
        }
    }
    Ok(())
}

fn write_if_different(path: &Path, bytes: &[u8]) -> Result<(), String> {
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    std::fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()))
}
