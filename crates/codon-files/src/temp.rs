//! Temporary files and folders created as ordinary ones are: with the permissions an ordinary
//! create gets under the umask, not tempfile's 0600.

use std::path::Path;

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

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

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
}
