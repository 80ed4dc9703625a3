//! `generated/<arch>/manifest.json`: what a kernel directory holds, and how to trust it.
//!
//! One entry per kernel: stem, symbol, launch geometry, sha256 of its source, and (once
//! compiled) sha256 and size of its cubin plus ptxas's resource report. The loader refuses a
//! cubin whose hash differs and a manifest for another arch. The file is committed; the
//! source half is checked for freshness on every `cargo test`, the cubin half is reproducible
//! with the pinned NVRTC.

use crate::arch::Arch;
use crate::compile::Resources;
use crate::spec::KernelSpec;
use serde::{Deserialize, Serialize};
use std::path::Path;

pub const FILE_NAME: &str = "manifest.json";
pub const FORMAT: u32 = 1;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub arch: Arch,
    /// NVRTC `--gpu-architecture` of every cubin.
    pub target: String,
    pub plan: String,
    /// NVRTC major.minor the cubins were built with ("" until compiled).
    pub nvrtc: String,
    /// sha256 over the device headers the sources include (render::headers_sha256).
    pub headers_sha256: String,
    /// The NVRTC options the cubins were built with (empty until compiled): a change of
    /// options recompiles.
    #[serde(default)]
    pub nvrtc_options: Vec<String>,
    pub kernels: Vec<Entry>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub stem: String,
    pub symbol: String,
    pub threads: u32,
    pub smem_bytes: u32,
    pub source_sha256: String,
    /// Absent until compiled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cubin: Option<CubinInfo>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CubinInfo {
    pub sha256: String,
    pub bytes: u64,
    /// ptxas's report, when it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Resources>,
}

impl Entry {
    /// The entry of a spec whose rendered source is `source`, not yet compiled.
    pub fn new(spec: &KernelSpec, source: &str) -> Entry {
        let g = spec.geometry();
        Entry {
            stem: spec.stem(),
            symbol: spec.symbol(),
            threads: g.threads,
            smem_bytes: g.smem_bytes,
            source_sha256: crate::render::sha256_hex(source.as_bytes()),
            cubin: None,
        }
    }

    pub fn cubin_file(&self) -> String {
        format!("{}.cubin", self.stem)
    }

    pub fn source_file(&self) -> String {
        format!("{}.cu", self.stem)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("reading {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a valid fa4gen manifest: {source}")]
    Parse {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path} has manifest format {found}; this fa4gen reads format {FORMAT}")]
    Format { path: String, found: u32 },
    #[error("{path} lists kernel {stem} more than once; a manifest names each kernel once")]
    Duplicate { path: String, stem: String },
}

impl Manifest {
    pub fn read(dir: &Path) -> Result<Manifest, ManifestError> {
        let path = dir.join(FILE_NAME);
        let p = path.display().to_string();
        let text = std::fs::read_to_string(&path).map_err(|source| ManifestError::Io {
            path: p.clone(),
            source,
        })?;
        let mut m: Manifest =
            serde_json::from_str(&text).map_err(|source| ManifestError::Parse {
                path: p.clone(),
                source,
            })?;
        if m.format != FORMAT {
            return Err(ManifestError::Format {
                path: p,
                found: m.format,
            });
        }
        // `entry` searches by stem. The generator writes entries sorted; a manifest written by
        // other tools (a hand-picked subset, an A/B root) need not be, and an unsorted list
        // would hide some of its kernels from the search.
        m.kernels.sort_by(|a, b| a.stem.cmp(&b.stem));
        if let Some(w) = m.kernels.windows(2).find(|w| w[0].stem == w[1].stem) {
            return Err(ManifestError::Duplicate {
                path: p,
                stem: w[0].stem.clone(),
            });
        }
        Ok(m)
    }

    /// Pretty JSON with a trailing newline; entries are kept sorted by stem by the writer.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("manifest serialises");
        s.push('\n');
        s
    }

    pub fn entry(&self, stem: &str) -> Option<&Entry> {
        self.kernels
            .binary_search_by(|e| e.stem.as_str().cmp(stem))
            .ok()
            .map(|i| &self.kernels[i])
    }

    /// The manifest with every compile-derived field cleared: what freshness compares.
    pub fn source_half(&self) -> Manifest {
        let mut m = self.clone();
        m.nvrtc.clear();
        m.nvrtc_options.clear();
        for e in &mut m.kernels {
            e.cubin = None;
        }
        m
    }
}
