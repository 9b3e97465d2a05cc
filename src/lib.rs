//! `codon-ascend`: the root package of the workspace. It owns the examples, the
//! integration tests and the benchmarks, and re-exports the crates they use.
//!
//! The README follows (its Rust examples are compiled as doc tests).
#![doc = include_str!("../README.md")]

use std::path::PathBuf;

pub use candle_ascend as ascend;
pub use codon_data as data;
pub use codon_model as model;
pub use codon_train as train;

/// The bundled demo data (`data/demo` in the repository).
pub fn demo_data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data").join("demo")
}

/// Parse a `--device` value: `cpu`, `npu:N` (a CANN toolkit) or `npu-sim:N` (the emulated
/// toolkit); the one parser lives in candle-ascend.
pub fn parse_device(text: &str) -> Result<candle_core::Device, String> {
    candle_ascend::parse_device(text).map_err(|e| e.to_string())
}

/// A deterministic masked-LM batch of `b` sequences of `n` tokens ([CLS], codon tokens,
/// [SEP]; every 7th token from the 4th masked), for benchmarks and timing runs.
pub fn synthetic_mlm_batch(b: usize, n: usize) -> codon_data::MlmBatch {
    let mut input_ids = Vec::with_capacity(b * n);
    let mut labels = Vec::with_capacity(b * n);
    for i in 0..b * n {
        let id = match i % n {
            0 => 1,
            p if p == n - 1 => 2,
            p => 26 + ((p * 7 + i / n) % 64) as u32,
        };
        let masked = i % 7 == 3 && id >= 26;
        input_ids.push(if masked { 5 } else { id });
        labels.push(if masked { i64::from(id) } else { -100 });
    }
    codon_data::MlmBatch {
        batch_size: b,
        seq_len: n,
        input_ids,
        attention_mask: vec![1; b * n],
        token_type_ids: vec![51; b * n],
        labels,
    }
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

/// Parse a `--dtype` value: `f32`, `bf16` or `f16`.
pub fn parse_dtype(text: &str) -> Result<candle_core::DType, String> {
    match text.trim() {
        "f32" | "float32" => Ok(candle_core::DType::F32),
        "bf16" | "bfloat16" => Ok(candle_core::DType::BF16),
        "f16" | "float16" => Ok(candle_core::DType::F16),
        other => Err(format!("unknown dtype {other:?} (expected f32, bf16 or f16)")),
    }
}

/// Run a command-line program: on error print one line (`error: …` with its causes)
/// to stderr and exit with status 1.
pub fn run_main<E: std::fmt::Display>(run: impl FnOnce() -> Result<(), E>) {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
