//! NCCL on NVIDIA GPUs, built with `--features cuda` and run where there is one:
//!
//! ```text
//! cargo test --release -p codon-train-cuda --features cuda,codon-ops/cuda --test nccl --no-run
//! CODON_TEST_DEVICE=cuda:0 target/release/deps/nccl-*
//! ```
//!
//! On one GPU a world of one runs (through the rendezvous, as torchrun's ranks join); with
//! several, the GPUs form a world of that many ranks, as `--num_gpus N` does.
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use codon_data::{prepare, DataLoader, JsonlDataset, LoaderConfig, MalformedPolicy, MlmCollator, PrepareOptions};
use codon_model::bigbird::{init_weights, AttentionType, BigBirdConfig, BigBirdForMaskedLM};
use codon_model::training::{MaskedLmData, MaskedLmModel};
use codon_model::CodonTokenizer;
use codon_train::rendezvous::{RankLayout, Rendezvous};
use codon_train::{Collective, Precision, StepMetrics, Trainer, TrainerConfig};
use codon_train_cuda::Nccl;

/// Every GPU from the one `CODON_TEST_DEVICE` names (`cuda:N`; `cuda:0` without it), each
/// opened once.
fn gpus() -> &'static [Device] {
    static GPUS: std::sync::OnceLock<Vec<Device>> = std::sync::OnceLock::new();
    GPUS.get_or_init(|| {
        let name = std::env::var("CODON_TEST_DEVICE").unwrap_or_else(|_| "cuda:0".into());
        let first: usize = name
            .strip_prefix("cuda:")
            .and_then(|i| i.parse().ok())
            .unwrap_or_else(|| panic!("CODON_TEST_DEVICE={name}"));
        let count = candle_core::cuda::cudarc::driver::CudaContext::device_count().unwrap() as usize;
        (first..count).map(|i| Device::new_cuda(i).unwrap()).collect()
    })
}

/// A world of one, joined as a torchrun rank joins: through a rendezvous file.
fn world_of_one(device: &Device, dir: &Path) -> Nccl {
    let layout = RankLayout { rank: 0, world: 1, local_rank: 0, local_world: 1 };
    let how = Rendezvous::File(dir.join("unique-id"));
    Nccl::join(&layout, device, &how, std::time::Duration::from_secs(30)).unwrap()
}

fn values(t: &Tensor) -> Vec<f32> {
    t.to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1().unwrap()
}

#[test]
fn collectives_sum_and_broadcast_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let gpu = &gpus()[0];
    let one = world_of_one(gpu, dir.path());
    assert_eq!((one.rank(), one.ranks()), (0, 1));
    // A world of one leaves every tensor as it was, in each dtype, a view at an offset too.
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        let t = Tensor::arange(0f32, 12.0, gpu).unwrap().to_dtype(dtype).unwrap();
        one.all_reduce_sum(&t).unwrap();
        one.broadcast(&t, 0).unwrap();
        one.synchronize().unwrap();
        assert_eq!(values(&t), (0..12).map(|i| i as f32).collect::<Vec<_>>(), "{dtype:?}");
    }
    let view = Tensor::arange(0f32, 12.0, gpu).unwrap().narrow(0, 4, 8).unwrap();
    one.all_reduce_sum(&view).unwrap();
    assert_eq!(values(&view), (4..12).map(|i| i as f32).collect::<Vec<_>>());
    // Not a GPU tensor, not contiguous: refused with a reason.
    let err = one.all_reduce_sum(&Tensor::zeros(3, DType::F32, &Device::Cpu).unwrap()).unwrap_err().to_string();
    assert!(err.contains("not on an NVIDIA GPU"), "{err}");
    let strided = Tensor::zeros((3, 4), DType::F32, gpu).unwrap().t().unwrap();
    assert!(one.all_reduce_sum(&strided).unwrap_err().to_string().contains("contiguous"));

    let n = gpus().len();
    if n < 2 {
        eprintln!("one GPU: the world of {n} ranks waits for a machine with several");
        return;
    }
    // Every GPU a rank: rank r holds r + 1; the sum is n(n + 1)/2 everywhere; then rank 1's.
    let comms = Nccl::init_all(gpus()).unwrap();
    std::thread::scope(|s| {
        for (r, comm) in comms.iter().enumerate() {
            s.spawn(move || {
                let t = (Tensor::ones(5, DType::F32, &gpus()[r]).unwrap() * (r + 1) as f64).unwrap();
                comm.all_reduce_sum(&t).unwrap();
                assert_eq!(values(&t), vec![(n * (n + 1) / 2) as f32; 5]);
                let b = (Tensor::ones(5, DType::F32, &gpus()[r]).unwrap() * r as f64).unwrap();
                comm.broadcast(&b, 1).unwrap();
                comm.synchronize().unwrap();
                assert_eq!(values(&b), vec![1.0; 5]);
            });
        }
    });
}

