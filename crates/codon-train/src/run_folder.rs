//! Whose checkpoints a folder holds, and the checks made before the first step. Each
//! `step-<N>` records its run's identity (see [`RunIdentity`]); a run writes only into a folder
//! that holds its own steps (or the steps it resumes from), removes another run's steps only
//! when allowed to overwrite, and prunes only its own. Before training starts, every output is
//! checked against the run's inputs, and the folder for being writable with room for a
//! checkpoint, so a run never fails at its first save hours in.

use std::path::{Path, PathBuf};

use crate::config::{RunIdentity, TrainerConfig};
use crate::error::{Result, TrainError};
use crate::step_folder::{recorded_identity, step_folders};

/// The identities this run counts as its own: its own, and that of the step it resumes from
/// (`None` where that step predates identities: its run's other steps record none either).
pub(crate) struct OwnRuns {
    identities: Vec<Option<RunIdentity>>,
}

impl OwnRuns {
    pub(crate) fn new(identity: &RunIdentity, resume: Option<&Path>) -> Self {
        let mut identities = vec![Some(identity.clone())];
        identities.extend(resume.map(recorded_identity));
        Self { identities }
    }

    /// Whether `step` (a `step-<N>` folder) is this run's.
    pub(crate) fn owns(&self, step: &Path) -> bool {
        self.identities.contains(&recorded_identity(step))
    }
}

/// Refuse outputs that would replace an input or write inside an input folder: the checkpoint
/// folder, the state-dict file and the metrics file, against [`TrainerConfig`]'s inputs.
pub(crate) fn refuse_writing_inputs(c: &TrainerConfig) -> Result<()> {
    let mut outputs: Vec<(&str, PathBuf)> = Vec::new();
    if let Some(dir) = &c.checkpoint_dir {
        outputs.push(("the checkpoint folder", dir.clone()));
        if let Some(name) = &c.checkpoint_filename {
            outputs.push(("the state-dict file", dir.join(name)));
        }
    }
    if let Some(path) = &c.metrics_path {
        outputs.push(("the metrics file", path.clone()));
    }
    for (what, output) in outputs {
        for input in &c.inputs {
            if codon_files::clash(input, &output).is_some() {
                return Err(TrainError::OutputIsInput { what: what.to_string(), output, input: input.clone() });
            }
        }
    }
    Ok(())
}

/// Make `dir` this run's: refuse another run's steps (and a state-dict file no step of this run
/// wrote) unless `overwrite`, which removes them first, never an input. Returns what was removed.
pub(crate) fn claim(c: &TrainerConfig, dir: &Path, own: &OwnRuns) -> Result<Vec<String>> {
    // One read of the folder and of each step's state file.
    let (mine, foreign): (Vec<PathBuf>, Vec<PathBuf>) =
        step_folders(dir).into_iter().map(|(_, path)| path).partition(|path| own.owns(path));
    let has_own = !mine.is_empty();
    let state_dict = c.checkpoint_filename.as_ref().map(|name| dir.join(name)).filter(|p| p.exists() && !has_own);
    if foreign.is_empty() && state_dict.is_none() {
        return Ok(Vec::new());
    }
    let mut names: Vec<String> = foreign.iter().map(|p| file_name(p)).collect();
    names.extend(state_dict.iter().map(|p| file_name(p)));
    if !c.overwrite {
        return Err(TrainError::ForeignCheckpoints { dir: dir.to_path_buf(), names });
    }
    let mut removed = Vec::new();
    for path in foreign.iter().chain(state_dict.iter()) {
        if let Some(input) = c.inputs.iter().find(|input| codon_files::clash(path, input).is_some()) {
            return Err(TrainError::OverwriteWouldRemoveInput { path: path.clone(), input: input.clone() });
        }
        let result = if path.is_dir() { std::fs::remove_dir_all(path) } else { std::fs::remove_file(path) };
        result.map_err(|e| TrainError::io(path, e))?;
        removed.push(format!("removed another run's {}", path.display()));
    }
    Ok(removed)
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned())
}

/// Hold `dir` for this run until the handle drops: an advisory lock on the folder itself, so
/// nothing is written into it, and a second training given the same folder is refused instead
/// of mixing its steps with this run's. The lock goes with the process, however it ends.
pub(crate) fn lock(dir: &Path) -> Result<std::fs::File> {
    let unusable = |reason: String| TrainError::CheckpointFolder { dir: dir.to_path_buf(), reason };
    std::fs::create_dir_all(dir).map_err(|e| unusable(format!("cannot be created: {e}")))?;
    let folder = std::fs::File::open(dir).map_err(|e| unusable(format!("cannot be opened: {e}")))?;
    match folder.try_lock() {
        Ok(()) => Ok(folder),
        Err(std::fs::TryLockError::WouldBlock) => Err(unusable(
            "is in use by another training (it holds the folder's lock): give each run its own checkpoint folder"
                .into(),
        )),
        Err(std::fs::TryLockError::Error(e)) => Err(unusable(format!("cannot be locked: {e}"))),
    }
}

