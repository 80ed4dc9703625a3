//! A kernel library on disk: a directory with `manifest.json` and `<stem>.cubin` files, as
//! `cargo xtask gen` writes them. Opening reads and checks the manifest; a cubin is read and
//! its sha256 checked against the manifest only when a kernel is first needed.

use super::error::Error;
use crate::arch::Arch;
use crate::manifest::{Entry, Manifest};
use crate::render::sha256_hex;
use std::path::{Path, PathBuf};

#[derive(Debug)]
pub struct KernelLibrary {
    dir: PathBuf,
    manifest: Manifest,
}

impl KernelLibrary {
    pub fn open(dir: impl AsRef<Path>) -> Result<KernelLibrary, Error> {
        let dir = dir.as_ref().to_path_buf();
        if !dir.is_dir() {
            return Err(Error::invalid(
                "kernel_dir",
                dir.display(),
                "a directory holding manifest.json and cubins (generated/<arch>/ after `cargo xtask gen`)",
            ));
        }
        let manifest = Manifest::read(&dir)?;
        if manifest.target != manifest.arch.nvrtc_target() {
            return Err(Error::Cubin {
                path: dir.join(crate::manifest::FILE_NAME).display().to_string(),
                why: format!(
                    "target {} does not belong to arch {}",
                    manifest.target, manifest.arch
                ),
            });
        }
        Ok(KernelLibrary { dir, manifest })
    }

    pub fn arch(&self) -> Arch {
        self.manifest.arch
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The manifest entry of a stem, if it was built (compiled) into this library.
    pub fn entry(&self, stem: &str) -> Option<&Entry> {
        self.manifest.entry(stem).filter(|e| e.cubin.is_some())
    }

    /// Read a kernel's cubin and check it against the manifest (size and sha256).
    pub fn read_cubin(&self, entry: &Entry) -> Result<Vec<u8>, Error> {
        let path = self.dir.join(entry.cubin_file());
        let p = path.display().to_string();
        let Some(info) = &entry.cubin else {
            return Err(Error::Cubin {
                path: p,
                why: "the manifest lists no compiled cubin for it".into(),
            });
        };
        let bytes = std::fs::read(&path).map_err(|e| Error::Cubin {
            path: p.clone(),
            why: e.to_string(),
        })?;
        let sha = sha256_hex(&bytes);
        if bytes.len() as u64 != info.bytes || sha != info.sha256 {
            return Err(Error::Cubin {
                path: p,
                why: format!(
                    "sha256 {sha} ({} bytes) does not match the manifest's {} ({} bytes); rebuild with `cargo xtask gen`",
                    bytes.len(),
                    info.sha256,
                    info.bytes
                ),
            });
        }
        Ok(bytes)
    }
}
