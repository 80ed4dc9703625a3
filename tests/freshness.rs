//! The committed `generated/` must equal a fresh rendering of every plan it holds (the default
//! plan for every family, others where built): same sources, no orphans, same manifest (source
//! half). Fails with the command that fixes it.

use fa4gen::{Arch, codegen, plan};
use std::path::Path;

#[test]
fn generated_is_fresh() {
    let generated = Path::new(env!("CARGO_MANIFEST_DIR")).join("generated");
    let mut problems = Vec::new();
    for name in plan::plan_names() {
        for arch in Arch::ALL {
            let dir = codegen::out_dir(&generated, name, arch);
            // The default plan must exist for every family; other plans where they were built.
            if name != "default" && !dir.exists() {
                continue;
            }
            let specs = plan::plan(name, arch).unwrap();
            let rendered = codegen::render_all(&specs).unwrap();
            problems.extend(codegen::check_dir(&dir, arch, name, &rendered));
        }
    }
    assert!(
        problems.is_empty(),
        "generated/ is stale; run `cargo xtask gen --arch all` (and `--plan <name>` for other plans) and commit:\n{}",
        problems
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Every kernel the manifests list was compiled: the manifest carries its cubin hash and
/// ptxas's resource report (registers, spills), which `cargo xtask gen` prints.
#[test]
fn manifests_record_compiled_kernels() {
    let generated = Path::new(env!("CARGO_MANIFEST_DIR")).join("generated");
    for arch in Arch::ALL {
        let m = fa4gen::manifest::Manifest::read(&generated.join(arch.name())).unwrap();
        assert!(
            !m.nvrtc.is_empty(),
            "{arch}: manifest has no NVRTC version (not compiled)"
        );
        for e in &m.kernels {
            let c = e
                .cubin
                .as_ref()
                .unwrap_or_else(|| panic!("{} has no cubin entry", e.stem));
            let r = c
                .resources
                .unwrap_or_else(|| panic!("{} has no ptxas report", e.stem));
            assert!(r.registers > 0 && r.registers <= 255, "{}: {r:?}", e.stem);
        }
    }
}
