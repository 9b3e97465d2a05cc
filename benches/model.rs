//! `model`: BigBirdForMaskedLM forward passes on CPU with the CodonTransformer
//! configuration (89.6M parameters, random weights, f32, batch 1, eval mode).
//!
//! ```text
//! cargo bench --bench model
//! python3 benches/compare_transformers.py   # the same shapes in transformers, when torch is installed
//! ```

use candle_core::{DType, Device, Tensor};
use codon_ascend::model::bigbird::{
    init_weights, AttentionType, BigBirdConfig, BigBirdForMaskedLM, ForwardMode, ModelInput,
};
use criterion::{criterion_group, criterion_main, Criterion};

fn input(len: usize) -> ModelInput {
    let ids: Vec<u32> = (0..len)
        .map(|i| match i {
            0 => 1,
            i if i == len - 1 => 2,
            i => 26 + (i * 7 % 64) as u32,
        })
        .collect();
    ModelInput {
        input_ids: Tensor::from_vec(ids, (1, len), &Device::Cpu).expect("ids"),
        token_type_ids: Tensor::full(51u32, (1, len), &Device::Cpu).expect("types"),
        attention_mask: Tensor::ones((1, len), DType::U32, &Device::Cpu).expect("mask"),
    }
}

fn bench(c: &mut Criterion) {
    let config = BigBirdConfig::default();
    let weights = init_weights(&config, 0, &Device::Cpu, DType::F32).expect("init");
    let model = BigBirdForMaskedLM::from_named(config, weights).expect("model");
    let mut group = c.benchmark_group("forward");
    group.sample_size(10);
    for (name, attention, len) in [
        ("full-502", AttentionType::OriginalFull, 502),
        ("full-1002", AttentionType::OriginalFull, 1002),
        ("full-2048", AttentionType::OriginalFull, 2048),
        ("block-sparse-2048", AttentionType::BlockSparse, 2048),
    ] {
        let x = input(len);
        group.bench_function(name, |b| b.iter(|| model.forward(&x, ForwardMode::eval(attention)).expect("forward")));
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
