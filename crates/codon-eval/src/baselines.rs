//! The codon-choice baselines of upstream's `CodonPrediction`: the most frequent codon, a codon
//! sampled by its frequency, and a uniformly random synonym, per residue.
//!
//! Upstream draws from numpy's global, unseeded generator; here every random baseline takes its
//! generator, so a seed reproduces it.

use rand::seq::IndexedRandom;
use rand::Rng;

use crate::dna::Dna;
use crate::error::{EvalError, Result};
use crate::frequencies::CodonFrequencies;
use crate::genetic_code::{families, family_index, AMINO_ACIDS};

/// The synonymous family of each residue (`*` and `_` are stops), or the first bad residue.
fn residue_families(protein: &str) -> Result<Vec<usize>> {
    protein
        .chars()
        .enumerate()
        .map(|(i, residue)| family_index(residue).ok_or(EvalError::UnknownResidue { residue, position: i + 1 }))
        .collect()
}

/// `get_high_frequency_choice_sequence`: each residue's most frequent codon; ties go to the
/// alphabetically first codon (numpy's `argmax` over the sorted family), so an amino acid the
/// reference never uses gets its first codon.
pub fn high_frequency_choice(protein: &str, frequencies: &CodonFrequencies) -> Result<Dna> {
    let codons = residue_families(protein)?
        .into_iter()
        .map(|f| {
            let mut best: Option<(usize, f64)> = None;
            for (codon, frequency) in frequencies.family(f) {
                if best.is_none_or(|(_, b)| frequency > b) {
                    best = Some((codon, frequency));
                }
            }
            best.map_or(0, |(codon, _)| codon as u8)
        })
        .collect();
    Ok(Dna::from_codons(codons))
}

/// `get_background_frequency_choice_sequence`: each codon drawn with probability its frequency.
/// An amino acid the reference never uses has nothing to draw from: an error naming it (numpy
/// raises "probabilities do not sum to 1").
pub fn background_frequency_choice(protein: &str, frequencies: &CodonFrequencies, rng: &mut impl Rng) -> Result<Dna> {
    let codons = residue_families(protein)?
        .into_iter()
        .enumerate()
        .map(|(i, f)| {
            let choices: Vec<(usize, f64)> = frequencies.family(f).collect();
            let amino_acid = AMINO_ACIDS.as_bytes()[f] as char;
            choices
                .choose_weighted(rng, |(_, frequency)| *frequency)
                .map(|(codon, _)| *codon as u8)
                .map_err(|_| EvalError::AminoAcidNotInReference { amino_acid, position: i + 1 })
        })
        .collect::<Result<Vec<u8>>>()?;
    Ok(Dna::from_codons(codons))
}

/// `get_uniform_random_choice_sequence`: each codon drawn uniformly among the residue's synonyms
/// (the three stops for a stop).
pub fn uniform_random_choice(protein: &str, rng: &mut impl Rng) -> Result<Dna> {
    let codons = residue_families(protein)?
        .into_iter()
        .map(|f| *families()[f].choose(rng).unwrap_or(&families()[f][0]))
        .collect();
    Ok(Dna::from_codons(codons))
}
