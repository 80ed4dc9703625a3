//! `cargo xtask stage`: everything a GPU host without cargo needs, in `.stage/` (git-ignored):
//! the release test binaries (`.stage/bin/<test>`, the library's unit tests as `fa4gen`), the
//! examples, and the kernel directories (`.stage/generated/<arch>/`). `scripts/gpu-check.sh`
//! runs them there.

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};

#[derive(clap::Args)]
pub struct StageArgs {
    /// Arch families whose cubins to stage (comma separated).
    #[arg(long, default_value = "sm90")]
    arch: String,
    /// Other plans whose built kernels to stage (comma separated, or all): the device tool
    /// carries at most 64 MiB.
    #[arg(long, default_value = "tiles,gpt-oss-20b")]
    plans: String,
}

impl Default for StageArgs {
    fn default() -> StageArgs {
        StageArgs {
            arch: "sm90".into(),
            plans: "tiles,gpt-oss-20b".into(),
        }
    }
}

pub fn run(a: StageArgs) -> Result<(), String> {
    let root = crate::root();
    let stage = root.join(".stage");
    let _ = std::fs::remove_dir_all(&stage);
    let bin = stage.join("bin");
    std::fs::create_dir_all(&bin).map_err(|e| e.to_string())?;

    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut n = 0;
    // Test binaries, then the examples as
    // programs (built by `cargo build`: under `cargo test` they would be test harnesses).
    for args in [
        // jit on: the feature tests compile kernels no plan ships, in parallel, on the GPU host.
        &[
            "test",
            "--release",
            "--no-run",
            "--lib",
            "--tests",
            "--features",
            "jit",
        ][..],
        &[
            "build",
            "--release",
            "--lib",
            "--examples",
            "--features",
            "jit",
        ][..],
    ] {
        let out = Command::new(&cargo)
            .current_dir(&root)
            .args(args)
            .args(["--message-format=json", "-p", "fa4gen"])
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("running cargo: {e}"))?;
        if !out.status.success() {
            return Err(format!("cargo {} failed", args.join(" ")));
        }
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let Ok(v) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let (Some(exe), Some(name)) = (v["executable"].as_str(), v["target"]["name"].as_str())
            else {
                continue;
            };
            let dst = bin.join(name);
            std::fs::copy(exe, &dst).map_err(|e| format!("{exe}: {e}"))?;
            n += 1;
        }
    }
    // The C ABI library, for the C test and the Python package.
    let lib = stage.join("lib");
    std::fs::create_dir_all(&lib).map_err(|e| e.to_string())?;
    let so = root.join("target/release/libfa4gen.so");
    std::fs::copy(&so, lib.join("libfa4gen.so")).map_err(|e| format!("{}: {e}", so.display()))?;
    // Every family's manifest (tests open other families' libraries to check refusals), and
    // the cubins of the families asked for.
    for arch in fa4gen::Arch::ALL {
        let dst = stage.join("generated").join(arch.name());
        std::fs::create_dir_all(&dst).map_err(|e| e.to_string())?;
        let m = fa4gen::manifest::FILE_NAME;
        std::fs::copy(
            root.join("generated").join(arch.name()).join(m),
            dst.join(m),
        )
        .map_err(|e| format!("{arch} manifest: {e}"))?;
    }
    for arch in a.arch.split(',') {
        let src = root.join("generated").join(arch);
        let dst = stage.join("generated").join(arch);
        copy_dir(&src, &dst)?;
    }
    // Other plans' libraries (e.g. the `tiles` sweep) for the same families.
    if let Ok(plans) = std::fs::read_dir(root.join("generated").join("plans")) {
        for plan in plans.flatten() {
            let name = plan.file_name().to_string_lossy().into_owned();
            if a.plans != "all" && !a.plans.split(',').any(|p| p == name) {
                continue;
            }
            for arch in a.arch.split(',') {
                let src = plan.path().join(arch);
                if src.is_dir() {
                    let dst = stage.join("plans").join(plan.file_name()).join(arch);
                    std::fs::create_dir_all(&dst).map_err(|e| e.to_string())?;
                    copy_dir(&src, &dst)?;
                }
            }
        }
    }
    println!(
        "staged {n} binaries and kernels for {} in {}",
        a.arch,
        stage.display()
    );
    Ok(())
}

/// Copies a kernel library's manifest and cubins, refusing one whose cubins do not match its
/// manifest (cubins are git-ignored: after a checkout they may be another commit's, and the
/// loader on the GPU host would refuse them one test case at a time).
fn copy_dir(src: &Path, dst: &Path) -> Result<(), String> {
    // The loader's own check (size and sha256 against the manifest), on every cubin now.
    let lib = fa4gen::runtime::KernelLibrary::open(src).map_err(|e| e.to_string())?;
    for k in lib.manifest().kernels.iter().filter(|k| k.cubin.is_some()) {
        lib.read_cubin(k)
            .map_err(|e| format!("{e} (a cubin of another commit?)"))?;
    }
    let entries = std::fs::read_dir(src).map_err(|e| format!("{}: {e}", src.display()))?;
    for e in entries.flatten() {
        let name = e.file_name();
        let s = name.to_string_lossy();
        if s.ends_with(".cubin") || s == "manifest.json" {
            std::fs::copy(e.path(), dst.join(&name)).map_err(|err| err.to_string())?;
        }
    }
    Ok(())
}
