//! The training loop on a tiny BigBird and the demo data: loss falls, resume is exact,
//! bad checkpoints are rejected, anomalies are caught.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor, Var};
use codon_data::{prepare, DataLoader, JsonlDataset, LoaderConfig, MalformedPolicy, MlmCollator, PrepareOptions};
use codon_model::bigbird::{init_weights, AttentionType, BigBirdConfig, BigBirdForMaskedLM};
use codon_model::training::{MaskedLmData, MaskedLmModel};
use codon_model::CodonTokenizer;
use codon_train::{
    AnomalyPolicy, BatchSource, Checkpointable, Collective, Constant, Parameters, Precision, StepMetrics, TrainError,
    TrainableModel, Trainer, TrainerConfig,
};

fn tiny_config(dropout: f64) -> BigBirdConfig {
    BigBirdConfig::from_json(&format!(
        r#"{{"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 48,
            "block_size": 16, "num_random_blocks": 1, "max_position_embeddings": 1024,
            "hidden_dropout_prob": {dropout}, "attention_probs_dropout_prob": {dropout}}}"#
    ))
    .unwrap()
}

fn demo_data(dir: &Path, batch_size: usize) -> MaskedLmData {
    let demo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../codon-cli/demo/genes.csv");
    let train = dir.join("train.jsonl");
    prepare(&demo, &train, &PrepareOptions::default()).unwrap();
    let dataset = JsonlDataset::open(&train, MalformedPolicy::Error).unwrap();
    let config = LoaderConfig { batch_size, num_workers: 1, seed: 5, ..Default::default() };
    MaskedLmData::new(DataLoader::new(dataset, MlmCollator::new(CodonTokenizer::new().unwrap()), config).unwrap())
}

fn model(dropout: f64, precision: Precision) -> MaskedLmModel {
    let config = tiny_config(dropout);
    let w = init_weights(&config, 0, &Device::Cpu, DType::F32).unwrap();
    MaskedLmModel::new(BigBirdForMaskedLM::from_named(config, w).unwrap(), precision, AttentionType::BlockSparse)
        .unwrap()
}

fn losses(steps: &[StepMetrics]) -> Vec<f64> {
    steps.iter().map(|s| s.loss).collect()
}

#[test]
fn loss_falls_on_the_demo_data() {
    let dir = tempfile::tempdir().unwrap();
    let data = demo_data(dir.path(), 6);
    let m = model(0.0, Precision::F32);
    let config = TrainerConfig::builder()
        .learning_rate(3e-3)
        .warmup_fraction(0.1)
        .max_epochs(6)
        .precision(Precision::F32)
        .quiet(true)
        .metrics_path(Some(dir.path().join("metrics.jsonl")))
        .build()
        .unwrap();
    let report = Trainer::new(config).fit(&m, &data, None).unwrap();
    assert_eq!(report.steps.len(), 36);
    let l = losses(&report.steps);
    let first: f64 = l[..6].iter().sum::<f64>() / 6.0;
    let last: f64 = l[l.len() - 6..].iter().sum::<f64>() / 6.0;
    assert!(last < first - 0.3, "loss did not fall: first epoch {first:.3}, last epoch {last:.3}");
    // The metrics log: one object per optimizer step, steps counted from 1.
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(dir.path().join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 36);
    assert_eq!(lines[0]["step"], 1);
    for key in ["epoch", "loss", "lr", "grad_norm", "tokens_per_s", "step_seconds"] {
        assert!(lines[5][key].is_number(), "{key}");
    }
    assert_eq!(lines[35]["epoch"], 5);
}

