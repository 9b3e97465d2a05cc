//! What a hostile trial of the command-line programs found, each kept from coming back: no
//! output replaces an input, failure-like outcomes exit non-zero, non-finite values never pass
//! silently, the demo stays the demo, resume and retention behave, error lines are short and
//! say each thing once, and killed checkpointing runs leave only complete step folders.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;
use common::{bigbird_fixture, command, demo, run};

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The demo data prepared into `dir/train.jsonl`.
fn prepared(dir: &Path) -> String {
    let train = dir.join("train.jsonl").to_string_lossy().into_owned();
    let o = run("prepare-data", &["--input", &demo("genes.csv"), "--output", &train]);
    assert!(o.status.success(), "{}", stderr(&o));
    train
}

/// `finetune` on `train` with the tiny fixture model, f32, one loader thread, quiet.
fn finetune(train: &str, extra: &[&str]) -> Command {
    let mut c = command("finetune");
    c.args(["--dataset_dir", train, "--precision", "f32", "--num_workers", "1", "--quiet"]).args(extra);
    c
}

fn tiny_config() -> String {
    bigbird_fixture("config.json")
}

#[test]
fn outputs_never_replace_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    std::fs::copy(demo("genes.csv"), p("genes.csv")).unwrap();
    std::fs::copy(demo("proteins.jsonl"), p("proteins.jsonl")).unwrap();
    let train = prepared(dir.path());
    std::fs::write(p("in.csv"), "protein_sequence,organism\nMKV,51\n").unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(p("genes.csv"), p("link.csv")).unwrap();
    let model = bigbird_fixture("");
    let dotted = format!("{}/./genes.csv", dir.path().display());
    let mut cases: Vec<(&str, Vec<String>, String)> = vec![
        ("prepare-data", vec!["--input".into(), p("genes.csv"), "--output".into(), p("genes.csv")], p("genes.csv")),
        ("prepare-data", vec!["--input".into(), p("genes.csv"), "--output".into(), dotted], p("genes.csv")),
        (
            "tokenize",
            vec!["--input".into(), p("proteins.jsonl"), "--output".into(), p("proteins.jsonl")],
            p("proteins.jsonl"),
        ),
        (
            "collate",
            vec!["--input".into(), train.clone(), "--batch-size".into(), "2".into(), "--output".into(), train.clone()],
            train.clone(),
        ),
        (
            "predict",
            vec!["--model".into(), model, "--input".into(), p("in.csv"), "--output".into(), p("in.csv")],
            p("in.csv"),
        ),
    ];
    #[cfg(unix)]
    cases.push((
        "prepare-data",
        vec!["--input".into(), p("genes.csv"), "--output".into(), p("link.csv")],
        p("genes.csv"),
    ));
    for (name, args, input) in cases {
        let before = std::fs::read(&input).unwrap();
        let o = command(name).args(&args).output().unwrap();
        assert_eq!(o.status.code(), Some(1), "{name} {args:?}: {}", stdout(&o));
        assert!(stderr(&o).contains("is the input"), "{name}: {}", stderr(&o));
        assert_eq!(std::fs::read(&input).unwrap(), before, "{name} changed its input");
    }
}

