//! The training loop: accumulation, mixed precision, clipping, anomaly detection,
//! schedules, metrics, checkpoints and resume.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use candle_core::backprop::{GradStore, GradientObserver};
use candle_core::{DType, Tensor};
use serde::{Deserialize, Serialize};

use crate::buckets::Buckets;
use crate::checkpoint::{self, TrainerState};
use crate::error::{Result, TrainError};
use crate::optim::{clip_by_norm, global_norm, AdamW, AdamWConfig, Parameters};
use crate::schedule::{OneCycleLr, Scheduler};

/// Numeric precision of training.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Precision {
    /// Everything in f32.
    F32,
    /// bf16 compute, f32 master weights and moments.
    Bf16,
    /// f16 compute with dynamic loss scaling, f32 master weights and moments.
    F16,
}

impl Precision {
    /// The compute dtype.
    pub fn dtype(self) -> DType {
        match self {
            Precision::F32 => DType::F32,
            Precision::Bf16 => DType::BF16,
            Precision::F16 => DType::F16,
        }
    }

    /// What `--precision auto` means on `device`: f32 on the CPU, bf16 where the device has it,
    /// otherwise f16 with dynamic loss scaling (an Ascend 910A has no BF16).
    pub fn auto(device: &candle_core::Device) -> Self {
        if device.is_cpu() {
            Precision::F32
        } else if device.supports_bf16() {
            Precision::Bf16
        } else {
            Precision::F16
        }
    }

    /// Refuse bf16 on an accelerator without BF16, before anything runs (the CPU emulates it).
    pub fn check_device(self, device: &candle_core::Device) -> Result<()> {
        if self == Precision::Bf16 && !device.is_cpu() && !device.supports_bf16() {
            return Err(TrainError::Config(format!(
                "bf16 precision on {:?}, which has no BF16: use f16 (dynamic loss scaling) or f32",
                device.location()
            )));
        }
        Ok(())
    }
}

impl std::str::FromStr for Precision {
    type Err = TrainError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "f32" | "32" | "32-true" | "fp32" => Ok(Self::F32),
            "bf16" | "bf16-mixed" => Ok(Self::Bf16),
            "f16" | "16" | "16-mixed" | "fp16" => Ok(Self::F16),
            other => Err(TrainError::Config(format!("unknown precision {other:?} (expected bf16, f16 or f32)"))),
        }
    }
}

/// What to do when the loss or a gradient is not finite (f16 overflow is handled by the
/// loss scaler and is not an anomaly).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnomalyPolicy {
    /// Skip the optimizer step, report it, and go on.
    Skip,
    /// Stop with an error naming the step and the parameters.
    Abort,
}

/// A loss and the gradients of `loss · scale`, by one backward pass through its graph, telling
/// `observer` of each gradient as soon as it is final.
pub fn backward_scaled(loss: Tensor, scale: f64, observer: &mut dyn GradientObserver) -> Result<(Tensor, GradStore)> {
    let grads = (&loss * scale)?.backward_with(observer)?;
    Ok((loss, grads))
}

/// A model the trainer can train: a batch in, a scalar loss out.
pub trait TrainableModel {
    /// One micro-batch.
    type Batch;
    /// The trainable parameters, by name, in the groups the optimizer updates together.
    fn parameters(&self) -> Parameters;
    /// The loss of a batch in training mode; `seed` drives this pass's randomness (dropout).
    fn loss(&self, batch: &Self::Batch, seed: u64) -> Result<Tensor>;
    /// The loss of a batch and the gradients of `loss · scale`. By default one backward pass
    /// through the graph of [`TrainableModel::loss`]; a model that recomputes activations
    /// (checkpointing) overrides it. `observer` may be told of final gradients during the pass
    /// (a data-parallel step then overlaps their reduction with the rest of it); gradients
    /// it is not told of are taken from the returned store afterwards.
    fn loss_and_gradients(
        &self,
        batch: &Self::Batch,
        seed: u64,
        scale: f64,
        observer: &mut dyn GradientObserver,
    ) -> Result<(Tensor, GradStore)> {
        backward_scaled(self.loss(batch, seed)?, scale, observer)
    }
    /// Tokens in a batch, for throughput.
    fn tokens(&self, batch: &Self::Batch) -> usize;
    /// Write f32 weights (named as [`TrainableModel::parameters`]) to a folder.
    fn save(&self, weights: &[(String, Tensor)], dir: &Path) -> Result<()>;
    /// Read the f32 weights that [`TrainableModel::save`] wrote.
    fn load(&self, dir: &Path) -> Result<HashMap<String, Tensor>>;
    /// Write the upstream-style state-dict file (`--checkpoint_filename`), if the model has one.
    fn save_state_dict(&self, _weights: &[(String, Tensor)], _path: &Path) -> Result<()> {
        Ok(())
    }
}