#[test]
fn resume_reproduces_the_uninterrupted_losses() {
    let dir = tempfile::tempdir().unwrap();
    let data = demo_data(dir.path(), 5);
    let trainer = |ckpt: &Path| {
        Trainer::new(
            TrainerConfig::builder()
                .learning_rate(1e-3)
                .max_epochs(2)
                .accumulate_grad_batches(2)
                .gradient_clip(Some(1.0))
                .precision(Precision::F32)
                .checkpoint_dir(Some(ckpt.to_path_buf()))
                .checkpoint_filename(Some("finetune.ckpt".into()))
                .save_every_n_steps(Some(3))
                .quiet(true)
                .build()
                .unwrap(),
        )
    };
    // 8 batches per epoch, 2 per step: 4 steps per epoch, 8 in all; checkpoints at 3 and 6.
    let full = trainer(&dir.path().join("a")).fit(&model(0.1, Precision::F32), &data, None).unwrap();
    assert_eq!(full.steps.len(), 8);
    let names: Vec<String> =
        full.checkpoints.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(names, ["step-3", "step-6", "step-8"]);
    assert!(dir.path().join("a/finetune.ckpt").exists());

    // A fresh model resumed from step 3 continues with exactly the same losses.
    let resumed = trainer(&dir.path().join("b"))
        .fit(&model(0.1, Precision::F32), &data, Some(&dir.path().join("a/step-3")))
        .unwrap();
    assert_eq!(losses(&resumed.steps), losses(&full.steps[3..]));
    assert_eq!(resumed.steps[0].step, 4);
    assert_eq!(resumed.steps[1].epoch, 1, "step 5 starts the second epoch");

    // The final checkpoint is a transformers model directory.
    let reloaded =
        codon_model::bigbird::load_model(dir.path().join("a/step-8"), None, &Device::Cpu, DType::F32).unwrap();
    assert_eq!(reloaded.config().hidden_size, 32);
}

#[test]
fn corrupt_or_partial_checkpoints_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let data = demo_data(dir.path(), 6);
    let make = || {
        Trainer::new(
            TrainerConfig::builder()
                .max_steps(Some(2))
                .max_epochs(1)
                .precision(Precision::F32)
                .checkpoint_dir(Some(dir.path().join("ck")))
                .quiet(true)
                .build()
                .unwrap(),
        )
    };
    make().fit(&model(0.0, Precision::F32), &data, None).unwrap();
    let good = dir.path().join("ck/step-2");
    let copy = |name: &str| {
        let to = dir.path().join(name);
        std::fs::create_dir_all(&to).unwrap();
        for f in std::fs::read_dir(&good).unwrap() {
            let f = f.unwrap();
            std::fs::copy(f.path(), to.join(f.file_name())).unwrap();
        }
        to
    };
    let truncated = copy("truncated");
    let opt = truncated.join("optimizer.safetensors");
    let bytes = std::fs::read(&opt).unwrap();
    std::fs::write(&opt, &bytes[..bytes.len() / 2]).unwrap();
    let partial = copy("partial");
    std::fs::remove_file(partial.join("trainer_state.json")).unwrap();
    let bad_json = copy("bad_json");
    std::fs::write(bad_json.join("trainer_state.json"), "{\"step\": ").unwrap();
    let no_weights = copy("no_weights");
    std::fs::remove_file(no_weights.join("model.safetensors")).unwrap();
    for (path, needle) in [
        (truncated, "optimizer.safetensors"),
        (partial, "trainer_state.json"),
        (bad_json, "corrupt"),
        (no_weights, "model weights"),
        (dir.path().join("missing"), "not a folder"),
    ] {
        let err = make().fit(&model(0.0, Precision::F32), &data, Some(&path)).unwrap_err();
        assert!(matches!(err, TrainError::Checkpoint { .. }), "{err}");
        assert!(err.to_string().contains(needle), "{needle}: {err}");
    }
    let other_seed =
        Trainer::new(TrainerConfig::builder().max_steps(Some(2)).max_epochs(1).seed(9).quiet(true).build().unwrap());
    let err = other_seed.fit(&model(0.0, Precision::F32), &data, Some(&good)).unwrap_err();
    assert!(err.to_string().contains("seed"), "{err}");
}

