//! Model plans: the attention a Hugging Face model needs, read from its `config.json`, and the
//! kernel set that serves it in an engine (prefill, chunked prefill with a prefix cache, decode).
//!
//! What a config decides: the dtype, head dims (qk, v; MLA's `qk_nope + qk_rope` / `v_head_dim`),
//! the GQA group, which layers are full and which slide (`layer_types`, `sliding_window`,
//! `use_sliding_window`, `sliding_window_pattern`), learnable sinks (gpt-oss) and the logit
//! softcap (`attn_logit_softcapping`). The scale, window size and softcap value are run-time
//! values and never multiply the kernel count.
//!
//! What an engine calls, per attention kind (full: causal; sliding: causal + window = local):
//! - dense batches (`flash_attn_func`) and ragged ones (`cu_seqlens`/`seqused`: varlen);
//! - K/V from a paged cache, with ragged or batched queries (paged, paged + varlen);
//! - with and without LSE (LSE for cascade / chunk merging);
//! - unsplit and split-KV (decode and long-K chunks);
//!
//! each at every q_stage the family's selection can ask for and on the decode tile (for at most
//! 64 packed query rows), GQA packed when G > 1 (selection's default).

use crate::arch::Arch;
use crate::spec::{DType, Features, KernelSpec, Mask};
use crate::tiles::{self, SpecClass};
use serde_json::Value;

/// The attention of a model, as its kernels see it.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelAttention {
    pub model_type: String,
    pub dtype: DType,
    pub heads: u32,
    pub heads_kv: u32,
    pub head_dim: u32,
    pub head_dim_v: u32,
    /// Layers with full (causal) attention.
    pub full_layers: bool,
    /// Window size of the sliding layers, if any.
    pub sliding_window: Option<u32>,
    pub sinks: bool,
    pub softcap: Option<f32>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config is not JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("config field `{field}`: {why}")]
    Field { field: &'static str, why: String },
}

fn field_err(field: &'static str, why: impl Into<String>) -> ConfigError {
    ConfigError::Field {
        field,
        why: why.into(),
    }
}

fn uint(cfg: &Value, field: &'static str) -> Result<Option<u32>, ConfigError> {
    match cfg.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|x| u32::try_from(x).ok())
            .map(Some)
            .ok_or_else(|| field_err(field, format!("{v} is not a non-negative integer"))),
    }
}

fn need(cfg: &Value, field: &'static str) -> Result<u32, ConfigError> {
    uint(cfg, field)?.ok_or_else(|| field_err(field, "missing"))
}

