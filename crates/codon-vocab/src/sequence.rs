//! Protein and DNA preprocessing and the merged-sequence builder (`get_merged_seq` upstream).
//!
//! A protein (plus optional DNA) becomes space-separated merged tokens such as
//! `M_ATG A_GCT __TAA`, or `M_UNK A_UNK __UNK` without DNA.

use std::collections::BTreeMap;
use std::str::FromStr;

use rand::seq::IndexedRandom;
use rand::Rng;

use crate::error::{Result, VocabError};

const STANDARD_AMINO_ACIDS: &str = "ACDEFGHIKLMNPQRSTVWY";
const STOP_CODONS: [&str; 3] = ["TAA", "TAG", "TGA"];
/// Ambiguous amino acids and their standard replacements (upstream default map).
const DEFAULT_AMBIGUOUS_MAP: [(char, &[char]); 6] =
    [('B', &['N', 'D']), ('Z', &['Q', 'E']), ('X', &['A']), ('J', &['L', 'I']), ('U', &['C']), ('O', &['K'])];

/// What to do with ambiguous amino acids (`ambiguous_aminoacid_behavior` upstream).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AmbiguousBehavior {
    /// Replace each one by a random entry of its map (the upstream default).
    #[default]
    StandardizeRandom,
    /// Replace each one by the first entry of its map.
    StandardizeDeterministic,
    /// Fail with [`VocabError::AmbiguousAminoAcids`].
    RaiseError,
}

impl FromStr for AmbiguousBehavior {
    type Err = VocabError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "standardize_random" => Ok(Self::StandardizeRandom),
            "standardize_deterministic" => Ok(Self::StandardizeDeterministic),
            "raise_error" => Ok(Self::RaiseError),
            other => Err(VocabError::InvalidAmbiguousBehavior(other.to_string())),
        }
    }
}

/// Protein preprocessing settings (`ProteinConfig` upstream, without the global singleton).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProteinConfig {
    behavior: AmbiguousBehavior,
    overrides: BTreeMap<char, Vec<char>>,
}

impl ProteinConfig {
    /// A configuration with the given behaviour and the default map.
    pub fn new(behavior: AmbiguousBehavior) -> Self {
        Self { behavior, overrides: BTreeMap::new() }
    }

    /// Replace the map entry of an ambiguous amino acid (`ambiguous_aminoacid_map_override`).
    pub fn with_override(mut self, amino_acid: char, replacements: &[char]) -> Result<Self> {
        if !DEFAULT_AMBIGUOUS_MAP.iter().any(|(aa, _)| *aa == amino_acid) {
            return Err(VocabError::InvalidOverrideKey(amino_acid));
        }
        if replacements.is_empty() {
            return Err(VocabError::EmptyOverride(amino_acid));
        }
        self.overrides.insert(amino_acid, replacements.to_vec());
        Ok(self)
    }

    /// The behaviour for ambiguous amino acids.
    pub fn behavior(&self) -> AmbiguousBehavior {
        self.behavior
    }

    fn replacements(&self, amino_acid: char) -> Option<&[char]> {
        if let Some(r) = self.overrides.get(&amino_acid) {
            return Some(r);
        }
        DEFAULT_AMBIGUOUS_MAP.iter().find(|(aa, _)| *aa == amino_acid).map(|(_, r)| *r)
    }
}

/// Upper-case, trim, and drop spaces, tabs and newlines (Python's `upper().strip()` + replaces).
fn clean(text: &str) -> String {
    text.to_uppercase().trim().chars().filter(|c| !matches!(c, '\n' | ' ' | '\t')).collect()
}

