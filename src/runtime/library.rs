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
            return Err(Error::Library {
                dir: dir.display().to_string(),
                why: "no such directory (expected generated/<arch>/ with manifest.json and cubins, after `cargo xtask gen`)".into(),
            });
        }
        let manifest = Manifest::read(&dir)?;
        if manifest.target != manifest.arch.nvrtc_target() {
            return Err(Error::Library {
                dir: dir.display().to_string(),
                why: format!(
                    "manifest target {} does not belong to its arch {}",
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::{CubinInfo, Entry, Manifest};

    /// A scratch library: one fake kernel whose "cubin" is `bytes`.
    fn scratch(name: &str, bytes: &[u8], manifest_bytes: &[u8], arch: Arch) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("fa4gen-lib-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let spec: crate::KernelSpec = "fwd.sm90.portable.bf16.d64x64.m128n128.q1".parse().unwrap();
        let mut entry = Entry::new(&spec, "src");
        entry.cubin = Some(CubinInfo {
            sha256: sha256_hex(manifest_bytes),
            bytes: manifest_bytes.len() as u64,
            resources: None,
        });
        let m = Manifest {
            format: crate::manifest::FORMAT,
            arch,
            target: arch.nvrtc_target().into(),
            plan: "default".into(),
            nvrtc: "13.5".into(),
            headers_sha256: String::new(),
            kernels: vec![entry.clone()],
        };
        std::fs::write(dir.join(crate::manifest::FILE_NAME), m.to_json()).unwrap();
        std::fs::write(dir.join(entry.cubin_file()), bytes).unwrap();
        dir
    }

    const STEM: &str = "fwd.sm90.portable.bf16.d64x64.m128n128.q1";

    #[test]
    fn verified_cubin_reads() {
        let dir = scratch("ok", b"\x7fELFcubin", b"\x7fELFcubin", Arch::Sm90);
        let lib = KernelLibrary::open(&dir).unwrap();
        let e = lib.entry(STEM).unwrap();
        assert_eq!(lib.read_cubin(e).unwrap(), b"\x7fELFcubin");
        assert!(
            lib.entry("fwd.sm90.portable.bf16.d64x64.m128n128.q1.causal")
                .is_none()
        );
    }

    #[test]
    fn tampered_cubin_is_refused() {
        let dir = scratch("hash", b"\x7fELFevil!", b"\x7fELFcubin", Arch::Sm90);
        let lib = KernelLibrary::open(&dir).unwrap();
        let e = lib
            .read_cubin(lib.entry(STEM).unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("does not match the manifest"), "{e}");
    }

    #[test]
    fn missing_cubin_is_refused() {
        let dir = scratch("gone", b"x", b"x", Arch::Sm90);
        std::fs::remove_file(dir.join(format!("{STEM}.cubin"))).unwrap();
        let lib = KernelLibrary::open(&dir).unwrap();
        assert!(matches!(
            lib.read_cubin(lib.entry(STEM).unwrap()),
            Err(Error::Cubin { .. })
        ));
    }

    #[test]
    fn missing_dir_corrupt_or_foreign_manifest_is_refused() {
        assert!(matches!(
            KernelLibrary::open("/nonexistent/fa4gen"),
            Err(Error::Library { .. })
        ));
        let dir = scratch("corrupt", b"x", b"x", Arch::Sm90);
        std::fs::write(dir.join(crate::manifest::FILE_NAME), "{ not json").unwrap();
        assert!(matches!(KernelLibrary::open(&dir), Err(Error::Manifest(_))));
        std::fs::remove_file(dir.join(crate::manifest::FILE_NAME)).unwrap();
        assert!(matches!(KernelLibrary::open(&dir), Err(Error::Manifest(_))));
        // A manifest of another format version.
        let dir = scratch("format", b"x", b"x", Arch::Sm90);
        let text = std::fs::read_to_string(dir.join(crate::manifest::FILE_NAME)).unwrap();
        std::fs::write(
            dir.join(crate::manifest::FILE_NAME),
            text.replace("\"format\": 1", "\"format\": 99"),
        )
        .unwrap();
        let e = KernelLibrary::open(&dir).unwrap_err().to_string();
        assert!(e.contains("format 99"), "{e}");
        // A manifest whose target is not its arch's.
        let dir = scratch("target", b"x", b"x", Arch::Sm90);
        let text = std::fs::read_to_string(dir.join(crate::manifest::FILE_NAME)).unwrap();
        std::fs::write(
            dir.join(crate::manifest::FILE_NAME),
            text.replace("sm_90a", "sm_100f"),
        )
        .unwrap();
        assert!(matches!(
            KernelLibrary::open(&dir),
            Err(Error::Library { .. })
        ));
    }
}