impl ModelAttention {
    /// Read a Hugging Face `config.json` (multimodal configs: their `text_config`).
    pub fn from_hf_config(text: &str) -> Result<ModelAttention, ConfigError> {
        let root: Value = serde_json::from_str(text)?;
        let cfg = root.get("text_config").unwrap_or(&root);
        let model_type = cfg
            .get("model_type")
            .or_else(|| root.get("model_type"))
            .and_then(Value::as_str)
            .unwrap_or("unknown")
            .to_string();
        // (`dtype` is what transformers writes since it renamed `torch_dtype`.)
        let dtype = match cfg
            .get("torch_dtype")
            .or_else(|| cfg.get("dtype"))
            .or_else(|| root.get("torch_dtype"))
            .or_else(|| root.get("dtype"))
            .and_then(Value::as_str)
        {
            None | Some("bfloat16") => DType::Bf16,
            Some("float16") => DType::Fp16,
            Some(other) => {
                return Err(field_err(
                    "torch_dtype",
                    format!("`{other}`: fa4gen builds bfloat16 and float16 kernels"),
                ));
            }
        };
        let heads = need(cfg, "num_attention_heads")?;
        if heads == 0 {
            return Err(field_err("num_attention_heads", "0: a model needs heads"));
        }
        let heads_kv = uint(cfg, "num_key_value_heads")?.unwrap_or(heads);
        if heads_kv == 0 || heads % heads_kv != 0 {
            return Err(field_err(
                "num_key_value_heads",
                format!("{heads_kv} does not divide num_attention_heads = {heads}"),
            ));
        }
        // MLA (DeepSeek): the prefill form attends with d = nope + rope, dv = v_head_dim.
        let (head_dim, head_dim_v) = match (
            uint(cfg, "qk_nope_head_dim")?,
            uint(cfg, "qk_rope_head_dim")?,
        ) {
            (Some(nope), Some(rope)) => (
                nope.checked_add(rope).ok_or_else(|| {
                    field_err("qk_rope_head_dim", format!("{nope} + {rope} overflows"))
                })?,
                need(cfg, "v_head_dim")?,
            ),
            _ => {
                let d = match uint(cfg, "head_dim")? {
                    Some(d) => d,
                    None => {
                        let hidden = need(cfg, "hidden_size")?;
                        if hidden % heads != 0 {
                            return Err(field_err(
                                "hidden_size",
                                format!(
                                    "{hidden} is not a multiple of num_attention_heads = {heads} \
                                     (give head_dim)"
                                ),
                            ));
                        }
                        hidden / heads
                    }
                };
                (d, d)
            }
        };
        if head_dim == 0 || head_dim_v == 0 {
            return Err(field_err(
                "head_dim",
                format!("{head_dim} x {head_dim_v}: head dims must be > 0"),
            ));
        }
        let use_sliding = cfg
            .get("use_sliding_window")
            .and_then(Value::as_bool)
            .unwrap_or(true);
        let window = uint(cfg, "sliding_window")?.filter(|_| use_sliding);
        if window == Some(0) {
            return Err(field_err(
                "sliding_window",
                "0: a window of no keys (null means none)",
            ));
        }
        let (full_layers, sliding_window) = match (window, cfg.get("layer_types")) {
            (None, _) => (true, None),
            (Some(w), Some(Value::Array(kinds))) => {
                let has = |k: &str| kinds.iter().any(|x| x.as_str() == Some(k));
                if !has("full_attention") && !has("sliding_attention") {
                    return Err(field_err(
                        "layer_types",
                        "names neither full_attention nor sliding_attention layers",
                    ));
                }
                (has("full_attention"), has("sliding_attention").then_some(w))
            }
            // A pattern interleaves sliding and full layers (Gemma 3, Cohere 2: every n-th
            // layer full); Gemma 2 interleaves them every other layer without one.
            (Some(w), _)
                if cfg
                    .get("sliding_window_pattern")
                    .is_some_and(|v| !v.is_null())
                    || model_type.starts_with("gemma") =>
            {
                (true, Some(w))
            }
            (Some(w), _) => (false, Some(w)),
        };
        let softcap = match cfg.get("attn_logit_softcapping") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                v.as_f64()
                    .filter(|c| *c > 0.0)
                    .ok_or_else(|| field_err("attn_logit_softcapping", format!("{v} is not > 0")))?
                    as f32,
            ),
        };
        Ok(ModelAttention {
            sinks: model_type == "gpt_oss",
            model_type,
            dtype,
            heads,
            heads_kv,
            head_dim,
            head_dim_v,
            full_layers,
            sliding_window,
            softcap,
        })
    }

    /// The kernels an engine needs for this model on `arch`, sorted by stem, no duplicates.
    pub fn plan(&self, arch: Arch) -> Vec<KernelSpec> {
        let mut masks = Vec::new();
        if self.full_layers {
            masks.push(Mask::Causal);
        }
        if self.sliding_window.is_some() {
            masks.push(Mask::Local);
        }
        let mut out = Vec::new();
        for mask in masks {
            for &q_stage in tiles::q_stages(arch) {
                for lse in [false, true] {
                    for (varlen, paged) in
                        [(false, false), (true, false), (true, true), (false, true)]
                    {
                        for split in [false, true] {
                            let class = SpecClass {
                                arch,
                                dtype: self.dtype,
                                d: self.head_dim,
                                dv: self.head_dim_v,
                                q_stage,
                                mask,
                                lse,
                                pack_gqa: self.heads > self.heads_kv,
                                feat: Features {
                                    varlen,
                                    paged,
                                    sink: self.sinks,
                                    softcap: self.softcap.is_some(),
                                    split,
                                },
                            };
                            out.extend(class.portable());
                            // Decode steps and small chunks select the decode tile.
                            out.extend(class.decode_tiles());
                            // Prefill: the sm90 flagship, packed and unpacked as selection
                            // takes it (select.rs: packed where the group divides 64, for
                            // every length at d <= 64 and for short queries above; unpacked
                            // otherwise); with pages, its tiles for the common page sizes
                            // (whole 128-key pages, and 16).
                            let group = self.heads / self.heads_kv.max(1);
                            let packs =
                                class.pack_gqa && crate::runtime::tma::packs_group(group as usize);
                            let unpacks = !packs
                                || !crate::tiles::flagship_packs_any_length(
                                    self.head_dim,
                                    self.head_dim_v,
                                );
                            let unpacked = SpecClass {
                                pack_gqa: false,
                                ..class
                            };
                            for c in [packs.then_some(class), unpacks.then_some(unpacked)]
                                .into_iter()
                                .flatten()
                            {
                                if paged && c.mask == Mask::Local {
                                    // Chosen by shape among the tiles pages of 16 and 128 fit
                                    // (`SpecClass::flagship_for_paged_shape`).
                                    out.extend(c.flagship_by_shape().filter(|s| {
                                        [16, 128]
                                            .iter()
                                            .any(|&pg| crate::runtime::tma::page_fits(pg, s.tile_n))
                                    }));
                                } else if paged {
                                    out.extend(c.flagship_for_pages(128));
                                    out.extend(c.flagship_for_pages(16));
                                } else {
                                    out.extend(c.flagship_by_shape());
                                }
                                // Calls whose 128-row tiles fill half the SMs or fewer
                                // (`flagship_fill`: full layers at d 65-128, any pages), and
                                // at d 64 those whose 128-row tiles fit one round
                                // (`flagship_one_round`: 128x128, which 16- and 128-key pages
                                // fit; unpaged it is already among `flagship_by_shape`'s).
                                out.extend(c.flagship_fill());
                                out.extend(c.flagship_one_round());
                            }
                        }
                    }
                }
            }
        }
        // The standalone combine (FA4's `flash_attn_combine`) of this model's dv: with and
        // without the LSE, dense and ragged queries, without a sink (FA4's) and with the
        // model's own.
        for lse in [false, true] {
            for varlen in [false, true] {
                for sink in [false, self.sinks] {
                    out.extend(SpecClass::split_combine(
                        arch,
                        self.dtype,
                        self.head_dim_v,
                        lse,
                        sink,
                        varlen,
                    ));
                }
            }
        }
        out.sort_by_key(|s| s.stem());
        out.dedup();
        out
    }
}

