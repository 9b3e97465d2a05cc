//! bf16 on the CPU predicts the codons f32 predicts, wherever f32 is sure of its choice: on the
//! demo's trained checkpoint and the demo proteins, at ≥ 99 % of the positions where f32's top
//! two codon log-probabilities differ by more than 0.1 (a random model's near-ties say nothing).

mod common;

use candle_core::{DType, Device};
use codon_model::bigbird::load_model;
use codon_model::predict::{DnaPrediction, PredictOptions, Predictor};
use codon_model::OrganismRef;

/// The margin below which f32's choice is a near-tie, and the agreement required above it.
const MARGIN: f32 = 0.1;
const MIN_AGREEMENT: f64 = 0.99;

/// One prediction per protein; the demo's deliberately bad entries are errors in both dtypes.
fn predict(
    checkpoint: &std::path::Path,
    dtype: DType,
    items: &[(String, OrganismRef)],
) -> Vec<codon_model::Result<DnaPrediction>> {
    let model = load_model(checkpoint, None, &Device::Cpu, dtype).unwrap();
    let options = PredictOptions { keep_codon_scores: true, ..PredictOptions::default() };
    Predictor::new(model)
        .unwrap()
        .predict_batch(items, &options)
        .unwrap()
        .into_iter()
        .map(|r| r.map(|mut runs| runs.remove(0)))
        .collect()
}

/// The best and second-best finite log-probabilities of one position.
fn top_two(scores: &[f32; 64]) -> (f32, f32) {
    scores.iter().filter(|s| s.is_finite()).fold((f32::NEG_INFINITY, f32::NEG_INFINITY), |(a, b), &s| {
        if s > a {
            (s, a)
        } else {
            (a, b.max(s))
        }
    })
}

#[test]
fn bf16_predicts_f32s_codon_wherever_f32_is_sure() {
    let dir = tempfile::tempdir().unwrap();
    let trained = common::command("finetune").current_dir(dir.path()).output().unwrap();
    assert!(trained.status.success(), "{}", String::from_utf8_lossy(&trained.stderr));
    let checkpoint = dir.path().join("demo-output/checkpoints/step-36");

    let items: Vec<(String, OrganismRef)> = std::fs::read_to_string(common::demo("proteins.jsonl"))
        .unwrap()
        .lines()
        .map(|line| {
            let record: serde_json::Value = serde_json::from_str(line).unwrap();
            let organism = match &record["organism"] {
                serde_json::Value::Number(id) => OrganismRef::Id(id.as_i64().unwrap()),
                name => OrganismRef::Name(name.as_str().unwrap().to_string()),
            };
            (record["protein"].as_str().unwrap().to_string(), organism)
        })
        .collect();
    let f32_runs = predict(&checkpoint, DType::F32, &items);
    let bf16_runs = predict(&checkpoint, DType::BF16, &items);

    let (mut sure, mut agree, mut all, mut same) = (0usize, 0usize, 0usize, 0usize);
    for (f, b) in f32_runs.iter().zip(&bf16_runs) {
        let (Ok(f), Ok(b)) = (f, b) else {
            assert_eq!(f.is_ok(), b.is_ok(), "a protein predicts in one dtype only");
            continue;
        };
        let scores = f.codon_log_probs.as_ref().unwrap();
        let codons = |p: &DnaPrediction| p.predicted_dna.as_bytes().chunks(3).map(<[u8]>::to_vec).collect::<Vec<_>>();
        for ((scores, fc), bc) in scores.iter().zip(codons(f)).zip(codons(b)) {
            let (best, second) = top_two(scores);
            all += 1;
            same += usize::from(fc == bc);
            if best - second > MARGIN {
                sure += 1;
                agree += usize::from(fc == bc);
            }
        }
    }
    let agreement = agree as f64 / sure as f64;
    eprintln!(
        "bf16 vs f32: {agree} of {sure} sure positions agree ({:.2} %), {same} of {all} in all",
        100.0 * agreement
    );
    assert!(sure >= all / 4, "only {sure} of {all} positions have a margin above {MARGIN}: the model is untrained");
    assert!(agreement >= MIN_AGREEMENT, "bf16 agrees with f32 at {:.2} % of the sure positions", 100.0 * agreement);
}
