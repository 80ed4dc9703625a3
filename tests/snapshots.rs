//! Snapshots of the rendered source: one spec per family and per key flag, so a template
//! change shows up as a reviewable diff here (the full plan is checked by tests/freshness.rs).

use fa4gen::KernelSpec;

fn snap(stem: &str) {
    let spec: KernelSpec = stem.parse().unwrap();
    let src = fa4gen::render::render(&spec).unwrap();
    let mut settings = insta::Settings::clone_current();
    settings.set_prepend_module_to_snapshot(false);
    settings.set_snapshot_path("snapshots");
    settings.bind(|| insta::assert_snapshot!(stem.replace('.', "_"), src));
}

#[test]
fn sm90_base() {
    snap("fwd.sm90.portable.bf16.d128x128.m128n64.q1");
}
#[test]
fn sm90_causal() {
    snap("fwd.sm90.portable.bf16.d128x128.m128n64.q1.causal");
}
#[test]
fn sm90_local_lse() {
    snap("fwd.sm90.portable.bf16.d128x128.m128n64.q1.local.lse");
}
#[test]
fn sm90_packgqa_fp16() {
    snap("fwd.sm90.portable.fp16.d64x64.m128n64.q1.packgqa");
}
#[test]
fn sm90_d192x128() {
    snap("fwd.sm90.portable.bf16.d192x128.m128n64.q1.causal");
}
#[test]
fn sm100f_q_stage_2() {
    snap("fwd.sm100f.portable.bf16.d128x128.m128n64.q2.causal.lse");
}

/// The key-split decode tile (four warps along the keys, their states merged) with swizzled K/V.
#[test]
fn sm90_key_split_decode_split() {
    snap("fwd.sm90.portable.bf16.d128x128.m16n128.q1.causal.packgqa.split");
}

#[test]
fn sm120_d256_small_tile() {
    snap("fwd.sm120.portable.bf16.d256x256.m64n64.q1");
}

#[test]
fn sm90_wgmma_d128_causal_lse() {
    snap("fwd.sm90.wgmma.bf16.d128x128.m128n128.q1.causal.lse");
}
#[test]
fn sm90_wgmma_d64_fp16() {
    snap("fwd.sm90.wgmma.fp16.d64x64.m192n128.q1");
}
#[test]
fn sm90_wgmma_d256_o_from_registers() {
    // One Q buffer and no rows for O: O stored from registers (`KernelSpec::wgmma_o_direct`).
    snap("fwd.sm90.wgmma.bf16.d256x256.m128n80.q1.causal.lse.varlen");
}
#[test]
fn sm90_wgmma_d192_causal_stale_max() {
    // The stale max and its slow path (`KernelSpec::wgmma_stale_max`), under a causal mask.
    snap("fwd.sm90.wgmma.bf16.d192x128.m128n128.q1.causal");
}
#[test]
fn sm90_wgmma_packed_window_sink() {
    // gpt-oss's sliding layer: K blocks laid from each tile's first visible key
    // (`KernelSpec::window_blocks`).
    snap("fwd.sm90.wgmma.bf16.d64x64.m192n80.q1.local.packgqa.sink");
}
#[test]
fn sm90_wgmma_packed_gqa_causal_sink() {
    snap("fwd.sm90.wgmma.bf16.d128x128.m128n128.q1.causal.packgqa.sink");
}

/// Every key field of the flagship changes its code too (its own template).
#[test]
fn every_wgmma_key_field_changes_the_source() {
    let base: KernelSpec = "fwd.sm90.wgmma.bf16.d128x128.m128n128.q1".parse().unwrap();
    let src = |s: &KernelSpec| {
        let full = fa4gen::render::render(s).unwrap();
        full.split_once("#include")
            .map(|(_, b)| b.to_string())
            .unwrap()
    };
    let b = src(&base);
    for v in [
        KernelSpec {
            dtype: fa4gen::DType::Fp16,
            ..base
        },
        KernelSpec { d: 192, ..base },
        KernelSpec { dv: 64, ..base },
        KernelSpec {
            tile_m: 192,
            d: 64,
            dv: 64,
            ..base
        },
        KernelSpec {
            tile_n: 112,
            ..base
        },
        KernelSpec {
            mask: fa4gen::Mask::Causal,
            ..base
        },
        KernelSpec {
            mask: fa4gen::Mask::Local,
            ..base
        },
        KernelSpec { lse: true, ..base },
        KernelSpec {
            pack_gqa: true,
            ..base
        },
        KernelSpec {
            feat: fa4gen::spec::Features {
                sink: true,
                ..Default::default()
            },
            ..base
        },
        KernelSpec {
            feat: fa4gen::spec::Features {
                softcap: true,
                ..Default::default()
            },
            ..base
        },
        KernelSpec {
            feat: fa4gen::spec::Features {
                split: true,
                ..Default::default()
            },
            ..base
        },
    ] {
        assert_ne!(
            src(&v),
            b,
            "{} renders the same code as the base spec",
            v.stem()
        );
    }
}

#[test]
fn sm90_wgmma_split_kv() {
    // Split-KV on the flagship: shares of each tile's blocks, fp32 partials for the combine.
    snap("fwd.sm90.wgmma.bf16.d128x128.m128n128.q1.causal.lse.packgqa.varlen.sink.split");
}

#[test]
fn sm90_serving_features() {
    snap(
        "fwd.sm90.portable.bf16.d64x64.m128n64.q1.local.lse.packgqa.varlen.paged.sink.softcap.split",
    );
}

/// Every key field changes the generated code (no dead fields).
#[test]
fn every_key_field_changes_the_source() {
    let base: KernelSpec = "fwd.sm100f.portable.bf16.d128x128.m128n64.q1"
        .parse()
        .unwrap();
    let src = |s: &KernelSpec| {
        // The header names the stem; compare the code below it.
        let full = fa4gen::render::render(s).unwrap();
        full.split_once("#include")
            .map(|(_, b)| b.to_string())
            .unwrap()
    };
    let b = src(&base);
    let variants = [
        KernelSpec {
            arch: fa4gen::Arch::Sm90,
            ..base
        },
        KernelSpec {
            dtype: fa4gen::DType::Fp16,
            ..base
        },
        KernelSpec {
            d: 96,
            dv: 96,
            ..base
        },
        KernelSpec { dv: 96, ..base },
        KernelSpec { tile_m: 64, ..base },
        KernelSpec { tile_n: 32, ..base },
        KernelSpec { q_stage: 2, ..base },
        KernelSpec {
            mask: fa4gen::Mask::Causal,
            ..base
        },
        KernelSpec {
            mask: fa4gen::Mask::Local,
            ..base
        },
        KernelSpec { lse: true, ..base },
        KernelSpec {
            pack_gqa: true,
            ..base
        },
        KernelSpec {
            pack_gqa: true,
            ..base
        },
    ];
    let feature_variants: [fn(&mut fa4gen::spec::Features); 5] = [
        |f| f.varlen = true,
        |f| f.paged = true,
        |f| f.sink = true,
        |f| f.softcap = true,
        |f| f.split = true,
    ];
    let variants = variants
        .into_iter()
        .chain(feature_variants.iter().map(|set| {
            let mut v = base;
            set(&mut v.feat);
            v
        }));
    for v in variants {
        let stem = v.stem();
        if v.arch != base.arch {
            // The arch changes the NVRTC target, not the C++; the header names it.
            assert_ne!(
                fa4gen::render::render(&v).unwrap(),
                fa4gen::render::render(&base).unwrap()
            );
            continue;
        }
        assert_ne!(src(&v), b, "{stem} renders the same code as the base spec");
    }
}
