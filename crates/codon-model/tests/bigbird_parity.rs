//! Parity with transformers' BigBirdForMaskedLM on the tiny fixture model
//! (`tests/fixtures/bigbird`): logits, loss, random-block tables and every gradient.
//!
//! The model runs on the CPU, or on the device `CODON_TEST_DEVICE` names (`cuda:N`, in a build
//! with `--features codon-ops/cuda`): the same tolerances hold on a GPU.

use std::collections::HashMap;
use std::path::PathBuf;

use candle_core::{DType, Device, Tensor};
use codon_model::bigbird::{
    load_model, masked_lm_loss, AttentionType, BigBirdForMaskedLM, BlockGeometry, ForwardMode, ModelInput, RandomBlocks,
};

/// The fixtures, from where the test was built or, for a binary carried to another machine, from
/// the repository root it runs in.
fn fixtures() -> PathBuf {
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/bigbird");
    if built.exists() {
        built
    } else {
        PathBuf::from("tests/fixtures/bigbird")
    }
}

fn read(path: PathBuf) -> HashMap<String, Tensor> {
    candle_core::safetensors::load(&path, &Device::Cpu).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The device the model runs on: `CODON_TEST_DEVICE` (`cpu` or `cuda:N`), the CPU by default.
/// Opened once: tensors of two opened instances of one GPU do not mix.
fn device() -> Device {
    static DEVICE: std::sync::OnceLock<Device> = std::sync::OnceLock::new();
    DEVICE
        .get_or_init(|| match std::env::var("CODON_TEST_DEVICE").as_deref() {
            Err(_) | Ok("cpu") => Device::Cpu,
            Ok(name) => {
                let id = name.strip_prefix("cuda:").and_then(|id| id.parse().ok());
                let id = id.unwrap_or_else(|| panic!("CODON_TEST_DEVICE={name}: expected cpu or cuda:N"));
                Device::new_cuda(id).unwrap_or_else(|e| panic!("CODON_TEST_DEVICE={name}: {e}"))
            }
        })
        .clone()
}

/// `t` on the CPU, for comparison with the fixtures.
fn host(t: &Tensor) -> Tensor {
    t.to_device(&Device::Cpu).unwrap()
}

struct Case {
    input: ModelInput,
    labels: Tensor,
}

fn case(name: &'static str) -> Case {
    let t = read(fixtures().join(name).join("inputs.safetensors"));
    let on = |key: &str| t[key].to_device(&device()).unwrap();
    Case {
        input: ModelInput {
            input_ids: on("input_ids"),
            token_type_ids: on("token_type_ids"),
            attention_mask: on("attention_mask"),
        },
        labels: on("labels"),
    }
}

const CASES: [&str; 4] = ["case_pad_b2_45", "case_even_b2_64", "case_short_b2_24", "case_legacy_b1_1024"];

fn max_abs(t: &Tensor) -> f32 {
    t.abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap()
}

fn check_logits(name: &str, got: &Tensor, want: &Tensor, rel: f32) {
    assert_eq!(got.dims(), want.dims(), "{name}");
    let got = host(got).to_dtype(DType::F32).unwrap();
    let diff = max_abs(&(got - want).unwrap());
    let scale = max_abs(want);
    eprintln!("{name}: max |Δlogit| / max |logit| = {:.2e}", diff / scale);
    assert!(diff <= rel * scale, "{name}: max |Δlogit| {diff:e} > {rel:e} · {scale}");
}

fn check_loss(name: &str, got: &Tensor, want: &Tensor) {
    let got = host(got).to_dtype(DType::F32).unwrap().to_scalar::<f32>().unwrap();
    let want = want.flatten_all().unwrap().get(0).unwrap().to_scalar::<f32>().unwrap();
    eprintln!("{name}: loss {got} vs {want} (rel {:.2e})", ((got - want) / want).abs());
    assert!(((got - want) / want).abs() <= 1e-5, "{name}: loss {got} vs {want}");
}

fn model(dtype: DType) -> BigBirdForMaskedLM {
    load_model(fixtures(), None, &device(), dtype).unwrap()
}

fn mode_of(file: &str) -> ForwardMode {
    match file {
        "full_eval" => ForwardMode::eval(AttentionType::OriginalFull),
        "sparse_eval" => ForwardMode::eval(AttentionType::BlockSparse),
        _ => ForwardMode::train(AttentionType::BlockSparse, 0),
    }
}

#[test]
fn logits_and_loss_match_in_every_case_and_mode() {
    let m = model(DType::F32);
    for name in CASES {
        let c = case(name);
        for file in ["full_eval", "sparse_eval", "sparse_train"] {
            let expected = read(fixtures().join(name).join(format!("{file}.safetensors")));
            let (logits, info) = m.forward_with_info(&c.input, mode_of(file)).unwrap();
            let label = format!("{name}/{file}");
            check_logits(&label, &logits, &expected["logits"], 2e-5);
            check_loss(&label, &masked_lm_loss(&logits, &c.labels).unwrap(), &expected["loss"]);
            // The random-block tables that ran are the ones HF gathered.
            let stored: Vec<_> = (0..2).filter_map(|l| expected.get(&format!("rand_attn.layer{l}"))).collect();
            assert_eq!(stored.len(), info.random_blocks.len(), "{label}: block-sparse ran iff HF's did");
            for (table, want) in info.random_blocks.iter().zip(stored) {
                // (b, h, nb−2, r): identical for every batch row.
                let want: Vec<u32> =
                    want.get(0).unwrap().flatten_all().unwrap().to_dtype(DType::U32).unwrap().to_vec1().unwrap();
                assert_eq!(table.blocks, want, "{label}");
            }
        }
    }
}

#[test]
fn every_gradient_matches() {
    let m = model(DType::F32);
    let (trainable, vars) = m.trainable(DType::F32).unwrap();
    for name in ["case_pad_b2_45", "case_even_b2_64", "case_short_b2_24"] {
        let c = case(name);
        let expected = read(fixtures().join(name).join("sparse_train.safetensors"));
        let logits = trainable.forward(&c.input, ForwardMode::train(AttentionType::BlockSparse, 0)).unwrap();
        let loss = masked_lm_loss(&logits, &c.labels).unwrap();
        let grads = loss.backward().unwrap();
        let mut checked = 0;
        let mut worst = 0f32;
        for (pname, var) in &vars {
            let want = &expected[&format!("grad.{pname}")];
            let got = host(&grads.get(var).cloned().unwrap_or_else(|| var.zeros_like().unwrap()));
            let diff =
                (&got - want).unwrap().sqr().unwrap().sum_all().unwrap().sqrt().unwrap().to_scalar::<f32>().unwrap();
            let norm = want.sqr().unwrap().sum_all().unwrap().sqrt().unwrap().to_scalar::<f32>().unwrap();
            if pname.ends_with("attention.self.key.bias") || pname.starts_with("bert.pooler") {
                // Mathematically zero (fixture README): compare absolutely.
                assert!(max_abs(&got) < 1e-6, "{name}: {pname} should be ~0, max {}", max_abs(&got));
            } else {
                worst = worst.max(diff / norm);
                assert!(diff <= 1e-4 * norm, "{name}: {pname}: ‖Δg‖ {diff:e} vs ‖g‖ {norm:e}");
            }
            checked += 1;
        }
        eprintln!("{name}: worst ‖Δg‖/‖g‖ = {worst:.2e}");
        assert_eq!(checked, 44, "{name}");
    }
}

#[test]
fn real_geometry_random_tables_match() {
    let tables = read(fixtures().join("rand_attn_real_geometry.safetensors"));
    let mut checked = 0;
    for (key, want) in &tables {
        // n<N>.layer<L>
        let (n, layer) = key.trim_start_matches('n').split_once(".layer").unwrap();
        let g = BlockGeometry {
            seq_len: n.parse().unwrap(),
            block_size: 64,
            num_random_blocks: 3,
            num_heads: 12,
            max_position_embeddings: 4096,
        };
        let got = RandomBlocks::training(&g, layer.parse().unwrap());
        let want: Vec<u32> = want.flatten_all().unwrap().to_dtype(DType::U32).unwrap().to_vec1().unwrap();
        assert_eq!(got.blocks, want, "{key}");
        checked += 1;
    }
    assert_eq!(checked, 60);
}

#[test]
fn bf16_stays_within_torch_bf16_tolerance() {
    let m = model(DType::BF16);
    let c = case("case_pad_b2_45");
    let f32_logits = &read(fixtures().join("case_pad_b2_45/full_eval.safetensors"))["logits"];
    let torch_bf16 = &read(fixtures().join("case_pad_b2_45/full_eval_bf16.safetensors"))["logits"];
    let torch_err = max_abs(&(torch_bf16.to_dtype(DType::F32).unwrap() - f32_logits).unwrap());
    for attention in [AttentionType::OriginalFull, AttentionType::BlockSparse] {
        let logits = m.forward(&c.input, ForwardMode::eval(attention)).unwrap();
        assert_eq!(logits.dtype(), DType::BF16);
        let logits = host(&logits).to_dtype(DType::F32).unwrap();
        assert!(max_abs(&logits).is_finite());
        if attention == AttentionType::OriginalFull {
            // Fixture README: torch's own bf16 error is 0.83 % of max |logit|; allow 4 %.
            let err = max_abs(&(logits - f32_logits).unwrap());
            eprintln!("bf16 max |Δlogit| {err} (torch bf16: {torch_err}), max |logit| {}", max_abs(f32_logits));
            assert!(err <= 0.04 * max_abs(f32_logits), "bf16 error {err} (torch's own: {torch_err})");
        }
    }
    // Training-mode bf16 runs forward and backward without NaN.
    let loss =
        masked_lm_loss(&m.forward(&c.input, ForwardMode::train(AttentionType::BlockSparse, 1)).unwrap(), &c.labels)
            .unwrap();
    assert!(host(&loss).to_dtype(DType::F32).unwrap().to_scalar::<f32>().unwrap().is_finite());
}

/// bf16 block-sparse inference (the CPU kernels widen bf16 to f32 and round the result back)
/// stays as close to transformers' f32 logits as bf16 full attention does, on a sequence long
/// enough for the sparse path.
#[test]
fn bf16_block_sparse_stays_within_the_bf16_tolerance() {
    let c = case("case_legacy_b1_1024");
    let want = &read(fixtures().join("case_legacy_b1_1024/sparse_eval.safetensors"))["logits"];
    let logits = model(DType::BF16).forward(&c.input, ForwardMode::eval(AttentionType::BlockSparse)).unwrap();
    assert_eq!(logits.dtype(), DType::BF16);
    let err = max_abs(&(host(&logits).to_dtype(DType::F32).unwrap() - want).unwrap());
    eprintln!("bf16 block-sparse max |Δlogit| {err}, max |logit| {}", max_abs(want));
    assert!(err <= 0.04 * max_abs(want), "bf16 block-sparse error {err}");
}
