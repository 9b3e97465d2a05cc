//! `model`: BigBirdForMaskedLM forward passes (eval mode, batch 1, random weights) on the CPU
//! and on an Ascend device, each a `BenchmarkId` of the same workload. The CodonTransformer
//! configuration (89.6M parameters) runs at 502, 1002 and 2048 tokens on the CPU and on `npu:0`;
//! without an NPU the Ascend side is `npu-sim:0`, which measures the emulator, so it runs only
//! the small workload (the demo model, 128 tokens), which the CPU runs too for the comparison. On
//! Ascend one call's counters are printed. The CPU also runs the 502-token full and 2048-token
//! block-sparse workloads in bf16, beside f32.
//!
//! `forward_modelled` reports, beside them, the modelled time of the same CodonTransformer
//! workloads on each emulated part (Ascend910A in f16, Ascend910B3 in bf16) through the
//! [`modelled::ModelledTime`] measurement: the time model's figure, not a measurement.
//!
//! ```text
//! cargo bench --bench model
//! python3 benches/compare_transformers.py   # the same shapes in transformers, when torch is installed
//! ```

mod common;

use candle_core::{DType, Device, Tensor};
use codon_model::bigbird::{init_weights, AttentionType, BigBirdConfig, BigBirdForMaskedLM, ForwardMode, ModelInput};
use common::devices::{devices, print_counters};
use common::modelled;
use criterion::{criterion_group, BenchmarkId, Criterion};

fn input(len: usize, device: &Device) -> ModelInput {
    let ids: Vec<u32> = (0..len)
        .map(|i| match i {
            0 => 1,
            i if i == len - 1 => 2,
            i => 26 + (i * 7 % 64) as u32,
        })
        .collect();
    ModelInput {
        input_ids: Tensor::from_vec(ids, (1, len), device).expect("ids"),
        token_type_ids: Tensor::full(
            codon_model::organism_id(codon_model::DEFAULT_ORGANISM).expect("built in"),
            (1, len),
            device,
        )
        .expect("types"),
        attention_mask: Tensor::ones((1, len), DType::U32, device).expect("mask"),
    }
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("forward");
    group.sample_size(10);
    let full = BigBirdConfig::default();
    let small = codon_model::bigbird::BigBirdConfig::demo();
    for d in devices() {
        let f32 = DType::F32;
        let workloads: Vec<(&str, &BigBirdConfig, AttentionType, usize, DType)> = if d.emulated() {
            vec![("small-full-128", &small, AttentionType::OriginalFull, 128, f32)]
        } else {
            let mut w = vec![
                ("full-502", &full, AttentionType::OriginalFull, 502, f32),
                ("full-1002", &full, AttentionType::OriginalFull, 1002, f32),
                ("full-2048", &full, AttentionType::OriginalFull, 2048, f32),
                ("block-sparse-2048", &full, AttentionType::BlockSparse, 2048, f32),
            ];
            if d.name == "cpu" {
                w.push(("small-full-128", &small, AttentionType::OriginalFull, 128, f32));
                // bf16 beside f32 on the CPU (codon_ops::cpu_bf16 picks the path this CPU has).
                w.push(("full-502-bf16", &full, AttentionType::OriginalFull, 502, DType::BF16));
                w.push(("block-sparse-2048-bf16", &full, AttentionType::BlockSparse, 2048, DType::BF16));
            }
            w
        };
        for (name, config, attention, len, dtype) in workloads {
            let weights = init_weights(config, 0, &d.device, dtype).expect("init");
            let model = BigBirdForMaskedLM::from_named(config.clone(), weights).expect("model");
            let x = input(len, &d.device);
            let forward = || {
                let logits = model.forward(&x, ForwardMode::eval(attention)).expect("forward");
                // Wait for the device: a forward pass is done when its logits can be read.
                logits.sum_all().and_then(|s| s.to_dtype(DType::F32)?.to_scalar::<f32>()).expect("logits")
            };
            print_counters(name, &d.device, || {
                forward();
            });
            group.bench_with_input(BenchmarkId::new(name, d.name), &(), |b, _| b.iter(forward));
        }
    }
    group.finish();
}

/// The CodonTransformer forwards on the emulated part, in its half precision, by modelled time.
fn bench_modelled(c: &mut Criterion<modelled::ModelledTime>) {
    let device = candle_ascend::parse_device("npu-sim:0").expect("npu-sim:0");
    let part = candle_ascend::ascend_device(&device).expect("an Ascend device").soc().name.clone();
    let dtype = if device.supports_bf16() { DType::BF16 } else { DType::F16 };
    let full = BigBirdConfig::default();
    let mut group = c.benchmark_group("forward_modelled");
    group.sampling_mode(modelled::MODELLED_SAMPLING);
    for (name, attention, len) in [
        ("full-502", AttentionType::OriginalFull, 502),
        ("full-2048", AttentionType::OriginalFull, 2048),
        ("block-sparse-2048", AttentionType::BlockSparse, 2048),
    ] {
        let weights = init_weights(&full, 0, &device, dtype).expect("init");
        let model = BigBirdForMaskedLM::from_named(full.clone(), weights).expect("model");
        let x = input(len, &device);
        let forward = || {
            let logits = model.forward(&x, ForwardMode::eval(attention)).expect("forward");
            logits.sum_all().and_then(|s| s.to_dtype(DType::F32)?.to_scalar::<f32>()).expect("logits")
        };
        group.bench_with_input(BenchmarkId::new(format!("{name}-{dtype:?}"), &part), &(), |b, _| b.iter(forward));
    }
    group.finish();
}

criterion_group!(benches, bench);

fn main() {
    modelled::main_with(benches, bench_modelled);
}
