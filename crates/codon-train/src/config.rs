//! Trainer settings and their builder.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::error::{Result, TrainError};
use crate::optim::AdamWConfig;
use crate::precision::Precision;
use crate::progress::DeviceProbe;
use crate::schedule::Scheduler;
use crate::status::RunStatus;

/// What makes a run itself: the caller's description (model configuration, data) and the
/// trainer's schedule (seed, learning rate, warm-up, batch size, accumulation, total steps).
/// Strings only, so that a value reads back exactly as it was written.
pub type RunIdentity = BTreeMap<String, String>;

/// What to do when the loss or a gradient is not finite (f16 overflow is handled by the
/// loss scaler and is not an anomaly).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnomalyPolicy {
    /// Skip the optimizer step, report it, and go on.
    Skip,
    /// Stop with an error naming the step and the parameters.
    Abort,
}

/// Trainer settings. Build with [`TrainerConfig::builder`].
pub struct TrainerConfig {
    pub(crate) learning_rate: f64,
    pub(crate) warmup_fraction: f64,
    pub(crate) max_epochs: usize,
    pub(crate) max_steps: Option<usize>,
    pub(crate) accumulate_grad_batches: usize,
    pub(crate) gradient_clip: Option<f64>,
    pub(crate) precision: Option<Precision>,
    pub(crate) seed: u64,
    pub(crate) adamw: AdamWConfig,
    pub(crate) checkpoint_dir: Option<PathBuf>,
    pub(crate) checkpoint_filename: Option<String>,
    pub(crate) save_every_n_steps: Option<usize>,
    pub(crate) keep_last: Option<usize>,
    pub(crate) metrics_path: Option<PathBuf>,
    pub(crate) quiet: bool,
    pub(crate) anomaly: AnomalyPolicy,
    pub(crate) max_skipped_steps: usize,
    pub(crate) values_meaningless: bool,
    pub(crate) scheduler: Option<Box<dyn Scheduler>>,
    pub(crate) retain_freed_memory: bool,
    pub(crate) device_probe: Option<std::sync::Mutex<Box<dyn DeviceProbe>>>,
    pub(crate) inputs: Vec<PathBuf>,
    pub(crate) run_description: RunIdentity,
    pub(crate) overwrite: bool,
    pub(crate) status: Option<std::sync::Arc<RunStatus>>,
}

/// Builder of [`TrainerConfig`]; the defaults are upstream `finetune.py`'s.
pub struct TrainerConfigBuilder(TrainerConfig);

impl TrainerConfig {
    /// Start from the defaults: lr 5e-5, warm-up 0.1, 15 epochs, no accumulation, no
    /// clipping, the model's precision, seed 123, OneCycleLR, checkpoints every 512 steps when a folder is set.
    pub fn builder() -> TrainerConfigBuilder {
        TrainerConfigBuilder(TrainerConfig {
            learning_rate: 5e-5,
            warmup_fraction: 0.1,
            max_epochs: 15,
            max_steps: None,
            accumulate_grad_batches: 1,
            gradient_clip: None,
            precision: None,
            seed: 123,
            adamw: AdamWConfig::default(),
            checkpoint_dir: None,
            checkpoint_filename: None,
            save_every_n_steps: Some(512),
            keep_last: None,
            metrics_path: None,
            quiet: false,
            anomaly: AnomalyPolicy::Skip,
            max_skipped_steps: 10,
            values_meaningless: false,
            scheduler: None,
            retain_freed_memory: false,
            device_probe: None,
            inputs: Vec::new(),
            run_description: RunIdentity::new(),
            overwrite: false,
            status: None,
        })
    }
}

/// Builder setters that store their argument in the config field of the same meaning.
macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident: $ty:ty => $field:ident,)*) => {$(
        $(#[$doc])*
        pub fn $name(mut self, value: $ty) -> Self {
            self.0.$field = value;
            self
        }
    )*};
}

