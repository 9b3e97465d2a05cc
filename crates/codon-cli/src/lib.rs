//! The `codon` program's library: its subcommands (`commands`), the flags they share (`cli`),
//! device selection, stdout/stderr plumbing that treats a closed pipe as the end of output, Ctrl-C
//! handling, the predictor every subcommand and the server open, and the Ascend self-test behind
//! `codon npu selftest`. The root package's `src/main.rs` is [`commands::main`].

use std::path::PathBuf;

pub mod cli;
pub mod commands;
pub mod device;
pub mod interrupt;
pub mod output;
pub mod predictor;
pub mod selftest;

/// The bundled demo genes (`crates/codon-cli/demo/genes.csv`), which `codon finetune` without
/// `--dataset_dir` trains on: built into the program, so an installed `codon` has them too.
pub const DEMO_GENES_CSV: &str = include_str!("../demo/genes.csv");

/// Write the demo genes into `dir` as `demo-genes.csv`, for a command to prepare; the file's path.
pub fn write_demo_genes(dir: &std::path::Path) -> codon_data::Result<PathBuf> {
    let path = dir.join("demo-genes.csv");
    codon_data::write_atomically(&path, |out| std::io::Write::write_all(out, DEMO_GENES_CSV.as_bytes()))?;
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

/// Longest error line printed; the rest is cut (a malformed line can be megabytes long).
const MAX_ERROR_CHARS: usize = 1500;

/// An error and its causes on one line. A cause whose text the line already holds is not
/// repeated (`{path}: {source}` messages embed their source), and the line is cut at
/// `MAX_ERROR_CHARS` characters.
pub fn error_line(e: &(dyn std::error::Error + 'static)) -> String {
    // Only the first line of each message: candle appends a multi-line backtrace under
    // RUST_BACKTRACE, which belongs in a debugger, not in a one-line error.
    let first_line = |e: &dyn std::error::Error| e.to_string().lines().next().unwrap_or("").trim_end().to_string();
    let mut line = first_line(e);
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = first_line(c);
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        cause = c.source();
    }
    let total = line.chars().count();
    if total <= MAX_ERROR_CHARS {
        return line;
    }
    let kept: String = line.chars().take(MAX_ERROR_CHARS).collect();
    format!("{kept}… ({} more characters)", total - MAX_ERROR_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("{path}: {source}")]
    struct WithPath {
        path: String,
        source: std::io::Error,
    }

    #[test]
    fn error_lines_say_each_cause_once_and_stay_short() {
        let io = || std::io::Error::from(std::io::ErrorKind::NotFound);
        let e = WithPath { path: "x.csv".into(), source: io() };
        assert_eq!(error_line(&e), format!("x.csv: {}", io()));
        let long = std::io::Error::other(format!("bad line: {}", "A".repeat(10_000)));
        let line = error_line(&long);
        assert!(line.chars().count() < MAX_ERROR_CHARS + 40, "{}", line.len());
        assert!(line.ends_with("more characters)"), "{line}");
        assert_eq!(error_line(&std::io::Error::other("failed\n   0: backtrace frame")), "failed");
    }
}
