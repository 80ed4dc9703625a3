//! `cargo xtask plan --hf-config <config.json> [--arch sm90] [--out FILE]`: the kernel set a
//! model needs, derived from its Hugging Face config. Prints what it read and the stems (sorted,
//! the same on every run); `--out` writes them as a plan file for `cargo xtask gen --plan FILE`
//! (or pass the config itself: `gen --plan config.json` derives the same set).

use fa4gen::Arch;
use fa4gen::model::ModelAttention;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct PlanArgs {
    /// A Hugging Face config.json.
    #[arg(long)]
    hf_config: PathBuf,
    /// Arch families (comma separated, or all).
    #[arg(long, default_value = "all")]
    arch: String,
    /// Write the stems here instead of stdout.
    #[arg(long)]
    out: Option<PathBuf>,
}

pub fn run(a: PlanArgs) -> Result<(), String> {
    let text = std::fs::read_to_string(&a.hf_config)
        .map_err(|e| format!("{}: {e}", a.hf_config.display()))?;
    let m = ModelAttention::from_hf_config(&text)
        .map_err(|e| format!("{}: {e}", a.hf_config.display()))?;
    let arches: Vec<Arch> = if a.arch == "all" {
        Arch::ALL.to_vec()
    } else {
        a.arch
            .split(',')
            .map(|s| s.parse::<Arch>())
            .collect::<Result<_, _>>()?
    };
    let mut lines = vec![format!(
        "# {}: {:?}, {} heads / {} kv heads, d {}x{}, full layers {}, sliding window {:?}, sinks {}, softcap {:?}",
        a.hf_config.display(),
        m.dtype,
        m.heads,
        m.heads_kv,
        m.head_dim,
        m.head_dim_v,
        m.full_layers,
        m.sliding_window,
        m.sinks,
        m.softcap
    )];
    for arch in arches {
        let specs = m.plan(arch);
        lines.push(format!("# {arch}: {} kernels", specs.len()));
        lines.extend(specs.iter().map(|s| s.stem()));
    }
    let text = lines.join("\n") + "\n";
    match a.out {
        Some(path) => {
            std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
            eprintln!("wrote {}", path.display());
        }
        None => print!("{text}"),
    }
    Ok(())
}
