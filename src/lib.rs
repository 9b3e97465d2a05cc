//! `codon-ascend`: the root package of the workspace. It owns the examples, the
//! integration tests and the benchmarks, and re-exports the crates they use.
//!
//! The README follows (its Rust examples are compiled as doc tests).
#![doc = include_str!("../README.md")]

use std::path::PathBuf;

pub use codon_data as data;
pub use codon_model as model;

/// The bundled demo data (`data/demo` in the repository).
pub fn demo_data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data").join("demo")
}

/// Run a command-line program: on error print one line (`error: …` with its causes)
/// to stderr and exit with status 1.
pub fn run_main<E: std::fmt::Display>(run: impl FnOnce() -> Result<(), E>) {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