/// Check that `dir` can take a checkpoint of about `bytes` bytes: it is created if need be, a
/// file can be written in it, and (where the platform says) the disk has room.
pub(crate) fn check_writable(dir: &Path, bytes: u64) -> Result<()> {
    let unusable = |reason: String| TrainError::CheckpointFolder { dir: dir.to_path_buf(), reason };
    std::fs::create_dir_all(dir).map_err(|e| unusable(format!("cannot be created: {e}")))?;
    let probe =
        codon_files::temp_file_in(dir, ".write-check.").map_err(|e| unusable(format!("cannot be written: {e}")))?;
    drop(probe);
    if let Some(free) = free_bytes(dir) {
        if free < bytes {
            return Err(unusable(format!(
                "{} MB free, and one checkpoint takes about {} MB",
                free / 1_000_000,
                bytes.div_ceil(1_000_000)
            )));
        }
    }
    Ok(())
}

/// Bytes available to this user on the filesystem of `dir`.
#[cfg(unix)]
fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a NUL-terminated string and `stat` a properly sized out-parameter.
    let rc = unsafe { libc::statvfs(path.as_ptr(), &mut stat) };
    (rc == 0).then(|| (stat.f_bavail as u64).saturating_mul(stat.f_frsize as u64))
}

#[cfg(not(unix))]
fn free_bytes(_dir: &Path) -> Option<u64> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step_folder::STATE_FILE;

    fn step(dir: &Path, n: usize, run: Option<&RunIdentity>) -> PathBuf {
        let path = dir.join(format!("step-{n}"));
        std::fs::create_dir_all(&path).unwrap();
        let state = serde_json::json!({ "step": n, "run": run });
        std::fs::write(path.join(STATE_FILE), state.to_string()).unwrap();
        path
    }

    fn identity(seed: &str) -> RunIdentity {
        RunIdentity::from([("seed".to_string(), seed.to_string())])
    }

    #[test]
    fn a_run_owns_its_steps_and_those_it_resumes_from() {
        let dir = tempfile::tempdir().unwrap();
        let mine = step(dir.path(), 6, Some(&identity("1")));
        let earlier = step(dir.path(), 3, Some(&identity("0")));
        let unrecorded = step(dir.path(), 1, None);
        let own = OwnRuns::new(&identity("1"), None);
        assert!(own.owns(&mine) && !own.owns(&earlier) && !own.owns(&unrecorded));
        let resumed = OwnRuns::new(&identity("1"), Some(&earlier));
        assert!(resumed.owns(&mine) && resumed.owns(&earlier) && !resumed.owns(&unrecorded));
        let older = step(dir.path(), 2, None);
        let resumed_older = OwnRuns::new(&identity("1"), Some(&older));
        assert!(resumed_older.owns(&older) && resumed_older.owns(&unrecorded), "an older run resumed owns its steps");
        assert!(!resumed_older.owns(&earlier));
    }

    #[test]
    fn another_runs_steps_are_refused_or_removed_but_never_an_input() {
        let dir = tempfile::tempdir().unwrap();
        let theirs = step(dir.path(), 6, Some(&identity("0")));
        let config = |overwrite: bool, inputs: Vec<PathBuf>| {
            let mut c = TrainerConfig::builder().overwrite(overwrite).build().unwrap();
            c.inputs = inputs;
            c
        };
        let own = OwnRuns::new(&identity("1"), None);
        let err = claim(&config(false, vec![]), dir.path(), &own).unwrap_err().to_string();
        assert!(err.contains("step-6") && err.contains("another run"), "{err}");
        let err = claim(&config(true, vec![theirs.join("model.safetensors")]), dir.path(), &own).unwrap_err();
        assert!(err.to_string().contains("model.safetensors"), "{err}");
        assert!(theirs.exists());
        let removed = claim(&config(true, vec![]), dir.path(), &own).unwrap();
        assert_eq!(removed.len(), 1);
        assert!(!theirs.exists());
    }

    #[test]
    fn a_folder_another_training_holds_is_refused_until_it_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let ck = dir.path().join("ck");
        let held = lock(&ck).unwrap();
        let err = lock(&ck).unwrap_err().to_string();
        assert!(err.contains("in use by another training"), "{err}");
        assert_eq!(std::fs::read_dir(&ck).unwrap().count(), 0, "the lock writes nothing into the folder");
        drop(held);
        lock(&ck).unwrap();
    }

    #[test]
    fn a_folder_without_room_or_that_cannot_exist_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        check_writable(&dir.path().join("ck"), 1_000).unwrap();
        let err = check_writable(&dir.path().join("ck"), u64::MAX).unwrap_err().to_string();
        assert!(err.contains("MB free, and one checkpoint takes about"), "{err}");
        std::fs::write(dir.path().join("file"), "").unwrap();
        let err = check_writable(&dir.path().join("file").join("ck"), 1).unwrap_err().to_string();
        assert!(err.contains("cannot be created"), "{err}");
        let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("ck")).unwrap().collect();
        assert!(leftovers.is_empty(), "the write check leaves nothing behind");
    }
}
