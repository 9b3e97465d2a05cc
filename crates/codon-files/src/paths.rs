//! Path identity: the folder a file lives in, what a path resolves to, and whether writing an
//! output would touch an input.

use std::path::{Path, PathBuf};

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

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn the_same_file_is_seen_through_spellings_and_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.csv");
        std::fs::write(&input, b"x").unwrap();
        assert_eq!(clash(&input, &dir.path().join(".").join("in.csv")), Some(Clash::Same));
        let link = dir.path().join("link.csv");
        std::os::unix::fs::symlink(&input, &link).unwrap();
        assert_eq!(clash(&input, &link), Some(Clash::Same));
        assert_eq!(clash(&input, &dir.path().join("out.csv")), None);
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