fn tiny_config() -> BigBirdConfig {
    BigBirdConfig::from_json(
        r#"{"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 48,
            "block_size": 16, "num_random_blocks": 1, "max_position_embeddings": 1024,
            "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}"#,
    )
    .unwrap()
}

fn demo_data(dir: &Path) -> MaskedLmData {
    let demo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../codon-cli/demo/genes.csv");
    let train = dir.join("train.jsonl");
    prepare(&demo, &train, &PrepareOptions::default()).unwrap();
    let dataset = JsonlDataset::open(&train, MalformedPolicy::Error).unwrap();
    let config = LoaderConfig { batch_size: 3, num_workers: 1, seed: 5, ..Default::default() };
    MaskedLmData::new(DataLoader::new(dataset, MlmCollator::new(CodonTokenizer::new().unwrap()), config).unwrap())
}

fn model(device: &Device) -> MaskedLmModel {
    let config = tiny_config();
    let w = init_weights(&config, 0, device, DType::F32).unwrap();
    MaskedLmModel::new(BigBirdForMaskedLM::from_named(config, w).unwrap(), Precision::F32, AttentionType::BlockSparse)
        .unwrap()
}

fn trainer(accumulation: usize) -> Trainer {
    Trainer::new(
        TrainerConfig::builder()
            .max_steps(Some(3))
            .max_epochs(1)
            .accumulate_grad_batches(accumulation)
            .precision(Precision::F32)
            .quiet(true)
            .build()
            .unwrap(),
    )
}

fn losses(steps: &[StepMetrics]) -> Vec<f64> {
    steps.iter().map(|s| s.loss).collect()
}

fn assert_close(a: &[f64], b: &[f64]) {
    assert_eq!(a.len(), 3, "{a:?}");
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() < 1e-5 * x.abs().max(1.0), "{a:?} vs {b:?}");
    }
}

/// N ranks train as one rank with N-fold accumulation, within f32 rounding: a world of one over
/// NCCL equals training alone, and every GPU of the machine as a rank equals one GPU.
#[test]
fn ranks_train_as_one_rank_with_their_accumulation() {
    let dir = tempfile::tempdir().unwrap();
    let data = demo_data(dir.path());
    let gpu = &gpus()[0];
    let alone = trainer(1).fit(&model(gpu), &data, None).unwrap();
    let one = world_of_one(gpu, dir.path());
    let joined = trainer(1).fit_distributed(&model(gpu), &data, None, &one).unwrap();
    assert_close(&losses(&alone.steps), &losses(&joined.steps));

    let n = gpus().len();
    if n < 2 {
        eprintln!("one GPU: {n} ranks against accumulation {n} waits for a machine with several");
        return;
    }
    let accumulated = trainer(n).fit(&model(gpu), &data, None).unwrap();
    let replicas: Vec<_> = gpus().iter().map(model).collect();
    let ranks = codon_train_cuda::fit_data_parallel(&trainer(1), &replicas, &data, None).unwrap();
    assert_close(&losses(&accumulated.steps), &losses(&ranks.steps));
}
