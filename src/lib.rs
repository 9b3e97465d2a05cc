//! `codon-ascend`: the root package of the workspace. It owns the examples, the
//! integration tests and the benchmarks, and re-exports the crates they use.

pub use codon_data as data;
pub use codon_model as model;
