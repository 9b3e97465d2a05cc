//! The error type of `codon-model`.

use std::path::PathBuf;

/// Everything that can go wrong in the model, its files and prediction; preprocessing and
/// tokenization errors are [`CodonError::Vocab`].
#[derive(Debug, thiserror::Error)]
pub enum CodonError {
    /// Preprocessing, the organism table or tokenization failed ([`codon_vocab::VocabError`]).
    #[error(transparent)]
    Vocab(#[from] codon_vocab::VocabError),
    /// A file could not be written, or would replace an input ([`codon_files::FilesError`]).
    #[error(transparent)]
    Files(#[from] codon_files::FilesError),
    /// An invalid or unreadable model configuration.
    #[error("invalid BigBird configuration: {0}")]
    Config(String),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A tensor operation failed.
    #[error("{op}: {source}")]
    Tensor {
        /// What the model was doing.
        op: String,
        /// candle's error (it names shapes and dtypes).
        source: candle_core::Error,
    },
    /// A checkpoint whose tensors do not fit the model.
    #[error("{path}: checkpoint does not fit the model:{}{}{}{}", list("missing", .missing), list("unexpected", .unexpected), list("misshapen", .misshapen), if .misshapen.is_empty() { "" } else { " a checkpoint of another size needs its own config.json (--config)" })]
    Weights {
        /// The checkpoint.
        path: PathBuf,
        /// Keys the model needs that the file lacks.
        missing: Vec<String>,
        /// Keys in the file that the model does not have.
        unexpected: Vec<String>,
        /// `key: expected shape, found shape`.
        misshapen: Vec<String>,
    },
    /// Weights with NaN or infinite values.
    #[error("{path}: the weights are not finite (NaN or infinity) in {}; the file is corrupt or was saved from a diverged run", shown(.tensors))]
    NonFiniteWeights {
        /// The checkpoint.
        path: PathBuf,
        /// Tensors with a non-finite value.
        tensors: Vec<String>,
    },
    /// Invalid model input (shapes, ids, lengths).
    #[error("invalid model input: {0}")]
    Input(String),
    /// Invalid prediction arguments (messages as upstream `predict_dna_sequence`).
    #[error("{0}")]
    Prediction(String),
    /// Known DNA for infill that does not fit its protein.
    #[error("known DNA: {0}")]
    KnownDna(String),
}

impl CodonError {
    /// The message without per-record context (positions, lengths, suggestions): the exact
    /// upstream text where there is one. Useful to group failures by kind.
    pub fn summary(&self) -> String {
        match self {
            CodonError::Vocab(e) => e.summary(),
            other => other.to_string(),
        }
    }
}

fn list(what: &str, keys: &[String]) -> String {
    if keys.is_empty() {
        String::new()
    } else {
        format!(" {what} ({}): {};", keys.len(), shown(keys))
    }
}

/// The first few keys, and how many more there are (a whole list can run to kilobytes).
fn shown(keys: &[String]) -> String {
    const SHOWN: usize = 4;
    let more = keys.len().saturating_sub(SHOWN);
    let tail = if more > 0 { format!(" and {more} more") } else { String::new() };
    format!("{}{tail}", keys[..keys.len().min(SHOWN)].join(", "))
}

impl From<candle_core::Error> for CodonError {
    fn from(source: candle_core::Error) -> Self {
        CodonError::Tensor { op: "tensor operation".into(), source }
    }
}

impl CodonError {
    /// Wrap an I/O error with its file.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        CodonError::Io { path: path.into(), source }
    }
}

/// Attach the model operation to a candle error.
pub trait TensorContext<T> {
    /// Name the operation that failed.
    fn op(self, op: &str) -> Result<T>;
}

impl<T> TensorContext<T> for std::result::Result<T, candle_core::Error> {
    fn op(self, op: &str) -> Result<T> {
        self.map_err(|source| CodonError::Tensor { op: op.to_string(), source })
    }
}

impl<T> TensorContext<T> for Result<T> {
    fn op(self, op: &str) -> Result<T> {
        self.map_err(|e| match e {
            CodonError::Tensor { op: inner, source } => CodonError::Tensor { op: format!("{op}: {inner}"), source },
            other => other,
        })
    }
}

/// Result with [`CodonError`].
pub type Result<T, E = CodonError> = std::result::Result<T, E>;