/// Batches, epoch by epoch, with a length known up front.
pub trait BatchSource {
    /// One micro-batch.
    type Batch;
    /// Batches in each epoch.
    fn batches_per_epoch(&self) -> usize;
    /// Records per batch, when the source has a fixed batch size (checked on resume).
    fn batch_size(&self) -> Option<usize> {
        None
    }
    /// The batches of epoch `epoch`, deterministic for a given epoch.
    fn epoch(&self, epoch: u64) -> Box<dyn Iterator<Item = Result<Self::Batch>> + '_>;
}

/// Trainer settings. Build with [`TrainerConfig::builder`].
pub struct TrainerConfig {
    pub(crate) learning_rate: f64,
    pub(crate) warmup_fraction: f64,
    pub(crate) max_epochs: usize,
    pub(crate) max_steps: Option<usize>,
    pub(crate) accumulate_grad_batches: usize,
    pub(crate) gradient_clip: Option<f64>,
    pub(crate) precision: Precision,
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
}

/// Builder of [`TrainerConfig`]; the defaults are upstream `finetune.py`'s.
pub struct TrainerConfigBuilder(TrainerConfig);

impl TrainerConfig {
    /// Start from the defaults: lr 5e-5, warm-up 0.1, 15 epochs, no accumulation, no
    /// clipping, bf16, seed 123, OneCycleLR, checkpoints every 512 steps when a folder is set.
    pub fn builder() -> TrainerConfigBuilder {
        TrainerConfigBuilder(TrainerConfig {
            learning_rate: 5e-5,
            warmup_fraction: 0.1,
            max_epochs: 15,
            max_steps: None,
            accumulate_grad_batches: 1,
            gradient_clip: None,
            precision: Precision::Bf16,
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
        })
    }
}

