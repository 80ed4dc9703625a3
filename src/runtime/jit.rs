//! The `jit` feature: a spec the kernel library lacks is rendered, compiled with NVRTC and
//! cached on disk, once per (source, headers, NVRTC version, options) across processes.
//!
//! Cache layout: `<dir>/<sha256 key>/<stem>.cubin` beside `<stem>.sha256` (the cubin's hash),
//! the key hashing the rendered source, the device headers, the NVRTC version and the options, so
//! a template or compiler change can never serve a stale cubin. Compiles are serialised per key
//! with an exclusive file lock (`<key>.lock`), and each file is written to a temporary file of its
//! own, synced and renamed into place, the hash first: N processes (ranks) asking for one kernel
//! compile it once, and a reader never sees half a file. A hit is served only if the cubin matches
//! its hash (a crash's truncated file, or a damaged one, is compiled again).
//!
//! What the cache holds is loaded into the process (cubins, and NVRTC itself where it was
//! installed into `<dir>/nvrtc`), so the cache's directory must be the caller's own: another
//! user's is refused, and ours is kept closed to everyone else (0700; see `check_private`). With
//! no home directory the default is a per-user folder under the temporary directory, never a
//! shared one.

use super::error::Error;
use crate::compile;
use crate::nvrtc::Nvrtc;
use crate::render::{self, sha256_hex};
use crate::spec::KernelSpec;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub struct Jit {
    dir: PathBuf,
    /// The directory checked as the caller's own (created if absent), once.
    private: OnceLock<Result<(), String>>,
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
            private: OnceLock::new(),
            nvrtc: OnceLock::new(),
        }
    }

    /// `$FA4GEN_CACHE_DIR`, else `$XDG_CACHE_HOME/fa4gen`, else `~/.cache/fa4gen`, else (no home:
    /// a service's environment) `fa4gen-<uid>` in the temporary directory: one per user, since
    /// what the cache holds is loaded into the process.
    pub fn default_dir() -> PathBuf {
        if let Some(d) = std::env::var_os("FA4GEN_CACHE_DIR") {
            return d.into();
        }
        std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
            .map(|base| base.join("fa4gen"))
            .unwrap_or_else(|| std::env::temp_dir().join(format!("fa4gen-{}", effective_uid())))
    }

    /// The cache directory, created (mode 0700) if absent, and checked to be this user's own:
    /// anyone else who could write it could plant a cubin, or a libnvrtc, this process loads.
    fn private_dir(&self) -> Result<(), Error> {
        self.private
            .get_or_init(|| check_private(&self.dir))
            .clone()
            .map_err(|why| Error::Library {
                dir: self.dir.display().to_string(),
                why: format!("jit cache: {why}"),
            })
    }

    fn nvrtc(&self) -> Result<&Nvrtc, Error> {
        self.private_dir()?;
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
        let hash = dir.join(format!("{}.sha256", spec.stem()));
        if let Some(cubin) = read_checked(&path, &hash) {
            return Ok(JitKernel {
                cubin,
                compile_seconds: None,
            });
        }
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)
                .map_err(|e| self.io("creating the cache", e))?;
        }
        let lock = std::fs::File::create(self.dir.join(format!("{key}.lock")))
            .map_err(|e| self.io("creating the lock", e))?;
        lock.lock().map_err(|e| self.io("locking", e))?;
        // Another process may have compiled it while we waited.
        if let Some(cubin) = read_checked(&path, &hash) {
            return Ok(JitKernel {
                cubin,
                compile_seconds: None,
            });
        }
        let k = compile::compile(nvrtc, spec, &source).map_err(|e| Error::Library {
            dir: self.dir.display().to_string(),
            why: format!("jit compile of {}: {e}", spec.stem()),
        })?;
        // The hash first: a cubin in place is always a finished one with its hash beside it.
        write_synced(&hash, sha256_hex(&k.cubin).as_bytes()).map_err(|e| self.io("writing", e))?;
        write_synced(&path, &k.cubin).map_err(|e| self.io("writing", e))?;
        if let Ok(d) = std::fs::File::open(&dir) {
            let _ = d.sync_all(); // the renames themselves (best effort: not every filesystem syncs a directory)
        }
        drop(lock);
        Ok(JitKernel {
            cubin: k.cubin,
            compile_seconds: Some(k.seconds),
        })
    }
}

/// This process's effective user id.
fn effective_uid() -> u32 {
    // SAFETY: geteuid takes no arguments, cannot fail and touches no memory of ours.
    unsafe { libc::geteuid() }
}

