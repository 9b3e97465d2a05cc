//! DNA translation with Biopython's semantics, and the `is_correct_seq` CDS filter.
//!
//! NCBI tables 1 and 11 translate identically, so one table serves every organism.

use std::collections::BTreeSet;

use codon_vocab::vocab::translate_codon;

/// Why a codon could not be translated (`TranslationError` upstream).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Codon '{0}' is invalid")]
pub struct InvalidCodon(pub String);

/// The bases an IUPAC nucleotide letter stands for.
fn iupac_bases(letter: u8) -> Option<&'static [u8]> {
    Some(match letter {
        b'A' => b"A",
        b'C' => b"C",
        b'G' => b"G",
        b'T' | b'U' => b"T",
        b'R' => b"AG",
        b'Y' => b"CT",
        b'W' => b"AT",
        b'S' => b"CG",
        b'M' => b"AC",
        b'K' => b"GT",
        b'H' => b"ACT",
        b'B' => b"CGT",
        b'V' => b"ACG",
        b'D' => b"AGT",
        b'N' => b"ACGT",
        _ => return None,
    })
}

/// Translate one upper-case codon; ambiguous codons resolve as Biopython does.
fn translate_ambiguous(codon: &[u8]) -> Result<char, InvalidCodon> {
    let sets: Option<Vec<&[u8]>> = codon.iter().map(|&b| iupac_bases(b)).collect();
    let Some(sets) = sets else {
        return Err(InvalidCodon(String::from_utf8_lossy(codon).into_owned()));
    };
    let mut possible = BTreeSet::new();
    for &a in sets[0] {
        for &b in sets[1] {
            for &c in sets[2] {
                possible.extend(translate_codon(&[a, b, c]));
            }
        }
    }
    let has_stop = possible.contains(&'_');
    Ok(match possible.len() {
        1 => *possible.first().unwrap_or(&'X'),
        _ if has_stop => 'X',
        _ => {
            let set: String = possible.into_iter().collect();
            match set.as_str() {
                "DN" => 'B',
                "EQ" => 'Z',
                "IL" => 'J',
                _ => 'X',
            }
        }
    })
}

/// `get_amino_acid_sequence(dna)`: Biopython's `Seq(dna).strip().translate()` with `_` as
/// the stop symbol. Case-insensitive; a trailing partial codon is dropped; ambiguous codons
/// give their amino acid when it is unambiguous, else B/Z/J or X; other letters are an error.
pub fn translate(dna: &str) -> Result<String, InvalidCodon> {
    let dna = dna.trim().to_ascii_uppercase();
    let bytes = dna.as_bytes();
    let mut protein = String::with_capacity(bytes.len() / 3);
    for codon in bytes.chunks_exact(3) {
        let aa = match translate_codon(codon) {
            Some(aa) => aa,
            None => translate_ambiguous(codon)?,
        };
        protein.push(aa);
    }
    Ok(protein)
}

/// The first rule of `is_correct_seq` that a coding sequence breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CdsDefect {
    /// DNA length is not a multiple of 3.
    LengthNotMultipleOfThree,
    /// The first codon is not ATG, TTG, CTG or GTG.
    NoStartCodon,
    /// The protein does not end with the stop symbol.
    NoFinalStop,
    /// The protein holds more than one stop symbol.
    InternalStop,
    /// The DNA is not made of exactly the four nucleotides A, C, G and T (all present).
    NotFourNucleotides,
}

impl std::fmt::Display for CdsDefect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CdsDefect::LengthNotMultipleOfThree => "DNA length is not a multiple of 3",
            CdsDefect::NoStartCodon => "no start codon (ATG, TTG, CTG, GTG)",
            CdsDefect::NoFinalStop => "no stop codon at the end",
            CdsDefect::InternalStop => "internal stop codon",
            CdsDefect::NotFourNucleotides => "DNA is not made of exactly the four nucleotides ACGT",
        })
    }
}

/// Check a CDS against `is_correct_seq`'s rules, in upstream order.
pub fn check_cds(dna: &str, protein: &str) -> Result<(), CdsDefect> {
    const STARTS: [&str; 4] = ["ATG", "TTG", "CTG", "GTG"];
    if !dna.chars().count().is_multiple_of(3) {
        return Err(CdsDefect::LengthNotMultipleOfThree);
    }
    let first: String = dna.chars().take(3).collect::<String>().to_uppercase();
    if !STARTS.contains(&first.as_str()) {
        return Err(CdsDefect::NoStartCodon);
    }
    if !protein.ends_with('_') {
        return Err(CdsDefect::NoFinalStop);
    }
    if protein.matches('_').count() != 1 {
        return Err(CdsDefect::InternalStop);
    }
    // Upstream checks `len(set(dna)) == 4`: every one of four distinct symbols must occur.
    if dna.chars().collect::<BTreeSet<char>>().len() != 4 {
        return Err(CdsDefect::NotFourNucleotides);
    }
    Ok(())
}

/// `is_correct_seq(dna, protein)`.
pub fn is_correct_seq(dna: &str, protein: &str) -> bool {
    check_cds(dna, protein).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn translation_follows_biopython() {
        assert_eq!(translate("ATGGCCTGA").unwrap(), "MA_");
        assert_eq!(translate(" atggcctga\n").unwrap(), "MA_");
        assert_eq!(translate("ATGATGATGATGATG").unwrap(), "MMMMM");
        assert_eq!(translate("TGATGATGATGA").unwrap(), "____");
        assert_eq!(translate("ATGGC").unwrap(), "M", "trailing partial codon dropped");
        assert_eq!(translate("GCN").unwrap(), "A");
        assert_eq!(translate("TAR").unwrap(), "_", "all expansions are stops");
        assert_eq!(translate("NNN").unwrap(), "X");
        assert_eq!(translate("TAN").unwrap(), "X", "stop or tyrosine");
        assert_eq!(translate("RAY").unwrap(), "B");
        assert_eq!(translate("SAR").unwrap(), "Z");
        assert_eq!(translate("MTT").unwrap(), "J");
        assert_eq!(translate("AUG").unwrap(), "M", "RNA");
        assert_eq!(translate("ATGATGATGXYZATG").unwrap_err().to_string(), "Codon 'XYZ' is invalid");
    }

    #[test]
    fn is_correct_seq_rules() {
        assert!(is_correct_seq("ATGGCCTGA", "MA_"));
        assert!(is_correct_seq("TTGGCCTAA", "LA_"));
        assert_eq!(check_cds("ATGTAAGCCTGA", "M_A_"), Err(CdsDefect::InternalStop));
        assert_eq!(check_cds("ATGGCCTG", "MA"), Err(CdsDefect::LengthNotMultipleOfThree));
        assert_eq!(check_cds("AAAGCCTGA", "KA_"), Err(CdsDefect::NoStartCodon));
        assert_eq!(check_cds("ATGGCCGCC", "MAA"), Err(CdsDefect::NoFinalStop));
        // Upstream quirk kept: all four nucleotides must occur.
        assert_eq!(check_cds("ATGTGA", "M_"), Err(CdsDefect::NotFourNucleotides));
        assert_eq!(check_cds("ATGNCCTGA", "MX_"), Err(CdsDefect::NotFourNucleotides));
    }
}
