//! Files written the way users expect: under a temporary name in the destination folder, then
//! renamed in, so a crash never leaves a partial file; and with the permissions an ordinary
//! create gives under the user's umask (tempfile's own default is 0600, which colleagues on a
//! shared server cannot read).
//!
//! Only a regular file is ever replaced. What an output path names decides how it is written
//! ([`OutputTarget`]):
//! - `-`, `/dev/stdout` and `/dev/stderr` are the process's own streams, written through;
//! - a symlink is followed, and its target written atomically (the link stays), as
//!   `sed -i --follow-symlinks` and editors do;
//! - a character or block device, a FIFO, or `/dev/fd/N` is opened and written through
//!   (`--output /dev/null` as root must not replace `/dev/null`);
//! - anything else that is not a regular file (a folder, a socket) is refused.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::error::{Result, VocabError};

/// Mode of an ordinary file create before the umask (Unix).
const FILE_MODE: u32 = 0o666;
/// Mode of an ordinary folder create before the umask (Unix).
const DIR_MODE: u32 = 0o777;

/// A tempfile builder whose file or folder is created with `mode` under the umask, as an
/// ordinary create is (elsewhere, the platform's default).
fn builder(prefix: &str, mode: u32) -> tempfile::Builder<'_, 'static> {
    let mut b = tempfile::Builder::new();
    b.prefix(prefix);
    #[cfg(unix)]
    b.permissions(std::os::unix::fs::PermissionsExt::from_mode(mode));
    #[cfg(not(unix))]
    let _ = mode;
    b
}

/// A temporary file in `dir`, named `<prefix><random>`, created as an ordinary file would be.
pub fn temp_file_in(dir: &Path, prefix: &str) -> std::io::Result<tempfile::NamedTempFile> {
    builder(prefix, FILE_MODE).tempfile_in(dir).map_err(without_temporary_name)
}

/// A temporary folder in `dir`, named `<prefix><random>`, created as an ordinary folder would be.
pub fn temp_dir_in(dir: &Path, prefix: &str) -> std::io::Result<tempfile::TempDir> {
    builder(prefix, DIR_MODE).tempdir_in(dir).map_err(without_temporary_name)
}

/// tempfile's error without its `at path "<temporary name>"`, which means nothing to a
/// user; callers name the folder or the file being written.
fn without_temporary_name(e: std::io::Error) -> std::io::Error {
    let text = e.to_string();
    match text.split_once(" at path \"") {
        Some((cause, _)) => std::io::Error::new(e.kind(), cause.to_string()),
        None => e,
    }
}

/// The temporary sibling of `path` that an atomic write fills: `.<name>.<random>` in its folder.
fn temp_sibling(path: &Path) -> Result<tempfile::NamedTempFile> {
    let dir = parent_dir(path);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    temp_file_in(dir, &format!(".{name}.")).map_err(|e| VocabError::io(dir, e))
}

/// Most symlinks followed from one output path (Linux's own limit, `MAXSYMLINKS`).
const MAX_LINKS: usize = 40;

