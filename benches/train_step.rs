//! `train_step`: one optimizer step (forward, backward, AdamW) of the CodonTransformer
//! configuration on CPU, batch 2 × 1024, block-sparse attention, in f32 and bf16.
//!
//! ```text
//! cargo bench --bench train_step
//! ```

use std::path::Path;

use candle_core::{DType, Device};
use codon_ascend::model::bigbird::{init_weights, AttentionType, BigBirdConfig, BigBirdForMaskedLM};
use codon_ascend::train::{MaskedLmModel, Precision, Trainer, TrainerConfig};
use criterion::{criterion_group, criterion_main, Criterion, SamplingMode};

fn bench(c: &mut Criterion) {
    let config = BigBirdConfig::default();
    let data = codon_ascend::SameBatch(codon_ascend::synthetic_mlm_batch(2, 1024));
    let mut group = c.benchmark_group("train_step");
    group.sample_size(10);
    // One step takes seconds: run each sample once instead of criterion's growing counts.
    group.sampling_mode(SamplingMode::Flat);
    for (name, precision) in [("f32", Precision::F32), ("bf16", Precision::Bf16)] {
        let weights = init_weights(&config, 0, &Device::Cpu, DType::F32).expect("init");
        let model = BigBirdForMaskedLM::from_named(config.clone(), weights).expect("model");
        let model = MaskedLmModel::new(model, precision, AttentionType::BlockSparse).expect("trainable");
        group.bench_function(name, |b| {
            b.iter(|| {
                let trainer = Trainer::new(
                    TrainerConfig::builder()
                        .max_steps(Some(1))
                        .max_epochs(1)
                        .precision(precision)
                        .quiet(true)
                        .build()
                        .expect("config"),
                );
                trainer.fit(&model, &data, None::<&Path>).expect("step")
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
