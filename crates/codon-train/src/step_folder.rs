//! What a `step-<N>` checkpoint folder is called and holds: the one place its name and its state
//! file are written, read by the checkpoint code and by the checks of whose steps a folder holds.

use std::path::{Path, PathBuf};

use crate::config::RunIdentity;

/// The trainer state file of a step folder (JSON).
pub(crate) const STATE_FILE: &str = "trainer_state.json";

/// The step folders of `dir`: `(N, path)` for each `step-<N>`, in step order.
pub(crate) fn step_folders(dir: &Path) -> Vec<(usize, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut steps: Vec<(usize, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let step = e.file_name().to_str()?.strip_prefix("step-")?.parse::<usize>().ok()?;
            e.path().is_dir().then(|| (step, e.path()))
        })
        .collect();
    steps.sort();
    steps
}

/// The identity a step folder records (`None`: unreadable, or written before identities were).
pub(crate) fn recorded_identity(step: &Path) -> Option<RunIdentity> {
    #[derive(serde::Deserialize)]
    struct Recorded {
        run: Option<RunIdentity>,
    }
    let text = std::fs::read_to_string(step.join(STATE_FILE)).ok()?;
    serde_json::from_str::<Recorded>(&text).ok()?.run
}
