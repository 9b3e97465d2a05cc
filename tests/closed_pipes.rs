//! A program whose stdout (or stderr) reader has gone, as in `predict --list-organisms | head -5`
//! or `finetune … 2>&1 | head -1`, never panics: a listing ends quietly with status 0, and a
//! program that writes files writes them all. Each program runs with its output on a socket
//! whose other end is already closed, so every write after the first fails with EPIPE, as it
//! does once `head` exits (deterministically, where a real `head` races the writer).
#![cfg(unix)]

use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Output, Stdio};

mod common;
use common::{bigbird_fixture, command, demo, run};

/// A stream whose reader is gone.
fn closed() -> Stdio {
    let (ours, theirs) = UnixStream::pair().unwrap();
    drop(theirs);
    Stdio::from(std::os::fd::OwnedFd::from(ours))
}

/// Run `name` in `cwd` with stdout closed (and stderr too when `close_stderr`). The emulator
/// skips its arithmetic: `step_counters` counts, and nothing here reads a value.
fn run_closed(name: &str, args: &[&str], cwd: &Path, close_stderr: bool) -> Output {
    let mut c = command(name);
    c.args(args).current_dir(cwd).stdin(Stdio::null()).stdout(closed()).env("CANDLE_ASCEND_SIM_NO_MATH", "1");
    c.stderr(if close_stderr { closed() } else { Stdio::piped() });
    c.output().unwrap()
}

/// Status 0 and no panic.
fn quiet_success(name: &str, o: &Output) {
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!stderr.contains("panicked"), "{name}: {stderr}");
    assert_eq!(o.status.code(), Some(0), "{name}: {stderr}");
}

#[test]
fn listings_end_quietly_when_stdout_closes() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    let p = |f: &str| cwd.join(f).to_string_lossy().into_owned();
    let train = p("train.jsonl");
    assert!(run("prepare-data", &["--input", &demo("genes.csv"), "--output", &train]).status.success());
    std::fs::write(p("seqs.csv"), "dna,organism\nATGAAAGCGTAA,51\n").unwrap();
    let inputs = bigbird_fixture("case_pad_b2_45/inputs.safetensors");
    let model = bigbird_fixture("");
    let cases: Vec<(&str, Vec<String>, Option<String>)> = vec![
        ("predict", vec!["--list-organisms".into()], None),
        (
            "predict",
            vec!["--model".into(), model.clone(), "--protein".into(), "MKV".into(), "--organism".into(), "51".into()],
            None,
        ),
        ("npu env", vec!["--device".into(), "npu-sim:0".into()], None),
        (
            "prepare-data",
            vec!["--input".into(), demo("genes.csv"), "--output".into(), p("t2.jsonl")],
            Some(p("t2.jsonl")),
        ),
        (
            "tokenize",
            vec![
                "--input".into(),
                demo("proteins.jsonl"),
                "--output".into(),
                p("tok.jsonl"),
                "--allow-failures".into(),
            ],
            Some(p("tok.jsonl")),
        ),
        (
            "collate",
            vec!["--input".into(), train.clone(), "--batch-size".into(), "6".into(), "--output".into(), p("b.jsonl")],
            Some(p("b.jsonl")),
        ),
        (
            "evaluate",
            vec!["--input".into(), p("seqs.csv"), "--reference".into(), train.clone(), "--output".into(), p("m.csv")],
            Some(p("m.csv")),
        ),
        (
            "score",
            vec!["--model".into(), model.clone(), "--inputs".into(), inputs, "--output".into(), p("s.safetensors")],
            Some(p("s.safetensors")),
        ),
        (
            "init-model",
            vec!["--output".into(), p("init"), "--config".into(), bigbird_fixture("config.json")],
            Some(p("init/model.safetensors")),
        ),
        (
            "dev pipeline",
            vec!["--max_epochs".into(), "1".into(), "--out_dir".into(), p("pipe")],
            Some(p("pipe/train.jsonl")),
        ),
        (
            "dev step-counters",
            vec!["--layers".into(), "1".into(), "--length".into(), "64".into(), "--steps".into(), "1".into()],
            None,
        ),
        ("dev forward-timing", vec!["--length".into(), "32".into(), "--repeats".into(), "1".into()], None),
        (
            "dev train-step-timing",
            vec!["--steps".into(), "1".into(), "--batch".into(), "1".into(), "--length".into(), "64".into()],
            None,
        ),
        ("dev gemm-throughput", vec![], None),
    ];
    for (name, args, written) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = run_closed(name, &args, cwd, false);
        quiet_success(name, &o);
        if let Some(file) = written {
            assert!(Path::new(&file).exists(), "{name} wrote {file}");
        }
    }
}

#[test]
fn training_goes_on_when_stdout_and_stderr_close() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    let train = p("train.jsonl");
    assert!(run("prepare-data", &["--input", &demo("genes.csv"), "--output", &train]).status.success());
    let config = bigbird_fixture("config.json");
    for name in ["finetune", "pretrain"] {
        let ck = p(&format!("{name}-ck"));
        let args = ["--dataset_dir", &train, "--config", &config, "--precision", "f32", "--max_steps", "3"];
        let o =
            run_closed(name, &[&args[..], &["--checkpoint_dir", &ck, "--num_workers", "1"]].concat(), dir.path(), true);
        quiet_success(name, &o);
        assert!(Path::new(&ck).join("step-3").is_dir(), "{name} saved its last step");
    }
    // The demo (no --dataset_dir), as the README runs it.
    let o = run_closed("finetune", &["--max_steps", "2", "--num_workers", "1"], dir.path(), true);
    quiet_success("finetune (demo)", &o);
    assert!(dir.path().join("demo-output/checkpoints/step-2").is_dir());
}
