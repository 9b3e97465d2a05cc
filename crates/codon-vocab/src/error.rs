//! The error type of `codon-vocab`.

use std::path::PathBuf;

/// Everything that can go wrong in preprocessing, the organism table and tokenization. Messages that have an upstream (Python CodonTransformer) counterpart start with its
/// exact text.
#[derive(Debug, thiserror::Error)]
pub enum VocabError {
    /// The protein is empty, or holds only whitespace.
    #[error("Protein sequence is empty.")]
    EmptyProtein,
    /// An ambiguous amino acid (B, Z, X, J, U, O) under [`crate::AmbiguousBehavior::RaiseError`].
    #[error("Ambiguous amino acids found in protein sequence.")]
    AmbiguousAminoAcids,
    /// A character that is neither a standard amino acid nor a stop symbol.
    #[error("Invalid characters in protein sequence. (first invalid character: {character:?} at position {position})")]
    InvalidProteinCharacter {
        /// The offending character.
        character: char,
        /// Its position (in characters) after preprocessing.
        position: usize,
    },
    /// Protein and DNA disagree in length.
    #[error("Length of protein (including stop symbol such as \"_\") and the number of codons in DNA sequence (including stop codon) must be equal. (protein: {protein_len} residues, DNA: {codons} codons)")]
    LengthMismatch {
        /// Residues after preprocessing, stop included.
        protein_len: usize,
        /// Codons after preprocessing, stop included.
        codons: usize,
    },
    /// An organism name that is not in the table.
    #[error("{}", unknown_organism(.name, .suggestions))]
    UnknownOrganismName {
        /// The name given.
        name: String,
        /// Close known names.
        suggestions: Vec<String>,
    },
    /// An organism id outside 0..164.
    #[error("Invalid organism ID: {id}. Please use a valid organism name or ID.")]
    UnknownOrganismId {
        /// The id given.
        id: i64,
    },
    /// An unknown ambiguous-amino-acid behaviour name.
    #[error("Invalid value for ambiguous_aminoacid_behavior: {0}.")]
    InvalidAmbiguousBehavior(String),
    /// An override for a letter that is not an ambiguous amino acid.
    #[error("Invalid amino acid in ambiguous_aminoacid_map_override: {0}")]
    InvalidOverrideKey(char),
    /// An override with no replacement.
    #[error("Override for aminoacid '{0}' cannot be empty list.")]
    EmptyOverride(char),
    /// The `tokenizers` library failed.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// An organism table that cannot be used (a custom `organisms.json`).
    #[error("invalid organism table: {0}")]
    OrganismTable(String),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A tokenizer file could not be read or parsed.
    #[error("cannot load tokenizer from {path}: {message}")]
    TokenizerFile {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The organism table could not be written.
    #[error(transparent)]
    Files(#[from] codon_files::FilesError),
}

impl VocabError {
    /// Wrap an I/O error with its file.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        VocabError::Io { path: path.into(), source }
    }

    /// The message without per-record context (positions, lengths, suggestions): the exact
    /// upstream text where there is one. Useful to group failures by kind.
    pub fn summary(&self) -> String {
        match self {
            VocabError::InvalidProteinCharacter { .. } => "Invalid characters in protein sequence.".into(),
            VocabError::LengthMismatch { .. } => "Length of protein (including stop symbol such as \"_\") and the number of codons in DNA sequence (including stop codon) must be equal.".into(),
            VocabError::UnknownOrganismName { name, .. } => format!("Invalid organism name: {name}."),
            other => other.to_string(),
        }
    }
}

/// Upstream's message for an unknown name; an empty name says that no organism was given.
fn unknown_organism(name: &str, suggestions: &[String]) -> String {
    if name.trim().is_empty() {
        return "No organism given (the name is empty). Please use a valid organism name or ID.".into();
    }
    format!("Invalid organism name: {name}. Please use a valid organism name or ID.{}", suggest(suggestions))
}

fn suggest(names: &[String]) -> String {
    if names.is_empty() {
        String::new()
    } else {
        format!(" Did you mean: {}?", names.join(", "))
    }
}

/// Result with [`VocabError`].
pub type Result<T, E = VocabError> = std::result::Result<T, E>;