#[test]
fn bf16_and_f16_training_run() {
    let dir = tempfile::tempdir().unwrap();
    let data = demo_data(dir.path(), 6);
    for precision in [Precision::Bf16, Precision::F16] {
        let m = model(0.1, precision);
        let config = TrainerConfig::builder()
            .learning_rate(1e-3)
            .max_steps(Some(3))
            .max_epochs(1)
            .precision(precision)
            .quiet(true)
            .build()
            .unwrap();
        let report = Trainer::new(config).fit(&m, &data, None).unwrap();
        assert_eq!(report.steps.len(), 3);
        assert!(report.steps.iter().all(|s| s.loss.is_finite() && !s.skipped), "{precision:?}: {:?}", report.steps);
        assert_eq!(m.parameters().named()[0].1.dtype(), precision.dtype());
        if precision == Precision::F16 {
            assert_eq!(report.steps[0].loss_scale, Some(65536.0));
        }
    }
}

/// y = w·x with an injectable NaN, to test anomaly handling.
struct Linear {
    w: Var,
    b: Var,
}

impl TrainableModel for Linear {
    type Batch = (f32, bool);
    fn parameters(&self) -> Parameters {
        Parameters::from(vec![("w".into(), self.w.clone()), ("b".into(), self.b.clone())])
    }
    fn loss(&self, batch: &(f32, bool), _seed: u64) -> codon_train::Result<Tensor> {
        let x = if batch.1 { f32::NAN } else { batch.0 };
        let x = Tensor::new(&[x], &Device::Cpu)?;
        Ok(((self.w.as_tensor() * &x)? + self.b.as_tensor())?.sqr()?.sum_all()?)
    }
    fn tokens(&self, _: &(f32, bool)) -> usize {
        1
    }
    fn checkpointable(&self) -> Option<&dyn Checkpointable> {
        Some(self)
    }
}

impl Checkpointable for Linear {
    fn save(&self, weights: &[(String, Tensor)], dir: &Path) -> codon_train::Result<()> {
        let weights: HashMap<String, Tensor> = weights.iter().cloned().collect();
        Ok(candle_core::safetensors::save(&weights, dir.join("linear.safetensors"))?)
    }
    fn load(&self, dir: &Path) -> codon_train::Result<HashMap<String, Tensor>> {
        Ok(candle_core::safetensors::load(dir.join("linear.safetensors"), &Device::Cpu)?)
    }
}

/// y = w², a model that only trains: nothing about files.
struct Square(Var);

impl TrainableModel for Square {
    type Batch = (f32, bool);
    fn parameters(&self) -> Parameters {
        Parameters::from(vec![("w".into(), self.0.clone())])
    }
    fn loss(&self, _: &(f32, bool), _seed: u64) -> codon_train::Result<Tensor> {
        Ok(self.0.as_tensor().sqr()?.sum_all()?)
    }
    fn tokens(&self, _: &(f32, bool)) -> usize {
        1
    }
}

#[test]
fn a_model_without_files_trains_and_refuses_checkpoints() {
    let model = Square(Var::new(&[1.0f32], &Device::Cpu).unwrap());
    let data = Batches(vec![(0.0, false); 3]);
    let config = |dir: Option<PathBuf>| {
        let b = TrainerConfig::builder().precision(Precision::F32).max_epochs(1).scheduler(Box::new(Constant(0.1)));
        b.checkpoint_dir(dir).quiet(true).build().unwrap()
    };
    let report = Trainer::new(config(None)).fit(&model, &data, None).unwrap();
    assert_eq!(report.steps.len(), 3);
    assert!(model.0.as_tensor().to_vec1::<f32>().unwrap()[0] < 1.0, "the weight moved towards the minimum");
    let dir = tempfile::tempdir().unwrap();
    let err = Trainer::new(config(Some(dir.path().into()))).fit(&model, &data, None).unwrap_err();
    assert!(err.to_string().contains("cannot be checkpointed"), "{err}");
    let err = Trainer::new(config(None)).fit(&model, &data, Some(dir.path())).unwrap_err();
    assert!(err.to_string().contains("cannot be checkpointed"), "{err}");
}

struct Batches(Vec<(f32, bool)>);

impl BatchSource for Batches {
    type Batch = (f32, bool);
    fn batches_per_epoch(&self) -> usize {
        self.0.len()
    }
    fn epoch(&self, _: u64) -> Box<dyn Iterator<Item = codon_train::Result<(f32, bool)>> + '_> {
        Box::new(self.0.iter().map(|b| Ok(*b)))
    }
}

