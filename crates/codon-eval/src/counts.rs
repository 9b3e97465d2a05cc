//! Codon counts: what a reference set (sequences or a codon-usage table) contributes to every
//! per-organism statistic.

use crate::dna::Dna;

/// How often each of the 64 codons occurs. Counts are `f64` so usage tables with fractional
/// numbers fit; integer counts stay exact up to 2^53.
#[derive(Debug, Clone, PartialEq)]
pub struct CodonCounts([f64; 64]);

impl Default for CodonCounts {
    fn default() -> Self {
        Self([0.0; 64])
    }
}

impl CodonCounts {
    /// No codons.
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts given per codon index (A<C<G<T order).
    pub fn from_array(counts: [f64; 64]) -> Self {
        Self(counts)
    }

    /// Count every codon of `dna`.
    pub fn add(&mut self, dna: &Dna) {
        for &c in dna.codons() {
            self.0[c as usize] += 1.0;
        }
    }

    /// Add `n` occurrences of one codon.
    pub fn add_codon(&mut self, codon: usize, n: f64) {
        self.0[codon % 64] += n;
    }

    /// The count of a codon index.
    pub fn get(&self, codon: usize) -> f64 {
        self.0[codon % 64]
    }

    /// Every count, by codon index.
    pub fn as_array(&self) -> &[f64; 64] {
        &self.0
    }

    /// Total number of codons.
    pub fn total(&self) -> f64 {
        self.0.iter().sum()
    }

    /// True when no codon was counted.
    pub fn is_empty(&self) -> bool {
        self.total() == 0.0
    }
}

impl<'a> FromIterator<&'a Dna> for CodonCounts {
    fn from_iter<I: IntoIterator<Item = &'a Dna>>(iter: I) -> Self {
        let mut counts = Self::new();
        for dna in iter {
            counts.add(dna);
        }
        counts
    }
}
