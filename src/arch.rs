//! GPU architecture families fa4gen compiles for, and which devices run them.
//!
//! A family is what a cubin is built for: `sm90` (NVRTC target `sm_90a`, the H100/H200 only),
//! `sm100f` (`sm_100f`: compute capability 10.x, B200/GB200/B300) and `sm120` (`sm_120f`: 12.x,
//! RTX 50 / RTX PRO). An `a` target runs on exactly one compute capability; an `f` target on every
//! member of its family. The loader filters by [`Arch::runs_on`] before it asks the driver to load
//! anything, because a cubin for another family fails with `CUDA_ERROR_NO_BINARY_FOR_GPU`.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    Sm90,
    Sm100f,
    Sm120,
}

impl Arch {
    pub const ALL: [Arch; 3] = [Arch::Sm90, Arch::Sm100f, Arch::Sm120];

    /// The short name used in stems, directories and the CLI.
    pub const fn name(self) -> &'static str {
        match self {
            Arch::Sm90 => "sm90",
            Arch::Sm100f => "sm100f",
            Arch::Sm120 => "sm120",
        }
    }

    /// The `--gpu-architecture` NVRTC compiles this family's cubins for (never a virtual arch:
    /// PTX from a newer NVRTC is rejected by an older driver, SASS is not).
    pub const fn nvrtc_target(self) -> &'static str {
        match self {
            Arch::Sm90 => "sm_90a",
            Arch::Sm100f => "sm_100f",
            Arch::Sm120 => "sm_120f",
        }
    }

    /// Largest dynamic shared memory one CTA may opt into (bytes): 227 KiB on sm90/sm100,
    /// 99 KiB on the sm120 consumer parts.
    pub const fn max_dynamic_smem(self) -> u32 {
        match self {
            Arch::Sm90 | Arch::Sm100f => 227 * 1024,
            Arch::Sm120 => 99 * 1024,
        }
    }

    /// Whether a cubin of this family runs on a device of compute capability `major.minor`.
    pub const fn runs_on(self, major: i32, minor: i32) -> bool {
        match self {
            Arch::Sm90 => major == 9 && minor == 0,
            Arch::Sm100f => major == 10,
            Arch::Sm120 => major == 12,
        }
    }

    /// The family whose cubins run on a device, if fa4gen builds one for it.
    pub fn for_device(major: i32, minor: i32) -> Option<Arch> {
        Arch::ALL.into_iter().find(|a| a.runs_on(major, minor))
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Arch {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Arch::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| format!("unknown arch family `{s}` (expected sm90, sm100f or sm120)"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_to_family() {
        assert_eq!(Arch::for_device(9, 0), Some(Arch::Sm90));
        assert_eq!(Arch::for_device(10, 0), Some(Arch::Sm100f));
        assert_eq!(Arch::for_device(10, 3), Some(Arch::Sm100f));
        assert_eq!(Arch::for_device(12, 0), Some(Arch::Sm120));
        assert_eq!(Arch::for_device(8, 0), None);
        assert_eq!(Arch::for_device(8, 9), None);
        assert_eq!(Arch::for_device(9, 1), None);
    }

    #[test]
    fn names_round_trip() {
        for a in Arch::ALL {
            assert_eq!(a.name().parse::<Arch>().unwrap(), a);
        }
        assert!("sm80".parse::<Arch>().is_err());
    }
}