#[test]
fn anomaly_detection_triggers_on_an_injected_nan() {
    let linear =
        || Linear { w: Var::new(&[0.5f32], &Device::Cpu).unwrap(), b: Var::new(&[0.1f32], &Device::Cpu).unwrap() };
    let data = Batches(vec![(1.0, false), (2.0, false), (3.0, true), (1.5, false)]);
    let config = |policy| {
        TrainerConfig::builder()
            .precision(Precision::F32)
            .max_epochs(1)
            .scheduler(Box::new(Constant(0.01)))
            .anomaly_policy(policy)
            .quiet(true)
            .build()
            .unwrap()
    };
    let err = Trainer::new(config(AnomalyPolicy::Abort)).fit(&linear(), &data, None).unwrap_err();
    match &err {
        TrainError::NonFinite { step, what, parameters } => {
            assert_eq!((*step, what.as_str()), (3, "loss"));
            assert_eq!(parameters, &["w", "b"]);
        }
        other => panic!("{other}"),
    }
    assert!(err.to_string().contains("optimizer step 3"), "{err}");
    let model = linear();
    let report = Trainer::new(config(AnomalyPolicy::Skip)).fit(&model, &data, None).unwrap();
    let skipped: Vec<bool> = report.steps.iter().map(|s| s.skipped).collect();
    assert_eq!(skipped, [false, false, true, false]);
    assert_eq!(report.warnings, ["non-finite loss or gradients at step 3; update skipped"]);
    assert!(model.w.as_tensor().to_vec1::<f32>().unwrap()[0].is_finite(), "skipped update left weights finite");
}

/// Skipping has a limit, and non-finite weights are never saved: a run from NaN weights, or one
/// whose updates blow up, ends in an error instead of a NaN checkpoint.
#[test]
fn non_finite_runs_stop_and_never_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let finite =
        || Linear { w: Var::new(&[0.5f32], &Device::Cpu).unwrap(), b: Var::new(&[0.1f32], &Device::Cpu).unwrap() };
    let config = |limit: usize, ckpt: Option<PathBuf>| {
        TrainerConfig::builder()
            .precision(Precision::F32)
            .max_epochs(1)
            .scheduler(Box::new(Constant(0.01)))
            .max_skipped_steps(limit)
            .checkpoint_dir(ckpt)
            .quiet(true)
            .build()
            .unwrap()
    };
    // Five bad batches in a row with a limit of three: stopped at step 3.
    let bad = Batches(vec![(1.0, true); 5]);
    let err = Trainer::new(config(3, None)).fit(&finite(), &bad, None).unwrap_err();
    assert!(matches!(err, TrainError::TooManySkippedSteps { skipped: 3, step: 3 }), "{err}");
    // One bad batch between good ones is skipped, and the run goes on.
    let one_bad = Batches(vec![(1.0, false), (1.0, true), (2.0, false)]);
    let report = Trainer::new(config(2, None)).fit(&finite(), &one_bad, None).unwrap();
    assert_eq!(report.steps.iter().filter(|s| s.skipped).count(), 1);
    // NaN weights: every step is skipped; the run is short of the limit, and the final save refuses.
    let nan = Linear { w: Var::new(&[f32::NAN], &Device::Cpu).unwrap(), b: Var::new(&[0.1f32], &Device::Cpu).unwrap() };
    let good = Batches(vec![(1.0, false); 2]);
    let ckpt = dir.path().join("ck");
    let err = Trainer::new(config(10, Some(ckpt.clone()))).fit(&nan, &good, None).unwrap_err();
    match &err {
        TrainError::NonFiniteWeights { step: 2, parameters } => assert_eq!(parameters, &["w"]),
        other => panic!("{other}"),
    }
    assert!(!ckpt.join("step-2").exists(), "a checkpoint of NaN weights was written");
    assert!(Trainer::new(config(10, None)).fit(&finite(), &good, None).is_ok());
    assert!(TrainerConfig::builder().max_skipped_steps(0).build().is_err());
}

