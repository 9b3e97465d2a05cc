//! CodonTransformer's evaluation, ported with upstream's semantics (CodonTransformer 1.6.7
//! `CodonEvaluation`, `CodonData`, `CodonPrediction`; CAI-PyPI 2.0.1 for CSI), and its bugs fixed
//! where they break (each fix is documented where it is made).
//!
//! - [`Dna`]: a sequence checked once (A/C/G/T, whole codons).
//! - Per organism, from a [`ReferenceSet`] (training JSONL) or a codon-usage table
//!   ([`read_codon_usage`]): [`CodonCounts`] → [`CodonFrequencies`] and [`CsiWeights`].
//! - [`metrics`]: CSI, GC content, CFD, %MinMax, similarity, complexity.
//! - [`baselines`]: high-frequency, background-frequency and uniform codon choice.
//! - [`plot`]: SVG pictures of %MinMax profiles and of metric distributions.

pub mod baselines;
mod counts;
mod csi;
mod dna;
pub mod error;
mod frequencies;
pub mod genetic_code;
pub mod metrics;
pub mod plot;
mod reference;
mod usage_table;

pub use counts::CodonCounts;
pub use csi::{single_codon_families, CsiWeights};
pub use dna::Dna;
pub use error::{EvalError, Result};
pub use frequencies::CodonFrequencies;
pub use metrics::{MetricOptions, OrganismReference, SequenceMetrics};
pub use reference::{ReferenceSet, References};
pub use usage_table::{parse_codon_usage, read_codon_usage};
