//! Weight loading, checking, saving and initialisation.

use std::collections::HashMap;
use std::path::PathBuf;

use candle_core::{DType, Device, Tensor};
use codon_model::bigbird::{
    init_weights, load_model, parameter_shapes, save_model, AttentionType, BigBirdConfig, BigBirdForMaskedLM,
    ForwardMode, ModelInput,
};
use codon_model::CodonError;

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/bigbird")
}

fn fixture_tensors() -> HashMap<String, Tensor> {
    candle_core::safetensors::load(fixture_dir().join("model.safetensors"), &Device::Cpu).unwrap()
}

fn tiny_config() -> BigBirdConfig {
    BigBirdConfig::from_file(fixture_dir().join("config.json")).unwrap()
}

#[test]
fn codontransformer_config_has_89_579_610_parameters() {
    let n: usize = parameter_shapes(&BigBirdConfig::default()).iter().map(|(_, s)| s.iter().product::<usize>()).sum();
    assert_eq!(n, 89_579_610);
    assert_eq!(parameter_shapes(&BigBirdConfig::default()).len(), 204);
    let tiny = load_model(fixture_dir(), None, &Device::Cpu, DType::F32).unwrap();
    assert_eq!(tiny.num_parameters(), 156_538);
}

#[test]
fn missing_unexpected_and_misshapen_keys_are_listed() {
    let dir = tempfile::tempdir().unwrap();
    let mut t = fixture_tensors();
    t.remove("bert.pooler.bias");
    t.insert("bert.extra.weight".into(), Tensor::zeros(3, DType::F32, &Device::Cpu).unwrap());
    t.insert("cls.predictions.bias".into(), Tensor::zeros(91, DType::F32, &Device::Cpu).unwrap());
    // Tied decoder copies and old position-id buffers are accepted and ignored.
    t.insert("cls.predictions.decoder.bias".into(), Tensor::zeros(90, DType::F32, &Device::Cpu).unwrap());
    t.insert("bert.embeddings.position_ids".into(), Tensor::zeros((1, 4096), DType::I64, &Device::Cpu).unwrap());
    let file = dir.path().join("bad.safetensors");
    candle_core::safetensors::save(&t, &file).unwrap();
    let err = load_model(&file, Some(tiny_config()), &Device::Cpu, DType::F32).unwrap_err();
    match &err {
        CodonError::Weights { missing, unexpected, misshapen, .. } => {
            // A key with the wrong shape is misshapen only, not missing as well.
            assert_eq!(missing, &["bert.pooler.bias"]);
            assert_eq!(unexpected, &["bert.extra.weight"]);
            assert_eq!(misshapen, &["cls.predictions.bias: expected [90], found [91]"]);
        }
        other => panic!("{other}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("bad.safetensors") && msg.contains("missing (1)") && msg.contains("unexpected (1)"), "{msg}");
}

#[test]
fn lightning_prefix_is_stripped() {
    let dir = tempfile::tempdir().unwrap();
    let t: HashMap<String, Tensor> = fixture_tensors().into_iter().map(|(k, v)| (format!("model.{k}"), v)).collect();
    let file = dir.path().join("lightning.safetensors");
    candle_core::safetensors::save(&t, &file).unwrap();
    let m = load_model(&file, Some(tiny_config()), &Device::Cpu, DType::F32).unwrap();
    assert_eq!(m.num_parameters(), 156_538);
}

#[test]
fn save_then_load_round_trips_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let m = load_model(fixture_dir(), None, &Device::Cpu, DType::F32).unwrap();
    save_model(&m, dir.path()).unwrap();
    let saved = candle_core::safetensors::load(dir.path().join("model.safetensors"), &Device::Cpu).unwrap();
    assert_eq!(saved.len(), 44, "transformers layout: decoder keys omitted");
    assert!(!saved.contains_key("cls.predictions.decoder.weight"));
    let original = fixture_tensors();
    for (k, v) in &original {
        let diff =
            (v - &saved[k]).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
        assert_eq!(diff, 0.0, "{k}");
    }
    // transformers 4.x loads a safetensors model only when its header says it came from torch.
    let bytes = std::fs::read(dir.path().join("model.safetensors")).unwrap();
    let (_, header) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    assert_eq!(header.metadata().as_ref().and_then(|m| m.get("format")).map(String::as_str), Some("pt"));
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("config.json")).unwrap()).unwrap();
    assert_eq!(config["architectures"][0], "BigBirdForMaskedLM");
    assert_eq!(config["model_type"], "big_bird");
    assert_eq!(config["hidden_act"], "gelu_new");
    let reloaded = load_model(dir.path(), None, &Device::Cpu, DType::F32).unwrap();
    assert_eq!(reloaded.config(), m.config());
    assert!(
        dir.path().read_dir().unwrap().all(|e| !e.unwrap().file_name().to_string_lossy().starts_with('.')),
        "no temp files left"
    );
}

