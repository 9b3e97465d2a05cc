//! The one atomic write, for writers of a stream and writers that take a path.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use crate::error::{FilesError, Result};
use crate::paths::parent_dir;
use crate::target::OutputTarget;
use crate::temp::temp_file_in;

/// The temporary sibling of `path` that an atomic write fills: `.<name>.<random>` in its folder.
fn temp_sibling(path: &Path) -> Result<tempfile::NamedTempFile> {
    let dir = parent_dir(path);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    temp_file_in(dir, &format!(".{name}.")).map_err(|e| FilesError::io(dir, e))
}

/// Give `tmp` the permissions of the file it will replace, if there is one (a `chmod 600`
/// output stays private); a new file keeps the ordinary create's.
fn keep_permissions(tmp: &Path, replaced: &Path) -> Result<()> {
    match std::fs::metadata(replaced) {
        Ok(meta) if meta.is_file() => {
            std::fs::set_permissions(tmp, meta.permissions()).map_err(|e| FilesError::io(replaced, e))
        }
        _ => Ok(()),
    }
}

/// Write `path` atomically: `write` fills a buffered temporary file in the same folder, which
/// is flushed, synced and renamed over `path`. On any failure the temporary file is removed
/// and `path` is left as it was. The writer also seeks (for zip archives). A symlink's target is
/// what is replaced; a device, a FIFO or a standard stream is written through (see the crate doc).
pub fn write_atomically(path: &Path, write: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<()>) -> Result<()> {
    let io = |e| FilesError::io(path, e);
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
pub fn write_atomically_at<E: From<FilesError>>(
    path: &Path,
    write: impl FnOnce(&Path) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    let target = OutputTarget::of(path)?;
    let OutputTarget::File(file_path) = &target else {
        let tmp = temp_file_in(&std::env::temp_dir(), ".codon-output.").map_err(|e| FilesError::io(path, e))?;
        write(tmp.path())?;
        let io = |e| FilesError::io(path, e);
        let mut written = File::open(tmp.path()).map_err(io)?;
        let mut out = target.open_stream(path)?;
        let copied = std::io::copy(&mut written, &mut out).and_then(|_| out.flush());
        return Ok(copied.or_else(|e| closed_pipe_is_fine(&target, e)).map_err(io)?);
    };
    let tmp = temp_sibling(file_path)?;
    write(tmp.path())?;
    let io = |e| FilesError::io(path, e);
    File::open(tmp.path()).and_then(|f| f.sync_all()).map_err(io)?;
    keep_permissions(tmp.path(), file_path)?;
    tmp.persist(file_path).map_err(|e| io(e.error))?;
    Ok(())
}

/// [`write_atomically_at`] for writers that replace the file they are given by one of their own
/// (the safetensors crate writes a 0600 file): the mode an ordinary create gets is put back
/// before the rename.
pub fn write_atomically_replaced<E: From<FilesError>>(
    path: &Path,
    write: impl FnOnce(&Path) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    write_atomically_at(path, |tmp| {
        let permissions = tmp.metadata().map_err(|e| FilesError::io(tmp, e))?.permissions();
        write(tmp)?;
        std::fs::set_permissions(tmp, permissions).map_err(|e| FilesError::io(tmp, e).into())
    })
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use crate::{check_output_location, refuse_overwriting};
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
        write_atomically_at(&dangling, |tmp| std::fs::write(tmp, "made").map_err(|e| FilesError::io(tmp, e))).unwrap();
        assert_eq!(std::fs::read_to_string(dir.path().join("made.csv")).unwrap(), "made");
        assert!(std::fs::symlink_metadata(&dangling).unwrap().file_type().is_symlink());
        // A device, through a link to /dev/null: written through, both left as they were.
        let null = dir.path().join("null");
        std::os::unix::fs::symlink("/dev/null", &null).unwrap();
        assert_eq!(OutputTarget::of(&null).unwrap(), OutputTarget::Stream("/dev/null".into()));
        check_output_location(&null).unwrap();
        write_atomically(&null, |w| w.write_all(b"gone")).unwrap();
        write_atomically_at(&null, |tmp| std::fs::write(tmp, "gone").map_err(|e| FilesError::io(tmp, e))).unwrap();
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
        write_atomically_at(&private, |tmp| std::fs::write(tmp, "newer").map_err(|e| FilesError::io(tmp, e))).unwrap();
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
}
