//! `cargo xtask bench`: build and stage everything the benchmark needs, then run
//! `scripts/gpu-check.sh` with the benchmark steps: here when this machine has a CUDA driver,
//! otherwise print the one command to run on the GPU host (with .stage/ copied there).

use std::process::Command;

#[derive(clap::Args)]
pub struct BenchArgs {
    /// gpu-check.sh steps to run.
    #[arg(long, default_value = "bench dropin-bench")]
    steps: String,
}

pub fn run(a: BenchArgs) -> Result<(), String> {
    crate::stage_cmd::run(crate::stage_cmd::StageArgs::default())?;
    let cmd = format!("scripts/gpu-check.sh {}", a.steps);
    if !fa4gen::runtime::driver_present() {
        println!(
            "no CUDA driver here: copy .stage/ to the GPU host's checkout and run there:\n  {cmd}"
        );
        return Ok(());
    }
    let status = Command::new("bash")
        .current_dir(crate::root())
        .arg("-c")
        .arg(&cmd)
        .status()
        .map_err(|e| format!("{cmd}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{cmd} failed ({status})"))
    }
}
