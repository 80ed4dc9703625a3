//! fa4gen: FlashAttention-4-class attention kernels generated ahead of time.
//!
//! `KernelSpec` (spec) → askama rendering (render) → NVRTC cubins (nvrtc, compile) listed in a
//! manifest (manifest) → the runtime loader picks, verifies, loads and launches (runtime).
//! ARCHITECTURE.md is the code map.

pub mod arch;
pub mod codegen;
pub mod compile;
pub mod manifest;
pub mod model;
pub mod nvrtc;
pub mod params;
pub mod plan;
pub mod render;
pub mod spec;
pub mod tiles;

pub use arch::Arch;
pub use spec::{DType, Impl, KernelSpec, Mask, Unsupported};
pub mod capi;
pub mod reference;
pub mod runtime;
pub mod schedule;
pub mod select;
pub mod split_count;