/// A save killed midway leaves our own leftovers; the next run in that folder puts back a
/// step folder set aside for replacement and removes partial ones, touching nothing else.
#[test]
fn interrupted_saves_are_tidied_by_the_next_run() {
    let dir = tempfile::tempdir().unwrap();
    let data = demo_data(dir.path(), 6);
    let ckpt = dir.path().join("ck");
    let make = |steps: usize| checkpointing_trainer(steps, &ckpt);
    make(2).fit(&model(0.0, Precision::F32), &data, None).unwrap();
    // As a kill between "old folder aside" and "new folder in" leaves it: only the aside copy.
    std::fs::rename(ckpt.join("step-2"), ckpt.join(".step-2.replaced")).unwrap();
    std::fs::create_dir_all(ckpt.join(".step-7.a1B2c3")).unwrap();
    std::fs::write(ckpt.join(".step-7.a1B2c3/model.safetensors"), b"partial").unwrap();
    std::fs::write(ckpt.join(".finetune.ckpt.x9Y8z7"), b"partial").unwrap();
    std::fs::write(ckpt.join(".stepping-stone"), b"not ours").unwrap();
    std::fs::write(ckpt.join("notes.txt"), b"not ours").unwrap();
    // The same run again: the set-aside step-2 is put back (and is this run's), then replaced.
    let report = make(2).fit(&model(0.0, Precision::F32), &data, None).unwrap();
    assert!(report.warnings.iter().any(|w| w.starts_with("interrupted save: restored")), "{:?}", report.warnings);
    let mut names: Vec<String> =
        std::fs::read_dir(&ckpt).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, [".stepping-stone", "finetune.ckpt", "notes.txt", "step-2"]);
    assert!(ckpt.join("step-2/trainer_state.json").is_file());

    // Re-saving an existing step replaces it and leaves nothing aside.
    make(2).fit(&model(0.0, Precision::F32), &data, None).unwrap();
    let after: Vec<String> =
        std::fs::read_dir(&ckpt).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(after.len(), names.len(), "{after:?}");
    codon_model::bigbird::load_model(ckpt.join("step-2"), None, &Device::Cpu, DType::F32).unwrap();

    // Killed while replacing step-2, then resumed from step-2: it is put back before it is read.
    std::fs::rename(ckpt.join("step-2"), ckpt.join(".step-2.replaced")).unwrap();
    let report = make(2).fit(&model(0.0, Precision::F32), &data, Some(&ckpt.join("step-2"))).unwrap();
    assert_eq!(report.warnings.len(), 1, "{:?}", report.warnings);
    assert!(report.warnings[0].starts_with("interrupted save: restored"), "{:?}", report.warnings);
    assert!(ckpt.join("step-2/trainer_state.json").is_file());
}

/// Checkpoint files get the permissions of an ordinary create (colleagues can read them), not
/// the 0600 of a temporary file.
#[cfg(unix)]
#[test]
fn checkpoints_are_readable_like_ordinary_files() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let data = demo_data(dir.path(), 6);
    let ckpt = dir.path().join("ck");
    checkpointing_trainer(1, &ckpt).fit(&model(0.0, Precision::F32), &data, None).unwrap();
    let mode = |p: &Path| p.metadata().unwrap().permissions().mode() & 0o777;
    let ordinary_file = dir.path().join("ordinary");
    std::fs::write(&ordinary_file, b"").unwrap();
    let ordinary_dir = dir.path().join("ordinary-dir");
    std::fs::create_dir(&ordinary_dir).unwrap();
    let step = ckpt.join("step-1");
    assert_eq!(mode(&step), mode(&ordinary_dir), "step folder");
    for file in ["model.safetensors", "config.json", "optimizer.safetensors", "trainer_state.json"] {
        assert_eq!(mode(&step.join(file)), mode(&ordinary_file), "{file}");
    }
    assert_eq!(mode(&ckpt.join("finetune.ckpt")), mode(&ordinary_file), "finetune.ckpt");
    assert_eq!(mode(&dir.path().join("train.jsonl")), mode(&ordinary_file), "prepared data");
}