/// `preprocess_protein_sequence`: upper case, no whitespace, ambiguous amino acids
/// resolved, characters checked, a trailing `*` turned into `_`, and `_` appended if missing.
///
/// `rng` is used only under [`AmbiguousBehavior::StandardizeRandom`].
pub fn preprocess_protein(protein: &str, config: &ProteinConfig, rng: &mut impl Rng) -> Result<String> {
    let mut residues: Vec<char> = clean(protein).chars().collect();
    // Upstream raises IndexError on whitespace-only input; an empty protein is the honest error.
    if residues.is_empty() {
        return Err(VocabError::EmptyProtein);
    }
    let is_ambiguous = |c: &char| config.replacements(*c).is_some();
    if config.behavior == AmbiguousBehavior::RaiseError && residues.iter().any(is_ambiguous) {
        return Err(VocabError::AmbiguousAminoAcids);
    }
    for residue in residues.iter_mut() {
        if let Some(choices) = config.replacements(*residue) {
            *residue = match config.behavior {
                AmbiguousBehavior::StandardizeRandom => *choices.choose(rng).unwrap_or(&choices[0]),
                _ => choices[0],
            };
        }
    }
    if let Some((position, &character)) =
        residues.iter().enumerate().find(|(_, c)| !(STANDARD_AMINO_ACIDS.contains(**c) || **c == '_' || **c == '*'))
    {
        return Err(VocabError::InvalidProteinCharacter { character, position });
    }
    match residues.last() {
        Some('*') => {
            let last = residues.len() - 1;
            residues[last] = '_';
        }
        Some('_') => {}
        _ => residues.push('_'),
    }
    Ok(residues.into_iter().collect())
}

/// `replace_ambiguous_codons`: every 3-character chunk that is not exactly three of
/// `ACGT` (a trailing partial codon included) becomes `UNK`.
pub fn replace_ambiguous_codons(dna: &str) -> String {
    let chars: Vec<char> = dna.to_uppercase().chars().collect();
    let mut out = String::with_capacity(chars.len() + 3);
    for chunk in chars.chunks(3) {
        if chunk.len() == 3 && chunk.iter().all(|c| matches!(c, 'A' | 'C' | 'G' | 'T')) {
            out.extend(chunk);
        } else {
            out.push_str("UNK");
        }
    }
    out
}

/// `preprocess_dna_sequence`: empty stays empty; otherwise clean, replace ambiguous
/// codons, and append `UNK` if the last codon is not a stop codon.
pub fn preprocess_dna(dna: &str) -> String {
    if dna.is_empty() {
        return String::new();
    }
    let mut out = replace_ambiguous_codons(&clean(dna));
    if !STOP_CODONS.iter().any(|stop| out.ends_with(stop)) {
        out.push_str("UNK");
    }
    out
}

/// `get_merged_seq(protein, dna, separator)` with an explicit config and RNG.
pub fn merged_sequence_with(
    protein: &str,
    dna: &str,
    separator: &str,
    config: &ProteinConfig,
    rng: &mut impl Rng,
) -> Result<String> {
    let dna = preprocess_dna(dna);
    let protein = preprocess_protein(protein, config, rng)?;
    let n_residues = protein.chars().count();
    if !dna.is_empty() && n_residues * 3 != dna.len() {
        return Err(VocabError::LengthMismatch { protein_len: n_residues, codons: dna.len() / 3 });
    }
    let mut out = String::with_capacity(n_residues * (4 + separator.len()));
    for (i, residue) in protein.chars().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push(residue);
        out.push_str(separator);
        out.push_str(if dna.is_empty() { "UNK" } else { &dna[3 * i..3 * i + 3] });
    }
    Ok(out)
}

