//! The exported graph run by a pure-Rust ONNX runtime (tract) against the model's own forward
//! pass (full attention), and checked against the operator list ATC accepts.
use std::path::PathBuf;

use candle_core::{DType, Device, Tensor};
use codon_model::bigbird::{
    init_weights, load_model, AttentionType, BigBirdConfig, BigBirdForMaskedLM, ForwardMode, ModelInput,
};
use codon_onnx::{export, model_proto, Float, OPERATORS};
use tract_onnx::prelude::*;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/bigbird")
}

/// (batch, length) int64 rows as the graph's input.
fn int64_input(t: &Tensor) -> TValue {
    let (b, n) = t.dims2().unwrap();
    let v = t.to_dtype(DType::I64).unwrap().flatten_all().unwrap().to_vec1::<i64>().unwrap();
    tract_ndarray::Array2::from_shape_vec((b, n), v).unwrap().into_tensor().into()
}

/// The exported file's logits for `input` under tract, and the model's own (full attention).
fn both_logits(model: &BigBirdForMaskedLM, input: &ModelInput) -> (Vec<f32>, Vec<f32>) {
    let bytes = export(model, Float::F32).unwrap();
    let (b, n) = input.input_ids.dims2().unwrap();
    let runnable = tract_onnx::onnx()
        .model_for_read(&mut bytes.as_slice())
        .unwrap()
        .with_input_fact(0, i64::fact([b, n]).into())
        .unwrap()
        .with_input_fact(1, i64::fact([b, n]).into())
        .unwrap()
        .with_input_fact(2, i64::fact([b, n]).into())
        .unwrap()
        .into_optimized()
        .unwrap()
        .into_runnable()
        .unwrap();
    let out = runnable
        .run(tvec!(
            int64_input(&input.input_ids),
            int64_input(&input.attention_mask),
            int64_input(&input.token_type_ids)
        ))
        .unwrap();
    let onnx: Vec<f32> = out[0].to_plain_array_view::<f32>().unwrap().iter().copied().collect();
    let ours = model.forward(input, ForwardMode::eval(AttentionType::OriginalFull)).unwrap();
    assert_eq!(ours.dims(), &[b, n, model.config().vocab_size]);
    (onnx, ours.flatten_all().unwrap().to_vec1::<f32>().unwrap())
}

/// Largest difference relative to the largest |logit|.
fn relative_difference(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
}

#[test]
fn the_exported_fixture_model_gives_the_models_logits() {
    let model = load_model(fixtures(), None, &Device::Cpu, DType::F32).unwrap();
    for case in ["case_short_b2_24", "case_pad_b2_45", "case_even_b2_64"] {
        let t = candle_core::safetensors::load(fixtures().join(case).join("inputs.safetensors"), &Device::Cpu).unwrap();
        let input = ModelInput {
            input_ids: t["input_ids"].clone(),
            token_type_ids: t["token_type_ids"].clone(),
            attention_mask: t["attention_mask"].clone(),
        };
        let (onnx, ours) = both_logits(&model, &input);
        let d = relative_difference(&onnx, &ours);
        assert!(d < 1e-5, "{case}: logits differ by {d:e} of the largest");
    }
}

#[test]
fn the_exported_codon_transformer_configuration_gives_the_models_logits() {
    let config = BigBirdConfig::default();
    let model =
        BigBirdForMaskedLM::from_named(config.clone(), init_weights(&config, 7, &Device::Cpu, DType::F32).unwrap())
            .unwrap();
    for n in [40, 257] {
        let ids: Vec<u32> = (0..2 * n).map(|i| if i % n == 0 { 2 } else { 26 + (i * 7 % 64) as u32 }).collect();
        let mut mask = vec![1u8; 2 * n];
        mask[2 * n - 5..].fill(0);
        let input = ModelInput {
            input_ids: Tensor::from_vec(ids, (2, n), &Device::Cpu).unwrap(),
            token_type_ids: Tensor::full(51u32, (2, n), &Device::Cpu).unwrap(),
            attention_mask: Tensor::from_vec(mask, (2, n), &Device::Cpu).unwrap(),
        };
        let (onnx, ours) = both_logits(&model, &input);
        let d = relative_difference(&onnx, &ours);
        assert!(d < 1e-5, "length {n}: logits differ by {d:e} of the largest");
    }
}

#[test]
fn the_graph_uses_only_the_listed_operators_at_the_listed_opset() {
    let model = load_model(fixtures(), None, &Device::Cpu, DType::F32).unwrap();
    let proto = model_proto(&model, Float::F32).unwrap();
    assert_eq!(proto.opset_import.len(), 1);
    assert_eq!((proto.opset_import[0].domain.as_str(), proto.opset_import[0].version), ("", codon_onnx::OPSET));
    let used: std::collections::BTreeSet<&str> = proto.graph.node.iter().map(|n| n.op_type.as_str()).collect();
    let listed: std::collections::BTreeSet<&str> = OPERATORS.iter().map(|o| o.name).collect();
    let unlisted: Vec<&&str> = used.difference(&listed).collect();
    assert!(unlisted.is_empty(), "operators not on the list: {unlisted:?}");
    assert!(used.contains("Softmax") && used.contains("MatMul") && !used.contains("LayerNormalization"));
    let names: Vec<&str> = proto.graph.input.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["input_ids", "attention_mask", "token_type_ids"]);
    assert_eq!(proto.graph.output[0].name, "logits");
}
