//! Data-parallel training over the emulator's HCCL: N emulated devices in one process train
//! exactly as one device that accumulates N times as many micro-batches (same micro-batches,
//! same dropout masks, gradients summed by all-reduce), with dropout and clipping on.
use candle_core::{DType, Device};
use codon_data::MlmBatch;
use codon_model::bigbird::{init_weights, AttentionType, BigBirdConfig, BigBirdForMaskedLM};
use codon_model::training::MaskedLmModel;
use codon_train::{BatchSource, Precision, TrainReport, TrainableModel, Trainer, TrainerConfig};

/// One test at a time: runs that share devices would queue their collectives on the same
/// streams in different orders, and wait on each other (as on hardware).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// Distinct batches, the same every epoch.
struct Batches(Vec<MlmBatch>);

impl BatchSource for Batches {
    type Batch = MlmBatch;
    fn batches_per_epoch(&self) -> usize {
        self.0.len()
    }
    fn epoch(&self, _: u64) -> Box<dyn Iterator<Item = codon_train::Result<MlmBatch>> + '_> {
        Box::new(self.0.iter().cloned().map(Ok))
    }
}

fn config() -> BigBirdConfig {
    BigBirdConfig::from_json(
        r#"{"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 48,
            "block_size": 8, "num_random_blocks": 1, "max_position_embeddings": 256,
            "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1}"#,
    )
    .unwrap()
}

/// The losses of 8 optimizer steps on `devices` emulated devices with `accumulation`. Replica
/// r starts from init seed r: rank 0's weights must reach the others by broadcast.
fn losses(devices: usize, accumulation: usize) -> Vec<f64> {
    run(devices, accumulation, None, None, Some(8))
}

/// As [`losses`], saving a checkpoint every 4 steps into `checkpoints` and resuming from
/// `resume` when given.
fn run(
    devices: usize,
    accumulation: usize,
    checkpoints: Option<&std::path::Path>,
    resume: Option<&std::path::Path>,
    max_steps: Option<usize>,
) -> Vec<f64> {
    let replicas = replicas(devices);
    let steps = train(&replicas, accumulation, checkpoints, resume, max_steps).steps;
    steps.iter().map(|s| s.loss).collect()
}

/// One tiny model per emulated device; replica r starts from init seed r.
fn replicas(devices: usize) -> Vec<MaskedLmModel> {
    (0..devices)
        .map(|r| {
            let device = candle_ascend::parse_device(&format!("npu-sim:{r}")).unwrap();
            let weights = init_weights(&config(), r as u64, &Device::Cpu, DType::F32).unwrap();
            let weights = weights.into_iter().map(|(n, t)| (n, t.to_device(&device).unwrap())).collect();
            let model = BigBirdForMaskedLM::from_named(config(), weights).unwrap();
            MaskedLmModel::new(model, Precision::F32, AttentionType::BlockSparse).unwrap()
        })
        .collect()
}

fn train(
    replicas: &[MaskedLmModel],
    accumulation: usize,
    checkpoints: Option<&std::path::Path>,
    resume: Option<&std::path::Path>,
    max_steps: Option<usize>,
) -> TrainReport {
    let data = Batches((0..12).map(|i| codon_data::synthetic_mlm_batch(2, 96 + 8 * i)).collect());
    let trainer = Trainer::new(
        TrainerConfig::builder()
            .max_steps(max_steps)
            .max_epochs(if max_steps.is_some() { 100 } else { 1 })
            .learning_rate(1e-3)
            .gradient_clip(Some(0.5))
            .accumulate_grad_batches(accumulation)
            .precision(Precision::F32)
            .checkpoint_dir(checkpoints.map(|p| p.to_path_buf()))
            .save_every_n_steps(Some(4))
            .quiet(true)
            .build()
            .unwrap(),
    );
    codon_train_ascend::fit_data_parallel(&trainer, replicas, &data, resume).unwrap()
}

fn assert_close(a: &[f64], b: &[f64], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (x, y) in a.iter().zip(b) {
        assert!(((x - y) / y).abs() <= 1e-5, "{what}: {a:?} vs {b:?}");
    }
}

#[test]
fn n_devices_train_as_one_device_with_n_times_the_accumulation() {
    let _serial = serial();
    let single_2 = losses(1, 2);
    let single_4 = losses(1, 4);
    assert_eq!(single_2.len(), 8);
    assert_close(&losses(2, 1), &single_2, "2 devices against 1 device accumulating 2");
    assert_close(&losses(4, 1), &single_4, "4 devices against 1 device accumulating 4");
    assert_close(&losses(2, 2), &single_4, "2 devices accumulating 2 against 1 device accumulating 4");
    // The runs differ from each other: the comparison is not of constants.
    assert!((single_2[7] - single_4[7]).abs() > 1e-6, "{single_2:?} {single_4:?}");
}

