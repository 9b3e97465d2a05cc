//! `codon-ascend`: the root package of the workspace. It owns the examples, the
//! integration tests and the benchmarks, and re-exports the crates they use.
//!
//! The README follows (its Rust examples are compiled as doc tests).
#![doc = include_str!("../README.md")]

use std::path::PathBuf;

pub mod bench;
pub mod cli;
pub mod commands;
pub mod device;
pub mod interrupt;
pub mod output;
pub mod predictor;
pub mod selftest;

pub use candle_ascend as ascend;
pub use codon_data as data;
pub use codon_design as design;
pub use codon_eval as eval;
pub use codon_model as model;
pub use codon_model::hub;
pub use codon_ops as ops;
pub use codon_train as train;
pub use codon_train_ascend as train_ascend;

/// The bundled demo data (`data/demo` in the repository).
pub fn demo_data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data").join("demo")
}

/// The small BigBird of the demo run and of the benches' emulator workloads: 2 layers, hidden 64,
/// 4 heads, intermediate 128, block 16 (trains in seconds on a CPU, and the emulator, whose
/// kernels are plain C, can time it).
pub fn demo_model_config() -> codon_model::bigbird::BigBirdConfig {
    codon_model::bigbird::BigBirdConfig {
        hidden_size: 64,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        intermediate_size: 128,
        block_size: 16,
        num_random_blocks: 1,
        max_position_embeddings: 1024,
        ..Default::default()
    }
}

/// A deterministic masked-LM batch of `b` sequences of `n` tokens (`[CLS]`, codon tokens,
/// `[SEP]`, all of upstream's default organism; every 7th token from the 4th masked as the collator masks), for
/// benchmarks and timing runs.
pub fn synthetic_mlm_batch(b: usize, n: usize) -> codon_data::MlmBatch {
    use codon_model::vocab::{CLS_ID, FIRST_CODON_ID, SEP_ID, TOKEN2MASK};
    let organism = codon_model::organism_id(codon_model::DEFAULT_ORGANISM).unwrap_or_default();
    let mut input_ids = Vec::with_capacity(b * n);
    let mut labels = Vec::with_capacity(b * n);
    for i in 0..b * n {
        let id = match i % n {
            0 => CLS_ID,
            p if p == n - 1 => SEP_ID,
            p => FIRST_CODON_ID + ((p * 7 + i / n) % 64) as u32,
        };
        let masked = i % 7 == 3 && id >= FIRST_CODON_ID;
        input_ids.push(if masked { TOKEN2MASK[id as usize] } else { id });
        labels.push(if masked { i64::from(id) } else { codon_data::IGNORE_INDEX });
    }
    let encoding = codon_model::BatchEncoding {
        batch_size: b,
        seq_len: n,
        input_ids,
        attention_mask: vec![1; b * n],
        token_type_ids: vec![organism; b * n],
    };
    codon_data::MlmBatch { encoding, labels }
}

/// A [`train::BatchSource`] that yields the same batch once per epoch, for benchmarks, timing
/// runs and tests.
pub struct SameBatch(pub codon_data::MlmBatch);

impl codon_train::BatchSource for SameBatch {
    type Batch = codon_data::MlmBatch;
    fn batches_per_epoch(&self) -> usize {
        1
    }
    fn epoch(&self, _: u64) -> Box<dyn Iterator<Item = codon_train::Result<Self::Batch>> + '_> {
        Box::new(std::iter::once(Ok(self.0.clone())))
    }
}

/// Whether `device` skips its arithmetic (the emulator under `CANDLE_ASCEND_SIM_NO_MATH=1`,
/// which counts launches and memory): every value it computes is then meaningless.
pub fn skips_math(device: &candle_core::Device) -> bool {
    candle_ascend::ascend_device(device).is_some_and(|a| a.skips_math())
}

/// The warning every command that outputs model values prints on a device that skips math.
pub const NO_MATH_WARNING: &str =
    "warning: no-math mode (CANDLE_ASCEND_SIM_NO_MATH=1): the emulator skips arithmetic, so every value below is meaningless";

/// Run a command-line program: on error print one line (`error: …` with its causes) to stderr
/// and exit with status 1. Output that stdout could not take (a full disk; not a closed pipe) is
/// such an error too, as in coreutils.
pub fn run_main<E: Into<Box<dyn std::error::Error + Send + Sync>>>(run: impl FnOnce() -> Result<(), E>) {
    let result = run().map_err(Into::into);
    let stdout = output::stdout_error();
    if let Err(e) = result {
        crate::errln!("error: {}", error_line(e.as_ref()));
        std::process::exit(1);
    }
    if let Some(e) = stdout {
        crate::errln!("error: cannot write to standard output: {e}");
        std::process::exit(1);
    }
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
