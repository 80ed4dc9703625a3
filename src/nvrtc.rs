//! NVRTC with nothing installed by hand: find a `libnvrtc.so.13`, or install the pinned PyPI
//! wheel into an ignored folder, load that exact file, and compile sources to cubins.
//!
//! fa4gen binds the nine NVRTC entry points it uses itself (this module is the only `unsafe`
//! NVRTC code) instead of going through `cudarc::nvrtc`: cudarc `dlopen`s bare library names from
//! a fixed candidate list (first `libnvrtc.so`), so it cannot be pointed at the wheel's file and
//! may silently pick another NVRTC from the loader path; it also panics on a missing library or
//! symbol. Here the library is chosen by path, its version checked, and every failure is a
//! typed error.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The NVRTC the committed manifests were built with. Cubins are byte-for-byte reproducible
/// only with the same NVRTC; another one works but rewrites the cubin hashes.
pub const PINNED_WHEEL: &str = "nvidia-cuda-nvrtc==13.5.37";
/// Oldest NVRTC accepted: 13.x emits `sm_100f`/`sm_120f` family cubins and matches the
/// driver floor (580) of CUDA 13. (The kernels include no CUDA headers, so NVRTC's bundled
/// headers, 13.3+, are not needed.)
pub const MIN_VERSION: (i32, i32) = (13, 0);
const LIB_NAME: &str = "libnvrtc.so.13";
const WHEEL_LIB_DIR: &str = "nvidia/cu13/lib";

