//! Sequence similarity (`get_sequence_similarity` upstream, with `truncate=True`).

use crate::error::{EvalError, Result};

/// Percentage of positions (`window` 1) or of non-overlapping windows (`window` 3: codons) of
/// `predicted` equal to `original`'s. Both are trimmed, `original` is cut to `predicted`'s length,
/// and the denominator is `len(predicted) / window`, as upstream (so identical sequences whose
/// length is not a multiple of the window score under 100). Case-sensitive, as upstream.
///
/// Upstream raises `IndexError` at window 1 when `predicted` is the longer one; here its extra
/// positions count as different, as they already do at other windows.
pub fn similarity(original: &str, predicted: &str, window: usize) -> Result<f64> {
    if window == 0 {
        return Err(EvalError::InvalidArgument { name: "window_length", detail: "must be at least 1".into() });
    }
    let predicted = predicted.trim().as_bytes();
    if predicted.is_empty() {
        return Err(EvalError::InvalidArgument { name: "predicted", detail: "is empty".into() });
    }
    let original = original.trim().as_bytes();
    let original = &original[..original.len().min(predicted.len())];
    let identical = original.chunks_exact(window).zip(predicted.chunks_exact(window)).filter(|(a, b)| a == b).count();
    Ok(identical as f64 / (predicted.len() as f64 / window as f64) * 100.0)
}
