//! The error type of `codon-design`.

/// What can go wrong while parsing constraints or repairing a sequence.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DesignError {
    /// An enzyme missing from the built-in table.
    #[error("--avoid-sites: unknown enzyme {0:?} (known: {known})", known = crate::enzymes::ENZYMES.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", "))]
    UnknownEnzyme(String),
    /// A motif with a letter that is not an IUPAC nucleotide code.
    #[error("--avoid-motif {0:?}: use IUPAC nucleotide letters (ACGT, RYSWKMBDHVN)")]
    InvalidMotif(String),
    /// A constraint with impossible parameters.
    #[error("{0}")]
    InvalidConstraint(String),
    /// The sequence to repair and its scores disagree, or it is not whole A/C/G/T codons.
    #[error("repair: {0}")]
    InvalidInput(String),
    /// No synonymous change removes a violation without creating another.
    #[error("cannot satisfy \"{constraint}\": {violation} (codons {first_codon}-{last_codon}); no synonymous change removes it without breaking another constraint (--best-effort keeps going)")]
    Unsatisfiable {
        /// The constraint, described.
        constraint: String,
        /// The violation and where it is.
        violation: String,
        /// First codon (1-based) of the region.
        first_codon: usize,
        /// Last codon (1-based) of the region.
        last_codon: usize,
    },
}

/// Result with [`DesignError`].
pub type Result<T> = std::result::Result<T, DesignError>;
