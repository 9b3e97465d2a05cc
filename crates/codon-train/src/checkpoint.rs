//! Resumable checkpoints: `step-<N>/` folders holding the model weights (in the model's own
//! format: the transformers layout for BigBird), `optimizer.safetensors` (AdamW moments) and
//! `trainer_state.json` (step, epoch, data position, seed, loss scale). A folder is written
//! under a temporary name and renamed, so a crash never leaves a partial `step-<N>`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::{RunIdentity, TrainerConfig};
use crate::error::{Result, TrainError};
use crate::model::Checkpointable;
use crate::optim::AdamW;
use crate::precision::LossScaler;
use crate::run_folder::OwnRuns;
use crate::step_folder::{step_folders, STATE_FILE};

const OPTIMIZER_FILE: &str = "optimizer.safetensors";
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
    /// Peak learning rate of the run (absent in checkpoints of earlier versions).
    #[serde(default)]
    pub learning_rate: Option<f64>,
    /// Warm-up fraction of the run.
    #[serde(default)]
    pub warmup_fraction: Option<f64>,
    /// Records per batch, where the data source has a fixed batch size.
    #[serde(default)]
    pub batch_size: Option<usize>,
    /// Micro-batches per optimizer step.
    #[serde(default)]
    pub accumulate_grad_batches: Option<usize>,
    /// The run's identity (absent in checkpoints of earlier versions): whose step this is.
    #[serde(default)]
    pub run: Option<RunIdentity>,
}

impl TrainerState {
    pub(crate) fn new(config: &TrainerConfig, total_steps: usize, batch_size: Option<usize>) -> Self {
        Self {
            format_version: FORMAT_VERSION,
            step: 0,
            epoch: 0,
            batch_in_epoch: 0,
            seed: config.seed,
            total_steps,
            optimizer_steps: 0,
            loss_scaler: None,
            learning_rate: Some(config.learning_rate),
            warmup_fraction: Some(config.warmup_fraction),
            batch_size,
            accumulate_grad_batches: Some(config.accumulate_grad_batches),
            run: Some(run_identity(config, total_steps, batch_size)),
        }
    }

    /// Why this run (`self`, fresh) cannot continue the checkpointed one, if it cannot: every
    /// setting that shapes the schedule or the data order must be the same.
    fn mismatch(&self, saved: &TrainerState) -> Option<String> {
        fn differs<T: PartialEq + std::fmt::Display>(what: &str, saved: Option<T>, now: Option<T>) -> Option<String> {
            match (saved, now) {
                (Some(s), Some(n)) if s != n => {
                    Some(format!("it was trained with {what} {s}, this run uses {n}; resume with the same {what}"))
                }
                _ => None,
            }
        }
        differs("seed", Some(saved.seed), Some(self.seed))
            .or_else(|| differs("learning rate", saved.learning_rate, self.learning_rate))
            .or_else(|| differs("warm-up fraction", saved.warmup_fraction, self.warmup_fraction))
            .or_else(|| differs("batch size", saved.batch_size, self.batch_size))
            .or_else(|| differs("gradient accumulation", saved.accumulate_grad_batches, self.accumulate_grad_batches))
            .or_else(|| {
                (saved.total_steps != self.total_steps).then(|| {
                    format!(
                        "its schedule has {} steps, this run {}: resume with the same data, epochs, batch size and accumulation",
                        saved.total_steps, self.total_steps
                    )
                })
            })
    }

    /// What in a saved state no run could have written, which would otherwise show only as a
    /// diverged run (AdamW's bias correction at step 0 divides by zero).
    fn inconsistency(&self) -> Option<String> {
        if self.optimizer_steps > self.step {
            return Some(format!("it counts {} optimizer steps in {} steps", self.optimizer_steps, self.step));
        }
        match self.loss_scaler {
            Some(s) if !s.is_reachable() => Some(format!(
                "its loss scaler (scale {}, {} good steps) is not one training leaves",
                s.scale, s.good_steps
            )),
            _ => None,
        }
    }
}

