//! `codon-ascend`: the root package of the workspace. It holds the `codon` program (its code is
//! the `codon-cli` crate), the library examples, the integration tests and the benchmarks, and
//! re-exports the crates they use.
//!
//! The README follows (its Rust examples are compiled as doc tests).
#![doc = include_str!("../README.md")]

pub mod bench;

pub use candle_ascend as ascend;
pub use codon_cli as cli;
pub use codon_cli::{errln, outln};
pub use codon_data as data;
pub use codon_design as design;
pub use codon_eval as eval;
pub use codon_model as model;
pub use codon_model::hub;
pub use codon_ops as ops;
pub use codon_train as train;
pub use codon_train_ascend as train_ascend;

/// The bundled demo data in the checkout (`crates/codon-cli/demo`): genes as CSV and FASTA,
/// proteins as JSONL, for the examples and tests.
pub fn demo_data_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/codon-cli/demo")
}
