//! Tile tables: the (tile_m, tile_n) a family uses for a head dim. Plans enumerate kernels with
//! these and the runtime selects with these, so the two can never disagree (FA3's host code and
//! its generator each kept a copy: "this needs to match the kernel configs").

use crate::arch::Arch;
use crate::spec::{DType, Impl, KernelSpec, Mask};

/// Candidate tiles of the portable kernel, best first; later ones are fall-backs where a
/// family's shared memory or registers cannot hold the first (sm120 at d = 256, q_stage 2 at
/// d > 128). Measured on the H200 (bf16, S = 4096, B·S = 16k, H·d = 2048; docs/BENCHMARKS.md):
/// d = 64: 128x128 310 TFLOP/s, 128x64 273, 64x128 252, 64x64 233, 128x32 180 (non-causal);
/// above 64, 128x64 (the S and O accumulators of a 32-row warp fill 255 registers at d = 128).
fn portable_candidates(d: u32, dv: u32) -> &'static [(u32, u32)] {
    if d.max(dv) <= 64 {
        &[(128, 128), (128, 64), (64, 64)]
    } else {
        &[(128, 64), (64, 64), (64, 32)]
    }
}

/// The portable spec for a problem class on `arch`: the first candidate tile that the family can
/// implement. `None` when no tile fits (head dims out of range).
#[allow(clippy::too_many_arguments)]
pub fn portable_spec(
    arch: Arch,
    dtype: DType,
    d: u32,
    dv: u32,
    q_stage: u32,
    mask: Mask,
    lse: bool,
    pack_gqa: bool,
) -> Option<KernelSpec> {
    portable_candidates(d, dv)
        .iter()
        .find_map(|&(tile_m, tile_n)| {
            let spec = KernelSpec {
                arch,
                imp: Impl::Portable,
                dtype,
                d,
                dv,
                tile_m,
                tile_n,
                q_stage,
                mask,
                lse,
                pack_gqa,
            };
            spec.can_implement().ok().map(|()| spec)
        })
}

/// The q_stage values FA4's selection can ask for on a family: sm100f uses 2 Q tiles per CTA
/// once `max_seqlen_q * G > 128`, the others always 1.
pub fn q_stages(arch: Arch) -> &'static [u32] {
    match arch {
        Arch::Sm100f => &[1, 2],
        Arch::Sm90 | Arch::Sm120 => &[1],
    }
}
