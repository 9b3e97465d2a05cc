//! What every front end of the library shares (the `codon` program, its server, the Python
//! package): a device named by a string and opened ([`device`]), a model opened for prediction
//! ([`predictor`]), and an error with its causes as one line ([`error_line`]).
//!
//! It depends on the library crates and nothing a front end brings (no command-line parser, no
//! HTTP server, no training on GPUs), so a front end links only what it uses.

pub mod device;
pub mod predictor;

pub use device::{DeviceError, DeviceSpec};
pub use predictor::{model_spec, open_predictor, OpenError};

/// Longest error line [`error_line`] gives; the rest is cut (a malformed line can be megabytes long).
pub const MAX_ERROR_CHARS: usize = 1500;

/// An error and its causes on one line. A cause whose text the line already holds is not
/// repeated (`{path}: {source}` messages embed their source), and the line is cut at
/// [`MAX_ERROR_CHARS`] characters.
pub fn error_line(e: &(dyn std::error::Error + 'static)) -> String {
    // Only the first line of each message: candle appends a multi-line backtrace under
    // RUST_BACKTRACE, which belongs in a debugger, not in a one-line error.
    let first_line = |e: &dyn std::error::Error| e.to_string().lines().next().unwrap_or("").trim_end().to_string();
    let mut line = first_line(e);
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = first_line(c);
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        cause = c.source();
    }
    let total = line.chars().count();
    if total <= MAX_ERROR_CHARS {
        return line;
    }
    let kept: String = line.chars().take(MAX_ERROR_CHARS).collect();
    format!("{kept}… ({} more characters)", total - MAX_ERROR_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("{path}: {source}")]
    struct WithPath {
        path: String,
        source: std::io::Error,
    }

    #[test]
    fn error_lines_say_each_cause_once_and_stay_short() {
        let io = || std::io::Error::from(std::io::ErrorKind::NotFound);
        let e = WithPath { path: "x.csv".into(), source: io() };
        assert_eq!(error_line(&e), format!("x.csv: {}", io()));
        let long = std::io::Error::other(format!("bad line: {}", "A".repeat(10_000)));
        let line = error_line(&long);
        assert!(line.chars().count() < MAX_ERROR_CHARS + 40, "{}", line.len());
        assert!(line.ends_with("more characters)"), "{line}");
        assert_eq!(error_line(&std::io::Error::other("failed\n   0: backtrace frame")), "failed");
    }
}
