//! Every output is guarded (issue 26's second hostile trial): no command replaces one of its
//! inputs, a file inside an input model folder, or another run's checkpoints, and a model
//! folder with files in it is replaced only on request.

use std::path::Path;
use std::process::Output;

mod common;
use common::{bigbird_fixture, command, demo, run};

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A copy of the tiny fixture model in `dir/name` (config.json + model.safetensors).
fn model_copy(dir: &Path, name: &str) -> String {
    let model = dir.join(name);
    std::fs::create_dir_all(&model).unwrap();
    for file in ["config.json", "model.safetensors"] {
        std::fs::copy(bigbird_fixture(file), model.join(file)).unwrap();
    }
    model.to_string_lossy().into_owned()
}

/// The demo data prepared into `dir/train.jsonl`.
fn prepared(dir: &Path) -> String {
    let train = dir.join("train.jsonl").to_string_lossy().into_owned();
    let o = run("prepare-data", &["--input", &demo("genes.csv"), "--output", &train]);
    assert!(o.status.success(), "{}", stderr(&o));
    train
}

/// Every file under `dir` with its bytes, for before-and-after comparisons.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else {
                files.push((path.to_string_lossy().into_owned(), std::fs::read(&path).unwrap()));
            }
        }
    }
    files.sort();
    files
}

/// Run `name` with `args`, expect status 1 with `message` in its error, and `guarded` unchanged.
fn refused(name: &str, args: &[&str], message: &str, guarded: &Path) {
    let before = snapshot(guarded);
    let o = command(name).args(args).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{name} {args:?}: {}", stderr(&o));
    assert!(stderr(&o).contains(message), "{name} {args:?}: {message:?} in {}", stderr(&o));
    assert!(snapshot(guarded) == before, "{name} {args:?} changed {}", guarded.display());
}

#[test]
fn predict_and_score_never_write_over_a_reference_or_into_a_model_folder() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    let train = prepared(dir.path());
    let model = model_copy(dir.path(), "m");
    std::fs::write(p("in.csv"), "protein_sequence,organism\nMKV,51\n").unwrap();
    let weights = format!("{model}/model.safetensors");
    let baseline = ["--method", "high-frequency", "--reference", &train, "--input", &p("in.csv"), "--output"];
    refused("predict", &[&baseline[..], &[&train]].concat(), "is the input", dir.path());
    let table = ["--method", "high-frequency", "--codon-table", &train, "--input", &p("in.csv"), "--output", &train];
    refused("predict", &table, "is the input", dir.path());
    refused("predict", &["--model", &model, "--input", &p("in.csv"), "--output", &weights], "inside", dir.path());
    let one = ["--model", &model, "--protein", "MKV", "--organism", "51", "--output", &weights];
    refused("predict", &one, "inside the input folder", dir.path());
    let inputs = bigbird_fixture("case_pad_b2_45/inputs.safetensors");
    refused("score", &["--model", &model, "--inputs", &inputs, "--output", &weights], "inside", dir.path());
    // Beside the model folder (a name sharing its prefix) is fine.
    let o = run("score", &["--model", &model, "--inputs", &inputs, "--output", &format!("{model}-scores.safetensors")]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn the_state_dict_file_is_a_plain_name_and_never_an_input() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    let train = prepared(dir.path());
    let model = model_copy(dir.path(), "m");
    std::fs::create_dir(p("other")).unwrap();
    std::fs::write(p("other/config.json"), "{}").unwrap();
    let finetune = |extra: &[&str]| {
        [
            &[
                "--dataset_dir",
                train.as_str(),
                "--precision",
                "f32",
                "--num_workers",
                "1",
                "--quiet",
                "--max_steps",
                "1",
            ],
            extra,
        ]
        .concat()
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<String>>()
    };
    let cases: [(&[&str], &str); 3] = [
        (
            &["--from-scratch", "--checkpoint_dir", &p(""), "--checkpoint_filename", "train.jsonl"],
            "would replace the run's input",
        ),
        (
            &["--from-scratch", "--checkpoint_dir", &p("ck"), "--checkpoint_filename", "../other/config.json"],
            "plain file name",
        ),
        (&["--model", &model, "--checkpoint_dir", &model, "--checkpoint_filename", "model.safetensors"], "input"),
    ];
    for (extra, message) in cases {
        let args = finetune(extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        refused("finetune", &args, message, dir.path());
    }
}

/// Steps of `dir`, sorted.
fn steps(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("step-"))
        .collect();
    names.sort();
    names
}

