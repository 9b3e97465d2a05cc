//! The training loop: epochs, micro-batches shared among ranks, checkpoints and resume. One
//! optimizer step is the private `step` module's; output is [`crate::progress`].

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::checkpoint::{self, TrainerState};
use crate::collective::Collective;
use crate::config::TrainerConfig;
use crate::error::{Result, TrainError};
use crate::model::{BatchSource, Checkpointable, TrainableModel};
use crate::optim::AdamW;
use crate::precision::{LossScaler, Precision};
use crate::progress::{Progress, StepMetrics, TrainReport};
use crate::run_folder::{self, OwnRuns};
use crate::schedule::{OneCycleLr, Scheduler};
use crate::step::{optimizer_step, Optimization, StepBatches};

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
        // Saturating: an accumulation past the data takes the whole epoch in one step.
        let per_epoch = batches_per_epoch.div_ceil(c.accumulate_grad_batches.saturating_mul(ranks.max(1)));
        let by_epochs = per_epoch.saturating_mul(c.max_epochs.max(1));
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

    /// [`Trainer::fit_data_parallel`] with the collectives made here: `open` gets each replica's
    /// device (that of its first parameter), in rank order, and returns one collective per
    /// device, or why these devices have none. One replica trains alone, without `open`.
    pub fn fit_data_parallel_over<M, S, C>(
        &self,
        replicas: &[M],
        data: &S,
        resume: Option<&Path>,
        open: impl FnOnce(&[candle_core::Device]) -> std::result::Result<Vec<C>, String>,
    ) -> Result<TrainReport>
    where
        M: TrainableModel + Sync,
        S: BatchSource<Batch = M::Batch> + Sync,
        C: Collective + Sync,
    {
        if replicas.len() <= 1 {
            return self.fit_data_parallel::<M, S, C>(replicas, &[], data, resume);
        }
        let devices = replicas
            .iter()
            .map(|m| {
                let params = m.parameters();
                let first = params.named().first().map(|(_, v)| v.as_tensor().device().clone());
                first.ok_or_else(|| TrainError::Config("a model replica without parameters".into()))
            })
            .collect::<Result<Vec<_>>>()?;
        let comms = open(&devices).map_err(TrainError::Config)?;
        self.fit_data_parallel(replicas, &comms, data, resume)
    }

    /// Train one replica per device, data-parallel over `comms` (replica r is rank r of
    /// `comms[r]`), as upstream's DDP: each optimizer step, rank r of N takes micro-batches
    /// r, r + N, … of the N × accumulation that one device with N times the accumulation would
    /// take, with the same dropout streams; the gradients are summed with one all-reduce per
    /// flat group, so every rank makes the same update. Rank 0's initial weights are broadcast
    /// first; rank 0 alone writes metrics, progress and checkpoints, and its report is
    /// returned. Each replica is driven by a thread of its own.
    pub fn fit_data_parallel<M, S, C>(
        &self,
        replicas: &[M],
        comms: &[C],
        data: &S,
        resume: Option<&Path>,
    ) -> Result<TrainReport>
    where
        M: TrainableModel + Sync,
        S: BatchSource<Batch = M::Batch> + Sync,
        C: Collective + Sync,
    {
        if replicas.len() <= 1 {
            let model = replicas.first().ok_or_else(|| TrainError::Config("no model replicas".into()))?;
            return self.fit(model, data, resume);
        }
        if comms.len() != replicas.len() {
            return Err(TrainError::Config(format!(
                "{} model replicas but {} collectives: each replica trains as one rank",
                replicas.len(),
                comms.len()
            )));
        }
        let ranks = replicas.len();
        let results: Vec<Result<TrainReport>> = std::thread::scope(|s| {
            let handles: Vec<_> = replicas
                .iter()
                .zip(comms)
                .map(|(model, comm)| s.spawn(move || self.fit_rank(model, data, resume, Some(comm as &dyn Collective))))
                .collect();
            handles
                .into_iter()
                .enumerate()
                .map(|(rank, h)| h.join().unwrap_or(Err(TrainError::RankPanicked { rank })))
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
        comm: &dyn Collective,
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
        comm: Option<&dyn Collective>,
    ) -> Result<TrainReport>
    where
        M: TrainableModel,
        S: BatchSource<Batch = M::Batch>,
    {
        let c = &self.config;
        run_folder::refuse_writing_inputs(c)?;
        let (rank, ranks) = comm.map_or((0, 1), |m| (m.rank(), m.ranks()));
        let lead = rank == 0;
        let batches_per_epoch = data.batches_per_epoch();
        if batches_per_epoch == 0 {
            return Err(TrainError::Config("the data source yields no batches".into()));
        }
        let files = model.checkpointable();
        if files.is_none() && (resume.is_some() || c.checkpoint_dir.is_some()) {
            return Err(TrainError::Config(
                "this model cannot be checkpointed (its TrainableModel::checkpointable is None): train without \
                 a checkpoint folder or a resume"
                    .into(),
            ));
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
            codon_ops::malloc_tuning::retain_freed_memory();
        }
        let params = model.parameters();
        if let Some(comm) = comm {
            for (_, var) in params.named() {
                comm.broadcast(var.as_tensor(), 0)?;
            }
        }
        let mut opt = Optimization {
            optimizer: AdamW::new(params.clone(), c.adamw)?,
            scaler: (model_precision(c, &params)? == Precision::F16).then(LossScaler::new),
            scheduler,
        };
        let mut progress = Progress::new(c.quiet || !lead, lead, total_steps);
        let mut failure = Failure { data_parallel: comm.is_some(), pending: None };
        // Held to the end of the run: a second training on the same folder is refused.
        let _folder_lock = match c.checkpoint_dir.as_ref().filter(|_| lead).map(|dir| run_folder::lock(dir)) {
            Some(Err(e)) => {
                failure.fail(e)?;
                None
            }
            held => held.and_then(|h| h.ok()),
        };
        // Tidied before a resume reads it: a step folder set aside mid-save goes back in place.
        if let Some(dir) = c.checkpoint_dir.as_ref().filter(|_| lead) {
            match checkpoint::clean_leftovers(dir, c.checkpoint_filename.as_deref()) {
                Ok(done) => done.into_iter().for_each(|d| progress.warn(format!("interrupted save: {d}"))),
                Err(e) => failure.fail(e)?,
            }
        }
        let mut state = TrainerState::new(c, total_steps, data.batch_size());
        let own = OwnRuns::new(state.run.as_ref().unwrap_or(&c.run_description), resume);
        if let Some(dir) = c.checkpoint_dir.as_ref().filter(|_| lead) {
            match run_folder::claim(c, dir, &own) {
                Ok(done) => done.into_iter().for_each(|d| progress.warn(d)),
                Err(e) => failure.fail(e)?,
            }
            if let Err(e) = run_folder::check_writable(dir, checkpoint_bytes(c, &params)) {
                failure.fail(e)?;
            }
        }
        if let Some(path) = c.metrics_path.as_ref().filter(|_| lead) {
            if let Err(e) = progress.open_metrics(path, resume.is_some()) {
                failure.fail(e)?;
            }
        }
        if let (Some(dir), Some(files)) = (resume, files) {
            state = checkpoint::load(dir, files, &mut opt.optimizer, &state)?;
            if state.batch_in_epoch > batches_per_epoch {
                return Err(TrainError::Checkpoint {
                    path: dir.to_path_buf(),
                    reason: format!(
                        "it resumes at batch {} of an epoch of {batches_per_epoch} batches (another data set or batch size?)",
                        state.batch_in_epoch
                    ),
                });
            }
            if let Some(s) = state.loss_scaler {
                opt.scaler = Some(s);
            }
        }
        progress.start_at(state.step);
        if let Some(status) = c.status.as_ref().filter(|_| lead) {
            status.set_step(state.step);
            if let Some(dir) = resume {
                status.set_last_checkpoint(dir.to_path_buf());
            }
        }
        let report = TrainReport { total_steps, ..Default::default() };
        let mut run = RankRun { config: c, model, comm, rank, ranks, opt, state, progress, failure, report, own };
        let result = run.epochs(data, &params);
        run.report.warnings = run.progress.finish();
        result?;
        if let (Some(dir), Some(files), true) = (&c.checkpoint_dir, files, lead) {
            let path = save_checkpoint(c, files, &run.opt.optimizer, &run.state, dir, &run.own)?;
            run.report.checkpoints.push(path.clone());
            if let Some(status) = &c.status {
                status.set_last_checkpoint(path);
            }
            run.report.checkpoints.retain(|p| p.is_dir());
        }
        Ok(run.report)
    }
}

/// The run's precision: its parameters' dtype, the one source (f16 turns on loss scaling). A
/// config that expects another is refused, so an f16 model never trains without loss scaling.
fn model_precision(c: &TrainerConfig, params: &crate::Parameters) -> Result<Precision> {
    let dtype = params.named().first().map_or(candle_core::DType::F32, |(_, v)| v.as_tensor().dtype());
    let precision = Precision::of_dtype(dtype)
        .ok_or_else(|| TrainError::Config(format!("the model's parameters are {dtype:?}: not a training precision")))?;
    match c.precision {
        Some(expected) if expected != precision => Err(TrainError::Config(format!(
            "the model was made trainable in {precision:?} (its parameters are {dtype:?}) but the trainer config says \
             {expected:?}: build the model in the config's precision, or leave the config's precision unset"
        ))),
        _ => Ok(precision),
    }
}

/// About how many bytes one checkpoint of `params` takes: f32 weights and AdamW's two f32
/// moments, and the state dict's f32 weights when one is written.
fn checkpoint_bytes(c: &TrainerConfig, params: &crate::Parameters) -> u64 {
    let elements: usize = params.named().iter().map(|(_, v)| v.as_tensor().elem_count()).sum();
    let copies = if c.checkpoint_filename.is_some() { 4 } else { 3 };
    (elements * 4 * copies) as u64
}

/// Write `dir/step-<N>`, the upstream-style state dict when asked, and prune old steps.
fn save_checkpoint(
    c: &TrainerConfig,
    files: &dyn Checkpointable,
    optimizer: &AdamW,
    state: &TrainerState,
    dir: &Path,
    own: &OwnRuns,
) -> Result<PathBuf> {
    let path = checkpoint::save(dir, files, optimizer, state, !c.values_meaningless)?;
    if let Some(name) = &c.checkpoint_filename {
        files.save_state_dict(&optimizer.master_weights()?, &dir.join(name))?;
    }
    if let Some(keep) = c.keep_last {
        checkpoint::prune(dir, keep, own)?;
    }
    Ok(path)
}

/// A rank's own failure (writing metrics or a checkpoint). In a data-parallel run it is held
/// while the rank takes part in one more step's collectives to tell the others, who stop too,
/// instead of waiting for it until HCCL_EXEC_TIMEOUT; on one device it stops the run at once.
struct Failure {
    data_parallel: bool,
    pending: Option<TrainError>,
}

impl Failure {
    fn fail(&mut self, e: TrainError) -> Result<()> {
        if !self.data_parallel {
            return Err(e);
        }
        self.pending.get_or_insert(e);
        Ok(())
    }
}

/// Micro-batches, each with its number across ranks.
type NumberedBatches<B> = Vec<(usize, B)>;

/// One rank's run in progress: what the epoch loop reads and updates.
struct RankRun<'a, M> {
    config: &'a TrainerConfig,
    model: &'a M,
    comm: Option<&'a dyn Collective>,
    rank: usize,
    ranks: usize,
    opt: Optimization<'a>,
    state: TrainerState,
    progress: Progress,
    failure: Failure,
    report: TrainReport,
    /// Whose steps in the checkpoint folder are this run's (retention prunes only those).
    own: OwnRuns,
}

