//! Rust errors as Python exceptions: the same one-line message as the `codon` program prints, and
//! the exception type upstream raises for the same mistake (`ValueError` for bad input).

use pyo3::exceptions::{PyFileNotFoundError, PyOSError, PyRuntimeError, PyValueError};
use pyo3::PyErr;

use codon_model::CodonError;

/// A prediction's or a score's error: bad input is a `ValueError` (upstream's type for an empty
/// protein, an unknown organism, a bad letter or a bad option), a failed computation a
/// `RuntimeError`.
pub fn codon_error(e: &CodonError) -> PyErr {
    let message = codon_app::error_line(e);
    match e {
        CodonError::Tensor { .. } => PyRuntimeError::new_err(message),
        CodonError::Io { source, .. } => io_error(source, message),
        _ => PyValueError::new_err(message),
    }
}

/// An error from opening a model: a missing file is `FileNotFoundError`,
/// another I/O failure `OSError`, a file or argument the library refuses `ValueError`.
pub fn load_error(e: &anyhow::Error) -> PyErr {
    let message = codon_app::error_line(e.as_ref());
    for cause in e.chain() {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            return io_error(io, message);
        }
        if let Some(CodonError::Io { source, .. }) = cause.downcast_ref::<CodonError>() {
            return io_error(source, message);
        }
    }
    PyValueError::new_err(message)
}

fn io_error(e: &std::io::Error, message: String) -> PyErr {
    if e.kind() == std::io::ErrorKind::NotFound {
        PyFileNotFoundError::new_err(message)
    } else {
        PyOSError::new_err(message)
    }
}

/// Any other library error with its one-line message, as a `ValueError`.
pub fn value_error(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(e.to_string())
}
