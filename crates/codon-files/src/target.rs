//! What an output path names ([`OutputTarget`]), and whether it can be written.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::{FilesError, Result};
use crate::paths::{clash, parent_dir, Clash};
use crate::temp::temp_file_in;

/// Most symlinks followed from one output path (Linux's own limit, `MAXSYMLINKS`).
const MAX_LINKS: usize = 40;

/// What writing an output path means (see the crate doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputTarget {
    /// A regular file, or a new one: written under a temporary name beside it, then renamed in.
    /// For a symlink this is the file the link leads to.
    File(PathBuf),
    /// A descriptor this process holds, written through a duplicate of it: `-` and
    /// `/dev/stdout` (1), `/dev/stderr` (2), `/dev/fd/N` and `/proc/self/fd/N` (N), so that a
    /// shell's `>>` or `3>` keeps its meaning.
    Descriptor(i32),
    /// A device or a FIFO: opened and written through.
    Stream(PathBuf),
}

/// The descriptor a path names, if it is one of the spellings [`OutputTarget::Descriptor`] lists.
fn descriptor_of(path: &Path) -> Option<i32> {
    match path.to_str()? {
        "-" | "/dev/stdout" => Some(1),
        "/dev/stderr" => Some(2),
        p => {
            let n = p.strip_prefix("/dev/fd/").or_else(|| p.strip_prefix("/proc/self/fd/"))?;
            (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())).then(|| n.parse().ok()).flatten()
        }
    }
}

impl OutputTarget {
    /// What `path` names now; a folder, a socket, a symlink loop, or a symlink that another user
    /// left in a shared sticky folder (such as /tmp) is an error.
    pub fn of(path: &Path) -> Result<Self> {
        let mut current = path.to_path_buf();
        for _ in 0..MAX_LINKS {
            if let Some(fd) = descriptor_of(&current) {
                return Ok(Self::Descriptor(fd));
            }
            let meta = match std::fs::symlink_metadata(&current) {
                Ok(meta) => meta,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::File(current)),
                Err(e) => return Err(FilesError::io(&current, e)),
            };
            let kind = meta.file_type();
            if kind.is_symlink() {
                refuse_planted_link(&current, &meta)?;
                let link = std::fs::read_link(&current).map_err(|e| FilesError::io(&current, e))?;
                current = parent_dir(&current).join(link);
            } else if kind.is_file() {
                return Ok(Self::File(current));
            } else if kind.is_dir() {
                return Err(FilesError::io(path, std::io::Error::other("a folder is there; give a file name")));
            } else if is_stream(&kind) {
                return Ok(Self::Stream(current));
            } else {
                return Err(FilesError::io(
                    path,
                    std::io::Error::other("not a regular file, a device or a FIFO: refused"),
                ));
            }
        }
        Err(FilesError::io(path, std::io::Error::other(format!("more than {MAX_LINKS} symlinks: refused"))))
    }

    /// Open a descriptor or stream target for writing, without truncating or replacing it.
    pub(crate) fn open_stream(&self, path: &Path) -> Result<File> {
        let io = |e| FilesError::io(path, e);
        match self {
            Self::Descriptor(fd) => duplicate(*fd).map_err(io),
            Self::Stream(p) => std::fs::OpenOptions::new().write(true).open(p).map_err(io),
            Self::File(_) => Err(io(std::io::Error::other("a regular file is written atomically"))),
        }
    }
}

/// The kernel's `protected_symlinks` rule, which following a link by hand would bypass: a link
/// in a sticky, world-writable folder is followed only when it is ours or the folder owner's.
#[cfg(unix)]
fn refuse_planted_link(link: &Path, meta: &std::fs::Metadata) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let Ok(dir) = std::fs::metadata(parent_dir(link)) else { return Ok(()) };
    let shared = dir.mode() & 0o1002 == 0o1002;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if shared && meta.uid() != me && meta.uid() != dir.uid() {
        return Err(FilesError::io(
            link,
            std::io::Error::other(
                "a symlink another user left in a shared folder: refused (as protected_symlinks does)",
            ),
        ));
    }
    Ok(())
}

#[cfg(not(unix))]
fn refuse_planted_link(_: &Path, _: &std::fs::Metadata) -> Result<()> {
    Ok(())
}

/// A duplicate of descriptor `fd`, as a file (close-on-exec).
#[cfg(unix)]
fn duplicate(fd: i32) -> std::io::Result<File> {
    use std::os::fd::FromRawFd;
    // SAFETY: fcntl(F_DUPFD_CLOEXEC) reads no memory; an fd that is not open gives EBADF.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if new < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `new` is a descriptor this process just opened and nothing else owns.
    Ok(unsafe { File::from_raw_fd(new) })
}

#[cfg(not(unix))]
fn duplicate(_: i32) -> std::io::Result<File> {
    Err(std::io::Error::other("descriptors by number are a Unix feature"))
}

/// A character or block device, or a FIFO: what is written through rather than replaced.
#[cfg(unix)]
fn is_stream(kind: &std::fs::FileType) -> bool {
    use std::os::unix::fs::FileTypeExt;
    kind.is_char_device() || kind.is_block_device() || kind.is_fifo()
}

#[cfg(not(unix))]
fn is_stream(_: &std::fs::FileType) -> bool {
    false
}

/// Check, before any work, that the file `path` can be written: its folder exists and takes a
/// new file (a long computation then never ends in "No such file or directory").
pub fn check_output_location(path: &Path) -> Result<()> {
    let path = match OutputTarget::of(path)? {
        OutputTarget::File(file) => file,
        OutputTarget::Descriptor(_) | OutputTarget::Stream(_) => return Ok(()),
    };
    let path = path.as_path();
    let dir = parent_dir(path);
    if !dir.is_dir() {
        let reason = if dir.exists() { "is not a folder" } else { "does not exist" };
        return Err(FilesError::io(dir, std::io::Error::other(format!("the output's folder {reason}"))));
    }
    if path.is_dir() {
        return Err(FilesError::io(path, std::io::Error::other("a folder is there; give a file name")));
    }
    temp_file_in(dir, ".write-check.").map(drop).map_err(|e| FilesError::io(dir, e))
}

/// Refuse, before anything is read, to write any of `outputs` over one of `inputs`, or into an
/// input folder (a model's, a checkpoint's), whose files it could replace: paths are compared
/// resolved, so `./x`, `dir/../x` and a symlink to the input are the input too.
pub fn refuse_overwriting(inputs: &[&Path], outputs: &[&Path]) -> Result<()> {
    for output in outputs {
        // What would be written: a symlink's target (even a dangling one's); a stream, nothing.
        let OutputTarget::File(written) = OutputTarget::of(output)? else { continue };
        for input in inputs {
            let (output, input) = (output.to_path_buf(), input.to_path_buf());
            match clash(&input, &written) {
                Some(Clash::Same) => return Err(FilesError::OutputIsInput { output, input }),
                Some(Clash::InsideFolder) => return Err(FilesError::OutputInInputFolder { output, input }),
                None => {}
            }
        }
    }
    Ok(())
}
