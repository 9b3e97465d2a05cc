//! How the PostgreSQL store meets a failure: a lost connection, a server restarting, a deadlock
//! or a pool that waited too long is tried again with backoff (jittered, so that replicas do
//! not reconnect in step); anything else (a wrong password, a missing privilege) is an answer at
//! once. A failure's words are the server's, on one line, never with the password.
use std::time::{Duration, Instant};

use deadpool_postgres::PoolError;

use crate::jobs::StoreError;

/// The first wait before a retry; each next one doubles, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(50);

/// The longest wait between two tries.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Why one attempt at an operation failed.
pub(super) enum Failure {
    /// The server or the connection.
    Pg(tokio_postgres::Error),
    /// The pool gave no connection in time.
    PoolTimeout,
    /// The attempt took longer than an attempt may.
    TimedOut,
    /// An answer of the store's own (full, too many jobs, a foreign database): not retried.
    Store(StoreError),
    /// Anything else from the pool, in words: not retried.
    Other(String),
}

impl From<tokio_postgres::Error> for Failure {
    fn from(e: tokio_postgres::Error) -> Self {
        Self::Pg(e)
    }
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

impl From<PoolError> for Failure {
    fn from(e: PoolError) -> Self {
        match e {
            PoolError::Backend(e) => Self::Pg(e),
            PoolError::Timeout(_) => Self::PoolTimeout,
            other => Self::Other(other.to_string()),
        }
    }
}

impl Failure {
    /// Whether trying again may succeed: the connection or the server's state, not the request.
    pub(super) fn is_transient(&self) -> bool {
        match self {
            Self::Pg(e) => transient(e),
            Self::PoolTimeout | Self::TimedOut => true,
            Self::Store(_) | Self::Other(_) => false,
        }
    }

    /// The failure in one line.
    pub(super) fn describe(&self) -> String {
        match self {
            Self::Pg(e) => describe(e),
            Self::PoolTimeout => "no connection could be had in time".into(),
            Self::TimedOut => "the server did not answer in time".into(),
            Self::Store(e) => e.to_string(),
            Self::Other(words) => words.clone(),
        }
    }
}

/// Whether `e` is the connection's or the server's state rather than the request's fault.
fn transient(e: &tokio_postgres::Error) -> bool {
    if let Some(code) = e.code() {
        let code = code.code();
        // 08: connection exceptions; 57P01-03: the server shutting down, crashed, or starting
        // up; 53300: too many connections; 40001 and 40P01: serialization failure and deadlock.
        return code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03" | "53300" | "40001" | "40P01");
    }
    if e.is_closed() {
        return true;
    }
    // tokio-postgres names the kinds in words only: the connection's are retried, a TLS
    // handshake refused, a configuration or an authentication without a password are not.
    let words = e.to_string();
    ["error connecting to server", "error communicating with the server", "timeout waiting for server"]
        .iter()
        .any(|kind| words.starts_with(kind))
}

/// `e` in one line: the server's severity and message, or the error with its causes.
pub(crate) fn describe(e: &tokio_postgres::Error) -> String {
    let first_line = |text: String| text.lines().next().unwrap_or("").trim_end().to_string();
    if let Some(db) = e.as_db_error() {
        return first_line(format!("{}: {}", db.severity(), db.message()));
    }
    let mut line = first_line(e.to_string());
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let text = first_line(c.to_string());
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        cause = c.source();
    }
    line
}

/// The wait before the next try after `delay`: doubled, within [`MAX_BACKOFF`], with a jitter of
/// up to a quarter either way.
pub(super) fn next_backoff(delay: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(Instant::now().elapsed().as_nanos());
    let jitter = (hasher.finish() % 501) as f64 / 1000.0 + 0.75;
    (delay * 2).min(MAX_BACKOFF).mul_f64(jitter)
}

/// The first wait before a retry.
pub(super) fn first_backoff() -> Duration {
    FIRST_BACKOFF
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_within_its_cap() {
        let mut delay = first_backoff();
        for _ in 0..20 {
            let next = next_backoff(delay);
            assert!(next <= MAX_BACKOFF.mul_f64(1.25), "{next:?}");
            assert!(next >= (delay * 2).min(MAX_BACKOFF).mul_f64(0.75), "{delay:?} -> {next:?}");
            delay = next;
        }
        assert!(delay >= MAX_BACKOFF.mul_f64(0.75));
    }
}
