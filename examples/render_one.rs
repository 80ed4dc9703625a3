fn main() {
    let stem = std::env::args().nth(1).expect("stem");
    let spec: fa4gen::KernelSpec = stem.parse().unwrap();
    print!("{}", fa4gen::render::render(&spec).unwrap());
}
