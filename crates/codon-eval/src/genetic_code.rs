//! Codons as indices 0..64 (A<C<G<T order, so index order is alphabetical order), their amino
//! acids, and the synonymous families every metric is built on.
//!
//! NCBI tables 1 and 11 have the same 61 sense codons and the same stops; they differ only in
//! start codons, which no metric reads. So one table serves every organism, as in upstream.

use std::sync::LazyLock;

/// The amino acids in upstream's skeleton order (Python string order: `_`, stop, sorts last).
pub const AMINO_ACIDS: &str = "ACDEFGHIKLMNPQRSTVWY_";

/// The stop symbol.
pub const STOP: char = '_';

/// Index of an upper-case A/C/G/T codon, `None` for anything else.
pub fn codon_index(codon: &[u8]) -> Option<usize> {
    codon_vocab::vocab::codon_index(codon)
}

/// The codon of an index 0..64.
pub fn codon_text(index: usize) -> &'static str {
    static TEXT: LazyLock<Vec<String>> = LazyLock::new(|| {
        (0..64)
            .map(|i| {
                codon_vocab::vocab::codon_at(i).map_or(String::new(), |c| String::from_utf8_lossy(&c).into_owned())
            })
            .collect()
    });
    &TEXT[index % 64]
}

/// The amino acid (`_` for stop) of a codon index.
pub fn amino_acid(index: usize) -> char {
    codon_vocab::vocab::translate_codon(codon_text(index).as_bytes()).unwrap_or(STOP)
}

/// Position of an amino acid in [`AMINO_ACIDS`]; `*` is a stop too.
pub fn family_index(amino_acid: char) -> Option<usize> {
    let amino_acid = if amino_acid == '*' { STOP } else { amino_acid };
    AMINO_ACIDS.find(amino_acid)
}

/// Per amino acid of [`AMINO_ACIDS`], its codon indices in ascending (alphabetical) order.
pub fn families() -> &'static [Vec<u8>; 21] {
    static FAMILIES: LazyLock<[Vec<u8>; 21]> = LazyLock::new(|| {
        let mut families: [Vec<u8>; 21] = Default::default();
        for codon in 0..64 {
            if let Some(f) = family_index(amino_acid(codon)) {
                families[f].push(codon as u8);
            }
        }
        families
    });
    &FAMILIES
}

/// The family index of each codon index.
pub fn family_of(codon: usize) -> usize {
    static FAMILY_OF: LazyLock<[u8; 64]> = LazyLock::new(|| {
        let mut of = [0u8; 64];
        for (f, codons) in families().iter().enumerate() {
            for &c in codons {
                of[c as usize] = f as u8;
            }
        }
        of
    });
    FAMILY_OF[codon % 64] as usize
}

/// True for TAA, TAG and TGA.
pub fn is_stop(codon: usize) -> bool {
    amino_acid(codon) == STOP
}

/// `get_codon_table(organism)` upstream: NCBI table 1 for fourteen eukaryotes (exact,
/// case-sensitive names; nine of them are among the model's organisms), 11 for everything else.
pub fn codon_table_number(organism: &str) -> u8 {
    const TABLE_1: [&str; 14] = [
        "Arabidopsis thaliana",
        "Caenorhabditis elegans",
        "Chlamydomonas reinhardtii",
        "Saccharomyces cerevisiae",
        "Danio rerio",
        "Drosophila melanogaster",
        "Homo sapiens",
        "Mus musculus",
        "Nicotiana tabacum",
        "Solanum tuberosum",
        "Solanum lycopersicum",
        "Oryza sativa",
        "Glycine max",
        "Zea mays",
    ];
    if TABLE_1.contains(&organism) {
        1
    } else {
        11
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_cover_the_64_codons_in_alphabetical_order() {
        let f = families();
        assert_eq!(f.iter().map(Vec::len).sum::<usize>(), 64);
        let leucine: Vec<&str> = f[family_index('L').unwrap()].iter().map(|&c| codon_text(c as usize)).collect();
        assert_eq!(leucine, ["CTA", "CTC", "CTG", "CTT", "TTA", "TTG"]);
        let stops: Vec<&str> = f[family_index('_').unwrap()].iter().map(|&c| codon_text(c as usize)).collect();
        assert_eq!(stops, ["TAA", "TAG", "TGA"]);
        assert_eq!(f[family_index('W').unwrap()].len(), 1);
    }
}
