//! The runtime's one error type: each variant names what was wrong, the value, and what is
//! supported. Nothing on the forward path panics; every check runs before anything is launched.

use crate::spec::KernelSpec;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid argument `{field}` = {value}: {expected}")]
    Invalid {
        field: &'static str,
        value: String,
        expected: String,
    },
    #[error("no CUDA driver (libcuda.so) could be loaded on this machine")]
    NoDriver,
    #[error(
        "device compute capability {major}.{minor} is not supported: fa4gen builds for 9.0 (sm90), 10.x (sm100f) and 12.x (sm120)"
    )]
    UnsupportedDevice { major: i32, minor: i32 },
    #[error("kernel library {dir} holds {lib_arch} kernels but the device is {major}.{minor}")]
    ArchMismatch {
        dir: String,
        lib_arch: crate::Arch,
        major: i32,
        minor: i32,
    },
    #[error(
        "no kernel {stem} in the library at {dir}: build it with `cargo xtask gen` in a plan that lists it"
    )]
    KernelMissing { stem: String, dir: String },
    #[error("{feature} is not built yet in fa4gen (tracked in issue {issue})")]
    NotBuilt { feature: &'static str, issue: u32 },
    #[error("this problem needs a kernel fa4gen cannot build: {0}")]
    Unsupported(#[from] crate::spec::Unsupported),
    #[error("kernel library {dir}: {why}")]
    Library { dir: String, why: String },
    #[error("kernel library: {0}")]
    Manifest(#[from] crate::manifest::ManifestError),
    #[error("cubin {path}: {why}")]
    Cubin { path: String, why: String },
    #[error("CUDA driver call {call} failed: {source}")]
    Driver {
        call: &'static str,
        #[source]
        source: cudarc::driver::DriverError,
    },
}

impl Error {
    /// This machine has no GPU to run on: no driver, the toolkit's stub in its place, or a
    /// driver that sees no device. (Any other failure to open a context is a real error on a
    /// machine that has one.)
    pub fn is_no_gpu(&self) -> bool {
        use cudarc::driver::sys::cudaError_enum as E;
        match self {
            Error::NoDriver => true,
            Error::Driver { source, .. } => {
                matches!(
                    source.0,
                    E::CUDA_ERROR_NO_DEVICE | E::CUDA_ERROR_STUB_LIBRARY
                )
            }
            _ => false,
        }
    }

    pub(crate) fn invalid(
        field: &'static str,
        value: impl std::fmt::Display,
        expected: impl Into<String>,
    ) -> Error {
        Error::Invalid {
            field,
            value: value.to_string(),
            expected: expected.into(),
        }
    }

    pub(crate) fn missing(spec: &KernelSpec, dir: &std::path::Path) -> Error {
        Error::KernelMissing {
            stem: spec.stem(),
            dir: dir.display().to_string(),
        }
    }
}

/// Attach the name of the driver call to a cudarc error.
pub(crate) trait DriverCall<T> {
    fn call(self, call: &'static str) -> Result<T, Error>;
}

impl<T> DriverCall<T> for Result<T, cudarc::driver::DriverError> {
    fn call(self, call: &'static str) -> Result<T, Error> {
        self.map_err(|source| Error::Driver { call, source })
    }
}