impl TrainerConfigBuilder {
    setters! {
        /// Peak learning rate.
        learning_rate: f64 => learning_rate,
        /// Fraction of steps spent warming up (OneCycleLR's `pct_start`).
        warmup_fraction: f64 => warmup_fraction,
        /// Epochs.
        max_epochs: usize => max_epochs,
        /// Stop after this many optimizer steps.
        max_steps: Option<usize> => max_steps,
        /// Micro-batches per optimizer step.
        accumulate_grad_batches: usize => accumulate_grad_batches,
        /// Clip gradients to this global 2-norm.
        gradient_clip: Option<f64> => gradient_clip,
        /// Seed of data order, masking and dropout.
        seed: u64 => seed,
        /// AdamW hyper-parameters.
        adamw: AdamWConfig => adamw,
        /// Folder of `step-<N>` checkpoints.
        checkpoint_dir: Option<PathBuf> => checkpoint_dir,
        /// Also write upstream's state-dict file under this name in the checkpoint folder.
        checkpoint_filename: Option<String> => checkpoint_filename,
        /// Checkpoint every N optimizer steps (and always at the end).
        save_every_n_steps: Option<usize> => save_every_n_steps,
        /// Keep only the newest `n` `step-<N>` folders (each holds about 1 GB at full size); older
        /// ones are removed after each save. `None` keeps every one.
        keep_last: Option<usize> => keep_last,
        /// Per-step metrics JSONL file.
        metrics_path: Option<PathBuf> => metrics_path,
        /// No progress bar.
        quiet: bool => quiet,
        /// Anomaly policy.
        anomaly_policy: AnomalyPolicy => anomaly,
        /// Under [`AnomalyPolicy::Skip`], stop with an error once this many optimizer steps in a row
        /// were skipped for non-finite values (default 10). f16 overflow skips count only once the
        /// loss scale has fallen below 1, where even unscaled gradients are not finite.
        max_skipped_steps: usize => max_skipped_steps,
        /// For counting runs on a device that skips arithmetic, whose values are meaningless: loss
        /// scaling and anomaly checks still run, but anomalies never stop the run, and checkpoints
        /// (only written when a folder is given) are written whatever their values.
        values_are_meaningless: bool => values_meaningless,
        /// Keep freed memory in the process while training (default false: it changes malloc for the
        /// whole process; see [`crate::retain_freed_memory`]). The training examples turn it on.
        retain_freed_memory: bool => retain_freed_memory,
        /// The files and folders the run reads (data, starting model, its configuration): no
        /// output of the run may be one of them or lie inside one, and `overwrite` removes none.
        inputs: Vec<PathBuf> => inputs,
        /// What identifies the run beyond the trainer's own settings (model configuration, data
        /// path and size): recorded in each checkpoint, so a folder's steps are known by run.
        run_description: RunIdentity => run_description,
        /// Let the run remove another run's steps and state-dict file from its checkpoint folder
        /// (default false: such a folder is refused).
        overwrite: bool => overwrite,
    }
    /// Watch the device: each step's metrics (and the progress bar) then carry its launches,
    /// allocations, synchronisations, reads and peak memory.
    pub fn device_probe(mut self, probe: Box<dyn DeviceProbe>) -> Self {
        self.0.device_probe = Some(std::sync::Mutex::new(probe));
        self
    }
    /// Publish the run's step and newest checkpoint here as it trains (rank 0 of a
    /// data-parallel run), for another thread to read.
    pub fn status(mut self, status: std::sync::Arc<RunStatus>) -> Self {
        self.0.status = Some(status);
        self
    }
    /// The precision the run expects. The model's parameter dtype is the one source of the
    /// precision (f16 turns on loss scaling): a model made trainable in another one is refused
    /// by `fit`. Unset, the run takes the model's.
    pub fn precision(mut self, precision: Precision) -> Self {
        self.0.precision = Some(precision);
        self
    }
    /// A custom schedule instead of OneCycleLR.
    pub fn scheduler(mut self, s: Box<dyn Scheduler>) -> Self {
        self.0.scheduler = Some(s);
        self
    }
    /// Validate and finish.
    pub fn build(self) -> Result<TrainerConfig> {
        let c = &self.0;
        if !(c.learning_rate.is_finite() && c.learning_rate > 0.0) {
            return Err(TrainError::Config(format!("learning rate {} must be positive", c.learning_rate)));
        }
        if c.accumulate_grad_batches == 0 {
            return Err(TrainError::Config("accumulate_grad_batches must be at least 1".into()));
        }
        if c.max_epochs == 0 && c.max_steps.is_none() {
            return Err(TrainError::Config("max_epochs must be at least 1".into()));
        }
        if c.max_skipped_steps == 0 {
            return Err(TrainError::Config("max_skipped_steps must be at least 1".into()));
        }
        if c.keep_last == Some(0) {
            return Err(TrainError::Config("keep_last must be at least 1".into()));
        }
        if c.max_steps == Some(0) || c.save_every_n_steps == Some(0) {
            return Err(TrainError::Config("max_steps and save_every_n_steps must be positive".into()));
        }
        if let Some(name) = &c.checkpoint_filename {
            let plain = std::path::Path::new(name).file_name().is_some_and(|n| n == name.as_str());
            let step_like = name.strip_prefix("step-").is_some_and(|n| n.parse::<usize>().is_ok());
            if !plain || name.starts_with('.') || step_like {
                return Err(TrainError::Config(format!(
                    "checkpoint file name {name:?} must be a plain file name inside the checkpoint folder (no folders, \
                     not hidden, not step-<N>)"
                )));
            }
        }
        if let Some(clip) = c.gradient_clip {
            if !(clip.is_finite() && clip > 0.0) {
                return Err(TrainError::Config(format!("gradient clip {clip} must be positive")));
            }
        }
        Ok(self.0)
    }
}