/// `get_merged_seq(protein, dna)` with the default config (random ambiguity resolution
/// from the thread RNG, as upstream) and the `_` separator.
///
/// ```
/// let merged = codon_vocab::merged_sequence("MAV_", "ATGGCTGTGTAA").unwrap();
/// assert_eq!(merged, "M_ATG A_GCT V_GTG __TAA");
/// ```
pub fn merged_sequence(protein: &str, dna: &str) -> Result<String> {
    merged_sequence_with(protein, dna, "_", &ProteinConfig::default(), &mut rand::rng())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn det() -> ProteinConfig {
        ProteinConfig::new(AmbiguousBehavior::StandardizeDeterministic)
    }
    fn rng() -> rand_chacha::ChaCha8Rng {
        rand_chacha::ChaCha8Rng::seed_from_u64(0)
    }

    #[test]
    fn reference_conformance_cases() {
        let m = |p: &str, d: &str| merged_sequence(p, d).unwrap();
        assert_eq!(m("MAV_", "ATGGCTGTGTAA"), "M_ATG A_GCT V_GTG __TAA");
        assert_eq!(m("QHH_", ""), "Q_UNK H_UNK H_UNK __UNK");
        for p in ["mav", "MAV*", " M A\nV\t"] {
            assert_eq!(m(p, ""), "M_UNK A_UNK V_UNK __UNK");
        }
        assert_eq!(m("MAV", "ATGGCTGTG"), "M_ATG A_GCT V_GTG __UNK");
        assert_eq!(m("MAV", "atggcNgtg"), "M_ATG A_UNK V_GTG __UNK");
        assert_eq!(m("M_M_", ""), "M_UNK __UNK M_UNK __UNK");
        assert_eq!(m("M*M", ""), "M_UNK *_UNK M_UNK __UNK");
        let dash = merged_sequence_with("MA_", "ATGGCCTGA", "-", &det(), &mut rng()).unwrap();
        assert_eq!(dash, "M-ATG A-GCC _-TGA");
        assert_eq!(preprocess_dna("atg gcn\ntaa"), "ATGUNKTAA");
        assert_eq!(preprocess_dna("ATGGC"), "ATGUNKUNK");
        assert_eq!(replace_ambiguous_codons("ATGRYNTAAC"), "ATGUNKTAAUNK");
        assert_eq!(preprocess_protein("mkv*", &det(), &mut rng()).unwrap(), "MKV_");
    }

    #[test]
    fn errors_match_upstream_conditions() {
        for (p, d) in [("MAV", "ATGGCTGTGTA"), ("MAV", "ATGGCT")] {
            assert!(matches!(merged_sequence(p, d), Err(VocabError::LengthMismatch { .. })));
        }
        for p in ["MKTZZFVLLL?", "MWW/", "M1", "M-K", "M.K", "M\rK"] {
            let err = merged_sequence(p, "").unwrap_err();
            assert!(err.to_string().starts_with("Invalid characters in protein sequence."), "{p}: {err}");
        }
        assert!(matches!(merged_sequence("", ""), Err(VocabError::EmptyProtein)));
        assert!(matches!(merged_sequence(" \n\t ", ""), Err(VocabError::EmptyProtein)));
    }

    #[test]
    fn ambiguous_amino_acids() {
        assert_eq!(preprocess_protein("BZXJUO_", &det(), &mut rng()).unwrap(), "NQALCK_");
        assert_eq!(preprocess_protein("MXB", &det(), &mut rng()).unwrap(), "MAN_");
        let over = det().with_override('X', &['G']).unwrap();
        assert_eq!(preprocess_protein("MX", &over, &mut rng()).unwrap(), "MG_");
        let raise = ProteinConfig::new(AmbiguousBehavior::RaiseError);
        assert!(matches!(preprocess_protein("Z_", &raise, &mut rng()), Err(VocabError::AmbiguousAminoAcids)));
        assert_eq!(preprocess_protein("MK_", &raise, &mut rng()).unwrap(), "MK_");
        // Random mode draws both replacements of Z.
        let random = ProteinConfig::default();
        let mut r = rng();
        let seen: std::collections::BTreeSet<String> =
            (0..30).map(|_| preprocess_protein("Z_", &random, &mut r).unwrap()).collect();
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), ["E_", "Q_"]);
    }

    #[test]
    fn config_validation() {
        assert_eq!("raise_error".parse::<AmbiguousBehavior>().unwrap(), AmbiguousBehavior::RaiseError);
        let err = "sometimes".parse::<AmbiguousBehavior>().unwrap_err();
        assert_eq!(err.to_string(), "Invalid value for ambiguous_aminoacid_behavior: sometimes.");
        assert_eq!(
            det().with_override('A', &['G']).unwrap_err().to_string(),
            "Invalid amino acid in ambiguous_aminoacid_map_override: A"
        );
        assert_eq!(
            det().with_override('X', &[]).unwrap_err().to_string(),
            "Override for aminoacid 'X' cannot be empty list."
        );
    }
}