/// What writing an output path means (see the module doc).
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
                Err(e) => return Err(VocabError::io(&current, e)),
            };
            let kind = meta.file_type();
            if kind.is_symlink() {
                refuse_planted_link(&current, &meta)?;
                let link = std::fs::read_link(&current).map_err(|e| VocabError::io(&current, e))?;
                current = parent_dir(&current).join(link);
            } else if kind.is_file() {
                return Ok(Self::File(current));
            } else if kind.is_dir() {
                return Err(VocabError::io(path, std::io::Error::other("a folder is there; give a file name")));
            } else if is_stream(&kind) {
                return Ok(Self::Stream(current));
            } else {
                return Err(VocabError::io(
                    path,
                    std::io::Error::other("not a regular file, a device or a FIFO: refused"),
                ));
            }
        }
        Err(VocabError::io(path, std::io::Error::other(format!("more than {MAX_LINKS} symlinks: refused"))))
    }

    /// Open a descriptor or stream target for writing, without truncating or replacing it.
    fn open_stream(&self, path: &Path) -> Result<File> {
        let io = |e| VocabError::io(path, e);
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
        return Err(VocabError::io(
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

/// Give `tmp` the permissions of the file it will replace, if there is one (a `chmod 600`
/// output stays private); a new file keeps the ordinary create's.
fn keep_permissions(tmp: &Path, replaced: &Path) -> Result<()> {
    match std::fs::metadata(replaced) {
        Ok(meta) if meta.is_file() => {
            std::fs::set_permissions(tmp, meta.permissions()).map_err(|e| VocabError::io(replaced, e))
        }
        _ => Ok(()),
    }
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

/// Write `path` atomically: `write` fills a buffered temporary file in the same folder, which
/// is flushed, synced and renamed over `path`. On any failure the temporary file is removed
/// and `path` is left as it was. The writer also seeks (for zip archives). A symlink's target is
/// what is replaced; a device, a FIFO or a standard stream is written through (see the module doc).
pub fn write_atomically(path: &Path, write: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<()>) -> Result<()> {
    let io = |e| VocabError::io(path, e);
    let target = OutputTarget::of(path)?;
    let OutputTarget::File(file_path) = &target else {
        let mut out = BufWriter::new(target.open_stream(path)?);
        return write(&mut out).and_then(|()| out.flush()).or_else(|e| closed_pipe_is_fine(&target, e)).map_err(io);
    };
    let tmp = temp_sibling(file_path)?;
    let mut out = BufWriter::new(tmp.as_file().try_clone().map_err(io)?);
    write(&mut out).map_err(io)?;
    let file = out.into_inner().map_err(|e| io(e.into_error()))?;
    file.sync_all().map_err(io)?;
    keep_permissions(tmp.path(), file_path)?;
    tmp.persist(file_path).map_err(|e| io(e.error))?;
    Ok(())
}

/// A descriptor whose reader has gone (`--output - | head`) is no error, as in coreutils.
fn closed_pipe_is_fine(target: &OutputTarget, e: std::io::Error) -> std::io::Result<()> {
    match target {
        OutputTarget::Descriptor(_) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        _ => Err(e),
    }
}

/// [`write_atomically`] for writers that take a path: `write` writes the temporary path given,
/// and may fail with its caller's error type. For a stream target the temporary file lies in the
/// system's temporary folder and is copied through once written.
pub fn write_atomically_at<E: From<VocabError>>(
    path: &Path,
    write: impl FnOnce(&Path) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    let target = OutputTarget::of(path)?;
    let OutputTarget::File(file_path) = &target else {
        let tmp = temp_file_in(&std::env::temp_dir(), ".codon-output.").map_err(|e| VocabError::io(path, e))?;
        write(tmp.path())?;
        let io = |e| VocabError::io(path, e);
        let mut written = File::open(tmp.path()).map_err(io)?;
        let mut out = target.open_stream(path)?;
        let copied = std::io::copy(&mut written, &mut out).and_then(|_| out.flush());
        return Ok(copied.or_else(|e| closed_pipe_is_fine(&target, e)).map_err(io)?);
    };
    let tmp = temp_sibling(file_path)?;
    write(tmp.path())?;
    let io = |e| VocabError::io(path, e);
    File::open(tmp.path()).and_then(|f| f.sync_all()).map_err(io)?;
    keep_permissions(tmp.path(), file_path)?;
    tmp.persist(file_path).map_err(|e| io(e.error))?;
    Ok(())
}

/// [`write_atomically_at`] for writers that replace the file they are given by one of their own
/// (the safetensors crate writes a 0600 file): the mode an ordinary create gets is put back
/// before the rename.
pub fn write_atomically_replaced<E: From<VocabError>>(
    path: &Path,
    write: impl FnOnce(&Path) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    write_atomically_at(path, |tmp| {
        let permissions = tmp.metadata().map_err(|e| VocabError::io(tmp, e))?.permissions();
        write(tmp)?;
        std::fs::set_permissions(tmp, permissions).map_err(|e| VocabError::io(tmp, e).into())
    })
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
        return Err(VocabError::io(dir, std::io::Error::other(format!("the output's folder {reason}"))));
    }
    if path.is_dir() {
        return Err(VocabError::io(path, std::io::Error::other("a folder is there; give a file name")));
    }
    temp_file_in(dir, ".write-check.").map(drop).map_err(|e| VocabError::io(dir, e))
}

/// The folder a file path lives in (`.` for a bare file name).
pub fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// The path a file would have once resolved: symlinks followed and `.`/`..` removed, for a file
/// that does not exist yet as for one that does.
pub fn resolved(path: &Path) -> PathBuf {
    if let Ok(p) = path.canonicalize() {
        return p;
    }
    let dir = parent_dir(path).canonicalize().unwrap_or_else(|_| parent_dir(path).to_path_buf());
    match path.file_name() {
        Some(name) => dir.join(name),
        None => dir,
    }
}

/// Whether writing `output` would replace `input` (the same file, through any spelling or symlink).
pub fn same_file(input: &Path, output: &Path) -> bool {
    resolved(input) == resolved(output)
}

/// How writing the file `output` would touch the input `input`, if it would.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clash {
    /// `output` is `input` (through any spelling or symlink).
    Same,
    /// `input` is a folder (a model, a checkpoint) and `output` lies inside it, where it could
    /// replace one of the folder's files.
    InsideFolder,
}

/// How writing `output` would touch `input`: `None` when it leaves it alone.
pub fn clash(input: &Path, output: &Path) -> Option<Clash> {
    let (input, output) = (resolved(input), resolved(output));
    if input == output {
        Some(Clash::Same)
    } else if input.is_dir() && output.starts_with(&input) {
        Some(Clash::InsideFolder)
    } else {
        None
    }
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
                Some(Clash::Same) => return Err(VocabError::OutputIsInput { output, input }),
                Some(Clash::InsideFolder) => return Err(VocabError::OutputInInputFolder { output, input }),
                None => {}
            }
        }
    }
    Ok(())
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn failed_write_keeps_the_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        std::fs::write(&path, "old").unwrap();
        let err = write_atomically(&path, |w| {
            w.write_all(b"partial")?;
            Err(std::io::Error::other("boom"))
        });
        assert!(err.is_err());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "old");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "temp file cleaned up");
        let err = write_atomically(&dir.path().join("missing").join("out.jsonl"), |_| Ok(())).unwrap_err();
        assert!(!err.to_string().contains(".out.jsonl."), "no temporary name: {err}");
        write_atomically(&path, |w| w.write_all(b"new")).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
    }

    #[test]
    fn links_devices_and_fifos_are_never_replaced() {
        use std::os::unix::fs::FileTypeExt;
        let dir = tempfile::tempdir().unwrap();
        // A symlink: its target is written, the link stays.
        let target = dir.path().join("target.csv");
        std::fs::write(&target, "old").unwrap();
        let link = dir.path().join("link.csv");
        std::os::unix::fs::symlink("target.csv", &link).unwrap();
        write_atomically(&link, |w| w.write_all(b"new")).unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "new");
        // A dangling link: the file it names is created.
        let dangling = dir.path().join("dangling.csv");
        std::os::unix::fs::symlink("made.csv", &dangling).unwrap();
        write_atomically_at(&dangling, |tmp| std::fs::write(tmp, "made").map_err(|e| VocabError::io(tmp, e))).unwrap();
        assert_eq!(std::fs::read_to_string(dir.path().join("made.csv")).unwrap(), "made");
        assert!(std::fs::symlink_metadata(&dangling).unwrap().file_type().is_symlink());
        // A device, through a link to /dev/null: written through, both left as they were.
        let null = dir.path().join("null");
        std::os::unix::fs::symlink("/dev/null", &null).unwrap();
        assert_eq!(OutputTarget::of(&null).unwrap(), OutputTarget::Stream("/dev/null".into()));
        check_output_location(&null).unwrap();
        write_atomically(&null, |w| w.write_all(b"gone")).unwrap();
        write_atomically_at(&null, |tmp| std::fs::write(tmp, "gone").map_err(|e| VocabError::io(tmp, e))).unwrap();
        assert!(std::fs::symlink_metadata(&null).unwrap().file_type().is_symlink());
        assert!(std::fs::metadata("/dev/null").unwrap().file_type().is_char_device());
        // A FIFO: written through to its reader.
        let fifo = dir.path().join("fifo");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
        };
        write_atomically(&fifo, |w| w.write_all(b"through")).unwrap();
        assert_eq!(reader.join().unwrap(), "through");
        assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
        // Standard streams by name; a link loop and a folder are refused.
        assert_eq!(OutputTarget::of(Path::new("-")).unwrap(), OutputTarget::Descriptor(1));
        assert_eq!(OutputTarget::of(Path::new("/dev/stdout")).unwrap(), OutputTarget::Descriptor(1));
        let looped = dir.path().join("loop");
        std::os::unix::fs::symlink("loop", &looped).unwrap();
        assert!(write_atomically(&looped, |w| w.write_all(b"x")).is_err());
        assert!(std::fs::symlink_metadata(&looped).unwrap().file_type().is_symlink());
        assert!(write_atomically(dir.path(), |w| w.write_all(b"x")).is_err());
        assert_eq!(OutputTarget::of(Path::new("/dev/fd/3")).unwrap(), OutputTarget::Descriptor(3));
        assert_eq!(OutputTarget::of(Path::new("/proc/self/fd/12")).unwrap(), OutputTarget::Descriptor(12));
        let to_stdout = dir.path().join("to-stdout");
        std::os::unix::fs::symlink("/dev/stdout", &to_stdout).unwrap();
        assert_eq!(OutputTarget::of(&to_stdout).unwrap(), OutputTarget::Descriptor(1), "caught on the way");
        assert!(!matches!(OutputTarget::of(Path::new("/dev/fd/../null")).unwrap(), OutputTarget::Descriptor(_)));
    }

    #[test]
    fn a_replaced_file_keeps_its_permissions_and_a_dangling_link_into_an_input_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let private = dir.path().join("designs.csv");
        std::fs::write(&private, "old").unwrap();
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).unwrap();
        write_atomically(&private, |w| w.write_all(b"new")).unwrap();
        assert_eq!(private.metadata().unwrap().permissions().mode() & 0o777, 0o600);
        write_atomically_at(&private, |tmp| std::fs::write(tmp, "newer").map_err(|e| VocabError::io(tmp, e))).unwrap();
        assert_eq!(private.metadata().unwrap().permissions().mode() & 0o777, 0o600);
        // A dangling link whose target lies inside an input folder.
        let model = dir.path().join("model");
        std::fs::create_dir(&model).unwrap();
        let out = dir.path().join("out.csv");
        std::os::unix::fs::symlink("model/new.csv", &out).unwrap();
        assert!(refuse_overwriting(&[&model], &[&out]).is_err());
        // Standard output is never an input's file, whatever the folder.
        refuse_overwriting(&[Path::new(".")], &[Path::new("-")]).unwrap();
    }

    #[test]
    fn a_link_another_user_planted_in_a_sticky_shared_folder_is_not_followed() {
        // Only root can make a link owned by another user; elsewhere the rule is not exercised.
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let shared = dir.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let victim = dir.path().join("victim.txt");
        std::fs::write(&victim, "mine").unwrap();
        let planted = shared.join("out.csv");
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        let path = std::ffi::CString::new(planted.to_str().unwrap()).unwrap();
        // SAFETY: a valid C string; lchown changes the link's owner to uid/gid 65534 (nobody).
        assert_eq!(unsafe { libc::lchown(path.as_ptr(), 65534, 65534) }, 0);
        assert!(write_atomically(&planted, |w| w.write_all(b"theirs")).is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "mine");
    }

    #[test]
    fn temp_files_get_ordinary_permissions() {
        let dir = tempfile::tempdir().unwrap();
        let reference = dir.path().join("ordinary");
        std::fs::write(&reference, b"x").unwrap();
        let ordinary = reference.metadata().unwrap().permissions().mode() & 0o777;
        let file = temp_file_in(dir.path(), ".t-").unwrap();
        assert_eq!(file.path().metadata().unwrap().permissions().mode() & 0o777, ordinary);
        let reference_dir = dir.path().join("ordinary-dir");
        std::fs::create_dir(&reference_dir).unwrap();
        let ordinary_dir = reference_dir.metadata().unwrap().permissions().mode() & 0o777;
        let sub = temp_dir_in(dir.path(), ".d-").unwrap();
        assert_eq!(sub.path().metadata().unwrap().permissions().mode() & 0o777, ordinary_dir);
    }

    #[test]
    fn same_file_sees_through_spellings_and_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.csv");
        std::fs::write(&input, b"x").unwrap();
        assert!(same_file(&input, &dir.path().join(".").join("in.csv")));
        let link = dir.path().join("link.csv");
        std::os::unix::fs::symlink(&input, &link).unwrap();
        assert!(same_file(&input, &link));
        assert!(!same_file(&input, &dir.path().join("out.csv")));
    }

    #[test]
    fn a_file_inside_an_input_folder_clashes_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("model");
        std::fs::create_dir(&model).unwrap();
        std::fs::write(model.join("model.safetensors"), b"x").unwrap();
        assert_eq!(clash(&model, &model.join("model.safetensors")), Some(Clash::InsideFolder));
        assert_eq!(clash(&model, &model.join("new.csv")), Some(Clash::InsideFolder));
        assert_eq!(clash(&model, &dir.path().join("model").join("..").join("model")), Some(Clash::Same));
        assert_eq!(clash(&model, &dir.path().join("model-out.csv")), None, "a sibling sharing the prefix");
        let file = model.join("model.safetensors");
        assert_eq!(clash(&file, &model.join("other.safetensors")), None);
    }
}