#[test]
fn failure_like_outcomes_exit_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    // The organism is checked before the input is read (this input does not exist).
    let o =
        run("prepare-data", &["--input", &p("none.csv"), "--output", &p("t.jsonl"), "--organism", "Escherichia colli"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("Escherichia coli") && !stderr(&o).contains("none.csv"), "{}", stderr(&o));
    let o = run("predict", &["--model", &p("none"), "--protein", "MKV", "--organism", "Homo sapien"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("Homo sapiens") && stderr(&o).contains("--list-organisms"), "{}", stderr(&o));
    let o = run("predict", &["--list-organisms"]);
    assert!(o.status.success());
    assert!(stdout(&o).lines().any(|l| l == "51\tEscherichia coli general"), "{}", stdout(&o));
    // Every record dropped: nothing to train on.
    std::fs::write(p("unknown.csv"), "dna,organism\nATGGCTGCTGCTTAA,Atlantis\n").unwrap();
    let o = run("prepare-data", &["--input", &p("unknown.csv"), "--output", &p("t.jsonl")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no records written"), "{}", stderr(&o));
    // An unterminated quote is reported with its line, not as "dropped: no organism".
    std::fs::write(p("quote.csv"), "dna,organism\nATGGCTGCTGCTTAA,51\n\"ATGGCTGCTGCTTAA,51\nATGAAATAA,51\n").unwrap();
    let o = run("prepare-data", &["--input", &p("quote.csv"), "--output", &p("t.jsonl")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("quote.csv:3") && stderr(&o).contains("unterminated quote"), "{}", stderr(&o));
    // A batch prediction whose every row fails.
    std::fs::write(p("bad.csv"), "protein_sequence,organism\nMK?,51\nM#,51\n").unwrap();
    let model = bigbird_fixture("");
    let o = run("predict", &["--model", &model, "--input", &p("bad.csv"), "--output", &p("pred.csv")]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(stderr(&o).contains("2 of 2 rows failed"), "{}", stderr(&o));
}

#[test]
fn non_finite_weights_and_runs_fail_loudly() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    let o = run("init-model", &["--output", &p("model"), "--config", &tiny_config()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let weights = dir.path().join("model/model.safetensors");
    let mut tensors = candle_core::safetensors::load(&weights, &candle_core::Device::Cpu).unwrap();
    let key = "bert.encoder.layer.0.output.dense.weight";
    let poisoned = (tensors[key].ones_like().unwrap() * f64::NAN).unwrap();
    tensors.insert(key.into(), poisoned);
    candle_core::safetensors::save(&tensors, &weights).unwrap();
    let o = run("predict", &["--model", &p("model"), "--protein", "MKV", "--organism", "51", "--match-protein"]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(stderr(&o).contains("not finite") && stderr(&o).contains(key), "{}", stderr(&o));
    assert!(stdout(&o).is_empty(), "{}", stdout(&o));

    // A learning rate that blows the weights up: the run stops after 10 skipped steps in a row,
    // exits 1, and leaves no checkpoint.
    let train = prepared(dir.path());
    let config = tiny_config();
    let flags = ["--config", &config, "--checkpoint_dir", &p("ck"), "--learning_rate", "1e30", "--max_steps", "14"];
    let o = finetune(&train, &flags).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(stderr(&o).contains("10 optimizer steps in a row"), "{}", stderr(&o));
    assert!(!dir.path().join("ck/step-14").exists());
    let o = finetune(&train, &flags).args(["--on-nonfinite", "abort"]).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("non-finite loss at optimizer step 2"), "{}", stderr(&o));
    let o = finetune(&train, &flags).args(["--max-skipped-steps", "3"]).output().unwrap();
    assert!(stderr(&o).contains("3 optimizer steps in a row (up to step 4)"), "{}", stderr(&o));
}

#[test]
fn the_demo_stays_the_demo_and_lists_its_outputs() {
    let cwd = tempfile::tempdir().unwrap();
    let o = command("finetune")
        .args(["--device", "npu-sim:0", "--max_steps", "2", "--quiet"])
        .current_dir(cwd.path())
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(o.status.success(), "{out}{}", stderr(&o));
    assert!(out.contains("configuration: demo, because no --dataset_dir was given"), "{out}");
    let params: usize = out.split("model: ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    assert!(params < 1_000_000, "the demo model has {params} parameters");
    for (what, path) in [
        ("prepared data", "demo-output/train.jsonl"),
        ("checkpoint", "demo-output/checkpoints/step-2"),
        ("state dict", "demo-output/checkpoints/finetune.ckpt"),
    ] {
        assert!(out.contains(&format!("{what}: {path}")), "{what}: {out}");
        assert!(cwd.path().join(path).exists(), "{path}");
    }
    let help = stdout(&run("finetune", &["--help"]));
    assert!(help.contains("Without it, the run is the demo"), "{help}");
}

#[test]
fn resume_retention_and_checkpoint_files() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    let train = prepared(dir.path());
    let config = tiny_config();
    let o = finetune(&train, &["--config", &config, "--checkpoint_dir", &p("ck"), "--save_every_n_steps", "1"])
        .args(["--max_steps", "4", "--keep-last", "2"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let mut steps: Vec<String> = std::fs::read_dir(p("ck"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("step-"))
        .collect();
    steps.sort();
    assert_eq!(steps, ["step-3", "step-4"]);
    // Resumed without --config: the checkpoint's own configuration, announced.
    let o = finetune(&train, &["--checkpoint_dir", &p("ck2"), "--resume", &p("ck/step-3"), "--max_steps", "4"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("resuming from step-3") && stdout(&o).contains("model: 156538 parameters"),
        "{}",
        stdout(&o)
    );
    let o = finetune(&train, &["--resume", &p("ck/step-3"), "--max_steps", "4", "--learning_rate", "1e-3"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("learning rate 0.00005, this run uses 0.001"), "{}", stderr(&o));
    let o = finetune(&train, &["--resume", &p("ck/step-4"), "--max_steps", "4"]).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("nothing to train"), "{}", stderr(&o));
    let o = finetune(&train, &["--config", &config, "--checkpoint_dir", &p("ck3"), "--save_every_n_steps", "1"])
        .args(["--max_steps", "2", "--save_top_k", "1"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!dir.path().join("ck3/step-1").exists() && dir.path().join("ck3/step-2").is_dir());
    // The state-dict file of a small model loads for prediction with its config.
    let o = run(
        "predict",
        &[
            "--model",
            &p("ck/finetune.ckpt"),
            "--config",
            &config,
            "--protein",
            "MKV",
            "--organism",
            "51",
            "--match-protein",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim().len(), 12);
}

#[test]
fn error_lines_are_short_and_say_things_once() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    let o = run("prepare-data", &["--input", &p("missing.csv"), "--output", &p("t.jsonl")]);
    assert_eq!(stderr(&o).matches("No such file").count(), 1, "{}", stderr(&o));
    // A small model's weights read as CodonTransformer's: a short list and a count.
    let o = run("predict", &["--model", &bigbird_fixture("model.safetensors"), "--protein", "MKV", "--organism", "51"]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(e.len() < 1500 && e.contains("more;") && e.lines().count() == 1, "{} bytes: {e}", e.len());
    // An injected device fault, with backtraces on: one line, said once.
    let o = command("predict")
        .args(["--model", &bigbird_fixture(""), "--protein", "MKV", "--organism", "51", "--device", "npu-sim:0"])
        .env("CANDLE_ASCEND_SIM_FAIL_ALLOC", "1")
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    assert_eq!(stderr(&o).matches("injected by CANDLE_ASCEND_SIM_FAIL_ALLOC").count(), 1, "{}", stderr(&o));
    // A 10 MB malformed line is not echoed whole.
    std::fs::write(p("huge.jsonl"), format!("{{\"idx\": 0, \"codons\": \"{}\n", "A".repeat(10_000_000))).unwrap();
    let o = run("collate", &["--input", &p("huge.jsonl"), "--batch-size", "1", "--output", &p("b.jsonl")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).len() < 2000, "{} bytes", stderr(&o).len());
    // A binary input is named as the input.
    std::fs::write(p("bin.jsonl"), [0xff, 0xfe, 0x00, 0x80, b'\n']).unwrap();
    let o = run("tokenize", &["--input", &p("bin.jsonl"), "--output", &p("tok.jsonl")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("bin.jsonl") && !stderr(&o).contains("tok.jsonl"), "{}", stderr(&o));
}

/// The crash trial: a checkpointing run killed at arbitrary moments, again and again in the same
/// folder (each run re-saves the steps the last one wrote), leaves only complete step folders,
/// and the next run tidies what the kills left.
#[test]
fn killed_checkpointing_runs_leave_only_complete_steps() {
    let dir = tempfile::tempdir().unwrap();
    let train = prepared(dir.path());
    let ck = dir.path().join("ck");
    let config = tiny_config();
    let ck_arg = ck.to_string_lossy().into_owned();
    let args = ["--config", &config, "--checkpoint_dir", &ck_arg, "--save_every_n_steps", "1"];
    for round in 0..8u64 {
        let mut child = finetune(&train, &args)
            .args(["--max_steps", "500"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(250 + 73 * round));
        child.kill().unwrap();
        child.wait().unwrap();
    }
    let steps: Vec<PathBuf> = std::fs::read_dir(&ck)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("step-"))
        .collect();
    assert!(!steps.is_empty(), "no step was saved before the kills");
    let leftovers = std::fs::read_dir(&ck)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with('.'))
        .count();
    eprintln!("after 8 kills: {} step folders, {leftovers} leftovers of interrupted saves", steps.len());
    for step in &steps {
        codon_model::bigbird::load_model(step, None, &candle_core::Device::Cpu, candle_core::DType::F32)
            .unwrap_or_else(|e| panic!("{}: {e}", step.display()));
        let state = std::fs::read_to_string(step.join("trainer_state.json")).unwrap();
        serde_json::from_str::<serde_json::Value>(&state).unwrap_or_else(|e| panic!("{}: {e}", step.display()));
        candle_core::safetensors::load(step.join("optimizer.safetensors"), &candle_core::Device::Cpu)
            .unwrap_or_else(|e| panic!("{}: {e}", step.display()));
    }
    // Another run (a shorter schedule) in the same folder: it tidies, and replaces the killed run's steps.
    let o = finetune(&train, &args).args(["--max_steps", "1", "--overwrite"]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let hidden: Vec<String> = std::fs::read_dir(&ck)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(hidden.is_empty(), "leftovers after a clean run: {hidden:?}");
}

/// Prediction sizes its windows from the model (a small position table takes long proteins in
/// several windows), and logits that come out non-finite from finite weights are an error
/// naming the residue, not DNA.
#[test]
fn predict_fits_small_models_and_checks_its_logits() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(tiny_config()).unwrap()).unwrap();
    config["max_position_embeddings"] = 64.into();
    std::fs::write(p("small.json"), config.to_string()).unwrap();
    assert!(run("init-model", &["--output", &p("model"), "--config", &p("small.json")]).status.success());
    let protein = "MKVLAW".repeat(25);
    let o = run("predict", &["--model", &p("model"), "--protein", &protein, "--organism", "51", "--match-protein"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim().len(), 3 * (protein.len() + 1));

    let weights = dir.path().join("model/model.safetensors");
    let mut tensors = candle_core::safetensors::load(&weights, &candle_core::Device::Cpu).unwrap();
    let key = "bert.embeddings.word_embeddings.weight";
    tensors.insert(key.into(), (tensors[key].ones_like().unwrap() * 3e38).unwrap());
    candle_core::safetensors::save(&tensors, &weights).unwrap();
    let o = run("predict", &["--model", &p("model"), "--protein", "MKV", "--organism", "51"]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(stderr(&o).contains("non-finite logits for residue 1 of protein MKV"), "{}", stderr(&o));
}

/// On an emulator that skips arithmetic (`CANDLE_ASCEND_SIM_NO_MATH=1`) the meaningless values
/// neither stop the run nor become a checkpoint, unless a folder is given explicitly.
#[test]
fn no_math_runs_count_without_failing_or_checkpointing() {
    let cwd = tempfile::tempdir().unwrap();
    let run_in = |extra: &[&str]| {
        command("finetune")
            .args(["--device", "npu-sim:0", "--max_steps", "12", "--quiet"])
            .args(extra)
            .env("CANDLE_ASCEND_SIM_NO_MATH", "1")
            .current_dir(cwd.path())
            .output()
            .unwrap()
    };
    let o = run_in(&[]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("no-math mode"), "{}", stdout(&o));
    assert!(stdout(&o).contains("12 optimizer steps"), "{}", stdout(&o));
    assert!(!cwd.path().join("demo-output/checkpoints").exists());
    let o = run_in(&["--checkpoint_dir", "asked"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(cwd.path().join("asked/step-12").is_dir());
}
