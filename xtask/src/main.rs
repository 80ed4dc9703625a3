//! `cargo xtask`: the project's build tasks.
//!
//! gen    render a plan into generated/<arch>/ and compile every kernel to a cubin with NVRTC
//! stage  build the test binaries and copy them with the cubins into .stage/ for the H200
//! bench  stage, then run the benchmark steps of scripts/gpu-check.sh (here if there is a GPU)
//! plan   derive a model's kernel set from its Hugging Face config.json

mod bench_cmd;
mod gen_cmd;
mod plan_cmd;
mod stage_cmd;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "cargo xtask", about = "fa4gen build tasks")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Render a plan's kernels into generated/<arch>/ and compile them to cubins.
    Gen(gen_cmd::GenArgs),
    /// Build release test binaries and stage them, the cubins and scripts in .stage/ for a GPU host.
    Stage(stage_cmd::StageArgs),
    /// Stage, then run the benchmark (here with a GPU, else print the command for the GPU host).
    Bench(bench_cmd::BenchArgs),
    /// Derive the kernel set a model needs from its Hugging Face config.json.
    Plan(plan_cmd::PlanArgs),
}

/// The workspace root (xtask lives one level below it).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Gen(a) => gen_cmd::run(a),
        Cmd::Stage(a) => stage_cmd::run(a),
        Cmd::Bench(a) => bench_cmd::run(a),
        Cmd::Plan(a) => plan_cmd::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