/// Resuming with a different learning rate, warm-up, batch size or accumulation is refused in
/// the style of the seed check.
#[test]
fn resume_refuses_changed_settings() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("ck");
    let builder = || TrainerConfig::builder().max_steps(Some(1)).max_epochs(1).precision(Precision::F32).quiet(true);
    Trainer::new(builder().checkpoint_dir(Some(ckpt.clone())).build().unwrap())
        .fit(&model(0.0, Precision::F32), &demo_data(dir.path(), 6), None)
        .unwrap();
    let step = ckpt.join("step-1");
    for (config, batch, needle) in [
        (builder().learning_rate(1e-3), 6, "learning rate"),
        (builder().warmup_fraction(0.2), 6, "warm-up fraction"),
        (builder(), 5, "batch size 6, this run uses 5"),
    ] {
        let err = Trainer::new(config.build().unwrap())
            .fit(&model(0.0, Precision::F32), &demo_data(dir.path(), batch), Some(&step))
            .unwrap_err();
        assert!(err.to_string().contains(needle), "{needle}: {err}");
    }
}

/// An f32 trainer of `steps` steps, one epoch, checkpointing into `ckpt` with a state dict.
fn checkpointing_trainer(steps: usize, ckpt: &Path) -> Trainer {
    Trainer::new(
        TrainerConfig::builder()
            .max_steps(Some(steps))
            .max_epochs(1)
            .precision(Precision::F32)
            .checkpoint_dir(Some(ckpt.to_path_buf()))
            .checkpoint_filename(Some("finetune.ckpt".into()))
            .quiet(true)
            .build()
            .unwrap(),
    )
}

/// The model's parameter dtype is the one source of the precision: an f16 model trains with
/// loss scaling under a config that names no precision, and a config that names another one is
/// refused before any step.
#[test]
fn precision_has_one_source_the_models_parameters() {
    let dir = tempfile::tempdir().unwrap();
    let data = demo_data(dir.path(), 6);
    let config = || TrainerConfig::builder().max_steps(Some(2)).max_epochs(1).quiet(true);
    let report = Trainer::new(config().build().unwrap()).fit(&model(0.0, Precision::F16), &data, None).unwrap();
    assert!(report.steps.iter().all(|s| s.loss_scale.is_some()), "f16 trains with loss scaling");
    let err = Trainer::new(config().precision(Precision::Bf16).build().unwrap())
        .fit(&model(0.0, Precision::F16), &data, None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("made trainable in F16") && err.contains("config says Bf16"), "{err}");
}

/// Ranks as threads of one process on the CPU, summing through shared memory: what a gloo-like
/// library gives. Every reduction is done when the call returns, which "started" allows.
struct ThreadRanks {
    rank: usize,
    ranks: usize,
    shared: std::sync::Arc<(std::sync::Barrier, std::sync::Mutex<Vec<Option<Tensor>>>)>,
}

impl ThreadRanks {
    fn group(ranks: usize) -> Vec<ThreadRanks> {
        let shared = std::sync::Arc::new((std::sync::Barrier::new(ranks), std::sync::Mutex::new(vec![None; ranks])));
        (0..ranks).map(|rank| ThreadRanks { rank, ranks, shared: shared.clone() }).collect()
    }

    /// Every rank's tensor, once each has put its own in.
    fn exchange(&self, own: Option<Tensor>) -> Vec<Option<Tensor>> {
        let (barrier, slots) = &*self.shared;
        slots.lock().unwrap()[self.rank] = own;
        barrier.wait();
        let all = slots.lock().unwrap().clone();
        barrier.wait();
        all
    }
}

impl Collective for ThreadRanks {
    fn rank(&self) -> usize {
        self.rank
    }
    fn ranks(&self) -> usize {
        self.ranks
    }
    fn broadcast(&self, t: &Tensor, root: usize) -> candle_core::Result<()> {
        let all = self.exchange((self.rank == root).then(|| t.copy()).transpose()?);
        match &all[root] {
            Some(src) if self.rank != root => t.slice_set(src, 0, 0),
            _ => Ok(()),
        }
    }
    fn all_reduce_sum(&self, t: &Tensor) -> candle_core::Result<()> {
        let all = self.exchange(Some(t.copy()?));
        let mut sum = t.zeros_like()?;
        for part in all.iter().flatten() {
            sum = (sum + part)?;
        }
        t.slice_set(&sum, 0, 0)
    }
    fn start_all_reduce_sum(&self, t: &Tensor) -> candle_core::Result<()> {
        self.all_reduce_sum(t)
    }
    fn finish_started(&self) -> candle_core::Result<()> {
        Ok(())
    }
    fn synchronize(&self) -> candle_core::Result<()> {
        Ok(())
    }
}

