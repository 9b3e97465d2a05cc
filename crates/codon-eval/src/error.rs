//! The error type of `codon-eval`.

use std::path::PathBuf;

/// Everything that can go wrong while reading references or evaluating a sequence.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// A character that is not A, C, G or T (either case).
    #[error("DNA has {character:?} at position {position} (1-based); only A, C, G and T are allowed")]
    InvalidBase {
        /// The character.
        character: char,
        /// Its 1-based position in the (trimmed) sequence.
        position: usize,
    },
    /// A DNA length that is not a whole number of codons.
    #[error("DNA length {length} is not a multiple of 3")]
    PartialCodon {
        /// Length in nucleotides.
        length: usize,
    },
    /// An empty DNA sequence.
    #[error("DNA is empty")]
    EmptyDna,
    /// A reference with no codon at all (no sequence, or only empty ones).
    #[error("the reference {what} has no codons")]
    EmptyReference {
        /// Which reference: a file, or an organism in it.
        what: String,
    },
    /// An organism the reference set has no sequence for.
    #[error("organism {organism} has no sequences in the reference set {reference}")]
    OrganismNotInReference {
        /// The organism, as `id (name)`.
        organism: String,
        /// The reference file.
        reference: PathBuf,
    },
    /// A codon (or residue) whose amino acid never occurs in the reference, so it has no
    /// frequency to compare with or draw from.
    #[error("codon {position} (1-based): the reference has no codon of amino acid {amino_acid} ('_' is stop)")]
    AminoAcidNotInReference {
        /// The amino acid (`_` for stop).
        amino_acid: char,
        /// 1-based position of the codon or residue.
        position: usize,
    },
    /// A protein residue that no codon encodes.
    #[error("protein has {residue:?} at position {position} (1-based); expected one of ACDEFGHIKLMNPQRSTVWY, or _ / * for stop")]
    UnknownResidue {
        /// The residue.
        residue: char,
        /// Its 1-based position.
        position: usize,
    },
    /// A parameter outside its domain.
    #[error("{name}: {detail}")]
    InvalidArgument {
        /// The parameter.
        name: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// A reference or codon-usage file with a line that cannot be parsed.
    #[error("{path}:{line}: {detail}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        detail: String,
    },
    /// A reference or codon-usage file that is wrong as a whole (no one line is at fault).
    #[error("{path}: {detail}")]
    MalformedFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A plot could not be drawn.
    #[error("plot {path}: {detail}")]
    Plot {
        /// The SVG file.
        path: PathBuf,
        /// The plotting library's message.
        detail: String,
    },
}

/// Result with [`EvalError`].
pub type Result<T> = std::result::Result<T, EvalError>;
