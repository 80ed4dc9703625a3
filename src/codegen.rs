//! Rendering a plan into a kernel directory and checking a directory against a fresh rendering.
//! `cargo xtask gen` writes with these; `cargo xtask gen --check` and the freshness test check
//! with the same code, so "stale" means one thing everywhere.

use crate::arch::Arch;
use crate::manifest::{Entry, Manifest};
use crate::render::{self, RenderError};
use crate::spec::KernelSpec;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// A spec and its rendered source.
pub struct Rendered {
    pub spec: KernelSpec,
    pub source: String,
}

/// Where a plan's kernels for `arch` live under the repository's `generated/`.
pub fn out_dir(generated: &Path, plan: &str, arch: Arch) -> PathBuf {
    if plan == "default" {
        generated.join(arch.name())
    } else {
        generated.join("plans").join(plan).join(arch.name())
    }
}

pub fn render_all(specs: &[KernelSpec]) -> Result<Vec<Rendered>, RenderError> {
    specs
        .iter()
        .map(|s| {
            Ok(Rendered {
                spec: *s,
                source: render::render(s)?,
            })
        })
        .collect()
}

/// The manifest a directory of these renderings must carry, before compilation.
pub fn source_manifest(arch: Arch, plan: &str, rendered: &[Rendered]) -> Manifest {
    let mut kernels: Vec<Entry> = rendered
        .iter()
        .map(|r| Entry::new(&r.spec, &r.source))
        .collect();
    kernels.sort_by(|a, b| a.stem.cmp(&b.stem));
    Manifest {
        format: crate::manifest::FORMAT,
        arch,
        target: arch.nvrtc_target().to_string(),
        plan: plan.to_string(),
        nvrtc: String::new(),
        headers_sha256: render::headers_sha256(),
        nvrtc_options: Vec::new(),
        kernels,
    }
}

/// One way a kernel directory differs from a fresh rendering.
#[derive(Debug, PartialEq, Eq)]
pub enum Staleness {
    Missing(PathBuf),
    Stale(PathBuf),
    Orphaned(PathBuf),
    ManifestStale(PathBuf, String),
}

impl std::fmt::Display for Staleness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Staleness::Missing(p) => write!(f, "missing: {}", p.display()),
            Staleness::Stale(p) => write!(f, "stale: {}", p.display()),
            Staleness::Orphaned(p) => write!(f, "orphaned (no spec renders it): {}", p.display()),
            Staleness::ManifestStale(p, why) => write!(f, "stale manifest {}: {why}", p.display()),
        }
    }
}

/// Compare `dir` with a fresh rendering: every source present and identical, no `.cu` or
/// `.cubin` left from a spec that is gone, and the manifest's source half identical.
pub fn check_dir(dir: &Path, arch: Arch, plan: &str, rendered: &[Rendered]) -> Vec<Staleness> {
    let mut out = Vec::new();
    let mut expected = BTreeSet::new();
    for r in rendered {
        let name = format!("{}.cu", r.spec.stem());
        let path = dir.join(&name);
        match std::fs::read_to_string(&path) {
            Ok(text) if text == r.source => {}
            Ok(_) => out.push(Staleness::Stale(path)),
            Err(_) => out.push(Staleness::Missing(path)),
        }
        expected.insert(name);
        expected.insert(format!("{}.cubin", r.spec.stem()));
    }
    expected.insert(crate::manifest::FILE_NAME.to_string());
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if e.path().is_file() && !expected.contains(&name) {
                out.push(Staleness::Orphaned(e.path()));
            }
        }
    }
    let mpath = dir.join(crate::manifest::FILE_NAME);
    let want = source_manifest(arch, plan, rendered);
    match Manifest::read(dir) {
        Ok(have) => {
            if have.source_half() != want {
                let why = if have.headers_sha256 != want.headers_sha256 {
                    "device headers changed".to_string()
                } else {
                    "kernel list or geometry differs".to_string()
                };
                out.push(Staleness::ManifestStale(mpath, why));
            }
        }
        Err(e) => out.push(Staleness::ManifestStale(mpath, e.to_string())),
    }
    out.sort_by_key(|s| s.to_string());
    out
}
