//! One kernel rendered from this tree's templates and compiled with NVRTC, for reading its
//! SASS and resources without a regeneration: writes /tmp/k.cubin and /tmp/k.entry.json (its
//! manifest entry, cubin hash and resources included; `scripts/variant_gen.py` reads both).
//!   compile_one <stem>
fn main() {
    let stem = std::env::args().nth(1).expect("stem");
    let spec: fa4gen::KernelSpec = stem.parse().unwrap();
    let src = fa4gen::render::render(&spec).unwrap();
    let n = fa4gen::nvrtc::Nvrtc::locate(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/.nvrtc"
    )))
    .unwrap();
    eprintln!("nvrtc {:?} at {}", n.version(), n.path().display());
    match fa4gen::compile::compile(&n, &spec, &src) {
        Ok(k) => {
            eprintln!(
                "{} bytes, {:?}, {:.2}s",
                k.cubin.len(),
                k.resources,
                k.seconds
            );
            for w in &k.warnings {
                eprintln!("warning: {w}");
            }
            if k.wgmma_serialization().is_some() {
                eprintln!("note: `cargo xtask gen` refuses this kernel (its wgmma serialised)");
            }
            let mut entry = fa4gen::manifest::Entry::new(&spec, &src);
            entry.cubin = Some(fa4gen::manifest::CubinInfo {
                sha256: fa4gen::render::sha256_hex(&k.cubin),
                bytes: k.cubin.len() as u64,
                resources: k.resources,
            });
            std::fs::write("/tmp/k.cubin", &k.cubin).unwrap();
            std::fs::write(
                "/tmp/k.entry.json",
                serde_json::to_string_pretty(&entry).unwrap(),
            )
            .unwrap();
        }
        Err(e) => eprintln!("{e}"),
    }
}
