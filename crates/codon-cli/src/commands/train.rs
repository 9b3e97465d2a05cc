//! `codon finetune` and `codon pretrain`: upstream `finetune.py`'s flags (in `--snake_case` and
//! `--kebab-case`) plus this project's. `finetune` starts from `--model`, else (with
//! `--dataset_dir`) from `adibvafa/CodonTransformer-base` as upstream does; the demo (no
//! `--dataset_dir`), `--from-scratch` and `--config` start from a random initialisation.

use crate::cli::{
    AttentionArg, ConfigArg, DeviceArg, DeviceSpec, GradientCheckpointingArg, LoaderArgs, MaxEpochsArg, ModelArg,
    OverwriteArg, PrecisionArg, SeedArg,
};
use std::path::PathBuf;
use std::sync::Arc;

use crate::{errln, outln};
use anyhow::Context;
use candle_core::DType;
use clap::Parser;
use codon_data::{prepare, DataLoader, JsonlDataset, LoaderConfig, MalformedPolicy, MlmCollator, PrepareOptions};
use codon_model::bigbird::{init_weights, load_model, AttentionType, BigBirdConfig, BigBirdForMaskedLM};
use codon_model::training::{MaskedLmData, MaskedLmModel, NewOrganismModel};
use codon_model::{CodonTokenizer, OrganismTable};
use codon_train::{AnomalyPolicy, Precision, RunIdentity, RunStatus, TrainableModel, Trainer, TrainerConfig};

/// How long the ranks of a multi-process NCCL run wait for each other at the rendezvous:
/// torchrun's own rendezvous timeout.
const NCCL_RENDEZVOUS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(900);

/// Which script.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Start from `--model` (or a random initialisation).
    Finetune,
    /// Always start from a random initialisation.
    Pretrain,
}

/// Train CodonTransformer (BigBirdForMaskedLM) on a JSONL training file.
#[derive(Parser, Debug)]
pub struct Args {
    /// Training file (JSONL: {"idx", "codons", "organism"}). Without it, the run is the demo: the
    /// bundled demo data, a small model (2 layers, hidden 64), 6 epochs, learning rate 2e-3, and
    /// checkpoints in demo-output/checkpoints; flags given explicitly still apply.
    #[arg(long = "dataset_dir", alias = "dataset-dir", alias = "train_data_path", alias = "train-data-path")]
    pub dataset_dir: Option<PathBuf>,
    /// Folder for step-<N> checkpoints.
    #[arg(long = "checkpoint_dir", alias = "checkpoint-dir")]
    pub checkpoint_dir: Option<PathBuf>,
    /// Upstream-style state-dict file written next to the checkpoints: a plain file name inside
    /// --checkpoint_dir [default: finetune.ckpt, pretrain: pretrain.ckpt].
    #[arg(long = "checkpoint_filename", alias = "checkpoint-filename")]
    pub checkpoint_filename: Option<String>,
    #[command(flatten)]
    pub overwrite: OverwriteArg,
    #[command(flatten)]
    pub loader: LoaderArgs<5>,
    #[command(flatten)]
    pub max_epochs: MaxEpochsArg,
    /// Micro-batches per optimizer step.
    #[arg(long = "accumulate_grad_batches", alias = "accumulate-grad-batches", default_value_t = 1)]
    pub accumulate_grad_batches: usize,
    /// Devices trained data-parallel over HCCL (--device npu:K) or NCCL (cuda:K): that device
    /// and the next N − 1.
    // Bounded past any one host's devices: the list of them is made before any is opened.
    #[arg(long = "num_gpus", alias = "num-gpus", default_value_t = 1,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    pub num_gpus: usize,
    /// Peak learning rate [default: 5e-5; demo: 2e-3].
    #[arg(long = "learning_rate", alias = "learning-rate")]
    pub learning_rate: Option<f64>,
    /// Warm-up fraction of OneCycleLR.
    #[arg(long = "warmup_fraction", alias = "warmup-fraction", default_value_t = 0.1)]
    pub warmup_fraction: f64,
    /// Checkpoint every N optimizer steps.
    #[arg(long = "save_every_n_steps", alias = "save-every-n-steps", default_value_t = 512)]
    pub save_every_n_steps: usize,
    #[command(flatten)]
    pub seed: SeedArg<123>,
    /// The starting model (finetune only; --config or --from-scratch start from a random
    /// initialisation instead).
    #[command(flatten)]
    pub model: ModelArg,
    /// Start from a random initialisation (CodonTransformer's configuration unless --config).
    #[arg(long = "from-scratch", alias = "from_scratch", conflicts_with = "model")]
    pub from_scratch: bool,
    #[command(flatten)]
    pub config: ConfigArg,
    #[command(flatten)]
    pub device: DeviceArg,
    #[command(flatten)]
    pub precision: PrecisionArg,
    #[command(flatten)]
    pub attention: AttentionArg,
    /// Stop after N optimizer steps.
    #[arg(long = "max_steps", alias = "max-steps")]
    pub max_steps: Option<usize>,
    /// Resume from a step-<N> checkpoint folder.
    #[arg(long)]
    pub resume: Option<PathBuf>,
    /// Per-step metrics JSONL file.
    #[arg(long)]
    pub metrics: Option<PathBuf>,
    /// What a non-finite loss or gradient does: skip the update (and warn), or abort.
    #[arg(long = "on-nonfinite", alias = "on_nonfinite", value_enum, default_value_t = OnNonFinite::Skip)]
    pub on_nonfinite: OnNonFinite,
    /// Stop with an error after this many skipped steps in a row.
    #[arg(long = "max-skipped-steps", alias = "max_skipped_steps", default_value_t = 10)]
    pub max_skipped_steps: usize,
    /// Keep only the newest N step-<N> folders (about 1 GB each at full size).
    #[arg(long = "keep-last", alias = "keep_last", alias = "save_top_k", alias = "save-top-k")]
    pub keep_last: Option<usize>,
    /// Clip gradients to this global norm.
    #[arg(long = "gradient_clip", alias = "gradient-clip")]
    pub gradient_clip: Option<f64>,
    #[command(flatten)]
    pub gradient_checkpointing: GradientCheckpointingArg,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// With WORLD_SIZE > 1 (torchrun's variables): a file on a shared filesystem through which
    /// rank 0 hands out HCCL's root info, instead of TCP on MASTER_ADDR:MASTER_PORT.
    #[arg(long)]
    pub rendezvous: Option<PathBuf>,
    /// Teach --model a new organism under this name: one embedding row is added and is all that
    /// trains; every record of the dataset is taken as this organism's. The checkpoints carry the
    /// new organism in their config and organism table (organisms.json).
    #[arg(long = "add-organism", alias = "add_organism", value_name = "NAME")]
    pub add_organism: Option<String>,
}