impl TrainerConfigBuilder {
    /// Peak learning rate.
    pub fn learning_rate(mut self, lr: f64) -> Self {
        self.0.learning_rate = lr;
        self
    }
    /// Fraction of steps spent warming up (OneCycleLR's `pct_start`).
    pub fn warmup_fraction(mut self, f: f64) -> Self {
        self.0.warmup_fraction = f;
        self
    }
    /// Epochs.
    pub fn max_epochs(mut self, n: usize) -> Self {
        self.0.max_epochs = n;
        self
    }
    /// Stop after this many optimizer steps.
    pub fn max_steps(mut self, n: Option<usize>) -> Self {
        self.0.max_steps = n;
        self
    }
    /// Micro-batches per optimizer step.
    pub fn accumulate_grad_batches(mut self, n: usize) -> Self {
        self.0.accumulate_grad_batches = n;
        self
    }
    /// Clip gradients to this global 2-norm.
    pub fn gradient_clip(mut self, max_norm: Option<f64>) -> Self {
        self.0.gradient_clip = max_norm;
        self
    }
    /// Precision.
    pub fn precision(mut self, p: Precision) -> Self {
        self.0.precision = p;
        self
    }
    /// Seed of data order, masking and dropout.
    pub fn seed(mut self, seed: u64) -> Self {
        self.0.seed = seed;
        self
    }
    /// AdamW hyper-parameters.
    pub fn adamw(mut self, c: AdamWConfig) -> Self {
        self.0.adamw = c;
        self
    }
    /// Folder of `step-<N>` checkpoints.
    pub fn checkpoint_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.0.checkpoint_dir = dir;
        self
    }
    /// Also write upstream's state-dict file under this name in the checkpoint folder.
    pub fn checkpoint_filename(mut self, name: Option<String>) -> Self {
        self.0.checkpoint_filename = name;
        self
    }
    /// Checkpoint every N optimizer steps (and always at the end).
    pub fn save_every_n_steps(mut self, n: Option<usize>) -> Self {
        self.0.save_every_n_steps = n;
        self
    }
    /// Keep only the newest `n` `step-<N>` folders (each holds about 1 GB at full size); older
    /// ones are removed after each save. `None` keeps every one.
    pub fn keep_last(mut self, n: Option<usize>) -> Self {
        self.0.keep_last = n;
        self
    }
    /// Per-step metrics JSONL file.
    pub fn metrics_path(mut self, path: Option<PathBuf>) -> Self {
        self.0.metrics_path = path;
        self
    }
    /// No progress bar.
    pub fn quiet(mut self, quiet: bool) -> Self {
        self.0.quiet = quiet;
        self
    }
    /// Anomaly policy.
    pub fn anomaly_policy(mut self, p: AnomalyPolicy) -> Self {
        self.0.anomaly = p;
        self
    }
    /// Under [`AnomalyPolicy::Skip`], stop with an error once this many optimizer steps in a row
    /// were skipped for non-finite values (default 10). f16 overflow skips count only once the
    /// loss scale has fallen below 1, where even unscaled gradients are not finite.
    pub fn max_skipped_steps(mut self, n: usize) -> Self {
        self.0.max_skipped_steps = n;
        self
    }
    /// Watch the device: each step's metrics (and the progress bar) then carry its launches,
    /// allocations, synchronisations, reads and peak memory.
    pub fn device_probe(mut self, probe: Box<dyn DeviceProbe>) -> Self {
        self.0.device_probe = Some(std::sync::Mutex::new(probe));
        self
    }
    /// For counting runs on a device that skips arithmetic, whose values are meaningless: loss
    /// scaling and anomaly checks still run, but anomalies never stop the run, and checkpoints
    /// (only written when a folder is given) are written whatever their values.
    pub fn values_are_meaningless(mut self, yes: bool) -> Self {
        self.0.values_meaningless = yes;
        self
    }
    /// A custom schedule instead of OneCycleLR.
    pub fn scheduler(mut self, s: Box<dyn Scheduler>) -> Self {
        self.0.scheduler = Some(s);
        self
    }
    /// Keep freed memory in the process while training (default false: it changes malloc for the
    /// whole process; see [`crate::retain_freed_memory`]). The training examples turn it on.
    pub fn retain_freed_memory(mut self, yes: bool) -> Self {
        self.0.retain_freed_memory = yes;
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
        if let Some(clip) = c.gradient_clip {
            if !(clip.is_finite() && clip > 0.0) {
                return Err(TrainError::Config(format!("gradient clip {clip} must be positive")));
            }
        }
        Ok(self.0)
    }
}

/// One line of the metrics log.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StepMetrics {
    /// Optimizer step, from 1.
    pub step: usize,
    /// Epoch, from 0.
    pub epoch: usize,
    /// Mean loss over the step's micro-batches.
    pub loss: f64,
    /// Learning rate this step used.
    pub lr: f64,
    /// Global gradient norm before clipping.
    pub grad_norm: f64,
    /// Tokens per second over the step.
    pub tokens_per_s: f64,
    /// Wall time of the step.
    pub step_seconds: f64,
    /// Whether the update was skipped (non-finite values).
    pub skipped: bool,
    /// The f16 loss scale, when used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loss_scale: Option<f64>,
    /// In a data-parallel run, the gradient buckets whose all-reduce started while the backward
    /// pass was still running (the rest started after it).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub overlapped_buckets: Option<usize>,
    /// What the device did during the step, when a [`DeviceProbe`] watches it.
    #[serde(flatten, skip_serializing_if = "Option::is_none", default)]
    pub device: Option<DeviceStepStats>,
}

/// What the device did during one optimizer step.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct DeviceStepStats {
    /// Kernel launches.
    pub device_launches: u64,
    /// Driver allocations.
    pub device_allocs: u64,
    /// Host waits on the device.
    pub host_syncs: u64,
    /// Device-to-host reads.
    pub device_reads: u64,
    /// Peak device memory held from the driver during the step (cache included), in MiB.
    pub device_peak_mb: f64,
    /// Collectives (all-reduce, broadcast, barrier) this device issued; 0 on one device.
    #[serde(default)]
    pub collectives: u64,
    /// Bytes those collectives moved from this device, in MiB.
    #[serde(default)]
    pub collective_mb: f64,
}

/// Watches a device across optimizer steps (see [`TrainerConfigBuilder::device_probe`]).
pub trait DeviceProbe: Send {
    /// Called before each optimizer step.
    fn begin_step(&mut self);
    /// Called after it: what the device did since [`DeviceProbe::begin_step`].
    fn end_step(&mut self) -> DeviceStepStats;
}

