//! Codon frequencies per amino acid (`get_codon_frequencies` upstream).

use crate::counts::CodonCounts;
use crate::genetic_code::{families, family_of};

/// Each codon's share of its amino acid's codons, with the family statistics %MinMax reads.
#[derive(Debug, Clone, PartialEq)]
pub struct CodonFrequencies {
    frequency: [f64; 64],
    family_max: [f64; 21],
    family_min: [f64; 21],
    family_mean: [f64; 21],
}

impl CodonFrequencies {
    /// Normalise counts per amino acid as upstream does: `count / (family total + 1e-100)`,
    /// so an amino acid never seen has all frequencies 0, not NaN.
    pub fn from_counts(counts: &CodonCounts) -> Self {
        let mut frequency = [0.0; 64];
        for codons in families() {
            // Summed in alphabetical codon order, as Python's `sum` over the sorted family.
            let total: f64 = codons.iter().map(|&c| counts.get(c as usize)).sum();
            for &c in codons {
                frequency[c as usize] = counts.get(c as usize) / (total + 1e-100);
            }
        }
        Self::from_frequencies(frequency)
    }

    /// A frequency table as upstream passes one around (each codon's share of its amino acid,
    /// by codon index), taken as it is.
    pub fn from_frequencies(frequency: [f64; 64]) -> Self {
        let (mut family_max, mut family_min, mut family_mean) = ([0.0; 21], [0.0; 21], [0.0; 21]);
        for (f, codons) in families().iter().enumerate() {
            let values = codons.iter().map(|&c| frequency[c as usize]);
            family_max[f] = values.clone().fold(f64::NEG_INFINITY, f64::max);
            family_min[f] = values.clone().fold(f64::INFINITY, f64::min);
            family_mean[f] = values.fold(0.0, |acc, v| acc + v) / codons.len() as f64;
        }
        Self { frequency, family_max, family_min, family_mean }
    }

    /// The frequency of a codon index within its amino acid.
    pub fn frequency(&self, codon: usize) -> f64 {
        self.frequency[codon % 64]
    }

    /// The largest frequency among a codon's synonyms (itself included).
    pub fn synonym_max(&self, codon: usize) -> f64 {
        self.family_max[family_of(codon)]
    }

    /// The smallest frequency among a codon's synonyms.
    pub fn synonym_min(&self, codon: usize) -> f64 {
        self.family_min[family_of(codon)]
    }

    /// The mean frequency of a codon's synonyms (`sum / len`, summed in codon order).
    pub fn synonym_mean(&self, codon: usize) -> f64 {
        self.family_mean[family_of(codon)]
    }

    /// Frequency over the family maximum, or `None` when the amino acid was never seen.
    pub fn relative(&self, codon: usize) -> Option<f64> {
        let max = self.synonym_max(codon);
        (max > 0.0).then(|| self.frequency(codon) / max)
    }

    /// The codons of an amino acid family index with their frequencies, in alphabetical order.
    pub fn family(&self, family: usize) -> impl Iterator<Item = (usize, f64)> + '_ {
        families()[family % 21].iter().map(|&c| (c as usize, self.frequency[c as usize]))
    }
}
