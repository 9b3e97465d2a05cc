//! Resumable checkpoints: `step-<N>/` folders holding the model weights (in the model's own
//! format: the transformers layout for BigBird), `optimizer.safetensors` (AdamW moments) and
//! `trainer_state.json` (step, epoch, data position, seed, loss scale). A folder is written
//! under a temporary name and renamed, so a crash never leaves a partial `step-<N>`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Result, TrainError};
use crate::optim::AdamW;
use crate::trainer::{LossScaler, TrainableModel};

const OPTIMIZER_FILE: &str = "optimizer.safetensors";
const STATE_FILE: &str = "trainer_state.json";
const FORMAT_VERSION: u32 = 1;

/// Where training stands.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TrainerState {
    /// Format version of the checkpoint.
    pub format_version: u32,
    /// Optimizer steps taken.
    pub step: usize,
    /// Current epoch.
    pub epoch: usize,
    /// Batches of the current epoch already consumed.
    pub batch_in_epoch: usize,
    /// Base seed (data order, masking and dropout derive from it and the step).
    pub seed: u64,
    /// Total steps of the schedule.
    pub total_steps: usize,
    /// AdamW's own step count (skipped steps do not count).
    pub optimizer_steps: usize,
    /// f16 loss scaler.
    #[serde(default)]
    pub(crate) loss_scaler: Option<LossScaler>,
}

impl TrainerState {
    pub(crate) fn new(seed: u64, total_steps: usize) -> Self {
        Self {
            format_version: FORMAT_VERSION,
            step: 0,
            epoch: 0,
            batch_in_epoch: 0,
            seed,
            total_steps,
            optimizer_steps: 0,
            loss_scaler: None,
        }
    }
}

/// Write `dir/step-<N>` atomically and return its path.
pub(crate) fn save<M: TrainableModel>(
    dir: &Path,
    model: &M,
    optimizer: &AdamW,
    state: &TrainerState,
) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).map_err(|e| TrainError::io(dir, e))?;
    let final_path = dir.join(format!("step-{}", state.step));
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".step-{}.", state.step))
        .tempdir_in(dir)
        .map_err(|e| TrainError::io(dir, e))?;
    model.save(&optimizer.master_weights(), tmp.path())?;
    let opt_path = tmp.path().join(OPTIMIZER_FILE);
    candle_core::safetensors::save(&optimizer.state(), &opt_path)
        .map_err(|e| TrainError::Tensor { op: format!("writing {}", opt_path.display()), source: e })?;
    let mut state = state.clone();
    state.optimizer_steps = optimizer.step_count();
    let json = serde_json::to_string_pretty(&state).unwrap_or_default();
    std::fs::write(tmp.path().join(STATE_FILE), json).map_err(|e| TrainError::io(tmp.path().join(STATE_FILE), e))?;
    if final_path.exists() {
        std::fs::remove_dir_all(&final_path).map_err(|e| TrainError::io(&final_path, e))?;
    }
    let tmp_path = tmp.keep();
    std::fs::rename(&tmp_path, &final_path).map_err(|e| TrainError::io(&final_path, e))?;
    Ok(final_path)
}

/// Restore a checkpoint into the model (through the optimizer) and return its state.
pub(crate) fn load<M: TrainableModel>(
    dir: &Path,
    model: &M,
    optimizer: &mut AdamW,
    seed: u64,
    total_steps: usize,
) -> Result<TrainerState> {
    let bad = |reason: String| TrainError::Checkpoint { path: dir.to_path_buf(), reason };
    if !dir.is_dir() {
        return Err(bad("not a folder (expected a step-<N> folder written by the trainer)".into()));
    }
    let state_text = std::fs::read_to_string(dir.join(STATE_FILE))
        .map_err(|e| bad(format!("cannot read {STATE_FILE}: {e} (incomplete checkpoint?)")))?;
    let state: TrainerState =
        serde_json::from_str(&state_text).map_err(|e| bad(format!("{STATE_FILE} is corrupt: {e}")))?;
    if state.format_version != FORMAT_VERSION {
        return Err(bad(format!("format version {} is not {FORMAT_VERSION}", state.format_version)));
    }
    if state.seed != seed {
        return Err(bad(format!(
            "it was trained with seed {}, this run uses {seed}; resume with the same seed",
            state.seed
        )));
    }
    if state.total_steps != total_steps {
        return Err(bad(format!(
            "its schedule has {} steps, this run {total_steps}: resume with the same data, epochs, batch size and accumulation",
            state.total_steps
        )));
    }
    let opt_path = dir.join(OPTIMIZER_FILE);
    let moments: HashMap<String, candle_core::Tensor> =
        candle_core::safetensors::load(&opt_path, &candle_core::Device::Cpu)
            .map_err(|e| bad(format!("cannot read {OPTIMIZER_FILE}: {e}")))?;
    let weights = model.load(dir).map_err(|e| bad(format!("cannot read the model weights: {e}")))?;
    optimizer.load_state(&moments, &weights, state.optimizer_steps).map_err(bad)?;
    Ok(state)
}
