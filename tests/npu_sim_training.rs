//! `codon_train::Trainer` on the emulated NPU: the same losses as on the CPU, and no host
//! reads beyond the per-step loss and gradient norm. Its own process, because the
//! emulator's transfer counters are process-wide.
use candle_core::{DType, Device};
use codon_model::bigbird::{AttentionType, BigBirdForMaskedLM};

/// The transfer counters are process-wide: tests that read them run one at a time.
static COUNTERS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn sim() -> Device {
    candle_ascend::parse_device("npu-sim:0").expect("the emulated toolkit loads")
}

/// Four steps of the self-test's tiny BigBird, dropout on.
fn train_losses(device: &Device, precision: codon_train::Precision) -> Vec<f64> {
    codon_cli::selftest::tiny_training_losses(device, precision, 4, 0.1).unwrap()
}

/// Per-op counts of `now` less those of `then`, the ops with none left out.
fn since(
    now: &std::collections::BTreeMap<String, u64>,
    then: &std::collections::BTreeMap<String, u64>,
) -> std::collections::BTreeMap<String, u64> {
    now.iter().map(|(op, n)| (op.clone(), n - then.get(op).copied().unwrap_or(0))).filter(|(_, n)| *n > 0).collect()
}

#[test]
fn trainer_on_npu_sim_reproduces_the_cpu_losses() {
    let _serial = COUNTERS.lock().unwrap_or_else(|p| p.into_inner());
    use codon_train::Precision;
    let dev = sim();
    let ascend = candle_ascend::ascend_device(&dev).unwrap();
    let soc = ascend.soc().clone();
    // The Atlas training series runs FP32 matmuls on its FP16 cube, and has no BF16.
    let f32_tolerance = if soc.has_bf16() { 1e-5 } else { 2e-3 };
    let low = if soc.has_bf16() { Precision::Bf16 } else { Precision::F16 };
    for (precision, tolerance) in [(Precision::F32, f32_tolerance), (low, 2e-2)] {
        let cpu = train_losses(&Device::Cpu, precision);
        let before = ascend.sim_counters().unwrap();
        let counted_before = ascend.counters();
        let npu = train_losses(&dev, precision);
        let after = ascend.sim_counters().unwrap();
        let counted = ascend.counters().since(&counted_before);
        // The backend's own counters (which exist on a real toolkit too) agree with the emulator's.
        assert_eq!(counted.launches, since(&after.launches, &before.launches), "{precision:?}: launches by op");
        // AI CPU launches: the backend's count (from the kernel tables) is the emulator's, and the
        // one kind left is the 910's dropout mask, which has no AI Core kernel on that part
        // (ops-math stateless_dropout_gen_mask.cpp: the AI Core list applies to regbase parts only).
        let emulated_aicpu = since(&after.aicpu_launches, &before.aicpu_launches);
        assert_eq!(counted.aicpu_launches, emulated_aicpu, "{precision:?}: AI CPU launches by op");
        let expected_aicpu: Vec<&str> = if soc.has_bf16() { vec![] } else { vec!["aclnnDropoutGenMaskV2"] };
        assert_eq!(
            counted.aicpu_launches.keys().map(String::as_str).collect::<Vec<_>>(),
            expected_aicpu,
            "{precision:?}"
        );
        assert_eq!(counted.allocations, after.allocations - before.allocations, "{precision:?}: allocations");
        assert_eq!(counted.synchronizations, after.synchronizations - before.synchronizations, "{precision:?}");
        assert_eq!(counted.reads, after.device_to_host.0 - before.device_to_host.0, "{precision:?}: reads");
        // The emulator rounds each block up as CANN does (a multiple of 32, plus 32).
        assert!(
            counted.memory_bytes <= after.memory.0 && after.memory.0 - counted.memory_bytes <= 64 * after.allocations
        );
        eprintln!("{precision:?}: cpu {cpu:?}\n       npu-sim {npu:?}");
        for (a, b) in cpu.iter().zip(&npu) {
            assert!(((a - b) / a).abs() <= tolerance, "{precision:?}: losses {cpu:?} vs {npu:?}");
        }
        assert!(npu[3] < npu[0], "{precision:?}: loss did not fall: {npu:?}");
        // Reads back to the host: the loss and gradient norm once per step, nothing per op.
        let reads = after.device_to_host.0 - before.device_to_host.0;
        assert!(reads <= 4 * 2, "{precision:?}: {reads} device-to-host reads in 4 steps");
    }
}

