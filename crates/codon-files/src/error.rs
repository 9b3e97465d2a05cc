//! The error type of `codon-files`.

use std::path::PathBuf;

/// Everything that can go wrong writing a file, or checking where it may be written.
#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// An output path that names an input: writing it would destroy the input.
    #[error("{output} is the input {input}: writing it would replace the input; choose another output path")]
    OutputIsInput {
        /// The output as given.
        output: PathBuf,
        /// The input it resolves to.
        input: PathBuf,
    },
    /// An output path inside an input folder, whose files it could replace.
    #[error("{output} is inside the input folder {input}: writing there could replace the input's files; choose a path outside it")]
    OutputInInputFolder {
        /// The output as given.
        output: PathBuf,
        /// The input folder.
        input: PathBuf,
    },
}

impl FilesError {
    /// Wrap an I/O error with its file.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        FilesError::Io { path: path.into(), source }
    }
}

/// Result with [`FilesError`].
pub type Result<T, E = FilesError> = std::result::Result<T, E>;