/// The model configs shipped in `models/` (test data and named plans).
pub const MODELS: &[(&str, &str)] = &[
    ("gpt-oss-20b", include_str!("../models/gpt-oss-20b.json")),
    ("deepseek-v3", include_str!("../models/deepseek-v3.json")),
    ("llama-3-70b", include_str!("../models/llama-3-70b.json")),
    ("qwen3-32b", include_str!("../models/qwen3-32b.json")),
    ("gemma-3-12b", include_str!("../models/gemma-3-12b.json")),
    ("gemma-2-9b", include_str!("../models/gemma-2-9b.json")),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Impl;

    fn model(name: &str) -> ModelAttention {
        let text = MODELS.iter().find(|(n, _)| *n == name).unwrap().1;
        ModelAttention::from_hf_config(text).unwrap()
    }

    #[test]
    fn shipped_configs_read_as_their_models_attend() {
        let g = model("gpt-oss-20b");
        assert_eq!(
            (g.heads, g.heads_kv, g.head_dim, g.head_dim_v),
            (64, 8, 64, 64)
        );
        assert!(g.sinks && g.full_layers);
        assert_eq!(g.sliding_window, Some(128));
        let d = model("deepseek-v3");
        assert_eq!(
            (d.heads, d.heads_kv, d.head_dim, d.head_dim_v),
            (128, 128, 192, 128)
        );
        assert!(d.full_layers && d.sliding_window.is_none() && !d.sinks);
        let l = model("llama-3-70b");
        assert_eq!((l.heads, l.heads_kv, l.head_dim), (64, 8, 128));
        let q = model("qwen3-32b");
        assert_eq!((q.head_dim, q.sliding_window), (128, None));
        let g3 = model("gemma-3-12b");
        assert_eq!(
            (g3.head_dim, g3.sliding_window, g3.softcap),
            (256, Some(1024), None)
        );
        assert!(g3.full_layers);
        let g2 = model("gemma-2-9b");
        assert_eq!((g2.head_dim, g2.softcap), (256, Some(50.0)));
    }

    #[test]
    fn plans_are_deterministic_and_implementable() {
        for (name, text) in MODELS {
            let m = ModelAttention::from_hf_config(text).unwrap();
            for arch in Arch::ALL {
                let all = m.plan(arch);
                assert_eq!(all, m.plan(arch), "{name}");
                // The standalone combine's modules (`SpecClass::split_combine`): unmasked, so
                // apart from every forward of the plan (whose masks are causal or local).
                let combine: Vec<KernelSpec> = [false, true]
                    .into_iter()
                    .flat_map(|lse| [false, true].map(|varlen| (lse, varlen)))
                    .flat_map(|(lse, varlen)| {
                        [false, m.sinks].map(|sink| {
                            SpecClass::split_combine(arch, m.dtype, m.head_dim_v, lse, sink, varlen)
                                .unwrap()
                        })
                    })
                    .collect();
                let (combines, all): (Vec<_>, Vec<_>) = all
                    .into_iter()
                    .partition(|s| s.mask == crate::spec::Mask::None);
                let distinct = if m.sinks { 8 } else { 4 };
                assert_eq!(combines.len(), distinct, "{name} {arch}");
                for c in &combine {
                    assert!(combines.contains(c), "{name} {arch}: {}", c.stem());
                }
                // The sm90 flagship serves the unsplit classes (dense, varlen, paged; sinks and
                // softcap included), packed where selection packs (groups dividing 64) and
                // unpacked where it does not (no group, or d > 64 past 64 queries).
                let (flagship, a): (Vec<_>, Vec<_>) =
                    all.into_iter().partition(|s| s.imp == Impl::Wgmma);
                // The flagship's split-KV: its unmasked and causal tiles, split (not the fill
                // tile, which runs unsplit only).
                let (flagship_split, flagship): (Vec<_>, Vec<_>) =
                    flagship.into_iter().partition(|s| s.feat.split);
                let is_fill = |s: &KernelSpec| {
                    s.tile_m == 64 && s.tile_n == 128 && s.mask != crate::spec::Mask::Local
                };
                // Nor the paged one-round tile (`flagship_one_round`, d <= 64: unsplit only);
                // unpaged, the same tile is also `flagship_by_shape`'s and splits.
                let is_one_round_paged = |s: &KernelSpec| {
                    let class = crate::tiles::SpecClass {
                        arch: s.arch,
                        dtype: s.dtype,
                        d: s.d,
                        dv: s.dv,
                        q_stage: s.q_stage,
                        mask: s.mask,
                        lse: s.lse,
                        pack_gqa: s.pack_gqa,
                        feat: s.feat,
                    };
                    s.feat.paged && class.flagship_one_round() == Some(*s)
                };
                let expect_split: Vec<KernelSpec> = flagship
                    .iter()
                    .filter(|s| {
                        s.mask != crate::spec::Mask::Local && !is_fill(s) && !is_one_round_paged(s)
                    })
                    .map(|s| KernelSpec {
                        feat: crate::spec::Features {
                            split: true,
                            ..s.feat
                        },
                        ..*s
                    })
                    .collect();
                let stems = |v: &[KernelSpec]| {
                    let mut v: Vec<String> = v.iter().map(|s| s.stem()).collect();
                    v.sort();
                    v
                };
                assert_eq!(
                    stems(&flagship_split),
                    stems(&expect_split),
                    "{name} {arch}"
                );
                let flagship_dims =
                    m.head_dim.is_multiple_of(16) && m.head_dim_v.is_multiple_of(16);
                if arch == Arch::Sm90 && flagship_dims {
                    // The fill tile (`flagship_fill`): full layers at d 65-128, per LSE flag,
                    // varlen and pages, and packing.
                    let (fill, flagship): (Vec<&KernelSpec>, Vec<&KernelSpec>) =
                        flagship.iter().partition(|s| is_fill(s));
                    let (paged, unpaged): (Vec<&KernelSpec>, Vec<&KernelSpec>) =
                        flagship.into_iter().partition(|s| s.feat.paged);
                    // Two tiles by shape (`flagship_by_shape`) at d <= 128, and at d 256 for
                    // full layers (128x80 and 128x64; its local masks have 128x64 only).
                    let dmax = m.head_dim.max(m.head_dim_v);
                    let by_length_local = if dmax <= 128 { 2 } else { 1 };
                    let by_length_full = if dmax <= 128 || dmax > 192 { 2 } else { 1 };
                    let group = (m.heads / m.heads_kv) as usize;
                    let packs = group > 1 && crate::runtime::tma::packs_group(group);
                    let unpacks = !packs || dmax > 64;
                    let variants = packs as usize + unpacks as usize;
                    // Packed local masks also take the table's narrow tiles (`flagship_by_shape`).
                    let (narrow, wide): (Vec<&&KernelSpec>, Vec<&&KernelSpec>) = unpaged
                        .iter()
                        .partition(|s| s.pack_gqa && s.mask == crate::spec::Mask::Local);
                    let local = m.sliding_window.is_some() as usize;
                    let expect_wide = 2
                        * 2
                        * variants
                        * (m.full_layers as usize * by_length_full + local * by_length_local)
                        - if packs && local == 1 {
                            2 * 2 * by_length_local
                        } else {
                            0
                        };
                    let expect_fill = if (65..=128).contains(&dmax) {
                        2 * 4 * variants * m.full_layers as usize
                    } else {
                        0
                    };
                    assert_eq!(fill.len(), expect_fill, "{name} {arch}");
                    assert_eq!(wide.len(), expect_wide, "{name} {arch}");
                    if packs && m.sliding_window.is_some() {
                        assert!(narrow.len() >= 2 * 2 * by_length_local, "{name} {arch}");
                        if dmax <= 64 {
                            assert!(narrow.iter().any(|s| s.tile_n < 128), "{name} {arch}");
                        }
                    }
                    // Local masks: by shape among the tiles pages fit (all of them), the same
                    // set as unpaged; full layers one or two tiles (128-key and 16-key pages),
                    // and at d <= 64 the one-round 128-row tile beside them.
                    let (paged_local, paged_full): (Vec<&&KernelSpec>, Vec<&&KernelSpec>) = paged
                        .iter()
                        .partition(|s| s.mask == crate::spec::Mask::Local);
                    let unpaged_local = unpaged
                        .iter()
                        .filter(|s| s.mask == crate::spec::Mask::Local)
                        .count();
                    assert_eq!(paged_local.len(), unpaged_local, "{name} {arch}");
                    let full = m.full_layers as usize;
                    assert!(
                        (full * 2 * 2 * variants..=full * 2 * 4 * variants)
                            .contains(&paged_full.len()),
                        "{name} {arch}: {}",
                        paged_full.len()
                    );
                    assert!(
                        paged
                            .iter()
                            .any(|s| crate::runtime::tma::pages_hold_blocks(128, s.tile_n)),
                        "{name}: a tile whose blocks lie in 128-key pages"
                    );
                    // d <= 64: full layers also on 128 rows, for calls of one round.
                    if dmax <= 64 && m.full_layers {
                        assert!(
                            paged_full.iter().any(|s| s.tile_m == 128),
                            "{name}: a one-round 128-row tile for pages"
                        );
                    }
                    for s in paged {
                        assert!(crate::runtime::tma::page_fits(16, s.tile_n), "{}", s.stem());
                    }
                } else {
                    assert!(flagship.is_empty(), "{name} {arch}");
                }
                let masks = m.full_layers as usize + m.sliding_window.is_some() as usize;
                // Each class on the main tile table at every q_stage, and on the decode tiles
                // (the key-split 16-row one and the 64-row one) where they differ (d 256 uses
                // 64x64 for both the table and decode).
                let classes = masks * 2 * 4 * 2;
                let qs = tiles::q_stages(arch).len();
                assert!(
                    (classes * (qs + 1)..=classes * (qs + 2)).contains(&a.len()),
                    "{name} {arch}: {}",
                    a.len()
                );
                if m.head_dim.max(m.head_dim_v) <= 128 {
                    assert_eq!(a.len(), classes * (qs + 2), "{name} {arch}");
                }
                assert_eq!(
                    a.iter().filter(|s| s.tile_m == 16).count(),
                    classes,
                    "{name} {arch}: one key-split decode tile per class"
                );
                for s in &a {
                    s.can_implement().unwrap();
                    assert_eq!(s.feat.sink, m.sinks);
                    assert_eq!(s.pack_gqa, m.heads > m.heads_kv);
                }
            }
        }
    }

    /// Every model plan holds the kernel selection takes on the H200 for its decode steps and
    /// short chunks (1-32 queries, B 1-16, 129 keys to 4k, dense and pages of 16 and 128, LSE or
    /// not, split or not, each of its masks), so the runtime never falls back to another tile
    /// for them: around `tiles::unsplit_decode_after_keys` the decode tile gives way to the
    /// flagship's by-shape and paged tiles.
    #[test]
    fn plans_hold_what_decode_steps_select() {
        use crate::runtime::{Paged, Problem, Strides};
        let dev = crate::select::H200;
        let mut seen = 0;
        for (name, text) in MODELS {
            let m = ModelAttention::from_hf_config(text).unwrap();
            let plan = m.plan(Arch::Sm90);
            let (h, hkv) = (m.heads as usize, m.heads_kv as usize);
            let (d, dv) = (m.head_dim as usize, m.head_dim_v as usize);
            let mut masks = Vec::new();
            if m.full_layers {
                masks.push((true, None));
            }
            if let Some(w) = m.sliding_window {
                masks.push((false, Some(w as i64 - 1)));
            }
            for (causal, left) in masks {
                for (b, sq, sk) in [1, 8, 16]
                    .into_iter()
                    .flat_map(|b| [1, 4, 32].map(|sq| (b, sq)))
                    .flat_map(|(b, sq)| [129, 200, 256, 300, 1000, 4096].map(|sk| (b, sq, sk)))
                {
                    for page in [None, Some(16), Some(128)] {
                        for (lse, splits) in [(false, 1), (true, 1), (false, 0)] {
                            let mut p = Problem::new(m.dtype, b, sq, sk, h, hkv, d, dv);
                            p.causal = causal;
                            p.window = (left, left.map(|_| 0));
                            p.return_lse = lse;
                            p.num_splits = splits;
                            p.sinks = m.sinks;
                            p.softcap = m.softcap.unwrap_or(0.0);
                            if let Some(page) = page {
                                p.paged = Some(Paged {
                                    page_size: page,
                                    num_pages: b * sk.div_ceil(page),
                                    pages_per_seq: sk.div_ceil(page),
                                    page_table_stride: sk.div_ceil(page),
                                });
                                p.k_strides = Strides::contiguous(page, hkv, d);
                                p.v_strides = Strides::contiguous(page, hkv, dv);
                            }
                            let Ok(v) = p.validate() else { continue };
                            let s = crate::select::select(&p, &v, &dev).unwrap();
                            assert!(
                                plan.contains(&s.spec),
                                "{name}: B {b} Sq {sq} Sk {sk} pages {page:?} lse {lse} splits \
                                 {splits} causal {causal} window {left:?}: {} not in the plan",
                                s.spec.stem()
                            );
                            seen += 1;
                        }
                    }
                }
            }
        }
        assert!(seen > 1000, "{seen}");
    }

    #[test]
    fn bad_configs_name_the_field() {
        for (text, field) in [
            (
                r#"{"num_attention_heads": 6, "num_key_value_heads": 4, "hidden_size": 768}"#,
                "num_key_value_heads",
            ),
            (r#"{"hidden_size": 768}"#, "num_attention_heads"),
            (
                r#"{"num_attention_heads": 8, "hidden_size": 512, "torch_dtype": "float32"}"#,
                "torch_dtype",
            ),
            (r#"{"num_attention_heads": 8, "head_dim": -64}"#, "head_dim"),
            // (A review's: each panicked, or read as a plan of no kernels.)
            (
                r#"{"num_attention_heads": 0, "num_key_value_heads": 4, "hidden_size": 768}"#,
                "num_attention_heads",
            ),
            (
                r#"{"num_attention_heads": 8, "qk_nope_head_dim": 4294967295, "qk_rope_head_dim": 1, "v_head_dim": 128}"#,
                "qk_rope_head_dim",
            ),
            (
                r#"{"num_attention_heads": 12, "hidden_size": 1000}"#,
                "hidden_size",
            ),
            (r#"{"num_attention_heads": 8, "head_dim": 0}"#, "head_dim"),
            (
                r#"{"num_attention_heads": 8, "head_dim": 64, "sliding_window": 0}"#,
                "sliding_window",
            ),
            (
                r#"{"num_attention_heads": 8, "head_dim": 64, "sliding_window": 128, "layer_types": []}"#,
                "layer_types",
            ),
            (
                r#"{"text_config": {"num_attention_heads": 8, "head_dim": 64, "dtype": "float32"}}"#,
                "torch_dtype",
            ),
        ] {
            match ModelAttention::from_hf_config(text) {
                Err(ConfigError::Field { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    /// Fields a config may carry beyond the shipped ones: a window pattern outside Gemma
    /// (Cohere 2) interleaves full and sliding layers; transformers' `dtype` in a text_config.
    #[test]
    fn patterns_and_dtypes_of_any_model_type() {
        let m = ModelAttention::from_hf_config(
            r#"{"model_type": "cohere2", "num_attention_heads": 64, "num_key_value_heads": 8,
                "head_dim": 128, "sliding_window": 4096, "sliding_window_pattern": 4}"#,
        )
        .unwrap();
        assert!(m.full_layers && m.sliding_window == Some(4096), "{m:?}");
        let m = ModelAttention::from_hf_config(
            r#"{"text_config": {"num_attention_heads": 8, "head_dim": 64, "dtype": "float16"}}"#,
        )
        .unwrap();
        assert_eq!(m.dtype, DType::Fp16);
        // A window switched off may read 0 (Qwen 2's configs).
        let m = ModelAttention::from_hf_config(
            r#"{"num_attention_heads": 8, "head_dim": 64, "sliding_window": 0, "use_sliding_window": false}"#,
        )
        .unwrap();
        assert!(m.full_layers && m.sliding_window.is_none(), "{m:?}");
    }
}
