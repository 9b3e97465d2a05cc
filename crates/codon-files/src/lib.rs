//! `codon-files`: files written the way users expect: under a temporary name in the destination
//! folder, then renamed in, so a crash never leaves a partial file; and with the permissions an
//! ordinary create gives under the user's umask (tempfile's own default is 0600, which colleagues
//! on a shared server cannot read).
//!
//! Only a regular file is ever replaced. What an output path names decides how it is written
//! ([`OutputTarget`]):
//! - `-`, `/dev/stdout` and `/dev/stderr` are the process's own streams, written through;
//! - a symlink is followed, and its target written atomically (the link stays), as
//!   `sed -i --follow-symlinks` and editors do;
//! - a character or block device, a FIFO, or `/dev/fd/N` is opened and written through
//!   (`--output /dev/null` as root must not replace `/dev/null`);
//! - anything else that is not a regular file (a folder, a socket) is refused.
//!
//! And no output is written over an input, or into an input folder ([`refuse_overwriting`]).
//!
//! ```
//! use std::io::Write;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("genes.csv");
//! codon_files::write_atomically(&path, |w| w.write_all(b"protein,dna\n"))?;
//! assert_eq!(std::fs::read_to_string(&path)?, "protein,dna\n");
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

mod atomic;
mod error;
mod paths;
mod target;
mod temp;

pub use atomic::{write_atomically, write_atomically_at, write_atomically_replaced};
pub use error::{FilesError, Result};
pub use paths::{clash, parent_dir, resolved, Clash};
pub use target::{check_output_location, refuse_overwriting, OutputTarget};
pub use temp::{temp_dir_in, temp_file_in};