/// What a run did.
#[derive(Debug, Clone, Default)]
pub struct TrainReport {
    /// Metrics of every optimizer step run.
    pub steps: Vec<StepMetrics>,
    /// Checkpoint folders written and still present (see [`TrainerConfigBuilder::keep_last`]).
    pub checkpoints: Vec<PathBuf>,
    /// Total optimizer steps of the schedule.
    pub total_steps: usize,
}

/// f16 dynamic loss scaling (torch GradScaler's defaults).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub(crate) struct LossScaler {
    pub scale: f64,
    pub good_steps: usize,
}

impl LossScaler {
    const GROWTH_INTERVAL: usize = 2000;
    fn new() -> Self {
        Self { scale: 65536.0, good_steps: 0 }
    }
    fn update(&mut self, finite: bool) {
        if finite {
            self.good_steps += 1;
            if self.good_steps == Self::GROWTH_INTERVAL {
                self.scale *= 2.0;
                self.good_steps = 0;
            }
        } else {
            self.scale *= 0.5;
            self.good_steps = 0;
        }
    }
}

/// Trains a [`TrainableModel`] on a [`BatchSource`].
pub struct Trainer {
    config: TrainerConfig,
}

impl Trainer {
    /// A trainer with validated settings.
    pub fn new(config: TrainerConfig) -> Self {
        Self { config }
    }

    /// Optimizer steps the run will take over `batches_per_epoch` batches on one device.
    pub fn total_steps(&self, batches_per_epoch: usize) -> usize {
        self.total_steps_on(batches_per_epoch, 1)
    }

    /// Optimizer steps over `batches_per_epoch` batches when `ranks` ranks share each step's
    /// micro-batches (each step takes accumulation × ranks of them).
    fn total_steps_on(&self, batches_per_epoch: usize, ranks: usize) -> usize {
        let c = &self.config;
        let per_epoch = batches_per_epoch.div_ceil(c.accumulate_grad_batches * ranks.max(1));
        let by_epochs = per_epoch * c.max_epochs.max(1);
        match c.max_steps {
            Some(m) if c.max_epochs == 0 => m,
            Some(m) => m.min(by_epochs),
            None => by_epochs,
        }
    }

    /// Train, optionally resuming from a `step-<N>` checkpoint folder.
    pub fn fit<M, S>(&self, model: &M, data: &S, resume: Option<&Path>) -> Result<TrainReport>
    where
        M: TrainableModel,
        S: BatchSource<Batch = M::Batch>,
    {
        self.fit_rank(model, data, resume, None)
    }

