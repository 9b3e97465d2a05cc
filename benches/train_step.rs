//! `train_step`: one optimizer step (forward, backward, AdamW) of the CodonTransformer
//! configuration on CPU, batch 2 × 1024, block-sparse attention, in f32 and bf16.
//!
//! ```text
//! cargo bench --bench train_step
//! ```

use std::path::Path;

use candle_core::{DType, Device};
use codon_ascend::data::MlmBatch;
use codon_ascend::model::bigbird::{init_weights, AttentionType, BigBirdConfig, BigBirdForMaskedLM};
use codon_ascend::train::{BatchSource, MaskedLmModel, Precision, Trainer, TrainerConfig};
use criterion::{criterion_group, criterion_main, Criterion, SamplingMode};

/// The same masked batch every step.
struct OneBatch(MlmBatch);

impl BatchSource for OneBatch {
    type Batch = MlmBatch;
    fn batches_per_epoch(&self) -> usize {
        1
    }
    fn epoch(&self, _: u64) -> Box<dyn Iterator<Item = codon_ascend::train::Result<MlmBatch>> + '_> {
        Box::new(std::iter::once(Ok(self.0.clone())))
    }
}

fn batch(b: usize, n: usize) -> MlmBatch {
    let mut input_ids = Vec::with_capacity(b * n);
    let mut labels = Vec::with_capacity(b * n);
    for i in 0..b * n {
        let id = match i % n {
            0 => 1,
            p if p == n - 1 => 2,
            p => 26 + ((p * 7 + i / n) % 64) as u32,
        };
        let masked = i % 7 == 3 && id >= 26;
        input_ids.push(if masked { 5 } else { id });
        labels.push(if masked { i64::from(id) } else { -100 });
    }
    MlmBatch {
        batch_size: b,
        seq_len: n,
        input_ids,
        attention_mask: vec![1; b * n],
        token_type_ids: vec![51; b * n],
        labels,
    }
}

fn bench(c: &mut Criterion) {
    let config = BigBirdConfig::default();
    let data = OneBatch(batch(2, 1024));
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
