//! `train_step`: one optimizer step (forward, backward, AdamW) on the CPU and on an Ascend
//! device, each a `BenchmarkId` of the same workload: the CodonTransformer configuration at
//! batch 2 × 1024, block-sparse, in f32 and bf16 on the CPU and on `npu:0`. Without an NPU the
//! Ascend side is `npu-sim:0`, which measures the emulator, so it runs only the small workload
//! (the demo model, batch 2 × 128, f32), which the CPU runs too. On Ascend one step's counters are
//! printed.
//!
//! `train_step_modelled` reports, beside them, the modelled time of a CodonTransformer step
//! (2 × 1024 and 6 × 2048, block-sparse) on each emulated part, Ascend910A in f16 and
//! Ascend910B3 in bf16, through the [`modelled::ModelledTime`] measurement: the time model's
//! figure, not a measurement.
//!
//! ```text
//! cargo bench --bench train_step
//! ```

use std::path::Path;

mod common;

use candle_core::DType;
use codon_model::bigbird::{init_weights, AttentionType, BigBirdConfig, BigBirdForMaskedLM};
use codon_model::training::MaskedLmModel;
use codon_train::{Precision, Trainer, TrainerConfig};
use common::devices::{devices, print_counters};
use common::modelled;
use criterion::{criterion_group, BenchmarkId, Criterion, SamplingMode};

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("train_step");
    group.sample_size(10);
    // One step takes seconds: run each sample once instead of criterion's growing counts.
    group.sampling_mode(SamplingMode::Flat);
    let full = BigBirdConfig::default();
    let small = codon_model::bigbird::BigBirdConfig::demo();
    for d in devices() {
        let mut workloads: Vec<(&str, &BigBirdConfig, Precision, usize)> = Vec::new();
        if !d.emulated() {
            workloads.push(("f32-2x1024", &full, Precision::F32, 1024));
            if d.device.is_cpu() || d.device.supports_bf16() {
                workloads.push(("bf16-2x1024", &full, Precision::Bf16, 1024));
            }
        }
        if d.emulated() || d.device.is_cpu() {
            workloads.push(("small-f32-2x128", &small, Precision::F32, 128));
        }
        for (name, config, precision, len) in workloads {
            let data = codon_train::SameBatch(codon_data::synthetic_mlm_batch(2, len));
            let weights = init_weights(config, 0, &d.device, DType::F32).expect("init");
            let model = BigBirdForMaskedLM::from_named(config.clone(), weights).expect("model");
            let model = MaskedLmModel::new(model, precision, AttentionType::BlockSparse).expect("trainable");
            let step = || {
                let trainer = Trainer::new(
                    TrainerConfig::builder()
                        .max_steps(Some(1))
                        .max_epochs(1)
                        .precision(precision)
                        .retain_freed_memory(true)
                        .quiet(true)
                        .build()
                        .expect("config"),
                );
                // The step ends with its one host read (loss and gradient norm), so it is done.
                trainer.fit(&model, &data, None::<&Path>).expect("step")
            };
            print_counters(name, &d.device, || {
                step();
            });
            group.bench_with_input(BenchmarkId::new(name, d.name), &(), |b, _| b.iter(step));
        }
    }
    group.finish();
}

/// One optimizer step of the CodonTransformer configuration on the emulated part, in its half
/// precision, by modelled time.
fn bench_modelled(c: &mut Criterion<modelled::ModelledTime>) {
    let device = candle_ascend::parse_device("npu-sim:0").expect("npu-sim:0");
    let part = candle_ascend::ascend_device(&device).expect("an Ascend device").soc().name.clone();
    let precision = if device.supports_bf16() { Precision::Bf16 } else { Precision::F16 };
    let full = BigBirdConfig::default();
    let mut group = c.benchmark_group("train_step_modelled");
    group.sampling_mode(modelled::MODELLED_SAMPLING);
    for (batch, len) in [(2, 1024), (6, 2048)] {
        let data = codon_train::SameBatch(codon_data::synthetic_mlm_batch(batch, len));
        let weights = init_weights(&full, 0, &device, DType::F32).expect("init");
        let model = BigBirdForMaskedLM::from_named(full.clone(), weights).expect("model");
        let model = MaskedLmModel::new(model, precision, AttentionType::BlockSparse).expect("trainable");
        let step = || {
            let config = TrainerConfig::builder()
                .max_steps(Some(1))
                .max_epochs(1)
                .precision(precision)
                .retain_freed_memory(true)
                .values_are_meaningless(true)
                .quiet(true)
                .build()
                .expect("config");
            Trainer::new(config).fit(&model, &data, None::<&Path>).expect("step")
        };
        let id = BenchmarkId::new(format!("{precision:?}-{batch}x{len}"), &part);
        group.bench_with_input(id, &(), |b, _| b.iter(step));
    }
    group.finish();
}

criterion_group!(benches, bench);

fn main() {
    modelled::main_with(benches, bench_modelled);
}
