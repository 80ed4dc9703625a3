//! Compiling a rendered kernel to a cubin with NVRTC, and reading ptxas's resource report.

use crate::nvrtc::{Nvrtc, NvrtcError};
use crate::render::HEADERS;
use crate::spec::KernelSpec;
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// What ptxas reports for a kernel: registers per thread, spill traffic and stack frame.
/// A kernel with spills or a stack frame uses local memory on its hot path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources {
    pub registers: u32,
    pub spill_store_bytes: u32,
    pub spill_load_bytes: u32,
    pub stack_frame_bytes: u32,
}

pub struct CompiledKernel {
    pub cubin: Vec<u8>,
    pub resources: Option<Resources>,
    /// The compiler's warnings (e.g. ptxas serialising wgmma around a register hazard), which
    /// `gen` prints: they are performance bugs even when the cubin is correct.
    pub warnings: Vec<String>,
    pub seconds: f64,
}

impl CompiledKernel {
    /// ptxas's line saying it serialised the kernel's warpgroup MMAs, if it did (see
    /// [`is_wgmma_serialization`]): `gen` refuses such a kernel.
    pub fn wgmma_serialization(&self) -> Option<&str> {
        self.warnings
            .iter()
            .map(String::as_str)
            .find(|l| is_wgmma_serialization(l))
    }
}

/// Whether a ptxas line reports serialised wgmma (C7510-C7515, an "info" of "Potential
/// Performance Loss: wgmma.mma_async instructions are serialized due to ..."). The cubin is
/// correct, but each warpgroup MMA then waits for the one before it: a template change that
/// left a wait on one path only, or a read of an accumulator between a wgmma's issue and its
/// wait, cost the flagship 29-37% this way (docs/BENCHMARKS.md, forty-sixth session), with
/// nothing else to show for it.
pub fn is_wgmma_serialization(line: &str) -> bool {
    let l = line.to_ascii_lowercase();
    l.contains("wgmma") && l.contains("serialized")
}

/// The NVRTC options of every kernel of `spec.arch`: a real (SASS) target, never PTX,
/// ptxas's verbose report for the manifest's resource fields, and a fixed seed for the names
/// of internal-linkage symbols (with a `__grid_constant__` parameter, as the wgmma kernel's
/// tensor maps, NVRTC otherwise names them from a per-process number, so the same source gave
/// a different cubin on every compile).
pub fn options(spec: &KernelSpec) -> Vec<String> {
    arch_options(spec.arch)
}

/// [`options`] depend on the family alone.
pub fn arch_options(arch: crate::Arch) -> Vec<String> {
    vec![
        format!("--gpu-architecture={}", arch.nvrtc_target()),
        "--std=c++17".into(),
        "--ptxas-options=-v".into(),
        "--frandom-seed=fa4gen".into(),
    ]
}

pub fn compile(
    nvrtc: &Nvrtc,
    spec: &KernelSpec,
    source: &str,
) -> Result<CompiledKernel, NvrtcError> {
    let t = Instant::now();
    let out = nvrtc.compile_cubin(
        &format!("{}.cu", spec.stem()),
        source,
        HEADERS,
        &options(spec),
    )?;
    let functions = ptxas_functions(&out.log);
    let symbol = spec.symbol();
    // The kernel's own report for the manifest; a spill in another function of its module (a
    // split's combine kernels, a varlen schedule) is a warning `gen` prints.
    let resources = functions
        .iter()
        .find(|(name, _)| *name == symbol)
        .or(functions.last())
        .map(|(_, r)| *r);
    let other_spills = functions
        .iter()
        .filter(|(name, r)| *name != symbol && (r.spill_store_bytes > 0 || r.spill_load_bytes > 0))
        .map(|(name, r)| {
            format!(
                "ptxas: {name} spills ({} bytes of stores, {} of loads)",
                r.spill_store_bytes, r.spill_load_bytes
            )
        });
    Ok(CompiledKernel {
        resources,
        warnings: out
            .log
            .lines()
            .filter(|l| {
                // ptxas reports wgmma serialisation (C7510-C7515) as "info", not "warning".
                let l = l.to_ascii_lowercase();
                l.contains("warning") || l.contains("performance loss")
            })
            .map(str::to_string)
            .chain(other_spills)
            .collect(),
        cubin: out.cubin,
        seconds: t.elapsed().as_secs_f64(),
    })
}

/// ptxas's `-v` report per entry function, in the log's order: each block opens with
/// `Compiling entry function 'NAME'` and holds that function's resource lines. (A module's
/// functions come in no order to rely on: ptxas 13.5 lists a split module's combine kernels
/// before the forward.)
pub fn ptxas_functions(log: &str) -> Vec<(String, Resources)> {
    let mut blocks: Vec<(String, String)> = Vec::new();
    for line in log.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            let name = rest.split('\'').next().unwrap_or_default();
            blocks.push((name.to_string(), String::new()));
        } else if let Some((_, text)) = blocks.last_mut() {
            text.push_str(line);
            text.push('\n');
        }
    }
    blocks
        .into_iter()
        .filter_map(|(name, text)| parse_ptxas_report(&text).map(|r| (name, r)))
        .collect()
}

