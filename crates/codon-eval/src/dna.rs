//! A validated coding sequence: upper-case A/C/G/T, a whole number of codons.

use crate::error::{EvalError, Result};
use crate::genetic_code::{codon_index, codon_text};

/// DNA checked once, so metrics never meet a bad character or a partial codon.
///
/// Upstream's GC content, CFD, %MinMax and similarity are case-sensitive (lower-case DNA gives
/// GC 0 and a `KeyError` elsewhere) while CSI upper-cases; here every metric sees upper case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dna {
    text: String,
    codons: Vec<u8>,
}

impl Dna {
    /// Parse DNA: surrounding whitespace trimmed, case ignored; anything but A/C/G/T, an empty
    /// sequence or a length that is not a multiple of 3 is an error.
    pub fn parse(text: &str) -> Result<Self> {
        let text = text.trim().to_ascii_uppercase();
        if let Some((i, c)) = text.chars().enumerate().find(|(_, c)| !matches!(c, 'A' | 'C' | 'G' | 'T')) {
            return Err(EvalError::InvalidBase { character: c, position: i + 1 });
        }
        if text.is_empty() {
            return Err(EvalError::EmptyDna);
        }
        if !text.len().is_multiple_of(3) {
            return Err(EvalError::PartialCodon { length: text.len() });
        }
        let codons = text.as_bytes().chunks_exact(3).filter_map(codon_index).map(|i| i as u8).collect();
        Ok(Self { text, codons })
    }

    /// Build from codon indices (0..64, A<C<G<T order).
    pub(crate) fn from_codons(codons: Vec<u8>) -> Self {
        let text = codons.iter().map(|&c| codon_text(c as usize)).collect();
        Self { text, codons }
    }

    /// The sequence, upper case.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Length in nucleotides.
    pub fn len(&self) -> usize {
        self.text.len()
    }

    /// Always false: an empty sequence does not parse.
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    /// The codons as indices 0..64 (A<C<G<T order, see [`crate::genetic_code`]).
    pub fn codons(&self) -> &[u8] {
        &self.codons
    }
}

impl std::fmt::Display for Dna {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lower_case_is_accepted_and_upper_cased() {
        let dna = Dna::parse(" atgGCc\n").unwrap();
        assert_eq!(dna.as_str(), "ATGGCC");
        assert_eq!(dna.codons(), &[14, 37]);
    }

    #[test]
    fn bad_input_is_refused_with_its_position() {
        assert!(matches!(Dna::parse("ATGNNN"), Err(EvalError::InvalidBase { character: 'N', position: 4 })));
        assert!(matches!(Dna::parse("ATGGC"), Err(EvalError::PartialCodon { length: 5 })));
        assert!(matches!(Dna::parse("  "), Err(EvalError::EmptyDna)));
        assert!(matches!(Dna::parse("ATG GCC"), Err(EvalError::InvalidBase { character: ' ', position: 4 })));
    }
}