/// The trainer knows collectives only through `Collective`: two CPU ranks of thread-backed
/// collectives train as one rank with twice the accumulation.
#[test]
fn any_collective_trains_data_parallel() {
    let dir = tempfile::tempdir().unwrap();
    let data = demo_data(dir.path(), 3);
    let config = |accumulation: usize| {
        TrainerConfig::builder()
            .max_steps(Some(3))
            .max_epochs(1)
            .accumulate_grad_batches(accumulation)
            .precision(Precision::F32)
            .quiet(true)
            .build()
            .unwrap()
    };
    let one = Trainer::new(config(2)).fit(&model(0.0, Precision::F32), &data, None).unwrap();
    let ranks = ThreadRanks::group(2);
    let trainer = Trainer::new(config(1));
    let reports: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = ranks
            .iter()
            .map(|r| {
                let (trainer, data) = (&trainer, &data);
                s.spawn(move || trainer.fit_distributed(&model(0.0, Precision::F32), data, None, r).unwrap())
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let (a, b) = (losses(&one.steps), losses(&reports[0].steps));
    assert_eq!(a.len(), 3);
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() < 1e-5 * x.abs().max(1.0), "{a:?} vs {b:?}");
    }
}

/// A device probe whose device turns faulty at its `fault_at`-th health check (checks come
/// before each step and after each step, before its checkpoint).
struct FaultyProbe {
    checks: usize,
    fault_at: usize,
}

impl codon_train::DeviceProbe for FaultyProbe {
    fn begin_step(&mut self) {}
    fn end_step(&mut self, _tokens: usize) -> codon_train::DeviceStepStats {
        codon_train::DeviceStepStats::default()
    }
    fn check_health(&mut self) -> std::result::Result<(), String> {
        self.checks += 1;
        if self.checks >= self.fault_at {
            return Err("npu:0 reports a fault: health Critical, error code 0x80E18402 (DCMI)".into());
        }
        Ok(())
    }
}

/// A fault found after a step keeps that step out of the checkpoints; one found before a step
/// stops the run before it; either way the message names the device and the error code.
#[test]
fn a_device_fault_stops_training_without_saving_after_it() {
    let data = Batches(vec![(1.0, false); 6]);
    // Checks: before step 1 (1), after it (2), before step 2 (3), after it (4), ...
    for (fault_at, steps_run, last_saved) in [(4, 2, Some(1)), (3, 1, Some(1)), (1, 0, None)] {
        let dir = tempfile::tempdir().unwrap();
        let model =
            Linear { w: Var::new(&[0.5f32], &Device::Cpu).unwrap(), b: Var::new(&[0.0f32], &Device::Cpu).unwrap() };
        let config = TrainerConfig::builder()
            .precision(Precision::F32)
            .max_epochs(1)
            .scheduler(Box::new(Constant(0.1)))
            .checkpoint_dir(Some(dir.path().join("ck")))
            .save_every_n_steps(Some(1))
            .device_probe(Box::new(FaultyProbe { checks: 0, fault_at }))
            .quiet(true)
            .build()
            .unwrap();
        let err = Trainer::new(config).fit(&model, &data, None).unwrap_err();
        assert!(matches!(err, TrainError::DeviceFault { after_step, .. } if after_step == steps_run), "{err}");
        let text = err.to_string();
        assert!(text.contains("npu:0") && text.contains("0x80E18402"), "{text}");
        let saved: Vec<usize> = std::fs::read_dir(dir.path().join("ck"))
            .map(|d| d.filter_map(|e| e.ok()?.file_name().to_str()?.strip_prefix("step-")?.parse().ok()).collect())
            .unwrap_or_default();
        assert_eq!(saved.iter().max().copied(), last_saved, "fault at check {fault_at}: saved {saved:?}");
    }
}