/// `--on-nonfinite`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum OnNonFinite {
    /// Skip the update, warn, and go on.
    Skip,
    /// Stop with an error naming the step and the parameters.
    Abort,
}

pub fn run(mode: Mode, mut args: Args) -> anyhow::Result<()> {
    let checkpoint_filename = args.checkpoint_filename.clone().unwrap_or_else(|| {
        match mode {
            Mode::Finetune => "finetune.ckpt",
            Mode::Pretrain => "pretrain.ckpt",
        }
        .to_string()
    });
    // The demo is whatever runs without a dataset: its defaults stay whatever else is set.
    let demo = args.dataset_dir.is_none();
    let out_dir = PathBuf::from("demo-output");
    // torchrun's layout: one process per device, --device npu:K meaning K + LOCAL_RANK.
    let layout = codon_train::rendezvous::RankLayout::from_env()?;
    let first = match &layout {
        Some(l) if args.num_gpus != 1 => anyhow::bail!(
            "WORLD_SIZE={} runs one process per device: use --num_gpus 1 in each (rank {})",
            l.world,
            l.rank
        ),
        Some(l) => data_parallel_devices(*args.device, l.local_rank + 1)?.pop().unwrap_or(*args.device),
        None => *args.device,
    };
    args.device.apply_tf32()?;
    let mut devices = Vec::new();
    for (k, spec) in data_parallel_devices(first, args.num_gpus)?.into_iter().enumerate() {
        devices.push(match k {
            0 => spec.open()?,
            _ => spec.open().with_context(|| format!("--num_gpus {} from {first}", args.num_gpus))?,
        });
    }
    let device = devices[0].clone();
    // Finetuning real data starts from the published base model unless told otherwise (upstream's
    // finetune.py); a Hub id becomes the cached snapshot's folder.
    let random_start = args.config.path.is_some() || args.from_scratch || args.resume.is_some() || demo;
    if mode == Mode::Finetune && args.model.path.is_none() && !random_start {
        args.model.path = Some(PathBuf::from(codon_model::hub::DEFAULT_BASE_MODEL));
    }
    if mode == Mode::Finetune {
        // A missing dataset is reported before any download.
        if let Some(path) = &args.dataset_dir {
            std::fs::metadata(path).with_context(|| format!("--dataset_dir {}", path.display()))?;
        }
        args.model.path = args.model.path.as_deref().map(codon_model::hub::resolve_model).transpose()?;
    }
    // An emulator that skips arithmetic counts launches and memory; its values mean nothing.
    let no_math = crate::skips_math(&device);
    if no_math {
        outln!(
            "no-math mode (CANDLE_ASCEND_SIM_NO_MATH=1): values are meaningless; anomalies do not stop the run, and checkpoints are written only to an explicit --checkpoint_dir"
        );
    }
    let checkpoint_dir =
        args.checkpoint_dir.clone().or_else(|| (demo && !no_math).then(|| out_dir.join("checkpoints")));
    // The demo's own folder holds whatever the last demo run left: each demo run replaces it.
    let overwrite = args.overwrite.allowed || (demo && args.checkpoint_dir.is_none());
    if checkpoint_dir.is_none() {
        outln!("no --checkpoint_dir: nothing will be saved");
    }
    let status = Arc::new(RunStatus::default());
    crate::interrupt::exit_on_interrupt(status.clone(), checkpoint_dir.clone())?;
    // What the run reads: the trainer refuses any output that would replace one, or lie inside one.
    let inputs: Vec<PathBuf> =
        [&args.dataset_dir, &args.model.path, &args.config.path].into_iter().flatten().cloned().collect();
    let precision = args.precision.resolve(&device);
    if let Some(ascend) = candle_ascend::ascend_device(&device) {
        let soc = ascend.soc();
        if precision == Precision::Bf16 && !soc.has_bf16() {
            anyhow::bail!(
                "--precision bf16: {} ({}) has no BF16; use --precision f16 (dynamic loss scaling) or f32",
                soc.name,
                ascend.name()
            );
        }
        outln!("device: {} ({}), precision {:?}", ascend.name(), soc.name, precision);
    } else {
        outln!("device: {}, precision {:?}", args.device, precision);
    }
    let attention = AttentionType::from(args.attention.choice);
    let epochs = args.max_epochs.value.unwrap_or(match (mode, demo) {
        (_, true) => 6,
        (Mode::Finetune, false) => 15,
        (Mode::Pretrain, false) => 5,
    });
    let learning_rate = args.learning_rate.unwrap_or(if demo { 2e-3 } else { 5e-5 });

    let (config, config_source) = match (&args.config.path, &args.resume, demo) {
        (Some(p), _, _) => (BigBirdConfig::from_file(p)?, format!("{}", p.display())),
        (None, Some(step), _) => {
            let file = step.join("config.json");
            let config = BigBirdConfig::from_file(&file).with_context(|| {
                format!("--resume {}: reading the checkpoint's model configuration", step.display())
            })?;
            (config, format!("the checkpoint's {}", file.display()))
        }
        (None, None, true) => (codon_model::bigbird::BigBirdConfig::demo(), "the demo model".to_string()),
        (None, None, false) => match &args.model.path {
            Some(path) => (BigBirdConfig::default(), format!("{}'s own", path.display())),
            None => (BigBirdConfig::default(), "CodonTransformer's".to_string()),
        },
    };
    if demo {
        outln!(
            "configuration: demo, because no --dataset_dir was given: the bundled demo data, {config_source}, \
             {epochs} epochs, learning rate {learning_rate:e} (give --dataset_dir for a real run)"
        );
    } else {
        outln!("configuration: {config_source} model, {epochs} epochs, learning rate {learning_rate:e}");
    }

    let mut outputs: Vec<(&str, PathBuf)> = Vec::new();
    let dataset_path = match &args.dataset_dir {
        Some(p) => p.clone(),
        None => {
            std::fs::create_dir_all(&out_dir)?;
            let train = out_dir.join("train.jsonl");
            let report = prepare(&crate::write_demo_genes(&out_dir)?, &train, &PrepareOptions::default())?;
            outln!("bundled demo data: {report}");
            outputs.push(("prepared data", train.clone()));
            train
        }
    };

    let model = match (&args.model.path, mode) {
        (Some(_), Mode::Pretrain) => anyhow::bail!("pretrain trains from scratch: drop --model (or use finetune)"),
        (Some(path), Mode::Finetune) => {
            outln!("starting from {}", path.display());
            load_model(path, args.config.path.as_ref().map(|_| config.clone()), &device, DType::F32)?
        }
        (None, _) => {
            if mode == Mode::Finetune && args.resume.is_none() {
                outln!("no --model given: starting from a random initialisation (seed {})", args.seed.value);
            }
            BigBirdForMaskedLM::from_named(
                config.clone(),
                init_weights(&config, args.seed.value, &device, DType::F32)?,
            )?
        }
    };
    outln!("model: {} parameters, {:?} attention, {:?} precision", model.num_parameters(), attention, precision);
    let new_organism = match (&args.add_organism, &args.model.path) {
        (None, _) => None,
        (Some(name), Some(path)) if mode == Mode::Finetune => {
            if devices.len() > 1 || layout.is_some() {
                anyhow::bail!("--add-organism trains one embedding row on one device: use --num_gpus 1");
            }
            let taught = NewOrganismModel::new(&model, &OrganismTable::for_model(path)?, name, precision, attention)?;
            outln!("adding organism {name:?} as id {}: only its embedding row trains", taught.organism_id());
            Some(taught)
        }
        (Some(_), _) => anyhow::bail!("--add-organism teaches a trained model a new organism: finetune with --model"),
    };
    // One replica per device; rank 0's weights reach the others by broadcast when training starts.
    let mut replicas = Vec::with_capacity(devices.len());
    for d in devices.iter().skip(1).filter(|_| new_organism.is_none()) {
        let weights = model
            .named_parameters()
            .into_iter()
            .map(|(n, t)| Ok((n, t.to_device(d)?)))
            .collect::<candle_core::Result<Vec<_>>>()?;
        replicas.push(BigBirdForMaskedLM::from_named(config.clone(), weights.into_iter().collect())?);
    }
    // The model's own configuration: a --model folder brings its own.
    let model_config = model.config().clone();
    let probe_len = model_config.block_sparse_probe_len();
    // Full attention's keys per token are taken at the longest position the model has.
    let flops_per_token = model_config.training_flops_per_token(
        model.named_parameters().iter().map(|(_, t)| t.elem_count()).sum(),
        attention,
        model_config.max_position_embeddings,
    );
    replicas.insert(0, model);
    let replicas = replicas
        .into_iter()
        .filter(|_| new_organism.is_none())
        .map(|m| {
            Ok(MaskedLmModel::new(m, precision, attention)?
                .with_gradient_checkpointing(args.gradient_checkpointing.enabled))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    if replicas.len() > 1 {
        outln!(
            "data-parallel over {}: {}",
            if device.is_cuda() { "NCCL" } else { "HCCL" },
            devices
                .iter()
                .map(|d| candle_ascend::ascend_device(d).map_or_else(|| d.location().to_string(), |a| a.name()))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }

    let dataset = JsonlDataset::open(&dataset_path, MalformedPolicy::Error)?;
    let unknown = dataset.unknown_tokens();
    if let Some((line, word)) = &unknown.first {
        errln!(
            "warning: {}: {} of {} tokens are not in the vocabulary (the first, {word:?}, at line {line}): they train as [UNK]",
            dataset_path.display(),
            unknown.count,
            unknown.total
        );
    }
    let loader_config = LoaderConfig {
        batch_size: args.loader.batch_size,
        num_workers: args.loader.num_workers,
        seed: args.seed.value,
        ..Default::default()
    };
    let loader = DataLoader::new(dataset, MlmCollator::new(CodonTokenizer::new()?), loader_config)?;
    outln!("{} records, {} batches per epoch", loader.records_per_epoch(), loader.batches_per_epoch());
    let data = MaskedLmData::new(loader);

    let trainer_config = TrainerConfig::builder()
        .learning_rate(learning_rate)
        .warmup_fraction(args.warmup_fraction)
        .max_epochs(epochs)
        .max_steps(args.max_steps)
        .accumulate_grad_batches(args.accumulate_grad_batches)
        .gradient_clip(args.gradient_clip)
        .precision(precision)
        .seed(args.seed.value)
        .checkpoint_dir(checkpoint_dir.clone())
        .checkpoint_filename(checkpoint_dir.as_ref().map(|_| checkpoint_filename.clone()))
        .inputs(inputs)
        .run_description(run_description(&model_config, &dataset_path)?)
        .overwrite(overwrite)
        .status(status)
        .save_every_n_steps(Some(args.save_every_n_steps))
        .keep_last(args.keep_last)
        .anomaly_policy(match args.on_nonfinite {
            OnNonFinite::Skip => AnomalyPolicy::Skip,
            OnNonFinite::Abort => AnomalyPolicy::Abort,
        })
        .max_skipped_steps(args.max_skipped_steps)
        .values_are_meaningless(no_math)
        .metrics_path(args.metrics.clone())
        .retain_freed_memory(true)
        .quiet(args.quiet);
    let trainer_config = match candle_ascend::ascend_device(&device) {
        Some(ascend) => trainer_config.device_probe(Box::new(
            codon_train_ascend::AscendProbe::new(ascend.clone())
                .with_flops_per_token(flops_per_token)
                .monitoring(monitored_devices(ascend, &devices, layout.as_ref(), *args.device)?),
        )),
        None => trainer_config,
    }
    .build()?;
    if let Some(ascend) = candle_ascend::ascend_device(&device) {
        match (&new_organism, replicas.first()) {
            (Some(taught), _) => preflight(ascend, taught, precision, probe_len)?,
            (None, Some(model)) => preflight(ascend, model, precision, probe_len)?,
            (None, None) => {}
        }
    }
    if let Some(step) = &args.resume {
        outln!("resuming from {}", step.file_name().unwrap_or(step.as_os_str()).to_string_lossy());
    }
    let trainer = Trainer::new(trainer_config);
    let report = match (&layout, candle_ascend::ascend_device(&device)) {
        (Some(l), Some(ascend)) => {
            let how = codon_train::rendezvous::Rendezvous::from_env(args.rendezvous.clone());
            let timeouts = candle_ascend::HcclTimeouts::from_env(ascend.soc());
            for note in candle_ascend::HcclTimeouts::notes(ascend.soc()) {
                errln!("note: {note}");
            }
            let timeout = std::time::Duration::from_secs_f64(timeouts.connect_s);
            outln!("{}", codon_train::rendezvous::waiting_line(l, &how, timeout, Some("HCCL_CONNECT_TIMEOUT")));
            let comm = codon_train_ascend::join(l, ascend, &how, timeout)?;
            outln!("rank {} of {} on {} ({how:?})", l.rank, l.world, ascend.name());
            let model = replicas.first().context("no model to train")?;
            trainer.fit_distributed(model, &data, args.resume.as_deref(), &comm)?
        }
        (Some(l), None) if device.is_cuda() => {
            let how = codon_train::rendezvous::Rendezvous::from_env(args.rendezvous.clone());
            outln!("{}", codon_train::rendezvous::waiting_line(l, &how, NCCL_RENDEZVOUS_TIMEOUT, None));
            let comm = codon_train_cuda::Nccl::join(l, &device, &how, NCCL_RENDEZVOUS_TIMEOUT)?;
            outln!("rank {} of {} on {} ({how:?})", l.rank, l.world, args.device);
            let model = replicas.first().context("no model to train")?;
            trainer.fit_distributed(model, &data, args.resume.as_deref(), &comm)?
        }
        (Some(l), None) => anyhow::bail!(
            "WORLD_SIZE={}: several processes train over HCCL on Ascend NPUs (--device npu:K or npu-sim:K) or over NCCL on NVIDIA GPUs (--device cuda:K); the CPU trains alone",
            l.world
        ),
        (None, _) => match &new_organism {
            Some(taught) => trainer.fit(taught, &data, args.resume.as_deref())?,
            None if device.is_cuda() => {
                codon_train_cuda::fit_data_parallel(&trainer, &replicas, &data, args.resume.as_deref())?
            }
            None => codon_train_ascend::fit_data_parallel(&trainer, &replicas, &data, args.resume.as_deref())?,
        },
    };
    if layout.as_ref().is_some_and(|l| l.rank != 0) {
        return Ok(());
    }
    let (Some(first), Some(last)) = (report.steps.first(), report.steps.last()) else {
        anyhow::bail!(
            "nothing to train: the run is already at the end of its {}-step schedule (resumed from a final checkpoint?)",
            report.total_steps
        );
    };
    outln!(
        "{} optimizer steps: loss {:.4} (step {}) -> {:.4} (step {})",
        report.steps.len(),
        first.loss,
        first.step,
        last.loss,
        last.step
    );
    if report.steps.iter().all(|s| s.skipped) && !no_math {
        anyhow::bail!("every optimizer step was skipped for non-finite values: the weights were never updated");
    }
    match &checkpoint_dir {
        Some(dir) => {
            outputs.push(("checkpoint folder", dir.clone()));
            outputs.extend(report.checkpoints.iter().map(|c| ("checkpoint", c.clone())));
            outputs.push(("state dict", dir.join(&checkpoint_filename)));
        }
        None => outln!("no --checkpoint_dir: nothing was saved"),
    }
    outputs.extend(args.metrics.iter().map(|m| ("metrics", m.clone())));
    for (what, path) in outputs {
        outln!("{what}: {}", path.display());
    }
    Ok(())
}

/// What identifies this run beside the trainer's settings: the model configuration, and the
/// training file's resolved path and size.
fn run_description(config: &BigBirdConfig, dataset: &std::path::Path) -> anyhow::Result<RunIdentity> {
    let bytes = std::fs::metadata(dataset).with_context(|| format!("--dataset_dir {}", dataset.display()))?.len();
    let model: serde_json::Value = serde_json::from_str(&config.to_json())?;
    Ok(RunIdentity::from([
        ("model_config".to_string(), model.to_string()),
        ("dataset".to_string(), codon_files::resolved(dataset).display().to_string()),
        ("dataset_bytes".to_string(), bytes.to_string()),
    ]))
}

/// One optimizer step of this run, on a synthetic batch, with every launch reduced to phase 1:
/// fails before the first real step, listing every op the part refuses.
fn preflight<M: TrainableModel<Batch = codon_data::MlmBatch>>(
    ascend: &candle_ascend::AscendDevice,
    model: &M,
    precision: Precision,
    seq_len: usize,
) -> anyhow::Result<()> {
    let config = TrainerConfig::builder().max_steps(Some(1)).max_epochs(1).precision(precision).quiet(true).build()?;
    let data = codon_train::SameBatch(codon_data::synthetic_mlm_batch(1, seq_len));
    ascend.preflight(|| {
        Trainer::new(config).fit(model, &data, None).map(|_| ()).map_err(|e| candle_core::Error::Msg(e.to_string()))
    })?;
    outln!("preflight on {}: every op of a training step is supported", ascend.soc().name);
    Ok(())
}

/// The devices whose DCMI figures and health the run follows: every device of an in-process
/// data-parallel run; in a multi-process run, rank 0 (which writes the metrics) follows every
/// rank's device on its machine, the others their own.
fn monitored_devices(
    ascend: &candle_ascend::AscendDevice,
    devices: &[candle_core::Device],
    layout: Option<&codon_train::rendezvous::RankLayout>,
    base: DeviceSpec,
) -> anyhow::Result<Vec<candle_ascend::DeviceWatch>> {
    match layout {
        Some(l) if l.rank == 0 => Ok(data_parallel_devices(base, l.local_world)?
            .into_iter()
            .filter_map(|spec| match spec {
                DeviceSpec::Ascend { id, .. } => Some(ascend.watch_peer(id)),
                _ => None,
            })
            .collect()),
        Some(_) => Ok(vec![ascend.watch()]),
        None => Ok(devices.iter().filter_map(|d| candle_ascend::ascend_device(d).map(|a| a.watch())).collect()),
    }
}

/// The devices of `--num_gpus n` from `--device`'s: that one and the next n − 1 of its kind.
/// Several devices train data-parallel over HCCL or NCCL, which the CPU does not have.
fn data_parallel_devices(first: DeviceSpec, n: usize) -> anyhow::Result<Vec<DeviceSpec>> {
    match (n, first) {
        (0, _) => anyhow::bail!("--num_gpus must be at least 1"),
        (1, _) => Ok(vec![first]),
        (_, DeviceSpec::Cpu) => anyhow::bail!(
            "--num_gpus {n}: several devices train data-parallel over HCCL on Ascend NPUs (--device npu:K, or npu-sim:K on the emulator) or over NCCL on NVIDIA GPUs (--device cuda:K); the CPU trains with --num_gpus 1"
        ),
        _ => first.and_next(n).ok_or_else(|| anyhow::anyhow!("--num_gpus {n} from --device {first}: no such devices")),
    }
}
