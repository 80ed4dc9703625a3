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
            std::fs::write("/tmp/k.cubin", &k.cubin).unwrap();
        }
        Err(e) => eprintln!("{e}"),
    }
}