    /// Train one replica per Ascend device, data-parallel over HCCL, as upstream's DDP: each
    /// optimizer step, rank r of N takes micro-batches r, r + N, … of the N × accumulation
    /// that one device with N times the accumulation would take, with the same dropout
    /// streams; the gradients are summed with one all-reduce per flat group, so every rank
    /// makes the same update. Rank 0's initial weights are broadcast first; rank 0 alone
    /// writes metrics, progress and checkpoints, and its report is returned. Each replica is
    /// driven by a thread of its own.
    pub fn fit_data_parallel<M, S>(&self, replicas: &[M], data: &S, resume: Option<&Path>) -> Result<TrainReport>
    where
        M: TrainableModel + Sync,
        S: BatchSource<Batch = M::Batch> + Sync,
    {
        if replicas.len() <= 1 {
            let model = replicas.first().ok_or_else(|| TrainError::Config("no model replicas".into()))?;
            return self.fit(model, data, resume);
        }
        let mut devices = Vec::with_capacity(replicas.len());
        for m in replicas {
            let params = m.parameters();
            let device = params.named().first().map(|(_, v)| v.as_tensor().device().clone());
            match device.as_ref().and_then(candle_ascend::ascend_device) {
                Some(d) => devices.push(d.clone()),
                None => {
                    return Err(TrainError::Config(format!(
                        "data-parallel training runs over HCCL on Ascend devices (npu:N or npu-sim:N); {:?} \
                         trains on one device",
                        device.map(|d| d.location())
                    )))
                }
            }
        }
        let comms = candle_ascend::Communicator::init_all(&devices).map_err(candle_core::Error::from)?;
        let ranks = replicas.len();
        let results: Vec<Result<TrainReport>> = std::thread::scope(|s| {
            let handles: Vec<_> = replicas
                .iter()
                .zip(&comms)
                .map(|(model, comm)| s.spawn(move || self.fit_rank(model, data, resume, Some(comm))))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err(TrainError::Config("a rank's thread panicked".into()))))
                .collect()
        });
        // The error of a rank that failed on its own, before those of the ranks it stopped.
        let first_cause =
            results.iter().position(|r| r.as_ref().is_err_and(|e| !matches!(e, TrainError::PeersFailed { .. })));
        let mut reports = Vec::with_capacity(ranks);
        let mut results: Vec<_> = results.into_iter().enumerate().collect();
        if let Some(i) = first_cause {
            results.swap(0, i);
        }
        for (rank, r) in results {
            reports.push(r.map_err(|e| TrainError::Rank { rank, ranks, source: Box::new(e) })?);
        }
        Ok(reports.swap_remove(0))
    }

    /// Train as one rank of a data-parallel run whose other ranks are other processes (each
    /// with its own replica and the same data), over `comm`; see [`Trainer::fit_data_parallel`]
    /// for the semantics. Rank 0 returns the full report; the others train silently.
    pub fn fit_distributed<M, S>(
        &self,
        model: &M,
        data: &S,
        resume: Option<&Path>,
        comm: &candle_ascend::Communicator,
    ) -> Result<TrainReport>
    where
        M: TrainableModel,
        S: BatchSource<Batch = M::Batch>,
    {
        self.fit_rank(model, data, resume, Some(comm)).map_err(|e| TrainError::Rank {
            rank: comm.rank(),
            ranks: comm.ranks(),
            source: Box::new(e),
        })
    }

    /// The training loop of one rank (`comm` is `None` on a single device).
    fn fit_rank<M, S>(
        &self,
        model: &M,
        data: &S,
        resume: Option<&Path>,
        comm: Option<&candle_ascend::Communicator>,
    ) -> Result<TrainReport>
    where
        M: TrainableModel,
        S: BatchSource<Batch = M::Batch>,
    {
        let c = &self.config;
        let (rank, ranks) = comm.map_or((0, 1), |m| (m.rank(), m.ranks()));
        let lead = rank == 0;
        let batches_per_epoch = data.batches_per_epoch();
        if batches_per_epoch == 0 {
            return Err(TrainError::Config("the data source yields no batches".into()));
        }
        let total_steps = self.total_steps_on(batches_per_epoch, ranks);
        let one_cycle;
        let scheduler: &dyn Scheduler = match &c.scheduler {
            Some(s) => s.as_ref(),
            None => {
                one_cycle = OneCycleLr::new(c.learning_rate, total_steps, c.warmup_fraction)?;
                &one_cycle
            }
        };
        if c.retain_freed_memory {
            crate::malloc_tuning::retain_freed_memory();
        }
        let params = model.parameters();
        if let Some(comm) = comm {
            for (_, var) in params.named() {
                comm.broadcast(var.as_tensor(), 0).map_err(candle_core::Error::from)?;
            }
        }
        let mut optimizer = AdamW::new(params.clone(), c.adamw)?;
        let mut scaler = (c.precision == Precision::F16).then(LossScaler::new);

        // A rank's own failure (writing metrics or a checkpoint) in a data-parallel run: it takes
        // part in one more step's collectives to tell the others, who stop too, instead of
        // waiting for it until HCCL_EXEC_TIMEOUT.
        let mut failure: Option<TrainError> = None;
        let fail = |e: TrainError, failure: &mut Option<TrainError>| match comm {
            Some(_) => {
                *failure = Some(e);
                Ok(())
            }
            None => Err(e),
        };
        if let Some(dir) = c.checkpoint_dir.as_ref().filter(|_| lead) {
            match checkpoint::clean_leftovers(dir) {
                Ok(done) => done.iter().for_each(|d| eprintln!("interrupted save: {d}")),
                Err(e) => fail(e, &mut failure)?,
            }
        }
        let mut state = TrainerState::new(c, total_steps, data.batch_size());
        if let Some(dir) = resume {
            state = checkpoint::load(dir, model, &mut optimizer, &state)?;
            if let Some(s) = state.loss_scaler {
                scaler = Some(s);
            }
        }

        let mut metrics = None;
        if let Some(p) = c.metrics_path.as_ref().filter(|_| lead) {
            let opened = std::fs::OpenOptions::new()
                .create(true)
                .append(resume.is_some())
                .write(true)
                .truncate(resume.is_none())
                .open(p);
            match opened {
                Ok(f) => metrics = Some(std::io::BufWriter::new(f)),
                Err(e) => fail(TrainError::io(p, e), &mut failure)?,
            }
        }
        // Without a terminal (CI, logs) progress goes out as plain lines, about 20 per run.
        let quiet = c.quiet || !lead;
        let log_lines = !quiet && !std::io::IsTerminal::is_terminal(&std::io::stderr());
        let log_every = (total_steps / 20).max(1);
        let progress = if quiet || log_lines {
            indicatif::ProgressBar::hidden()
        } else {
            let bar = indicatif::ProgressBar::new(total_steps as u64);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{bar:30} step {pos}/{len} {msg} [{elapsed_precise} < {eta_precise}]",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar
        };
        progress.set_position(state.step as u64);

        let mut report = TrainReport { total_steps, ..Default::default() };
        let mut skipped_in_a_row = 0;
        let max_epochs = if c.max_epochs == 0 { usize::MAX } else { c.max_epochs };
        'epochs: while state.step < total_steps && state.epoch < max_epochs {
            let mut batches = data.epoch(state.epoch as u64).skip(state.batch_in_epoch);
            loop {
                if let Some(e) = failure.take() {
                    // Tell the other ranks through the next step's collectives, then stop.
                    if state.step >= total_steps {
                        return Err(e);
                    }
                    let step = StepBatches { micro: &[], total: 1, comm, failed: true };
                    let _ = self.optimizer_step(model, &params, step, &mut optimizer, &mut scaler, scheduler, &state);
                    progress.finish_and_clear();
                    return Err(e);
                }
                if state.step >= total_steps {
                    break 'epochs;
                }
                let started = Instant::now();
                if let Some(p) = c.device_probe.as_ref().filter(|_| lead) {
                    p.lock().unwrap_or_else(|e| e.into_inner()).begin_step();
                }
                // The step's micro-batches, numbered across ranks; this rank takes every
                // ranks-th, from its own rank on.
                let mut micro = Vec::with_capacity(c.accumulate_grad_batches);
                let mut taken = 0;
                while taken < c.accumulate_grad_batches * ranks {
                    match batches.next() {
                        Some(b) if taken % ranks == rank => micro.push((taken, b?)),
                        Some(b) => drop(b?),
                        None => break,
                    }
                    taken += 1;
                }
                if taken == 0 {
                    break;
                }
                let step = StepBatches { micro: &micro, total: taken, comm, failed: false };
                let m = self.optimizer_step(model, &params, step, &mut optimizer, &mut scaler, scheduler, &state)?;
                state.step += 1;
                state.batch_in_epoch += taken;
                let device = c
                    .device_probe
                    .as_ref()
                    .filter(|_| lead)
                    .map(|p| p.lock().unwrap_or_else(|e| e.into_inner()).end_step());
                let tokens: usize = micro.iter().map(|(_, b)| model.tokens(b)).sum::<usize>() * ranks;
                let secs = started.elapsed().as_secs_f64();
                let metric = StepMetrics {
                    step: state.step,
                    epoch: state.epoch,
                    loss: m.loss,
                    lr: m.lr,
                    grad_norm: m.grad_norm,
                    tokens_per_s: tokens as f64 / secs.max(1e-9),
                    step_seconds: secs,
                    skipped: m.skipped,
                    loss_scale: scaler.map(|s| s.scale),
                    overlapped_buckets: m.overlapped_buckets,
                    device,
                };
                if let Some(w) = metrics.as_mut() {
                    let line = serde_json::to_string(&metric).unwrap_or_default();
                    let written = writeln!(w, "{line}").and_then(|_| w.flush());
                    if let Err(e) = written {
                        fail(TrainError::io("metrics", e), &mut failure)?;
                    }
                }
                progress.set_position(state.step as u64);
                let memory = metric.device.map(|d| format!(" {:.0} MiB device", d.device_peak_mb)).unwrap_or_default();
                progress.set_message(format!(
                    "loss {:.4} lr {:.2e} {:.0} tok/s{memory}",
                    metric.loss, metric.lr, metric.tokens_per_s
                ));
                if log_lines && (state.step % log_every == 0 || state.step == total_steps) {
                    eprintln!(
                        "step {}/{total_steps} epoch {} loss {:.4} lr {:.2e} {:.0} tokens/s",
                        state.step, state.epoch, metric.loss, metric.lr, metric.tokens_per_s
                    );
                }
                report.steps.push(metric);
                skipped_in_a_row = if m.anomalous { skipped_in_a_row + 1 } else { 0 };
                if skipped_in_a_row >= c.max_skipped_steps && !c.values_meaningless {
                    progress.finish_and_clear();
                    return Err(TrainError::TooManySkippedSteps { skipped: skipped_in_a_row, step: state.step });
                }
                state.loss_scaler = scaler;
                let due = c.save_every_n_steps.is_some_and(|n| state.step % n == 0);
                if due && state.step < total_steps && lead {
                    if let Some(dir) = &c.checkpoint_dir {
                        match self.save(model, &optimizer, &state, dir) {
                            Ok(path) => report.checkpoints.push(path),
                            Err(e) => fail(e, &mut failure)?,
                        }
                    }
                }
            }
            state.epoch += 1;
            state.batch_in_epoch = 0;
        }
        progress.finish_and_clear();
        if let Some(e) = failure {
            return Err(e);
        }
        if let Some(dir) = c.checkpoint_dir.as_ref().filter(|_| lead) {
            report.checkpoints.push(self.save(model, &optimizer, &state, dir)?);
            report.checkpoints.retain(|p| p.is_dir());
        }
        Ok(report)
    }

    fn save<M: TrainableModel>(
        &self,
        model: &M,
        optimizer: &AdamW,
        state: &TrainerState,
        dir: &Path,
    ) -> Result<PathBuf> {
        let path = checkpoint::save(dir, model, optimizer, state, !self.config.values_meaningless)?;
        if let Some(name) = &self.config.checkpoint_filename {
            model.save_state_dict(&optimizer.master_weights()?, &dir.join(name))?;
        }
        if let Some(keep) = self.config.keep_last {
            checkpoint::prune(dir, keep)?;
        }
        Ok(path)
    }

    #[allow(clippy::too_many_arguments)]
    fn optimizer_step<M: TrainableModel>(
        &self,
        model: &M,
        params: &Parameters,
        batches: StepBatches<'_, M::Batch>,
        optimizer: &mut AdamW,
        scaler: &mut Option<LossScaler>,
        scheduler: &dyn Scheduler,
        state: &TrainerState,
    ) -> Result<StepOutcome> {
        let c = &self.config;
        let scale = scaler.map_or(1.0, |s| s.scale);
        let mut grads: Option<Vec<Tensor>> = None;
        let mut loss_sum: Option<Tensor> = None;
        let ranks = batches.comm.map_or(1, |m| m.ranks());
        let mut reduced = None;
        let mut overlapped_buckets = batches.comm.map(|_| 0);
        for (n, (i, batch)) in batches.micro.iter().enumerate() {
            // Keyed by the micro-batch's number across ranks, so N ranks draw the masks of one
            // device with N times the accumulation.
            let index = state.step * c.accumulate_grad_batches * ranks + i;
            let seed = codon_data::mix_seed(state.seed, index as u64);
            let scale = scale / batches.total as f64;
            let last = n + 1 == batches.micro.len();
            let loss = match batches.comm.filter(|_| last) {
                // The step's last backward pass starts each bucket's all-reduce as it finishes.
                Some(comm) => {
                    let mut buckets = Buckets::new(params, comm, grads.take());
                    let (loss, store) = model.loss_and_gradients(batch, seed, scale, &mut buckets)?;
                    let (sum, overlapped) = buckets.finish_with(|var| store.get(var.as_tensor()).cloned())?;
                    reduced = Some((sum, overlapped));
                    loss
                }
                None => {
                    let (loss, store) = model.loss_and_gradients(batch, seed, scale, &mut ())?;
                    let step_grads = params.gradients(&store)?;
                    grads = Some(match grads {
                        Some(acc) => {
                            acc.iter().zip(&step_grads).map(|(a, b)| a + b).collect::<candle_core::Result<_>>()?
                        }
                        None => step_grads,
                    });
                    loss
                }
            };
            let l = loss.detach().to_dtype(DType::F32)?;
            loss_sum = Some(match loss_sum {
                Some(s) => (s + l)?,
                None => l,
            });
        }
        let device = params.named().first().map(|(_, v)| v.device().clone());
        let Some(device) = device else {
            return Err(TrainError::Config("a model without parameters".into()));
        };
        let loss_sum = match loss_sum {
            Some(l) => l,
            None => Tensor::zeros((), DType::F32, &device)?,
        };
        let mut grads = match (batches.comm, reduced) {
            (_, Some((sum, overlapped))) => {
                overlapped_buckets = Some(overlapped);
                sum
            }
            // A rank without a micro-batch (at an epoch's end) still takes part in every
            // all-reduce, with zeros.
            (Some(comm), None) => Buckets::new(params, comm, grads.take()).finish_with(|_| None)?.0,
            (None, _) => match grads {
                Some(g) => g,
                None => params.zero_gradients()?,
            },
        };
        // The loss travels with one flag per rank, set by a rank that has failed.
        let mut flags = vec![0f32; ranks];
        flags[batches.comm.map_or(0, |m| m.rank())] = f32::from(u8::from(batches.failed));
        let status = Tensor::cat(&[loss_sum.reshape(1)?, Tensor::new(flags, &device)?], 0)?;
        if let Some(comm) = batches.comm {
            comm.all_reduce(&status, candle_ascend::ReduceOp::Sum).map_err(candle_core::Error::from)?;
        }
        if scale != 1.0 {
            grads = grads.iter().map(|g| g * (1.0 / scale)).collect::<candle_core::Result<_>>()?;
        }
        let norm = global_norm(&grads)?;
        let loss_mean = (status.narrow(0, 0, 1)? / batches.total as f64)?;
        // The one host read of the step: loss, gradient norm and the ranks' flags together.
        let host: Vec<f32> = Tensor::cat(&[loss_mean, norm.reshape(1)?, status.narrow(0, 1, ranks)?], 0)?.to_vec1()?;
        // The bucket reductions are done by now (the read followed them); did they succeed?
        if let Some(comm) = batches.comm {
            comm.synchronize().map_err(candle_core::Error::from)?;
        }
        let (loss, grad_norm) = (host[0] as f64, host[1] as f64);
        let failed: Vec<usize> = (0..ranks).filter(|&r| host[2 + r] > 0.5).collect();
        if !failed.is_empty() && !batches.failed {
            return Err(TrainError::PeersFailed { failed, step: state.step + 1 });
        }
        let lr = scheduler.lr(state.step);
        let finite = loss.is_finite() && grad_norm.is_finite();
        if let Some(s) = scaler.as_mut() {
            s.update(grad_norm.is_finite());
            if !grad_norm.is_finite() {
                let anomalous = s.scale < 1.0;
                return Ok(StepOutcome { loss, lr, grad_norm, skipped: true, anomalous, overlapped_buckets });
            }
        }
        if !finite {
            if c.anomaly == AnomalyPolicy::Abort {
                let mut bad = Vec::new();
                for (name, g) in params.split(&grads)? {
                    let s = g.sum_all()?.to_scalar::<f32>()?;
                    if !s.is_finite() {
                        bad.push(name);
                    }
                }
                let what = if loss.is_finite() { "gradients" } else { "loss" };
                return Err(TrainError::NonFinite { step: state.step + 1, what: what.into(), parameters: bad });
            }
            eprintln!("warning: non-finite loss or gradients at step {}; update skipped", state.step + 1);
            return Ok(StepOutcome { loss, lr, grad_norm, skipped: true, anomalous: true, overlapped_buckets });
        }
        if let Some(max_norm) = c.gradient_clip {
            clip_by_norm(&mut grads, &norm, max_norm)?;
        }
        optimizer.step(&grads, lr, scheduler.beta1(state.step))?;
        Ok(StepOutcome { loss, lr, grad_norm, skipped: false, anomalous: false, overlapped_buckets })
    }
}

/// One optimizer step's micro-batches on this rank, each with its number across ranks; how many
/// there are across ranks; and the communicator of a data-parallel run.
struct StepBatches<'a, B> {
    micro: &'a [(usize, B)],
    total: usize,
    comm: Option<&'a candle_ascend::Communicator>,
    /// This rank has failed and takes part only to tell the others.
    failed: bool,
}

impl<B> Clone for StepBatches<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B> Copy for StepBatches<'_, B> {}

struct StepOutcome {
    loss: f64,
    lr: f64,
    grad_norm: f64,
    skipped: bool,
    /// Skipped for values that are not finite, as opposed to an ordinary f16 overflow.
    anomalous: bool,
    /// Data-parallel gradient buckets whose all-reduce started during the backward pass.
    overlapped_buckets: Option<usize>,
}