#[test]
fn data_parallel_training_on_the_cpu_is_a_clear_error() {
    let _serial = serial();
    let cpu: Vec<MaskedLmModel> = (0..2)
        .map(|_| {
            let weights = init_weights(&config(), 0, &Device::Cpu, DType::F32).unwrap();
            let model = BigBirdForMaskedLM::from_named(config(), weights).unwrap();
            MaskedLmModel::new(model, Precision::F32, AttentionType::BlockSparse).unwrap()
        })
        .collect();
    let data = Batches(vec![codon_data::synthetic_mlm_batch(2, 96)]);
    let trainer = Trainer::new(TrainerConfig::builder().max_steps(Some(1)).quiet(true).build().unwrap());
    let err = codon_train_ascend::fit_data_parallel(&trainer, &cpu, &data, None).unwrap_err().to_string();
    assert!(err.contains("HCCL") && err.contains("npu"), "{err}");
}

#[test]
fn a_two_device_run_resumed_midway_reproduces_the_uninterrupted_losses() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let whole = run(2, 1, Some(dir.path()), None, Some(8));
    let resumed = run(2, 1, None, Some(&dir.path().join("step-4")), Some(8));
    assert_eq!(resumed, whole[4..].to_vec());
}

#[test]
fn an_epoch_on_two_devices_has_the_steps_of_one_device_accumulating_two() {
    let _serial = serial();
    // One epoch of 12 batches: 6 steps either way, and the same schedule, so the same losses.
    let two = run(2, 1, None, None, None);
    let one = run(1, 2, None, None, None);
    assert_eq!(two.len(), 6);
    assert_close(&two, &one, "one epoch on 2 devices against 1 device accumulating 2");
}

/// With the parameters in many small groups, each group's all-reduce starts as soon as the
/// backward pass has finished its gradients. Groups start from the last down, and the first
/// group holds the embeddings, whose gradients come last: every other group starts while
/// gradients are still to come. The losses stay those of one device accumulating two.
#[test]
fn gradient_buckets_start_during_the_backward_pass() {
    let _serial = serial();
    let grouped: Vec<MaskedLmModel> = replicas(2).into_iter().map(|m| m.with_group_elements(4096).unwrap()).collect();
    let groups = grouped[0].parameters().group_count();
    assert!(groups >= 4, "{groups} groups");
    let report = train(&grouped, 1, None, None, Some(8));
    for step in &report.steps {
        assert_eq!(step.overlapped_buckets, Some(groups - 1), "step {}", step.step);
    }
    let two: Vec<f64> = report.steps.iter().map(|s| s.loss).collect();
    assert_close(&two, &losses(1, 2), "2 devices with small buckets against 1 device accumulating 2");
}

/// Rank 0 alone writes metrics. When it cannot, it tells the other rank through the first
/// step's collectives, and rank 1 stops there naming rank 0, instead of waiting for rank 0
/// until HCCL_EXEC_TIMEOUT.
#[test]
fn a_rank_zero_write_failure_stops_every_rank_at_the_next_step() {
    let _serial = serial();
    // Bounds the wait should the failure not reach rank 1 (the test then fails on its error).
    // SAFETY (env): the other tests of this binary do not time out either way.
    unsafe { std::env::set_var("HCCL_EXEC_TIMEOUT", "30") };
    let dir = tempfile::tempdir().unwrap();
    let unwritable = dir.path().join("missing").join("metrics.jsonl");
    let data = Batches((0..4).map(|i| codon_data::synthetic_mlm_batch(2, 96 + 8 * i)).collect());
    let trainer = Trainer::new(
        TrainerConfig::builder().max_steps(Some(2)).metrics_path(Some(unwritable)).quiet(true).build().unwrap(),
    );
    let models = replicas(2);
    let devices: Vec<_> = models
        .iter()
        .map(|m| candle_ascend::ascend_device(m.parameters().named()[0].1.device()).unwrap().clone())
        .collect();
    let comms: Vec<_> =
        candle_ascend::Communicator::init_all(&devices).unwrap().into_iter().map(codon_train_ascend::Hccl).collect();
    let errors: Vec<String> = std::thread::scope(|s| {
        let ranks: Vec<_> =
            models.iter().zip(&comms).map(|(m, c)| s.spawn(|| trainer.fit_distributed(m, &data, None, c))).collect();
        ranks.into_iter().map(|h| h.join().unwrap().unwrap_err().to_string()).collect()
    });
    assert!(errors[0].contains("rank 0 of 2") && errors[0].contains("metrics.jsonl"), "{}", errors[0]);
    assert!(
        errors[1].contains("rank 1 of 2") && errors[1].contains("stopped at step 1 because rank(s) [0] failed"),
        "{}",
        errors[1]
    );
}