/// `dir` exists (created with mode 0700 if it did not; a link to a directory is followed), is
/// owned by this process's user, and is closed to everyone else: mode 0700, so that nothing
/// below it (key folders, NVRTC's install, whatever their own modes) can be reached by another
/// user. One of ours that is open (an older fa4gen made it with the umask's mode, e.g. 0775) is
/// closed here; if anyone at all could write it (o+w), what it holds is discarded first, since
/// any user may have put it there. One that belongs to another user is refused.
fn check_private(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    if let Err(e) = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        return Err(format!("creating {}: {e}", dir.display()));
    }
    let m = std::fs::metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let me = effective_uid();
    if !m.is_dir() {
        return Err(format!("{} is not a directory", dir.display()));
    }
    if m.uid() != me {
        return Err(format!(
            "{} belongs to user {}, not to this process's user {me}: its cubins (and any NVRTC \
             installed there) are not loaded; set FA4GEN_CACHE_DIR to a directory of your own",
            dir.display(),
            m.uid()
        ));
    }
    let mode = m.mode() & 0o777;
    if mode & 0o077 != 0 {
        if mode & 0o002 != 0 {
            let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            for e in entries.flatten() {
                let p = e.path();
                // (A link is removed, not followed.)
                let gone = match e.file_type() {
                    Ok(t) if t.is_dir() => std::fs::remove_dir_all(&p),
                    _ => std::fs::remove_file(&p),
                };
                gone.map_err(|err| {
                    format!(
                        "{} was writable by every user (mode {mode:o}); clearing {}: {err}",
                        dir.display(),
                        p.display()
                    )
                })?;
            }
        }
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(|e| {
            format!(
                "closing {} (mode {mode:o}) to other users: {e}",
                dir.display()
            )
        })?;
    }
    Ok(())
}

/// The cubin at `path` if the hash file beside it names its sha256 (else none: never
/// finished, damaged, or from a cache before the hashes).
fn read_checked(path: &Path, hash: &Path) -> Option<Vec<u8>> {
    let want = std::fs::read_to_string(hash).ok()?;
    let cubin = std::fs::read(path).ok()?;
    (sha256_hex(&cubin) == want.trim()).then_some(cubin)
}

/// `bytes` to `path` through a temporary file of this call's own (process, counter), synced
/// before it is renamed into place. Callers hold the key's lock; a temporary file a crashed run
/// left under the same name (a container's pid repeats) is overwritten.
fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.{}.{n}.tmp", std::process::id()));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
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
        // A damaged entry (a crash mid-write, a full disk) is compiled again, not served.
        let cached: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| {
                e.ok()
                    .map(|e| e.path().join(format!("{}.cubin", spec.stem())))
            })
            .filter(|p| p.is_file())
            .collect();
        assert_eq!(cached.len(), 1, "one cached cubin: {cached:?}");
        std::fs::write(&cached[0], b"").unwrap();
        let mended = Jit::new(&dir).cubin(&spec).unwrap();
        assert!(mended.compile_seconds.is_some() && mended.cubin == results[0].cubin);
        // So is one without its hash (a cache from before the hashes), and a temporary file a
        // crashed run left under the name this process's next write takes is overwritten.
        std::fs::remove_file(cached[0].with_extension("sha256")).unwrap();
        for n in 0..64 {
            for name in [
                cached[0].file_name(),
                cached[0].with_extension("sha256").file_name(),
            ] {
                let name = name.unwrap().to_string_lossy().into_owned();
                let tmp = format!(".{name}.{}.{n}.tmp", std::process::id());
                std::fs::write(cached[0].with_file_name(tmp), b"left by a crash").unwrap();
            }
        }
        let mended = Jit::new(&dir).cubin(&spec).unwrap();
        assert!(mended.compile_seconds.is_some() && mended.cubin == results[0].cubin);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The cache directory is closed to other users before anything in it is read: created
    /// 0700; an open one of ours closed (a world-writable one emptied first: anyone may have
    /// put what it holds there); a link to one of ours followed; another user's refused.
    #[test]
    fn the_cache_is_closed_to_other_users() {
        use std::os::unix::fs::PermissionsExt;
        let base = std::env::temp_dir().join(format!("fa4gen-jit-modes-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let dir = base.join("cache");
        check_private(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        // Group-writable (an older fa4gen under umask 002): closed, what it holds kept.
        std::fs::write(dir.join("kept"), b"x").unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o775)).unwrap();
        check_private(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        assert!(dir.join("kept").is_file());
        // World-writable: emptied, then closed.
        std::fs::create_dir_all(dir.join("key")).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        check_private(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        // A link to a directory of ours (a scratch disk) is followed.
        let link = base.join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        check_private(&link).unwrap();
        // Another user's directory: as root, one given to `nobody`; else /, which is root's.
        let theirs = if effective_uid() == 0 {
            let d = base.join("theirs");
            std::fs::create_dir_all(&d).unwrap();
            std::os::unix::fs::chown(&d, Some(65534), Some(65534)).unwrap();
            d
        } else {
            PathBuf::from("/")
        };
        let err = check_private(&theirs).unwrap_err();
        assert!(err.contains("belongs to user"), "{err}");
        let _ = std::fs::remove_dir_all(&base);
    }
}
