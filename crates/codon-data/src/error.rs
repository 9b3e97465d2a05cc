//! The error type of `codon-data`.

use std::path::PathBuf;

/// Everything that can go wrong while preparing, reading or batching data.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A JSONL line that is not a valid record.
    #[error("{path}:{line}: malformed record: {message}")]
    MalformedLine {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        message: String,
    },
    /// A CSV file that cannot be parsed.
    #[error("{path}: CSV error: {message}")]
    Csv {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// A CSV file without a required column.
    #[error("{path}: Input dataset must have columns: {required}; found: {found}")]
    MissingColumns {
        /// The file.
        path: PathBuf,
        /// The columns needed.
        required: String,
        /// The header that was found.
        found: String,
    },
    /// A compressed input, where text was expected.
    #[error("{path}: the file is {format}-compressed; decompress it first ({undo} {path})")]
    Compressed {
        /// The file.
        path: PathBuf,
        /// The compression its first bytes show.
        format: &'static str,
        /// The command that undoes it.
        undo: &'static str,
    },
    /// A CSV file with two columns of one name that the reader looks up.
    #[error("{path}: columns {first} and {second} are both named {name:?}; rename or remove one")]
    DuplicateColumn {
        /// The file.
        path: PathBuf,
        /// The name.
        name: String,
        /// The first column's number (from 1).
        first: usize,
        /// The second's.
        second: usize,
    },
    /// An input whose format cannot be told from its extension.
    #[error("{path}: unknown input format (expected .csv, .fasta, .fa, .fna or .ffn)")]
    UnknownFormat {
        /// The file.
        path: PathBuf,
    },
    /// A dataset with no records.
    #[error("{path}: the dataset holds no records")]
    EmptyDataset {
        /// The file.
        path: PathBuf,
    },
    /// A dataset whose tokens are too often outside the vocabulary to train on.
    #[error("{path}: {unknown} of {total} tokens are not in the vocabulary (the first, {example:?}, at line {line}); they would train as [UNK] (prepare the file with prepare_data)")]
    UnknownTokens {
        /// The file.
        path: PathBuf,
        /// Tokens outside the vocabulary.
        unknown: usize,
        /// All tokens.
        total: usize,
        /// The first of them.
        example: String,
        /// Its line.
        line: usize,
    },
    /// An invalid loader or collator setting.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// Tokenization or preprocessing failed.
    #[error(transparent)]
    Vocab(#[from] codon_vocab::VocabError),
    /// An output could not be written, or would replace an input.
    #[error(transparent)]
    Files(#[from] codon_files::FilesError),
    /// A loader worker thread panicked.
    #[error("data loader worker thread panicked")]
    WorkerPanicked,
}

impl DataError {
    /// Wrap an I/O error with the file it concerns.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        DataError::Io { path: path.into(), source }
    }
}

/// Result with [`DataError`].
pub type Result<T, E = DataError> = std::result::Result<T, E>;
