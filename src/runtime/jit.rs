//! The `jit` feature: a spec the kernel library lacks is rendered, compiled with NVRTC and
//! cached on disk, once per (source, headers, NVRTC version, options) across processes.
//!
//! Cache layout: `<dir>/<sha256 key>/<stem>.cubin`, the key hashing the rendered source, the
//! device headers, the NVRTC version and the options, so a template or compiler change can never
//! serve a stale cubin. Compiles are serialised per key with an exclusive file lock
//! (`<key>.lock`), and the cubin is written to a temporary file renamed into place: N processes
//! (ranks) asking for one kernel compile it once, and a reader never sees half a file.

use super::error::Error;
use crate::compile;
use crate::nvrtc::Nvrtc;
use crate::render::{self, sha256_hex};
use crate::spec::KernelSpec;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub struct Jit {
    dir: PathBuf,
    nvrtc: OnceLock<Result<Nvrtc, String>>,
}

/// A cubin from the cache or a fresh compile.
pub struct JitKernel {
    pub cubin: Vec<u8>,
    /// Seconds NVRTC took, when this call compiled it (None: cache hit).
    pub compile_seconds: Option<f64>,
}

impl Jit {
    /// Cache under `dir` (created on first use). NVRTC is located (or installed into
    /// `<dir>/nvrtc`) on the first miss only.
    pub fn new(dir: impl Into<PathBuf>) -> Jit {
        Jit {
            dir: dir.into(),
            nvrtc: OnceLock::new(),
        }
    }

    /// `$FA4GEN_CACHE_DIR`, else `$XDG_CACHE_HOME/fa4gen`, else `~/.cache/fa4gen`.
    pub fn default_dir() -> PathBuf {
        if let Some(d) = std::env::var_os("FA4GEN_CACHE_DIR") {
            return d.into();
        }
        let base = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
            .unwrap_or_else(std::env::temp_dir);
        base.join("fa4gen")
    }

    fn nvrtc(&self) -> Result<&Nvrtc, Error> {
        self.nvrtc
            .get_or_init(|| Nvrtc::locate(&self.dir.join("nvrtc")).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|why| Error::Library {
                dir: self.dir.display().to_string(),
                why: format!("jit needs NVRTC: {why}"),
            })
    }

    fn io(&self, what: &str, e: std::io::Error) -> Error {
        Error::Library {
            dir: self.dir.display().to_string(),
            why: format!("jit cache: {what}: {e}"),
        }
    }

    /// The cubin of `spec`, compiling it if no process has yet.
    pub fn cubin(&self, spec: &KernelSpec) -> Result<JitKernel, Error> {
        let source = render::render(spec).map_err(|e| match e {
            render::RenderError::Unsupported(u) => Error::Unsupported(u),
            other => Error::Library {
                dir: self.dir.display().to_string(),
                why: other.to_string(),
            },
        })?;
        let nvrtc = self.nvrtc()?;
        let (major, minor) = nvrtc.version();
        let key = sha256_hex(
            format!(
                "{}\0{}\0{major}.{minor}\0{}",
                sha256_hex(source.as_bytes()),
                render::headers_sha256(),
                crate::compile::options(spec).join("\0")
            )
            .as_bytes(),
        );
        let dir = self.dir.join(&key);
        let path = dir.join(format!("{}.cubin", spec.stem()));
        if let Ok(cubin) = std::fs::read(&path) {
            return Ok(JitKernel {
                cubin,
                compile_seconds: None,
            });
        }
        std::fs::create_dir_all(&dir).map_err(|e| self.io("creating the cache", e))?;
        let lock = std::fs::File::create(self.dir.join(format!("{key}.lock")))
            .map_err(|e| self.io("creating the lock", e))?;
        lock.lock().map_err(|e| self.io("locking", e))?;
        // Another process may have compiled it while we waited.
        if let Ok(cubin) = std::fs::read(&path) {
            return Ok(JitKernel {
                cubin,
                compile_seconds: None,
            });
        }
        let k = compile::compile(nvrtc, spec, &source).map_err(|e| Error::Library {
            dir: self.dir.display().to_string(),
            why: format!("jit compile of {}: {e}", spec.stem()),
        })?;
        let tmp = dir.join(format!(".{}.{}.tmp", spec.stem(), std::process::id()));
        std::fs::write(&tmp, &k.cubin).map_err(|e| self.io("writing", e))?;
        std::fs::rename(&tmp, &path).map_err(|e| self.io("renaming", e))?;
        drop(lock);
        Ok(JitKernel {
            cubin: k.cubin,
            compile_seconds: Some(k.seconds),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spec no plan ships compiles once; the second request (another Jit on the same
    /// directory, as another process would be) is a cache hit; concurrent requests compile
    /// once. Needs NVRTC (found or pip-installed into the repository's .nvrtc/).
    #[test]
    fn compiles_once_then_hits_the_cache() {
        let dir = std::env::temp_dir().join(format!("fa4gen-jit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // Share the repository's NVRTC instead of installing another copy.
        let nvrtc_home = Path::new(env!("CARGO_MANIFEST_DIR")).join(".nvrtc");
        if nvrtc_home.is_dir() {
            std::os::unix::fs::symlink(&nvrtc_home, dir.join("nvrtc")).unwrap();
        }
        let spec: KernelSpec = "fwd.sm90.portable.bf16.d72x72.m64n32.q1.local.lse"
            .parse()
            .unwrap();
        let results: Vec<JitKernel> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..3)
                .map(|_| s.spawn(|| Jit::new(&dir).cubin(&spec).unwrap()))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let compiled: Vec<f64> = results.iter().filter_map(|r| r.compile_seconds).collect();
        assert_eq!(
            compiled.len(),
            1,
            "three concurrent requests compiled {} times",
            compiled.len()
        );
        println!("jit compile of {}: {:.2} s", spec.stem(), compiled[0]);
        assert!(
            results
                .iter()
                .all(|r| r.cubin == results[0].cubin && r.cubin.starts_with(b"\x7fELF"))
        );
        let again = Jit::new(&dir).cubin(&spec).unwrap();
        assert!(again.compile_seconds.is_none() && again.cubin == results[0].cubin);
    }
}
