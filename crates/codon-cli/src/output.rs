//! Printing that a closed pipe never turns into a panic, and a full disk never turns into a
//! silently short file. `println!` panics when stdout is a pipe whose reader has gone
//! (`predict --list-organisms | head -5`), and `eprintln!` likewise for stderr. The programs print
//! through [`outln!`](crate::outln) and [`errln!`](crate::errln) instead:
//! - a closed pipe (EPIPE) is quiet, as in coreutils: output is dropped, the program goes on (its
//!   files are the work), and a listing can ask [`stdout_closed`] to stop early;
//! - any other write error on stdout (a full disk, `/dev/full`) is kept, stdout is written no more,
//!   and [`crate::run_main`] reports it as one line and exit status 1 once the program returns.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);
/// The first write error on stdout that was not a closed pipe: the OS's error code where there is
/// one (its message is the one users know), else the kind.
static STDOUT_FAILURE: Mutex<Option<(std::io::ErrorKind, Option<i32>)>> = Mutex::new(None);

/// Whether stdout takes no more lines: its reader is gone, or a write failed. A listing stops
/// there, as `ls | head` does.
pub fn stdout_closed() -> bool {
    STDOUT_CLOSED.load(Ordering::Relaxed)
}

/// Write one line to stdout (see the module doc for what a failure does).
pub fn stdout_line(args: std::fmt::Arguments<'_>) {
    if stdout_closed() {
        return;
    }
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(format_args!("{args}\n")).and_then(|_| out.flush()) {
        stdout_failed(e);
    }
}

/// Note a failed write to stdout: a closed pipe is no error; anything else is kept for
/// [`stdout_error`].
fn stdout_failed(e: std::io::Error) {
    STDOUT_CLOSED.store(true, Ordering::Relaxed);
    if e.kind() != std::io::ErrorKind::BrokenPipe {
        STDOUT_FAILURE.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert((e.kind(), e.raw_os_error()));
    }
}

/// Flush stdout, then the write error it met, if any other than a closed pipe: what a program
/// reports before it exits.
pub fn stdout_error() -> Option<std::io::Error> {
    if !stdout_closed() {
        if let Err(e) = std::io::stdout().lock().flush() {
            stdout_failed(e);
        }
    }
    let kind = *STDOUT_FAILURE.lock().unwrap_or_else(|p| p.into_inner());
    kind.map(|(kind, code)| code.map_or_else(|| std::io::Error::from(kind), std::io::Error::from_raw_os_error))
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

/// Write a command's closing report (`wrote FILE`): to stdout, unless the command's `output` is
/// stdout itself (`--output -`), whose data it must not mix into.
pub fn report_line(output: &std::path::Path, args: std::fmt::Arguments<'_>) {
    use codon_files::OutputTarget;
    if matches!(OutputTarget::of(output), Ok(OutputTarget::Descriptor(1))) {
        stderr_line(args);
    } else {
        stdout_line(args);
    }
}

/// `outln!` for a closing report about the file `output` (see [`report_line`]).
#[macro_export]
macro_rules! reportln {
    ($output:expr, $($arg:tt)*) => { $crate::output::report_line($output, format_args!($($arg)*)) };
}
