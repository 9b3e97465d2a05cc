//! IUPAC nucleotide codes: matching a pattern against DNA, and reverse complements.

/// The bases (bit set A=1, C=2, G=4, T=8) an IUPAC letter stands for; `None` for other letters.
pub fn bases(letter: u8) -> Option<u8> {
    Some(match letter.to_ascii_uppercase() {
        b'A' => 1,
        b'C' => 2,
        b'G' => 4,
        b'T' | b'U' => 8,
        b'R' => 1 | 4,
        b'Y' => 2 | 8,
        b'S' => 2 | 4,
        b'W' => 1 | 8,
        b'K' => 4 | 8,
        b'M' => 1 | 2,
        b'B' => 2 | 4 | 8,
        b'D' => 1 | 4 | 8,
        b'H' => 1 | 2 | 8,
        b'V' => 1 | 2 | 4,
        b'N' => 15,
        _ => return None,
    })
}

/// A pattern as base sets, one per position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern(Vec<u8>);

impl Pattern {
    /// Parse IUPAC letters; `None` when a letter is not IUPAC or the pattern is empty.
    pub fn parse(text: &str) -> Option<Self> {
        let sets: Option<Vec<u8>> = text.trim().bytes().map(bases).collect();
        sets.filter(|s| !s.is_empty()).map(Self)
    }

    /// Length in nucleotides.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Never true: an empty pattern does not parse.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The reverse complement (complementing a set complements each base in it).
    pub fn reverse_complement(&self) -> Self {
        let complement = |set: u8| {
            // A<->T (1<->8), C<->G (2<->4).
            ((set & 1) << 3) | ((set & 8) >> 3) | ((set & 2) << 1) | ((set & 4) >> 1)
        };
        Self(self.0.iter().rev().map(|&s| complement(s)).collect())
    }

    /// True when the pattern reads the same on both strands (EcoRI's GAATTC, say).
    pub fn is_palindromic(&self) -> bool {
        *self == self.reverse_complement()
    }

    /// Whether the pattern matches `dna` (upper-case A/C/G/T) at `start`.
    pub fn matches_at(&self, dna: &[u8], start: usize) -> bool {
        dna.len() >= start + self.0.len()
            && self.0.iter().zip(&dna[start..]).all(|(&set, &base)| bases(base).is_some_and(|b| b & set != 0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reverse_complements_and_palindromes() {
        let bsai = Pattern::parse("GGTCTC").unwrap();
        assert_eq!(bsai.reverse_complement(), Pattern::parse("GAGACC").unwrap());
        assert!(!bsai.is_palindromic());
        assert!(Pattern::parse("GAATTC").unwrap().is_palindromic());
        assert_eq!(Pattern::parse("RYN").unwrap().reverse_complement(), Pattern::parse("NRY").unwrap());
        assert!(Pattern::parse("GGXC").is_none() && Pattern::parse("").is_none());
    }

    #[test]
    fn ambiguous_letters_match_their_bases() {
        let sfii = Pattern::parse("GGCCNNNNNGGCC").unwrap();
        assert!(sfii.matches_at(b"TTGGCCATATAGGCCTT", 2));
        assert!(!sfii.matches_at(b"TTGGCCATATAGGCATT", 2));
        assert!(!sfii.matches_at(b"GGCC", 0), "a pattern longer than the rest never matches");
    }
}