#[derive(Debug, thiserror::Error)]
pub enum NvrtcError {
    #[error("FA4GEN_NVRTC={0} names no {LIB_NAME} (give the library file or its folder)")]
    BadOverride(PathBuf),
    #[error(
        "no NVRTC found and it could not be installed: `{cmd}` failed: {why}. Install python3 with pip, or set FA4GEN_NVRTC to a {LIB_NAME} (NVRTC >= {}.{})",
        MIN_VERSION.0, MIN_VERSION.1
    )]
    Install { cmd: String, why: String },
    #[error("loading {path}: {source}")]
    Load {
        path: PathBuf,
        #[source]
        source: libloading::Error,
    },
    #[error("{path} is NVRTC {}.{}; fa4gen needs >= {}.{}", version.0, version.1, MIN_VERSION.0, MIN_VERSION.1)]
    TooOld { path: PathBuf, version: (i32, i32) },
    #[error("NVRTC {call} failed: {msg}")]
    Call { call: &'static str, msg: String },
    #[error("NVRTC could not compile {name}:\n{log}")]
    Compile { name: String, log: String },
    #[error("source or option text contains a NUL byte")]
    Nul(#[from] std::ffi::NulError),
}

type Prog = *mut c_void;
type Res = c_int;

/// A loaded NVRTC library and its entry points.
pub struct Nvrtc {
    path: PathBuf,
    version: (i32, i32),
    create: unsafe extern "C" fn(
        *mut Prog,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> Res,
    compile: unsafe extern "C" fn(Prog, c_int, *const *const c_char) -> Res,
    log_size: unsafe extern "C" fn(Prog, *mut usize) -> Res,
    log: unsafe extern "C" fn(Prog, *mut c_char) -> Res,
    cubin_size: unsafe extern "C" fn(Prog, *mut usize) -> Res,
    cubin: unsafe extern "C" fn(Prog, *mut c_char) -> Res,
    destroy: unsafe extern "C" fn(*mut Prog) -> Res,
    error_string: unsafe extern "C" fn(Res) -> *const c_char,
    // Keeps the function pointers above valid; dropped last.
    _lib: libloading::Library,
}

/// What a successful compile produced.
pub struct Compiled {
    pub cubin: Vec<u8>,
    /// The program log (ptxas's resource report when `-v` was asked for).
    pub log: String,
}

impl Nvrtc {
    /// Find NVRTC, installing the pinned wheel under `install_dir` if none is found:
    /// 1. `FA4GEN_NVRTC` (the library file or its folder), if set;
    /// 2. a previous install under `install_dir`;
    /// 3. the system's `libnvrtc.so.13` (loader path, `/usr/local/cuda`), if new enough;
    /// 4. `python3 -m pip install --target install_dir` of [`PINNED_WHEEL`].
    pub fn locate(install_dir: &Path) -> Result<Nvrtc, NvrtcError> {
        if let Some(p) = std::env::var_os("FA4GEN_NVRTC") {
            let p = PathBuf::from(p);
            let file = if p.is_dir() {
                p.join(LIB_NAME)
            } else {
                p.clone()
            };
            if !file.is_file() {
                return Err(NvrtcError::BadOverride(p));
            }
            return Nvrtc::load(&file);
        }
        let installed = install_dir.join(WHEEL_LIB_DIR).join(LIB_NAME);
        if installed.is_file() {
            return Nvrtc::load(&installed);
        }
        for candidate in [
            PathBuf::from(LIB_NAME),
            PathBuf::from("/usr/local/cuda/lib64").join(LIB_NAME),
        ] {
            if let Ok(n) = Nvrtc::load(&candidate) {
                return Ok(n);
            }
        }
        install_wheel(install_dir)?;
        Nvrtc::load(&installed)
    }

    /// Load one library file (a bare name goes through the system loader path).
    pub fn load(path: &Path) -> Result<Nvrtc, NvrtcError> {
        let load_err = |source| NvrtcError::Load {
            path: path.to_path_buf(),
            source,
        };
        // SAFETY: loading NVRTC runs only its ELF initialisers, which have no preconditions.
        let lib = unsafe { libloading::Library::new(path) }.map_err(load_err)?;
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the symbol's C signature is the one NVRTC documents in nvrtc.h and the
                // field type spells out; the pointer is valid while `lib` lives (kept in self).
                *unsafe { lib.get($name) }.map_err(load_err)?
            };
        }
        let version_fn: unsafe extern "C" fn(*mut c_int, *mut c_int) -> Res = sym!(b"nvrtcVersion");
        let (mut major, mut minor) = (0, 0);
        // SAFETY: two valid out-pointers.
        let rc = unsafe { version_fn(&mut major, &mut minor) };
        let n = Nvrtc {
            path: path.to_path_buf(),
            version: (major, minor),
            create: sym!(b"nvrtcCreateProgram"),
            compile: sym!(b"nvrtcCompileProgram"),
            log_size: sym!(b"nvrtcGetProgramLogSize"),
            log: sym!(b"nvrtcGetProgramLog"),
            cubin_size: sym!(b"nvrtcGetCUBINSize"),
            cubin: sym!(b"nvrtcGetCUBIN"),
            destroy: sym!(b"nvrtcDestroyProgram"),
            error_string: sym!(b"nvrtcGetErrorString"),
            _lib: lib,
        };
        n.check("nvrtcVersion", rc)?;
        if n.version < MIN_VERSION {
            return Err(NvrtcError::TooOld {
                path: n.path,
                version: n.version,
            });
        }
        Ok(n)
    }

    pub fn version(&self) -> (i32, i32) {
        self.version
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn check(&self, call: &'static str, rc: Res) -> Result<(), NvrtcError> {
        if rc == 0 {
            return Ok(());
        }
        // SAFETY: nvrtcGetErrorString returns a static NUL-terminated string for any code.
        let msg = unsafe { CStr::from_ptr((self.error_string)(rc)) }
            .to_string_lossy()
            .into_owned();
        Err(NvrtcError::Call { call, msg })
    }

    /// Compile `source` (named `name` in diagnostics) with in-memory `headers`
    /// (include name, text) and `options`, returning the cubin. A virtual `--gpu-architecture`
    /// yields no cubin and is reported as an error.
    pub fn compile_cubin(
        &self,
        name: &str,
        source: &str,
        headers: &[(&str, &str)],
        options: &[String],
    ) -> Result<Compiled, NvrtcError> {
        let c_src = CString::new(source)?;
        let c_name = CString::new(name)?;
        let h_names: Vec<CString> = headers
            .iter()
            .map(|(n, _)| CString::new(*n))
            .collect::<Result<_, _>>()?;
        let h_texts: Vec<CString> = headers
            .iter()
            .map(|(_, t)| CString::new(*t))
            .collect::<Result<_, _>>()?;
        let h_name_ptrs: Vec<*const c_char> = h_names.iter().map(|s| s.as_ptr()).collect();
        let h_text_ptrs: Vec<*const c_char> = h_texts.iter().map(|s| s.as_ptr()).collect();
        let c_opts: Vec<CString> = options
            .iter()
            .map(|o| CString::new(o.as_str()))
            .collect::<Result<_, _>>()?;
        let opt_ptrs: Vec<*const c_char> = c_opts.iter().map(|s| s.as_ptr()).collect();

        let mut prog: Prog = std::ptr::null_mut();
        // SAFETY: every pointer is a live NUL-terminated string (or array of them with the
        // count given); NVRTC copies what it keeps.
        let rc = unsafe {
            (self.create)(
                &mut prog,
                c_src.as_ptr(),
                c_name.as_ptr(),
                headers.len() as c_int,
                h_text_ptrs.as_ptr(),
                h_name_ptrs.as_ptr(),
            )
        };
        self.check("nvrtcCreateProgram", rc)?;
        let result = self.compile_and_fetch(prog, name, &opt_ptrs);
        // SAFETY: prog was created above and is destroyed exactly once.
        let rc = unsafe { (self.destroy)(&mut prog) };
        let out = result?;
        self.check("nvrtcDestroyProgram", rc)?;
        Ok(out)
    }

    fn compile_and_fetch(
        &self,
        prog: Prog,
        name: &str,
        opts: &[*const c_char],
    ) -> Result<Compiled, NvrtcError> {
        // SAFETY: prog is live; opts points at live C strings.
        let rc = unsafe { (self.compile)(prog, opts.len() as c_int, opts.as_ptr()) };
        let log = self.program_log(prog)?;
        if rc != 0 {
            return Err(NvrtcError::Compile {
                name: name.to_string(),
                log,
            });
        }
        let mut size = 0usize;
        // SAFETY: prog is live and compiled; size is a valid out-pointer.
        self.check("nvrtcGetCUBINSize", unsafe {
            (self.cubin_size)(prog, &mut size)
        })?;
        if size == 0 {
            return Err(NvrtcError::Call {
                call: "nvrtcGetCUBIN",
                msg: "no cubin (was a virtual compute_ target given?)".into(),
            });
        }
        let mut cubin = vec![0u8; size];
        // SAFETY: the buffer holds exactly the size NVRTC reported.
        self.check("nvrtcGetCUBIN", unsafe {
            (self.cubin)(prog, cubin.as_mut_ptr().cast())
        })?;
        Ok(Compiled { cubin, log })
    }

    fn program_log(&self, prog: Prog) -> Result<String, NvrtcError> {
        let mut size = 0usize;
        // SAFETY: prog is live; size is a valid out-pointer.
        self.check("nvrtcGetProgramLogSize", unsafe {
            (self.log_size)(prog, &mut size)
        })?;
        let mut buf = vec![0u8; size.max(1)];
        // SAFETY: the buffer holds the size NVRTC reported (including the NUL).
        self.check("nvrtcGetProgramLog", unsafe {
            (self.log)(prog, buf.as_mut_ptr().cast())
        })?;
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
    }
}

/// `python3 -m pip install --target` the pinned wheel, into a temporary sibling folder renamed
/// into place, so concurrent first uses (two terminals) never see half a tree. Within a process
/// (parallel tests are threads of one) installs take turns, and a turn finding the wheel in
/// place is done: the temporary folder is named by the process, and two threads sharing it
/// removed each other's files (a clean clone's CI failed `renaming into place`).
fn install_wheel(install_dir: &Path) -> Result<(), NvrtcError> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
    if install_dir.join(WHEEL_LIB_DIR).join(LIB_NAME).is_file() {
        return Ok(());
    }
    let parent = install_dir.parent().unwrap_or(Path::new("."));
    let tmp = parent.join(format!(
        ".{}.tmp{}",
        install_dir
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default(),
        std::process::id()
    ));
    let cmd = format!(
        "python3 -m pip install --quiet --disable-pip-version-check --no-deps --target {} {PINNED_WHEEL}",
        tmp.display()
    );
    let fail = |why: String| NvrtcError::Install {
        cmd: cmd.clone(),
        why,
    };
    eprintln!(
        "fa4gen: no NVRTC found; installing {PINNED_WHEEL} into {}",
        install_dir.display()
    );
    let _ = std::fs::create_dir_all(parent);
    let _ = std::fs::remove_dir_all(&tmp);
    let out = Command::new("python3")
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(["--no-deps", "--target"])
        .arg(&tmp)
        .arg(PINNED_WHEEL)
        .output()
        .map_err(|e| fail(e.to_string()))?;
    if !out.status.success() {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(fail(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    if let Err(e) = std::fs::rename(&tmp, install_dir) {
        // Another process won the race: its install is as good as ours.
        let _ = std::fs::remove_dir_all(&tmp);
        if !install_dir.join(WHEEL_LIB_DIR).join(LIB_NAME).is_file() {
            return Err(fail(format!("renaming into place: {e}")));
        }
    }
    Ok(())
}