impl<M: TrainableModel> RankRun<'_, M> {
    fn lead(&self) -> bool {
        self.rank == 0
    }

    /// Epochs until the schedule's last step (or `max_epochs`).
    fn epochs<S: BatchSource<Batch = M::Batch>>(&mut self, data: &S, params: &crate::Parameters) -> Result<()> {
        let c = self.config;
        let total_steps = self.report.total_steps;
        let max_epochs = if c.max_epochs == 0 { usize::MAX } else { c.max_epochs };
        let mut skipped_in_a_row = 0;
        while self.state.step < total_steps && self.state.epoch < max_epochs {
            let mut batches = data.epoch(self.state.epoch as u64).skip(self.state.batch_in_epoch);
            loop {
                if let Some(e) = self.failure.pending.take() {
                    // Tell the other ranks through the next step's collectives, then stop.
                    if self.state.step < total_steps {
                        let step = StepBatches { micro: &[], total: 1, comm: self.comm, failed: true };
                        let _ = optimizer_step(c, self.model, params, step, &mut self.opt, &self.state);
                    }
                    return Err(e);
                }
                if self.state.step >= total_steps {
                    return Ok(());
                }
                let started = Instant::now();
                // A device fault stops the run before the step (the first included).
                if let Some(fault) = self.device_fault() {
                    self.failure.fail(fault)?;
                    continue;
                }
                if let Some(p) = c.device_probe.as_ref().filter(|_| self.lead()) {
                    p.lock().unwrap_or_else(|e| e.into_inner()).begin_step();
                }
                let (micro, taken) = self.take_micro_batches(&mut batches)?;
                if taken == 0 {
                    break;
                }
                let step = StepBatches { micro: &micro, total: taken, comm: self.comm, failed: false };
                let outcome = optimizer_step(c, self.model, params, step, &mut self.opt, &self.state)?;
                self.state.step += 1;
                self.state.batch_in_epoch += taken;
                if let Some(status) = c.status.as_ref().filter(|_| self.lead()) {
                    status.set_step(self.state.step);
                }
                let tokens: usize = micro.iter().map(|(_, b)| self.model.tokens(b)).sum::<usize>() * self.ranks;
                self.record(&outcome, tokens, started)?;
                skipped_in_a_row = if outcome.anomalous { skipped_in_a_row + 1 } else { 0 };
                if skipped_in_a_row >= c.max_skipped_steps && !c.values_meaningless {
                    return Err(TrainError::TooManySkippedSteps { skipped: skipped_in_a_row, step: self.state.step });
                }
                self.state.loss_scaler = self.opt.scaler;
                // A fault that appeared during the step keeps its weights out of the checkpoints.
                if let Some(fault) = self.device_fault() {
                    self.failure.fail(fault)?;
                    continue;
                }
                self.save_if_due()?;
            }
            self.state.epoch += 1;
            self.state.batch_in_epoch = 0;
        }
        self.failure.pending.take().map_or(Ok(()), Err)
    }

    /// The fault of a watched device, if one reports one ([`crate::DeviceProbe::check_health`],
    /// on the lead rank); the probe's warnings go out on the way.
    fn device_fault(&mut self) -> Option<TrainError> {
        let probe = self.config.device_probe.as_ref().filter(|_| self.lead())?;
        let mut probe = probe.lock().unwrap_or_else(|e| e.into_inner());
        let health = probe.check_health();
        for w in probe.take_warnings() {
            self.progress.warn(w);
        }
        let fault = health.err()?;
        Some(TrainError::DeviceFault { after_step: self.state.step, fault })
    }

    /// The step's micro-batches, numbered across ranks: this rank takes every ranks-th, from its
    /// own rank on. Also returns how many all ranks take (fewer at an epoch's end).
    fn take_micro_batches(
        &self,
        batches: &mut impl Iterator<Item = Result<M::Batch>>,
    ) -> Result<(NumberedBatches<M::Batch>, usize)> {
        // Grown as batches come: an accumulation may be larger than the epoch.
        let mut micro = Vec::new();
        let mut taken = 0;
        while taken < self.config.accumulate_grad_batches.saturating_mul(self.ranks) {
            match batches.next() {
                Some(b) if taken % self.ranks == self.rank => micro.push((taken, b?)),
                Some(b) => drop(b?),
                None => break,
            }
            taken += 1;
        }
        Ok((micro, taken))
    }

    /// The step's metrics, to the report, the metrics file and the progress output.
    fn record(&mut self, outcome: &crate::step::StepOutcome, tokens: usize, started: Instant) -> Result<()> {
        let device = self
            .config
            .device_probe
            .as_ref()
            .filter(|_| self.lead())
            .map(|p| p.lock().unwrap_or_else(|e| e.into_inner()).end_step(tokens / self.ranks.max(1)));
        let npu = match self.config.device_probe.as_ref().filter(|_| self.lead()) {
            Some(p) => p.lock().unwrap_or_else(|e| e.into_inner()).sample(),
            None => Vec::new(),
        };
        let secs = started.elapsed().as_secs_f64();
        let metric = StepMetrics {
            step: self.state.step,
            epoch: self.state.epoch,
            loss: outcome.loss,
            lr: outcome.lr,
            grad_norm: outcome.grad_norm,
            tokens_per_s: tokens as f64 / secs.max(1e-9),
            step_seconds: secs,
            skipped: outcome.skipped,
            loss_scale: self.opt.scaler.map(|s| s.scale),
            overlapped_buckets: outcome.overlapped_buckets,
            device,
            npu,
        };
        if let Some(w) = &outcome.warning {
            self.progress.warn(w.clone());
        }
        if let Err(e) = self.progress.step(&metric) {
            self.failure.fail(e)?;
        }
        self.report.steps.push(metric);
        Ok(())
    }

    /// Rank 0 writes a checkpoint every `save_every_n_steps` (the last step's is written after the loop).
    fn save_if_due(&mut self) -> Result<()> {
        let c = self.config;
        let due = c.save_every_n_steps.is_some_and(|n| self.state.step.is_multiple_of(n));
        let (Some(dir), Some(files)) = (&c.checkpoint_dir, self.model.checkpointable()) else { return Ok(()) };
        if !due || self.state.step >= self.report.total_steps || !self.lead() {
            return Ok(());
        }
        match save_checkpoint(c, files, &self.opt.optimizer, &self.state, dir, &self.own) {
            Ok(path) => {
                if let Some(status) = &c.status {
                    status.set_last_checkpoint(path.clone());
                }
                self.report.checkpoints.push(path);
            }
            Err(e) => self.failure.fail(e)?,
        }
        Ok(())
    }
}
