//! Rendering a `KernelSpec` to CUDA C++ with askama.
//!
//! Templates only bind the key's values and pick a template family; the device logic lives in
//! `templates/include/fa4gen/*.cuh`, which generated files `#include`. Those headers are compiled
//! into this crate (`include_str!`) and handed to NVRTC in memory, so neither the xtask nor the
//! `jit` path depends on a file layout at run time. Their combined hash is part of every
//! manifest: a header edit makes the committed `generated/` stale.

use crate::params;
use crate::spec::{DType, Geometry, Impl, KernelSpec, Mask};
use askama::Template;
use sha2::{Digest, Sha256};

/// The device headers, by the name kernels include them under.
pub const HEADERS: &[(&str, &str)] = &[
    (
        "fa4gen/prelude.cuh",
        include_str!("../templates/include/fa4gen/prelude.cuh"),
    ),
    (
        "fa4gen/dtype.cuh",
        include_str!("../templates/include/fa4gen/dtype.cuh"),
    ),
    (
        "fa4gen/mma_m16n8k16.cuh",
        include_str!("../templates/include/fa4gen/mma_m16n8k16.cuh"),
    ),
    (
        "fa4gen/ldmatrix.cuh",
        include_str!("../templates/include/fa4gen/ldmatrix.cuh"),
    ),
    (
        "fa4gen/stmatrix.cuh",
        include_str!("../templates/include/fa4gen/stmatrix.cuh"),
    ),
    (
        "fa4gen/cp_async.cuh",
        include_str!("../templates/include/fa4gen/cp_async.cuh"),
    ),
    (
        "fa4gen/smem_tile.cuh",
        include_str!("../templates/include/fa4gen/smem_tile.cuh"),
    ),
    (
        "fa4gen/online_softmax.cuh",
        include_str!("../templates/include/fa4gen/online_softmax.cuh"),
    ),
    (
        "fa4gen/mask.cuh",
        include_str!("../templates/include/fa4gen/mask.cuh"),
    ),
    (
        "fa4gen/fwd_params.cuh",
        include_str!("../templates/include/fa4gen/fwd_params.cuh"),
    ),
    (
        "fa4gen/seqlens.cuh",
        include_str!("../templates/include/fa4gen/seqlens.cuh"),
    ),
    (
        "fa4gen/sequence_splits.cuh",
        include_str!("../templates/include/fa4gen/sequence_splits.cuh"),
    ),
    (
        "fa4gen/softcap.cuh",
        include_str!("../templates/include/fa4gen/softcap.cuh"),
    ),
    (
        "fa4gen/fast_divmod.cuh",
        include_str!("../templates/include/fa4gen/fast_divmod.cuh"),
    ),
    (
        "fa4gen/mbarrier.cuh",
        include_str!("../templates/include/fa4gen/mbarrier.cuh"),
    ),
    (
        "fa4gen/tma.cuh",
        include_str!("../templates/include/fa4gen/tma.cuh"),
    ),
    (
        "fa4gen/cluster.cuh",
        include_str!("../templates/include/fa4gen/cluster.cuh"),
    ),
    (
        "fa4gen/warpgroup.cuh",
        include_str!("../templates/include/fa4gen/warpgroup.cuh"),
    ),
    (
        "fa4gen/wgmma.cuh",
        include_str!("../templates/include/fa4gen/wgmma.cuh"),
    ),
    (
        "fa4gen/block_reduce.cuh",
        include_str!("../templates/include/fa4gen/block_reduce.cuh"),
    ),
    (
        "fa4gen/grid_dependency.cuh",
        include_str!("../templates/include/fa4gen/grid_dependency.cuh"),
    ),
];

/// sha256 over every header's name and contents, in `HEADERS` order.
pub fn headers_sha256() -> String {
    let mut h = Sha256::new();
    for (name, text) in HEADERS {
        h.update(name.as_bytes());
        h.update([0]);
        h.update(text.as_bytes());
        h.update([0]);
    }
    hex(&h.finalize())
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[derive(Template)]
#[template(path = "fwd_portable.cu")]
struct PortableFwd<'a> {
    spec: &'a KernelSpec,
    geo: Geometry,
    stem: String,
    symbol: String,
    elem_tag: &'static str,
    mask_kind: &'static str,
    /// K blocks laid from the CTA's first visible key (`KernelSpec::window_blocks`).
    window_blocks: bool,
    /// `params::layout()`: FwdParams' size and the offsets the kernel checks.
    params: params::Layout,
}