/// Parse ptxas `-v` lines (one function's; over a whole module, the last function's wins):
/// `ptxas info    : Used 168 registers, used 1 barriers, 400 bytes cmem[0]`
/// `    8 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads`
pub fn parse_ptxas_report(log: &str) -> Option<Resources> {
    let number_before = |line: &str, what: &str| -> Option<u32> {
        let idx = line.find(what)?;
        line[..idx].split_whitespace().last()?.parse().ok()
    };
    let mut r = Resources::default();
    let mut found = false;
    for line in log.lines() {
        if let Some(n) = number_before(line, " registers") {
            r.registers = n;
            found = true;
        }
        if let Some(n) = number_before(line, " bytes stack frame") {
            r.stack_frame_bytes = n;
        }
        if let Some(n) = number_before(line, " bytes spill stores") {
            r.spill_store_bytes = n;
        }
        if let Some(n) = number_before(line, " bytes spill loads") {
            r.spill_load_bytes = n;
        }
    }
    found.then_some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptxas_report() {
        let log = "ptxas info    : Compiling entry function 'k' for 'sm_90a'\n\
                   ptxas info    : Function properties for k\n    \
                   8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n\
                   ptxas info    : Used 168 registers, used 1 barriers, 400 bytes cmem[0]\n";
        assert_eq!(
            parse_ptxas_report(log),
            Some(Resources {
                registers: 168,
                spill_store_bytes: 4,
                spill_load_bytes: 12,
                stack_frame_bytes: 8
            })
        );
        assert_eq!(parse_ptxas_report("nothing here"), None);
    }

    /// A split module's report (ptxas 13.5's order: the combine kernels first): each function's
    /// own numbers, found by name wherever it stands.
    #[test]
    fn ptxas_report_per_function() {
        let log = "ptxas info    : 157 bytes gmem\n\
                   ptxas info    : Compiling entry function 'k_combine' for 'sm_90a'\n\
                   ptxas info    : Function properties for k_combine\n\
                   ptxas         .     0 bytes stack frame, 16 bytes spill stores, 16 bytes spill loads\n\
                   ptxas info    : Used 56 registers, used 1 barriers, 3328 bytes smem\n\
                   ptxas info    : Compiling entry function 'k' for 'sm_90a'\n\
                   ptxas info    : Function properties for k\n\
                   ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n\
                   ptxas info    : Used 243 registers, used 1 barriers, 256 bytes smem\n";
        let f = ptxas_functions(log);
        assert_eq!(f.len(), 2);
        assert_eq!(
            (f[0].0.as_str(), f[0].1.registers, f[0].1.spill_store_bytes),
            ("k_combine", 56, 16)
        );
        assert_eq!(
            (f[1].0.as_str(), f[1].1.registers, f[1].1.spill_store_bytes),
            ("k", 243, 0)
        );
        assert!(ptxas_functions("nothing here").is_empty());
    }

    /// The line ptxas 13.5 printed for a kernel whose P V wait sat on two paths (C7514), and a
    /// line of its form under another code, are serialisation; resource lines and other
    /// warnings (one naming a wgmma kernel's file among them) are not.
    #[test]
    fn wgmma_serialization_is_recognised() {
        let c7514 = "ptxas info    : (C7514) Potential Performance Loss: wgmma.mma_async \
                     instructions are serialized due to non wgmma instructions reading accumulator \
                     registers of  a wgmma between start and end of the pipeline stage in the \
                     function 'k' in line 0";
        let c7510 = "ptxas info    : (C7510) Potential Performance Loss: wgmma.mma_async \
                     instructions are serialized due to the presence of Extern calls in the function 'k'";
        assert!(is_wgmma_serialization(c7514) && is_wgmma_serialization(c7510));
        for other in [
            "ptxas info    : Used 168 registers, used 1 barriers, 400 bytes cmem[0]",
            "warning #549-D: variable \"corr\" is used before its value is set",
            "warning: fwd.sm90.wgmma.bf16.d64x64.m192n128.q1.cu(245): warning #177-D: declared but never referenced",
        ] {
            assert!(!is_wgmma_serialization(other), "{other}");
        }
        let k = CompiledKernel {
            cubin: Vec::new(),
            resources: None,
            warnings: vec![other_warning(), c7514.to_string()],
            seconds: 0.0,
        };
        assert_eq!(k.wgmma_serialization(), Some(c7514));
        let clean = CompiledKernel {
            warnings: vec![other_warning()],
            ..k
        };
        assert_eq!(clean.wgmma_serialization(), None);
    }

    fn other_warning() -> String {
        "warning #177-D: function \"listed\" was declared but never referenced".to_string()
    }
}