#[test]
fn two_trainings_cannot_share_a_checkpoint_folder() {
    // Two runs on one folder both exited 0 with their steps mixed; this test holds the folder's
    // lock as a running training does.
    let dir = tempfile::tempdir().unwrap();
    let train = prepared(dir.path());
    let ck = dir.path().join("ck");
    std::fs::create_dir(&ck).unwrap();
    let held = std::fs::File::open(&ck).unwrap();
    held.try_lock().unwrap();
    let args = ["--dataset_dir", &train, "--config", &bigbird_fixture("config.json"), "--max_steps", "1", "--quiet"];
    let ck_arg = ck.to_string_lossy().into_owned();
    refused("finetune", &[&args[..], &["--checkpoint_dir", &ck_arg]].concat(), "is in use by another training", &ck);
    drop(held);
    let o = command("finetune").args(args).args(["--checkpoint_dir", &ck_arg]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn a_checkpoint_folder_holds_one_runs_steps() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    let train = prepared(dir.path());
    let config = bigbird_fixture("config.json");
    let finetune_steps = |steps: &str, seed: &str, extra: &[&str]| {
        let mut c = command("finetune");
        c.args(["--dataset_dir", &train, "--config", &config, "--precision", "f32", "--num_workers", "1", "--quiet"])
            .args(["--checkpoint_dir", &p("ck"), "--save_every_n_steps", "1", "--max_steps", steps, "--seed", seed])
            .args(extra);
        c.output().unwrap()
    };
    let finetune = |seed: &str, extra: &[&str]| finetune_steps("2", seed, extra);
    let o = finetune("1", &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(steps(&dir.path().join("ck")), ["step-1", "step-2"]);
    let state = std::fs::read_to_string(p("ck/step-2/trainer_state.json")).unwrap();
    let state: serde_json::Value = serde_json::from_str(&state).unwrap();
    for key in ["model_config", "dataset", "dataset_bytes", "seed", "learning_rate", "total_steps"] {
        assert!(state["run"][key].is_string(), "{key} in {state}");
    }
    // The same run again is the same run: its own steps are replaced.
    let o = finetune("1", &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    // Another run (another seed) is refused, with or without retention, and nothing changes.
    let ck = dir.path().join("ck");
    let before = snapshot(&ck);
    for extra in [&[][..], &["--keep-last", "1"][..]] {
        let o = finetune("2", extra);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        assert!(
            stderr(&o).contains("holds another run's checkpoints (step-1, step-2, finetune.ckpt)"),
            "{}",
            stderr(&o)
        );
        assert!(snapshot(&ck) == before, "a refused run changed the folder");
    }
    // --overwrite removes the other run's steps and state dict first, then trains.
    let o = finetune("2", &["--overwrite", "--keep-last", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("removed another run's"), "{}", stderr(&o));
    assert_eq!(steps(&ck), ["step-2"]);
    let state = std::fs::read_to_string(p("ck/step-2/trainer_state.json")).unwrap();
    assert!(state.contains("\"seed\": \"2\""), "{state}");
    // A resumed run counts the steps it resumes from as its own: retention prunes them.
    std::fs::remove_dir_all(p("ck")).unwrap();
    let o = finetune_steps("4", "1", &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    for n in [3, 4] {
        std::fs::remove_dir_all(p(&format!("ck/step-{n}"))).unwrap();
    }
    let o = finetune_steps("4", "1", &["--resume", &p("ck/step-2"), "--keep-last", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(steps(&ck), ["step-4"]);
}

#[test]
fn init_model_replaces_a_used_folder_only_on_request() {
    let dir = tempfile::tempdir().unwrap();
    let model = model_copy(dir.path(), "trained");
    std::fs::write(format!("{model}/optimizer.safetensors"), b"moments").unwrap();
    let config = bigbird_fixture("config.json");
    refused("init-model", &["--output", &model, "--config", &config], "is not empty", dir.path());
    let o = run("init-model", &["--output", &model, "--config", &config, "--overwrite"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut files: Vec<String> =
        std::fs::read_dir(&model).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    files.sort();
    assert_eq!(files, ["config.json", "model.safetensors"], "the old optimizer state is gone with the folder");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "no temporary folder left beside it");
    let config_inside = format!("{model}/config.json");
    refused("init-model", &["--output", &model, "--config", &config_inside, "--overwrite"], "--config", dir.path());
}