/// The Hopper flagship (`Impl::Wgmma`).
#[derive(Template)]
#[template(path = "fwd_sm90.cu")]
struct WgmmaFwd<'a> {
    spec: &'a KernelSpec,
    geo: Geometry,
    stem: String,
    symbol: String,
    elem_tag: &'static str,
    /// PTX element type of the wgmma instructions.
    ptx_type: &'static str,
    mask_kind: &'static str,
    producer_regs: u32,
    consumer_regs: u32,
    consumer_wgs: u32,
    ctas_per_sm: u32,
    chain_tiles: bool,
    o_direct: bool,
    /// Q blocks per run of the masked schedule: 0 packed (runs of G), -1 none.
    q_run: i64,
    pairs: bool,
    /// K blocks laid from each tile's first visible key (`KernelSpec::window_blocks`).
    window_blocks: bool,
    max_slack: u32,
    stale_max: bool,
    split_tail: bool,
    /// Q blocks end at the last row (`KernelSpec::wgmma_q_from_end`).
    q_from_end: bool,
    /// `params::layout()`: FwdParams' size and the offsets the kernel checks.
    params: params::Layout,
}

#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error(transparent)]
    Unsupported(#[from] crate::spec::Unsupported),
    #[error("rendering {stem}: {source}")]
    Template {
        stem: String,
        #[source]
        source: askama::Error,
    },
}

/// The CUDA C++ source of a spec. Fails only if the spec cannot be implemented.
pub fn render(spec: &KernelSpec) -> Result<String, RenderError> {
    spec.can_implement()?;
    let params = params::layout();
    let elem_tag = match spec.dtype {
        DType::Bf16 => "Bf16",
        DType::Fp16 => "Fp16",
    };
    let mask_kind = match spec.mask {
        Mask::None => "None",
        Mask::Causal => "Causal",
        Mask::Local => "Local",
    };
    let text = match spec.imp {
        Impl::Portable => PortableFwd {
            spec,
            geo: spec.geometry(),
            stem: spec.stem(),
            symbol: spec.symbol(),
            elem_tag,
            mask_kind,
            window_blocks: spec.window_blocks(),
            params,
        }
        .render(),
        Impl::Wgmma => {
            let (producer_regs, consumer_regs) = spec.wgmma_registers();
            WgmmaFwd {
                spec,
                geo: spec.geometry(),
                stem: spec.stem(),
                symbol: spec.symbol(),
                elem_tag,
                ptx_type: match spec.dtype {
                    DType::Bf16 => "bf16",
                    DType::Fp16 => "f16",
                },
                mask_kind,
                producer_regs,
                consumer_regs,
                consumer_wgs: spec.tile_m / 64,
                ctas_per_sm: spec.ctas_per_sm(),
                chain_tiles: spec.wgmma_chain_tiles(),
                o_direct: spec.wgmma_o_direct(),
                q_run: spec.wgmma_q_run().map_or(-1, i64::from),
                pairs: spec.wgmma_pairs(),
                window_blocks: spec.window_blocks(),
                max_slack: spec.wgmma_max_slack(),
                stale_max: spec.wgmma_stale_max(),
                split_tail: spec.wgmma_split_tail(),
                q_from_end: spec.wgmma_q_from_end(),
                params,
            }
            .render()
        }
    };
    text.map_err(|source| RenderError::Template {
        stem: spec.stem(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file under templates/include is in HEADERS (a forgotten one would compile in a
    /// checkout and fail in the jit path, which only has HEADERS).
    #[test]
    fn headers_list_matches_directory() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/templates/include/fa4gen");
        let mut on_disk: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| format!("fa4gen/{}", e.unwrap().file_name().to_string_lossy()))
            .collect();
        on_disk.sort();
        let mut listed: Vec<String> = HEADERS.iter().map(|(n, _)| n.to_string()).collect();
        listed.sort();
        assert_eq!(on_disk, listed);
    }
}
