//! Plans: the list of kernel specs to ship for an arch family.
//!
//! `default`: every head dim engines use (64, 96, 128, 256 and DeepSeek's 192/128), bf16 and
//! fp16, each mask kind (none, causal, local) with and without LSE, packed and unpacked GQA
//! (selection packs by default when H > Hkv), at every q_stage FA4's selection can ask for on
//! the family, on the family's tile table.

use crate::arch::Arch;
use crate::spec::{DType, Features, KernelSpec, Mask};
use crate::tiles::{self, SpecClass};

/// Head dims (qk, v) of the default plan.
pub const DEFAULT_HEAD_DIMS: [(u32, u32); 5] =
    [(64, 64), (96, 96), (128, 128), (192, 128), (256, 256)];

/// Every named plan: `default`, `tiles`, and one per shipped model config (`models/*.json`).
pub fn plan_names() -> Vec<&'static str> {
    let mut names = vec!["default", "tiles"];
    names.extend(crate::model::MODELS.iter().map(|(n, _)| *n));
    names
}

/// The named plan `name` refers to: itself, or the one shipped model whose name it begins
/// (`gpt-oss` is `gpt-oss-20b`, `qwen3` is `qwen3-32b`).
pub fn canonical_name(name: &str) -> Option<&'static str> {
    let names = plan_names();
    if let Some(n) = names.iter().find(|n| **n == name) {
        return Some(n);
    }
    let mut hits = names
        .iter()
        .filter(|n| n.starts_with(name) && !name.is_empty());
    match (hits.next(), hits.next()) {
        (Some(n), None) => Some(n),
        _ => None,
    }
}

#[derive(Debug, thiserror::Error)]
#[error("unknown plan `{0}` (known: {known})", known = plan_names().join(", "))]
pub struct UnknownPlan(pub String);

/// The specs of plan `name` for `arch`, sorted by stem and free of duplicates.
pub fn plan(name: &str, arch: Arch) -> Result<Vec<KernelSpec>, UnknownPlan> {
    let name = canonical_name(name).ok_or_else(|| UnknownPlan(name.to_string()))?;
    let mut specs = match name {
        "default" => default_plan(arch),
        "tiles" => tile_sweep(arch),
        other => match crate::model::MODELS.iter().find(|(n, _)| *n == other) {
            Some((_, config)) => crate::model::ModelAttention::from_hf_config(config)
                .map_err(|e| UnknownPlan(format!("{other} (its config does not read: {e})")))?
                .plan(arch),
            None => return Err(UnknownPlan(other.to_string())),
        },
    };
    specs.sort_by_key(|s| s.stem());
    specs.dedup();
    Ok(specs)
}

/// `tiles`: the tile candidates for tuning the tile table (bench with `Problem::tile_mn`):
/// bf16, d 64/128/256 and 192/128, no mask and causal, no LSE, unpacked.
fn tile_sweep(arch: Arch) -> Vec<KernelSpec> {
    let mut out = Vec::new();
    for (d, dv) in [(64, 64), (128, 128), (192, 128), (256, 256)] {
        for mask in [Mask::None, Mask::Causal] {
            let class = SpecClass {
                arch,
                dtype: DType::Bf16,
                d,
                dv,
                q_stage: 1,
                mask,
                lse: false,
                pack_gqa: false,
                feat: Features::default(),
            };
            for (tile_m, tile_n) in [(128, 128), (128, 64), (128, 32), (64, 128), (64, 64)] {
                let s = class.on_tile(tile_m, tile_n);
                if s.can_implement().is_ok() {
                    out.push(s);
                }
            }
            // The flagship's candidates (sm90): 64-row consumer warpgroups, K/V tile widths
            // around FA3's choices.
            for (tile_m, tile_n) in [
                (192, 128),
                (128, 176),
                (128, 160),
                (128, 128),
                (128, 112),
                (128, 96),
                (128, 80),
                (128, 64),
            ] {
                let s = KernelSpec {
                    imp: crate::spec::Impl::Wgmma,
                    ..class.on_tile(tile_m, tile_n)
                };
                if s.can_implement().is_ok() {
                    out.push(s);
                }
            }
        }
    }
    out
}

fn default_plan(arch: Arch) -> Vec<KernelSpec> {
    let mut out = Vec::new();
    for (d, dv) in DEFAULT_HEAD_DIMS {
        for dtype in DType::ALL {
            for &q_stage in tiles::q_stages(arch) {
                for mask in Mask::ALL {
                    for lse in [false, true] {
                        for pack_gqa in [false, true] {
                            let class = SpecClass {
                                arch,
                                dtype,
                                d,
                                dv,
                                q_stage,
                                mask,
                                lse,
                                pack_gqa,
                                feat: Features::default(),
                            };
                            out.extend(class.portable());
                            out.extend(class.flagship_by_shape());
                            out.extend(class.flagship_fill());
                        }
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_plan_covers_every_head_dim_on_every_family() {
        for arch in Arch::ALL {
            let specs = plan("default", arch).unwrap();
            let per_dim = 2 * 3 * 2 * 2 * tiles::q_stages(arch).len();
            // sm90 adds the flagship, packed and unpacked, for every head dim, on two tiles
            // for d 64, 96 and 128 (`flagship_by_shape`: 192x128 or 128x160 for long
            // sequences, 128x128 for short) and for d 256 unmasked and causal (128x80 long,
            // 128x64 short); packed local masks also on the narrow tiles (d 64: 192x64,
            // 192x80 and 128x64; d 96, 128: 128x64; d 192: 128x112 and 128x64; per dtype and
            // LSE: 2 x 2 x (3 + 1 + 1 + 2) = 28); and the 64x128 fill tile for d 96 and 128,
            // unmasked and causal, packed and not (`flagship_fill`: 2 x 2 x 2 x 2 x 2 = 32).
            let flagship = if arch == Arch::Sm90 {
                8 * 2 * 3 * 2 * 2 + 2 * 2 * 2 * 2 + 28 + 32
            } else {
                0
            };
            assert_eq!(
                specs.len(),
                DEFAULT_HEAD_DIMS.len() * per_dim + flagship,
                "{arch}"
            );
            for s in &specs {
                s.can_implement().unwrap();
                assert_eq!(s.arch, arch);
            }
        }
    }

    #[test]
    fn unknown_plan_is_an_error() {
        assert!(plan("nope", Arch::Sm90).is_err());
        assert!(plan("gemma", Arch::Sm90).is_err()); // gemma-3-12b or gemma-2-9b: ambiguous
    }

    #[test]
    fn model_names_resolve_by_prefix() {
        assert_eq!(canonical_name("gpt-oss"), Some("gpt-oss-20b"));
        assert_eq!(canonical_name("qwen3"), Some("qwen3-32b"));
        assert_eq!(canonical_name("default"), Some("default"));
        assert_eq!(
            plan("gpt-oss", Arch::Sm90).unwrap(),
            plan("gpt-oss-20b", Arch::Sm90).unwrap()
        );
    }
}