#[test]
fn inference_stays_on_the_device() {
    let _serial = COUNTERS.lock().unwrap_or_else(|p| p.into_inner());
    use codon_model::bigbird::{ForwardMode, ModelInput};
    let dev = sim();
    let ascend = candle_ascend::ascend_device(&dev).unwrap();
    let model = tiny_model(2, &dev);
    let batch = codon_data::synthetic_mlm_batch(2, 120);
    let input = ModelInput::from_encoding(&batch.encoding, model.config(), &dev).unwrap();
    for attention in [AttentionType::OriginalFull, AttentionType::BlockSparse] {
        let before = ascend.sim_counters().unwrap();
        let logits = model.forward(&input, ForwardMode::eval(attention)).unwrap();
        let after = ascend.sim_counters().unwrap();
        assert_eq!(after.aicpu_launches, before.aicpu_launches, "{attention:?}: a launch ran on the AI CPU");
        assert!(logits.device().is_custom());
        assert_eq!(
            after.device_to_host.0, before.device_to_host.0,
            "{attention:?}: a forward pass read back to the host"
        );
    }
}

#[test]
fn bf16_training_is_refused_before_any_step_on_parts_without_bf16() {
    use codon_model::training::MaskedLmModel;
    use codon_train::Precision;
    let dev = sim();
    let soc = candle_ascend::ascend_device(&dev).unwrap().soc().clone();
    let model = tiny_model(1, &dev);
    assert_eq!(Precision::auto(&dev), if soc.has_bf16() { Precision::Bf16 } else { Precision::F16 });
    let made = MaskedLmModel::new(model, Precision::Bf16, AttentionType::BlockSparse);
    if soc.has_bf16() {
        assert!(made.is_ok());
    } else {
        let Err(err) = made else { panic!("bf16 must be refused") };
        let err = err.to_string();
        assert!(err.contains("has no BF16") && err.contains("f16"), "{err}");
    }
}

/// A tiny block-sparse-capable BigBird (hidden 32, block 8) with `layers` layers, f32 on `dev`.
fn tiny_model(layers: usize, dev: &candle_core::Device) -> BigBirdForMaskedLM {
    use codon_model::bigbird::{init_weights, BigBirdConfig};
    let config = BigBirdConfig::from_json(&format!(
        r#"{{"hidden_size": 32, "num_hidden_layers": {layers}, "num_attention_heads": 2, "intermediate_size": 48,
            "block_size": 8, "num_random_blocks": 1, "max_position_embeddings": 256}}"#
    ))
    .unwrap();
    BigBirdForMaskedLM::from_named(config.clone(), init_weights(&config, 0, dev, DType::F32).unwrap()).unwrap()
}

/// AdamW on the emulated part gives the CPU's weights and moments, through
/// `aclnnApplyAdamWV2` where the part has the fused operator (A2) and the composed update
/// where it does not (the Atlas training series): one launch per parameter when each parameter
/// is its own group, one per flat group when the parameters are views into a group buffer.
#[test]
fn adamw_on_npu_sim_matches_the_cpu_fused_where_the_part_has_it() {
    let _serial = COUNTERS.lock().unwrap_or_else(|p| p.into_inner());
    use candle_core::{Tensor, Var};
    use codon_train::optim::{AdamW, AdamWConfig, Parameters};
    let dev = sim();
    let ascend = candle_ascend::ascend_device(&dev).unwrap();
    let values = |seed: u64, n: usize| -> Vec<f32> {
        (0..n).map(|i| (((i as u64 * 2_654_435_761 + seed * 97) % 1000) as f32 / 500.0) - 1.0).collect()
    };
    let shapes = [(3usize, 5usize), (1, 7)];
    const STEPS: u64 = 3;
    let run = |device: &Device, flat: bool| {
        let named: Vec<(String, Tensor)> = shapes
            .iter()
            .enumerate()
            .map(|(i, &(r, c))| {
                let t = Tensor::from_vec(values(i as u64, r * c), (r, c), &Device::Cpu).unwrap();
                (format!("p{i}"), t.to_device(device).unwrap())
            })
            .collect();
        let params = if flat {
            Parameters::trainable(named, DType::F32).unwrap()
        } else {
            let vars: Vec<(String, Var)> = named.into_iter().map(|(n, t)| (n, Var::from_tensor(&t).unwrap())).collect();
            Parameters::from(vars)
        };
        let mut opt = AdamW::new(params.clone(), AdamWConfig::default()).unwrap();
        for step in 0..STEPS {
            // A backward pass whose gradients are the fixed values: d/dp Σ p·c = c.
            let mut loss: Option<Tensor> = None;
            for (i, (_, var)) in params.named().iter().enumerate() {
                let (r, c) = shapes[i];
                let coef = Tensor::from_vec(values(10 + step * 3 + i as u64, r * c), (r, c), &Device::Cpu)
                    .unwrap()
                    .to_device(device)
                    .unwrap();
                let term = (var.as_tensor() * coef).unwrap().sum_all().unwrap();
                loss = Some(match loss {
                    Some(l) => (l + term).unwrap(),
                    None => term,
                });
            }
            let grads = params.gradients(&loss.unwrap().backward().unwrap()).unwrap();
            opt.step(&grads, 1e-2, None).unwrap();
        }
        let state = opt.state().unwrap();
        let mut out: Vec<Vec<f32>> =
            params.named().iter().map(|(_, v)| v.as_tensor().flatten_all().unwrap().to_vec1().unwrap()).collect();
        for (i, _) in shapes.iter().enumerate() {
            for key in ["exp_avg", "exp_avg_sq"] {
                out.push(state[&format!("{key}.p{i}")].flatten_all().unwrap().to_vec1().unwrap());
            }
        }
        out
    };
    let has_fused =
        ascend.soc().runs(candle_ascend::soc::AclnnOp::ApplyAdamWV2, candle_ascend::ffi::types::dtype::FLOAT);
    for flat in [false, true] {
        let cpu = run(&Device::Cpu, flat);
        let before = ascend.counters();
        let npu = run(&dev, flat);
        let launched = ascend.counters().since(&before).launches;
        for (a, b) in cpu.iter().zip(&npu) {
            for (x, y) in a.iter().zip(b) {
                assert!((x - y).abs() <= 1e-6 * x.abs().max(1.0), "flat {flat}\ncpu {a:?}\nnpu-sim {b:?}");
            }
        }
        let groups = if flat { 1 } else { shapes.len() as u64 };
        let fused = launched.get("aclnnApplyAdamWV2").copied().unwrap_or(0);
        let composed = launched.get("aclnnSqrt").copied().unwrap_or(0);
        if has_fused {
            assert_eq!((fused, composed), (STEPS * groups, 0), "flat {flat}: {launched:?}");
        } else {
            assert_eq!((fused, composed), (0, STEPS * groups), "flat {flat}: {launched:?}");
        }
    }
}