#[test]
fn initialisation_follows_transformers() {
    let config = tiny_config();
    let w = init_weights(&config, 1, &Device::Cpu, DType::F32).unwrap();
    let stats = |t: &Tensor| {
        let v: Vec<f32> = t.flatten_all().unwrap().to_vec1().unwrap();
        let mean = v.iter().sum::<f32>() / v.len() as f32;
        let std = (v.iter().map(|x| (x - mean).powi(2)).sum::<f32>() / v.len() as f32).sqrt();
        (mean, std)
    };
    let (mean, std) = stats(&w["bert.embeddings.position_embeddings.weight"]);
    assert!(mean.abs() < 1e-3 && (std - 0.02).abs() < 1e-3, "{mean} {std}");
    let word: Vec<Vec<f32>> = w["bert.embeddings.word_embeddings.weight"].to_vec2().unwrap();
    assert!(word[0].iter().all(|&x| x == 0.0), "padding row is zero");
    assert!(word[1].iter().any(|&x| x != 0.0));
    assert_eq!(stats(&w["bert.encoder.layer.0.attention.output.LayerNorm.weight"]), (1.0, 0.0));
    assert_eq!(stats(&w["bert.encoder.layer.1.intermediate.dense.bias"]), (0.0, 0.0));
    let again = init_weights(&config, 1, &Device::Cpu, DType::F32).unwrap();
    assert_eq!(
        again["cls.predictions.transform.dense.weight"].to_vec2::<f32>().unwrap(),
        w["cls.predictions.transform.dense.weight"].to_vec2::<f32>().unwrap()
    );
    BigBirdForMaskedLM::from_named(config, w).unwrap();
}

