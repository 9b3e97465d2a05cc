//! Codon frequency distribution (`get_cfd` upstream).

use crate::dna::Dna;
use crate::error::{EvalError, Result};
use crate::frequencies::CodonFrequencies;
use crate::genetic_code::amino_acid;

/// Upstream's default rarity threshold.
pub const DEFAULT_CFD_THRESHOLD: f64 = 0.3;

/// Percentage of codons whose frequency over the largest of its synonyms is below `threshold`.
/// Every codon counts, stops and ATG/TGG included.
///
/// Upstream normalises the whole table first, so one amino acid missing from the reference
/// fails every sequence with `ZeroDivisionError`; here only a sequence that uses such an amino
/// acid fails, naming it.
pub fn cfd(dna: &Dna, frequencies: &CodonFrequencies, threshold: f64) -> Result<f64> {
    let mut rare = 0usize;
    for (i, &c) in dna.codons().iter().enumerate() {
        let c = c as usize;
        let relative = frequencies
            .relative(c)
            .ok_or(EvalError::AminoAcidNotInReference { amino_acid: amino_acid(c), position: i + 1 })?;
        if relative < threshold {
            rare += 1;
        }
    }
    Ok(rare as f64 / (dna.len() as f64 / 3.0) * 100.0)
}