/// Activation checkpointing recomputes each layer in the backward pass with the same dropout
/// masks and random blocks, so every parameter gets the gradient that backpropagation through
/// the whole graph gives: on the CPU and the emulated part, block-sparse and full attention.
#[test]
fn gradient_checkpointing_gives_the_gradients_of_the_full_graph() {
    let _serial = COUNTERS.lock().unwrap_or_else(|p| p.into_inner());
    use candle_core::Tensor;
    use codon_model::bigbird::{init_weights, masked_lm_loss, BigBirdConfig, ForwardMode, ModelInput};
    let config = BigBirdConfig::from_json(
        r#"{"hidden_size": 32, "num_hidden_layers": 3, "num_attention_heads": 2, "intermediate_size": 48,
            "block_size": 8, "num_random_blocks": 1, "max_position_embeddings": 256,
            "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1}"#,
    )
    .unwrap();
    let batch = codon_data::synthetic_mlm_batch(2, 120);
    for device in [Device::Cpu, sim()] {
        let weights = init_weights(&config, 0, &Device::Cpu, DType::F32).unwrap();
        let on_device = weights.into_iter().map(|(n, t)| (n, t.to_device(&device).unwrap())).collect();
        let (model, vars) =
            BigBirdForMaskedLM::from_named(config.clone(), on_device).unwrap().trainable(DType::F32).unwrap();
        let input = ModelInput::from_encoding(&batch.encoding, &config, &device).unwrap();
        let labels = Tensor::from_slice(&batch.labels, (2, 120), &device).unwrap();
        for attention in [AttentionType::BlockSparse, AttentionType::OriginalFull] {
            let mode = ForwardMode::train(attention, 11);
            let loss = masked_lm_loss(&model.forward(&input, mode).unwrap(), &labels).unwrap();
            let full = loss.backward().unwrap();
            let (again, checkpointed) =
                model.backward_checkpointed(&input, mode, |logits| masked_lm_loss(logits, &labels)).unwrap();
            let scalar = |t: &Tensor| t.to_dtype(DType::F32).unwrap().to_scalar::<f32>().unwrap();
            assert_eq!(scalar(&loss), scalar(&again), "{device:?} {attention:?}: the recomputed loss differs");
            for (name, var) in &vars {
                let (a, b) = match (full.get(var.as_tensor()), checkpointed.get(var.as_tensor())) {
                    (Some(a), Some(b)) => (a, b),
                    // The pooler is not part of the masked-LM loss.
                    (None, None) => continue,
                    (a, b) => panic!("{name}: gradient {} vs {}", a.is_some(), b.is_some()),
                };
                let a: Vec<f32> = a.flatten_all().unwrap().to_vec1().unwrap();
                let b: Vec<f32> = b.flatten_all().unwrap().to_vec1().unwrap();
                let scale = a.iter().fold(1e-12f32, |m, x| m.max(x.abs()));
                let worst = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max) / scale;
                assert!(worst <= 1e-5, "{device:?} {attention:?} {name}: relative difference {worst}");
            }
        }
    }
}