#[test]
fn f16_inference_and_input_errors() {
    let m16 = load_model(fixture_dir(), None, &Device::Cpu, DType::F16).unwrap();
    let m32 = load_model(fixture_dir(), None, &Device::Cpu, DType::F32).unwrap();
    let input = |n: usize| ModelInput {
        input_ids: Tensor::from_vec((0..n as u32).map(|i| 26 + i % 64).collect(), (1, n), &Device::Cpu).unwrap(),
        token_type_ids: Tensor::full(51u32, (1, n), &Device::Cpu).unwrap(),
        attention_mask: Tensor::ones((1, n), DType::U32, &Device::Cpu).unwrap(),
    };
    for attention in [AttentionType::OriginalFull, AttentionType::BlockSparse] {
        let a = m16.forward(&input(40), ForwardMode::eval(attention)).unwrap();
        assert_eq!(a.dtype(), DType::F16);
        let b = m32.forward(&input(40), ForwardMode::eval(attention)).unwrap();
        let diff =
            (a.to_dtype(DType::F32).unwrap() - &b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap();
        let scale = b.abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
        assert!(diff.to_scalar::<f32>().unwrap() < 0.01 * scale, "f16 {attention:?}: {diff}");
    }
    // Longer than max_position_embeddings, mismatched shapes.
    let err = m32.forward(&input(4097), ForwardMode::eval(AttentionType::OriginalFull)).unwrap_err().to_string();
    assert!(err.contains("max_position_embeddings"), "{err}");
    let mut bad = input(10);
    bad.attention_mask = Tensor::ones((1, 9), DType::U32, &Device::Cpu).unwrap();
    let err = m32.forward(&bad, ForwardMode::eval(AttentionType::OriginalFull)).unwrap_err().to_string();
    assert!(err.contains("attention_mask has shape [1, 9]"), "{err}");
}

#[test]
fn dropout_is_active_in_training_and_seeded() {
    let mut config = tiny_config();
    config.hidden_dropout_prob = 0.1;
    config.attention_probs_dropout_prob = 0.1;
    let w = fixture_tensors();
    let m = BigBirdForMaskedLM::from_named(config, w).unwrap();
    let n = 20;
    let input = ModelInput {
        input_ids: Tensor::from_vec((0..n as u32).map(|i| 26 + i).collect(), (1, n), &Device::Cpu).unwrap(),
        token_type_ids: Tensor::zeros((1, n), DType::U32, &Device::Cpu).unwrap(),
        attention_mask: Tensor::ones((1, n), DType::U32, &Device::Cpu).unwrap(),
    };
    let run = |mode| m.forward(&input, mode).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let eval = run(ForwardMode::eval(AttentionType::OriginalFull));
    assert_eq!(eval, run(ForwardMode::eval(AttentionType::OriginalFull)));
    let t1 = run(ForwardMode::train(AttentionType::OriginalFull, 1));
    assert_eq!(t1, run(ForwardMode::train(AttentionType::OriginalFull, 1)));
    assert_ne!(t1, eval);
    assert_ne!(t1, run(ForwardMode::train(AttentionType::OriginalFull, 2)));
}

#[test]
fn pytorch_checkpoints_load_with_and_without_lightning_prefix() {
    let reference = load_model(fixture_dir(), None, &Device::Cpu, DType::F32).unwrap();
    for file in ["lightning.ckpt", "state_dict.pt"] {
        let m = load_model(fixture_dir().join(file), Some(tiny_config()), &Device::Cpu, DType::F32).unwrap();
        for ((n1, a), (n2, b)) in m.named_parameters().iter().zip(reference.named_parameters().iter()) {
            assert_eq!(n1, n2);
            let d = (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
            assert_eq!(d, 0.0, "{file}: {n1}");
        }
    }
    let err = load_model(fixture_dir().join("config.json"), Some(tiny_config()), &Device::Cpu, DType::F32).unwrap_err();
    assert!(err.to_string().contains("unsupported checkpoint type"), "{err}");
}

#[test]
fn a_model_folder_with_only_pytorch_model_bin_loads() {
    let reference = load_model(fixture_dir(), None, &Device::Cpu, DType::F32).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(fixture_dir().join("config.json"), dir.path().join("config.json")).unwrap();
    std::fs::copy(fixture_dir().join("state_dict.pt"), dir.path().join("pytorch_model.bin")).unwrap();
    let m = load_model(dir.path(), None, &Device::Cpu, DType::F32).unwrap();
    for ((n1, a), (n2, b)) in m.named_parameters().iter().zip(reference.named_parameters().iter()) {
        assert_eq!(n1, n2);
        let d = (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
        assert_eq!(d, 0.0, "{n1}");
    }
}

#[test]
fn torch_state_dict_files_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let m = load_model(fixture_dir(), None, &Device::Cpu, DType::F32).unwrap();
    let path = dir.path().join("finetune.ckpt");
    codon_model::bigbird::weights::save_torch_state_dict(&m.named_parameters(), &path).unwrap();
    let back = load_model(&path, Some(tiny_config()), &Device::Cpu, DType::F32).unwrap();
    for ((n1, a), (_, b)) in m.named_parameters().iter().zip(back.named_parameters().iter()) {
        let d = (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
        assert_eq!(d, 0.0, "{n1}");
    }
}
