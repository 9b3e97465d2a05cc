//! `finetune --add-organism`: a trained model learns one more organism through one new embedding
//! row; everything else stays bitwise the same, the optimizer holds state for that row alone, and
//! the checkpoint's config and organism table carry the organism to `predict`.

use std::collections::HashMap;

use candle_core::{Device, Tensor};

mod common;
use common::{bigbird_fixture, demo, run};

const TABLE: &str = "bert.embeddings.token_type_embeddings.weight";

fn tensors(path: &std::path::Path) -> HashMap<String, Tensor> {
    candle_core::safetensors::load(path, &Device::Cpu).unwrap()
}

fn values(t: &Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_vec1::<f32>().unwrap()
}

#[test]
fn only_the_new_row_trains_and_predict_knows_the_organism() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    let o = run("prepare-data", &["--input", &demo("genes.csv"), "--output", &p("train.jsonl")]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let train = |checkpoints: &str, extra: &[&str]| {
        let args = [
            "--dataset_dir",
            &p("train.jsonl"),
            "--model",
            &bigbird_fixture(""),
            "--add-organism",
            "Nova organism",
            "--batch_size",
            "2",
            "--num_workers",
            "1",
            "--learning_rate",
            "1e-2",
            "--save_every_n_steps",
            "2",
            "--checkpoint_dir",
            &p(checkpoints),
            "--quiet",
        ];
        let o = run("finetune", &[&args[..], extra].concat());
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let stdout = train("ck", &["--max_steps", "4"]);
    assert!(stdout.contains("adding organism \"Nova organism\" as id 164"), "{stdout}");

    let before = tensors(std::path::Path::new(&bigbird_fixture("model.safetensors")));
    let after = tensors(&dir.path().join("ck/step-4/model.safetensors"));
    assert_eq!(before.len(), after.len());
    for (name, old) in &before {
        let new = &after[name];
        if name == TABLE {
            let rows = old.dim(0).unwrap();
            assert_eq!(new.dims(), [rows + 1, old.dim(1).unwrap()]);
            assert_eq!(values(&new.narrow(0, 0, rows).unwrap()), values(old), "the existing rows are unchanged");
            let start = values(&old.mean_keepdim(0).unwrap());
            assert_ne!(values(&new.narrow(0, rows, 1).unwrap()), start, "the new row trained away from its start");
        } else {
            assert_eq!(values(new), values(old), "{name} is frozen");
        }
    }
    let moments = tensors(&dir.path().join("ck/step-4/optimizer.safetensors"));
    let hidden = before[TABLE].dim(1).unwrap();
    assert_eq!(moments.len(), 2, "{:?}", moments.keys());
    assert!(moments.values().all(|t| t.elem_count() == hidden), "optimizer state for the row alone");

    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("ck/step-4/config.json")).unwrap()).unwrap();
    assert_eq!(config["type_vocab_size"], 165);
    let names: Vec<String> =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("ck/step-4/organisms.json")).unwrap()).unwrap();
    assert_eq!((names.len(), names.last().map(String::as_str)), (165, Some("Nova organism")));
    assert!(dir.path().join("ck/organisms.json").exists(), "the state dict's folder has the table too");

    let o = run(
        "predict",
        &["--model", &p("ck/step-4"), "--protein", "MKVLAW", "--organism", "Nova organism", "--match-protein"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let dna = String::from_utf8_lossy(&o.stdout).trim().to_string();
    let protein: String = dna.as_bytes().chunks(3).map(|c| codon_model::vocab::translate_codon(c).unwrap()).collect();
    assert_eq!(protein, "MKVLAW_");
    let o = run("predict", &["--model", &p("ck/step-4"), "--protein", "MKV", "--organism", "Nova organsm"]);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("Did you mean: Nova organism"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    // Resuming from the run's step-2 checkpoint reproduces its step-4 row.
    train("ck2", &["--max_steps", "4", "--resume", &p("ck/step-2")]);
    let resumed = tensors(&dir.path().join("ck2/step-4/model.safetensors"));
    assert_eq!(values(&resumed[TABLE]), values(&after[TABLE]));

    // Adding a name the model already knows is refused.
    let o = run(
        "finetune",
        &[
            "--dataset_dir",
            &p("train.jsonl"),
            "--model",
            &p("ck/step-4"),
            "--add-organism",
            "Nova organism",
            "--max_steps",
            "1",
        ],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("already knows \"Nova organism\""),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