/// The run's identity: the caller's description and the settings that shape the schedule.
fn run_identity(config: &TrainerConfig, total_steps: usize, batch_size: Option<usize>) -> RunIdentity {
    let mut run = config.run_description.clone();
    let settings = [
        ("seed", config.seed.to_string()),
        ("learning_rate", format!("{:e}", config.learning_rate)),
        ("warmup_fraction", format!("{}", config.warmup_fraction)),
        ("batch_size", batch_size.map_or_else(|| "variable".into(), |b| b.to_string())),
        ("accumulate_grad_batches", config.accumulate_grad_batches.to_string()),
        ("total_steps", total_steps.to_string()),
    ];
    run.extend(settings.into_iter().map(|(k, v)| (k.to_string(), v)));
    run
}

/// Write `dir/step-<N>` atomically and return its path. An existing `step-<N>` is renamed aside
/// first and deleted only once the new one is in place, so a kill at any point leaves one
/// complete copy (see [`clean_leftovers`]). With `require_finite`, weights with a NaN or an
/// infinity are refused.
pub(crate) fn save(
    dir: &Path,
    model: &dyn Checkpointable,
    optimizer: &AdamW,
    state: &TrainerState,
    require_finite: bool,
) -> Result<PathBuf> {
    let weights = optimizer.master_weights()?;
    if require_finite {
        refuse_non_finite(&weights, state.step)?;
    }
    std::fs::create_dir_all(dir).map_err(|e| TrainError::io(dir, e))?;
    let final_path = dir.join(format!("step-{}", state.step));
    let tmp = codon_files::temp_dir_in(dir, &format!(".step-{}.", state.step)).map_err(|e| TrainError::io(dir, e))?;
    model.save(&weights, tmp.path())?;
    let optimizer_file = tmp.path().join(OPTIMIZER_FILE);
    codon_files::write_atomically_replaced(&optimizer_file, |file| -> Result<()> {
        Ok(candle_core::safetensors::save(&optimizer.state()?, file)?)
    })?;
    let mut state = state.clone();
    state.optimizer_steps = optimizer.step_count();
    let json = serde_json::to_string_pretty(&state).unwrap_or_default();
    std::fs::write(tmp.path().join(STATE_FILE), json).map_err(|e| TrainError::io(tmp.path().join(STATE_FILE), e))?;
    let tmp_path = tmp.keep();
    let aside = aside_path(dir, state.step);
    let replacing = final_path.exists();
    if replacing {
        if aside.exists() {
            std::fs::remove_dir_all(&aside).map_err(|e| TrainError::io(&aside, e))?;
        }
        std::fs::rename(&final_path, &aside).map_err(|e| TrainError::io(&final_path, e))?;
    }
    std::fs::rename(&tmp_path, &final_path).map_err(|e| TrainError::io(&final_path, e))?;
    if replacing {
        std::fs::remove_dir_all(&aside).map_err(|e| TrainError::io(&aside, e))?;
    }
    Ok(final_path)
}

/// Refuse weights with a NaN or an infinity.
pub(crate) fn refuse_non_finite(weights: &[(String, candle_core::Tensor)], step: usize) -> Result<()> {
    let mut parameters = Vec::new();
    for (name, w) in weights {
        if !codon_ops::optim::all_finite(w)? {
            parameters.push(name.clone());
        }
    }
    if parameters.is_empty() {
        Ok(())
    } else {
        Err(TrainError::NonFiniteWeights { step, parameters })
    }
}

/// Where a `step-<N>` being replaced waits until its successor is in place.
fn aside_path(dir: &Path, step: usize) -> PathBuf {
    dir.join(format!(".step-{step}.replaced"))
}

/// Remove all but the newest `keep` of this run's `step-<N>` folders of `dir` (another run's,
/// kept by `--overwrite`'s absence, are never touched). Each is first renamed to a partial-step
/// name, so a kill midway leaves a leftover for [`clean_leftovers`], never a half-deleted `step-<N>`.
pub(crate) fn prune(dir: &Path, keep: usize, own: &OwnRuns) -> Result<()> {
    let steps: Vec<(usize, PathBuf)> = step_folders(dir).into_iter().filter(|(_, path)| own.owns(path)).collect();
    let excess = steps.len().saturating_sub(keep);
    for (step, path) in steps.into_iter().take(excess) {
        let doomed = dir.join(format!(".step-{step}.pruned"));
        std::fs::rename(&path, &doomed).map_err(|e| TrainError::io(&path, e))?;
        std::fs::remove_dir_all(&doomed).map_err(|e| TrainError::io(&doomed, e))?;
    }
    Ok(())
}

