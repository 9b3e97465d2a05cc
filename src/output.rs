//! Printing that a closed pipe never turns into a panic. `println!` panics when stdout is a pipe
//! whose reader has gone (`predict --list-organisms | head -5`), and `eprintln!` likewise for
//! stderr (`finetune … 2>&1 | head -1` would kill a training run). The programs print through
//! [`outln!`](crate::outln) and [`errln!`](crate::errln) instead: output to a closed stream is
//! dropped, the program goes on (its files are the work), and a listing can ask
//! [`stdout_closed`] to stop early. The exit status is what it would have been.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// Whether a line to stdout has failed because its reader is gone: a listing stops there, as
/// `ls | head` does, with status 0.
pub fn stdout_closed() -> bool {
    STDOUT_CLOSED.load(Ordering::Relaxed)
}

/// Write one line to stdout, best-effort (see the module doc).
pub fn stdout_line(args: std::fmt::Arguments<'_>) {
    if stdout_closed() {
        return;
    }
    let mut out = std::io::stdout().lock();
    if out.write_fmt(format_args!("{args}\n")).and_then(|_| out.flush()).is_err() {
        STDOUT_CLOSED.store(true, Ordering::Relaxed);
    }
}

/// Write one line to stderr, best-effort (see the module doc).
pub fn stderr_line(args: std::fmt::Arguments<'_>) {
    let _ = std::io::stderr().lock().write_fmt(format_args!("{args}\n"));
}

/// `println!` that survives a closed stdout (see [`crate::output`]).
#[macro_export]
macro_rules! outln {
    () => { $crate::output::stdout_line(format_args!("")) };
    ($($arg:tt)*) => { $crate::output::stdout_line(format_args!($($arg)*)) };
}

/// `eprintln!` that survives a closed stderr (see [`crate::output`]).
#[macro_export]
macro_rules! errln {
    () => { $crate::output::stderr_line(format_args!("")) };
    ($($arg:tt)*) => { $crate::output::stderr_line(format_args!($($arg)*)) };
}
