//! NVRTC compiles a sample of specs for every family into real cubins (ELF, SASS for the
//! family's target), and the cubins are reproducible: a fresh compile of a committed kernel
//! hashes to what its manifest recorded when the NVRTC version matches. Needs NVRTC: found or
//! installed by fa4gen::nvrtc (PyPI wheel into .nvrtc/), so this runs in CI.

use fa4gen::nvrtc::Nvrtc;
use fa4gen::{Arch, KernelSpec, compile, render};
use std::path::Path;

fn nvrtc() -> Nvrtc {
    Nvrtc::locate(&Path::new(env!("CARGO_MANIFEST_DIR")).join(".nvrtc")).expect("NVRTC")
}

#[test]
fn sample_compiles_on_every_family() {
    let n = nvrtc();
    let stems = [
        "fwd.sm90.portable.bf16.d128x128.m128n64.q1.causal.lse",
        "fwd.sm90.portable.fp16.d72x72.m64n64.q1.local.packgqa",
        "fwd.sm100f.portable.bf16.d64x64.m128n128.q2.packgqa",
        "fwd.sm100f.portable.fp16.d192x128.m128n64.q1.lse",
        "fwd.sm120.portable.bf16.d256x256.m64n64.q1.causal",
        "fwd.sm120.portable.fp16.d96x96.m128n64.q1.local.lse",
        // The serving features and split-KV (+ its combine) on every family.
        "fwd.sm90.portable.fp16.d96x96.m128n64.q1.causal.lse.packgqa.varlen.paged.sink.softcap.split",
        "fwd.sm100f.portable.bf16.d64x64.m64n128.q1.local.lse.packgqa.varlen.paged.sink.split",
        "fwd.sm100f.portable.bf16.d192x128.m128n64.q2.causal.varlen.paged",
        // sm120 d256 paged needs the page-entry slots beyond 99 KB at 64x64: the table takes 64x32.
        "fwd.sm120.portable.bf16.d256x256.m64n32.q1.causal.lse.packgqa.varlen.paged.sink.softcap.split",
        // The narrowest tiles `can_implement` accepts (16 keys: two n8 groups per row).
        "fwd.sm90.portable.bf16.d64x64.m64n16.q1.causal",
        "fwd.sm90.wgmma.fp16.d64x64.m128n16.q1.local.lse",
    ];
    for stem in stems {
        let spec: KernelSpec = stem.parse().unwrap();
        let src = render::render(&spec).unwrap();
        let k = compile::compile(&n, &spec, &src).unwrap_or_else(|e| panic!("{stem}: {e}"));
        assert_eq!(&k.cubin[..4], b"\x7fELF", "{stem}: not an ELF cubin");
        let r = k
            .resources
            .unwrap_or_else(|| panic!("{stem}: no ptxas report"));
        assert!(r.registers > 0 && r.registers <= 255, "{stem}: {r:?}");
        println!("{stem}: {} bytes, {r:?}, {:.2} s", k.cubin.len(), k.seconds);
    }
}

#[test]
fn committed_cubin_hashes_reproduce() {
    let n = nvrtc();
    let (major, minor) = n.version();
    for arch in Arch::ALL {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("generated")
            .join(arch.name());
        let m = fa4gen::manifest::Manifest::read(&dir).unwrap();
        if m.nvrtc != format!("{major}.{minor}") {
            println!(
                "{arch}: manifest built with NVRTC {}, this is {major}.{minor}: skipped",
                m.nvrtc
            );
            continue;
        }
        // A kernel from the middle and the last one (on sm90, a flagship kernel: its
        // `__grid_constant__` tensor maps once made NVRTC name symbols per process).
        for e in [
            &m.kernels[m.kernels.len() / 2],
            &m.kernels[m.kernels.len() - 1],
        ] {
            let spec: KernelSpec = e.stem.parse().unwrap();
            let k = compile::compile(&n, &spec, &render::render(&spec).unwrap()).unwrap();
            assert_eq!(
                render::sha256_hex(&k.cubin),
                e.cubin.as_ref().unwrap().sha256,
                "{}: cubin differs from the manifest's",
                e.stem
            );
        }
    }
}

#[test]
fn flagship_cubins_are_deterministic() {
    let n = nvrtc();
    let spec: KernelSpec = "fwd.sm90.wgmma.bf16.d64x64.m128n128.q1.local.lse.varlen.paged.sink"
        .parse()
        .unwrap();
    let src = render::render(&spec).unwrap();
    let a = compile::compile(&n, &spec, &src).unwrap().cubin;
    let b = compile::compile(&n, &spec, &src).unwrap().cubin;
    assert!(a == b, "two compiles of one source gave different cubins");
}

#[test]
fn compile_errors_carry_the_log() {
    let n = nvrtc();
    let spec: KernelSpec = "fwd.sm90.portable.bf16.d64x64.m128n128.q1".parse().unwrap();
    let e = compile::compile(&n, &spec, "this is not C++;")
        .err()
        .unwrap();
    assert!(e.to_string().contains("error"), "{e}");
}