/// Tidy what an interrupted save left in `dir`, matching only our own names: a step folder set
/// aside goes back in place when its replacement never arrived (else it is deleted), and
/// partial `.step-<N>.*` folders and the atomic write's `.<state_dict>.*` files (see
/// [`codon_files::write_atomically`]) are deleted. Returns what was done.
pub(crate) fn clean_leftovers(dir: &Path, state_dict: Option<&str>) -> Result<Vec<String>> {
    let partial_state_dict = state_dict.map(|name| format!(".{name}."));
    let Ok(entries) = std::fs::read_dir(dir) else { return Ok(Vec::new()) };
    let mut done = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| TrainError::io(dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let partial_step = name
            .strip_prefix(".step-")
            .and_then(|rest| rest.split_once('.'))
            .filter(|(step, _)| !step.is_empty() && step.bytes().all(|b| b.is_ascii_digit()));
        if let Some((step, "replaced")) = partial_step {
            let target = dir.join(format!("step-{step}"));
            if !target.exists() {
                std::fs::rename(&path, &target).map_err(|e| TrainError::io(&target, e))?;
                done.push(format!("restored {}", target.display()));
                continue;
            }
        }
        let removed = if partial_step.is_some() && path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else if partial_state_dict.as_ref().is_some_and(|p| name.starts_with(p.as_str())) && path.is_file() {
            std::fs::remove_file(&path)
        } else {
            continue;
        };
        removed.map_err(|e| TrainError::io(&path, e))?;
        done.push(format!("removed {}", path.display()));
    }
    done.sort();
    Ok(done)
}

/// Restore a checkpoint into the model (through the optimizer) and return its state; `fresh` is
/// the state this run would start from, whose settings must match the checkpoint's.
pub(crate) fn load(
    dir: &Path,
    model: &dyn Checkpointable,
    optimizer: &mut AdamW,
    fresh: &TrainerState,
) -> Result<TrainerState> {
    let bad = |reason: String| TrainError::Checkpoint { path: dir.to_path_buf(), reason };
    if !dir.is_dir() {
        return Err(bad("not a folder (expected a step-<N> folder written by the trainer)".into()));
    }
    let state_text = std::fs::read_to_string(dir.join(STATE_FILE))
        .map_err(|e| bad(format!("cannot read {STATE_FILE}: {e} (incomplete checkpoint?)")))?;
    let mut state: TrainerState =
        serde_json::from_str(&state_text).map_err(|e| bad(format!("{STATE_FILE} is corrupt: {e}")))?;
    if state.format_version != FORMAT_VERSION {
        return Err(bad(format!("format version {} is not {FORMAT_VERSION}", state.format_version)));
    }
    if let Some(reason) = state.inconsistency().or_else(|| fresh.mismatch(&state)) {
        return Err(bad(reason));
    }
    // Checkpoints of earlier versions lack these; from now on they record this run's.
    state.learning_rate = fresh.learning_rate;
    state.warmup_fraction = fresh.warmup_fraction;
    state.batch_size = fresh.batch_size;
    state.accumulate_grad_batches = fresh.accumulate_grad_batches;
    state.run = fresh.run.clone();
    let opt_path = dir.join(OPTIMIZER_FILE);
    let moments: HashMap<String, candle_core::Tensor> =
        candle_core::safetensors::load(&opt_path, &candle_core::Device::Cpu)
            .map_err(|e| bad(format!("cannot read {OPTIMIZER_FILE}: {e}")))?;
    // A corrupt moment would show as a diverged run several steps later: blame the file now.
    let mut corrupt: Vec<&str> = Vec::new();
    for (name, t) in &moments {
        if !codon_ops::optim::all_finite(t).map_err(|e| bad(format!("cannot check {OPTIMIZER_FILE}: {e}")))? {
            corrupt.push(name);
        }
    }
    if !corrupt.is_empty() {
        corrupt.sort();
        return Err(bad(format!(
            "{OPTIMIZER_FILE} holds NaN or infinite values in {} (the file is corrupt)",
            corrupt.join(", ")
        )));
    }
    let weights = model.load(dir).map_err(|e| bad(format!("cannot read the model weights: {e}")))?;
    optimizer.load_state(&moments, &weights, state.optimizer_steps).map_err(bad)?;
    Ok(state)
}
