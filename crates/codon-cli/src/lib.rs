//! The `codon` program's library: its subcommands (`commands`), the flags they share (`cli`),
//! stdout/stderr plumbing that treats a closed pipe as the end of output, Ctrl-C handling, and the
//! Ascend self-test behind `codon npu selftest`. Device selection, the predictor every subcommand
//! and the server open, and one-line errors are codon-app's, re-exported here. The root package's
//! `src/main.rs` is [`commands::main`].

use std::path::PathBuf;

pub mod cli;
pub mod commands;
pub mod interrupt;
pub mod output;
pub mod selftest;

/// `--device`'s [`device::DeviceSpec`], the predictor every command opens, and errors as one
/// line: codon-app's, which the Python package shares.
pub use codon_app::{device, error_line, predictor};

/// The bundled demo genes (`crates/codon-cli/demo/genes.csv`), which `codon finetune` without
/// `--dataset_dir` trains on: built into the program, so an installed `codon` has them too.
pub const DEMO_GENES_CSV: &str = include_str!("../demo/genes.csv");

/// Write the demo genes into `dir` as `demo-genes.csv`, for a command to prepare; the file's path.
pub fn write_demo_genes(dir: &std::path::Path) -> codon_data::Result<PathBuf> {
    let path = dir.join("demo-genes.csv");
    codon_files::write_atomically(&path, |out| std::io::Write::write_all(out, DEMO_GENES_CSV.as_bytes()))?;
    Ok(path)
}

/// Whether `device` skips its arithmetic (the emulator under `CANDLE_ASCEND_SIM_NO_MATH=1`,
/// which counts launches and memory): every value it computes is then meaningless.
pub fn skips_math(device: &candle_core::Device) -> bool {
    candle_ascend::ascend_device(device).is_some_and(|a| a.skips_math())
}

/// The warning every command that outputs model values prints on a device that skips math.
pub const NO_MATH_WARNING: &str =
    "warning: no-math mode (CANDLE_ASCEND_SIM_NO_MATH=1): the emulator skips arithmetic, so every value below is meaningless";

/// Run a command-line program and give its exit status: on error print one line (`error: …` with
/// its causes) to stderr and give 1. Output that stdout could not take (a full disk; not a closed
/// pipe) is such an error too, as in coreutils.
pub fn run_main<E: Into<Box<dyn std::error::Error + Send + Sync>>>(run: impl FnOnce() -> Result<(), E>) -> i32 {
    let result = run().map_err(Into::into);
    let stdout = output::stdout_error();
    if let Err(e) = result {
        crate::errln!("error: {}", error_line(e.as_ref()));
        return 1;
    }
    if let Some(e) = stdout {
        crate::errln!("error: cannot write to standard output: {e}");
        return 1;
    }
    0
}
