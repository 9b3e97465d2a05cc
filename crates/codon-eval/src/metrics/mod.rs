//! The per-sequence metrics of upstream's `CodonEvaluation`, one per module, and
//! [`OrganismReference::evaluate`], which computes them all for one sequence.

mod cfd;
mod complexity;
mod gc;
mod minmax;
mod similarity;

pub use cfd::{cfd, DEFAULT_CFD_THRESHOLD};
pub use complexity::complexity;
pub use gc::gc_content;
pub use minmax::{min_max_profile, profile_mean, DEFAULT_MINMAX_WINDOW, MAX_MINMAX_WINDOW};
pub use similarity::similarity;

use crate::counts::CodonCounts;
use crate::csi::CsiWeights;
use crate::dna::Dna;
use crate::error::Result;
use crate::frequencies::CodonFrequencies;

/// The parameters of [`OrganismReference::evaluate`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MetricOptions {
    /// %MinMax window, in codons.
    pub window: usize,
    /// CFD rarity threshold.
    pub cfd_threshold: f64,
}

impl Default for MetricOptions {
    fn default() -> Self {
        Self { window: DEFAULT_MINMAX_WINDOW, cfd_threshold: DEFAULT_CFD_THRESHOLD }
    }
}

/// Every metric of one sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct SequenceMetrics {
    /// Codon similarity index (NaN when only ATG, TGG and stops remain).
    pub csi: f64,
    /// GC percentage.
    pub gc_content: f64,
    /// Percentage of rare codons.
    pub cfd: f64,
    /// The %MinMax profile (see [`min_max_profile`]).
    pub minmax: Vec<Option<f64>>,
    /// Its mean ([`profile_mean`]); `None` when the sequence is shorter than the window.
    pub minmax_mean: Option<f64>,
    /// Nucleotide identity (window 1) with a reference DNA, when one is given.
    pub similarity: Option<f64>,
    /// Sequence complexity.
    pub complexity: f64,
}

/// What one organism's reference contributes: codon frequencies and CSI weights.
#[derive(Debug, Clone, PartialEq)]
pub struct OrganismReference {
    /// Codon frequencies per amino acid.
    pub frequencies: CodonFrequencies,
    /// CSI weights.
    pub weights: CsiWeights,
}

impl OrganismReference {
    /// Both statistics from one organism's codon counts.
    pub fn from_counts(counts: &CodonCounts) -> Result<Self> {
        Ok(Self { frequencies: CodonFrequencies::from_counts(counts), weights: CsiWeights::from_counts(counts)? })
    }

    /// Every metric of `dna`; similarity too when `reference_dna` is given.
    pub fn evaluate(&self, dna: &Dna, reference_dna: Option<&Dna>, options: &MetricOptions) -> Result<SequenceMetrics> {
        let minmax = min_max_profile(dna, &self.frequencies, options.window)?;
        Ok(SequenceMetrics {
            csi: self.weights.csi(dna),
            gc_content: gc_content(dna.as_str()),
            cfd: cfd(dna, &self.frequencies, options.cfd_threshold)?,
            minmax_mean: profile_mean(&minmax),
            minmax,
            similarity: reference_dna.map(|r| similarity(r.as_str(), dna.as_str(), 1)).transpose()?,
            complexity: complexity(dna.as_str()),
        })
    }
}
