//! Where a run stands, readable from another thread while it trains: a signal handler that
//! reports "interrupted at step N; last checkpoint step-M" before the process exits, or a
//! monitor.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// The step a run has reached and its newest checkpoint (see
/// [`crate::TrainerConfigBuilder::status`]).
#[derive(Debug, Default)]
pub struct RunStatus {
    step: AtomicUsize,
    last_checkpoint: Mutex<Option<PathBuf>>,
}

impl RunStatus {
    /// Optimizer steps finished (a resumed run starts at its checkpoint's).
    pub fn step(&self) -> usize {
        self.step.load(Ordering::Relaxed)
    }

    /// The newest complete checkpoint folder: written by this run, or the one it resumed from.
    pub fn last_checkpoint(&self) -> Option<PathBuf> {
        self.last_checkpoint.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(crate) fn set_step(&self, step: usize) {
        self.step.store(step, Ordering::Relaxed);
    }

    pub(crate) fn set_last_checkpoint(&self, path: PathBuf) {
        *self.last_checkpoint.lock().unwrap_or_else(|e| e.into_inner()) = Some(path);
    }
}
