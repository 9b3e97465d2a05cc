//! No silent wrong results (issue 26's second hostile trial): values from an emulator that skips
//! arithmetic are marked, every output goes where it was asked, training data whose tokens are
//! outside the vocabulary is dropped, warned of or refused, stale plots go, the commands chain,
//! and an output location that cannot be written fails before the work.

use std::path::Path;
use std::process::Output;

mod common;
use common::{bigbird_fixture, command, demo, run};

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The header and rows of a CSV file.
fn read_csv(path: &Path) -> (Vec<String>, Vec<Vec<String>>) {
    let mut reader = csv::Reader::from_path(path).unwrap();
    let headers = reader.headers().unwrap().iter().map(str::to_string).collect();
    let rows = reader.records().map(|r| r.unwrap().iter().map(str::to_string).collect()).collect();
    (headers, rows)
}

fn no_math(name: &str, args: &[&str]) -> Output {
    command(name).args(args).env("CANDLE_ASCEND_SIM_NO_MATH", "1").output().unwrap()
}

#[test]
fn no_math_values_are_marked_where_they_are_written() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    let model = bigbird_fixture("");
    std::fs::write(p("in.csv"), "protein_sequence,organism\nMKV,51\n").unwrap();
    let o = no_math("predict", &["--model", &model, "--input", &p("in.csv"), "--output", &p("out.csv")]);
    assert!(o.status.success(), "{}", stderr(&o));
    // The CPU computes: no mark.
    let (headers, _) = read_csv(&dir.path().join("out.csv"));
    assert!(!headers.contains(&"no_math".to_string()), "{headers:?}");
    let npu = ["--device", "npu-sim:0"];
    let o = no_math(
        "predict",
        &[&["--model", &model, "--input", &p("in.csv"), "--output", &p("out.csv")], &npu[..]].concat(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("no-math mode"), "{}", stderr(&o));
    let (headers, rows) = read_csv(&dir.path().join("out.csv"));
    let column = headers.iter().position(|h| h == "no_math").expect("a no_math column");
    assert_eq!(rows[0][column], "true");
    let o = no_math("predict", &[&["--model", &model, "--protein", "MKV", "--organism", "51"], &npu[..]].concat());
    assert!(o.status.success() && stderr(&o).contains("no-math mode"), "{}", stderr(&o));
    let inputs = bigbird_fixture("case_pad_b2_45/inputs.safetensors");
    let o = no_math(
        "score",
        &[&["--model", &model, "--inputs", &inputs, "--output", &p("s.safetensors")], &npu[..]].concat(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no-math mode") && stdout(&o).contains("[no-math mode: meaningless]"),
        "{}",
        stdout(&o)
    );
    let written = candle_core::safetensors::load(p("s.safetensors"), &candle_core::Device::Cpu).unwrap();
    assert!(written.contains_key("no_math"), "{:?}", written.keys());
    let o = no_math("npu env", &npu);
    assert!(stdout(&o).contains("arithmetic:      skipped"), "{}", stdout(&o));
    let o = run("npu env", &npu);
    assert!(!stdout(&o).contains("arithmetic:"), "{}", stdout(&o));
}

#[test]
fn one_protein_with_an_output_writes_a_batch_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.csv");
    let model = bigbird_fixture("");
    let args = ["--model", &model, "--protein", "MKV", "--organism", "51", "--match-protein", "--output"];
    let o = run("predict", &[&args[..], &[&out.to_string_lossy()]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let (headers, rows) = read_csv(&out);
    assert_eq!(
        headers,
        [
            "protein_sequence",
            "organism",
            "predicted_dna",
            "error",
            "log_likelihood",
            "mean_log_likelihood",
            "least_likely_codons"
        ]
    );
    assert_eq!((rows.len(), rows[0][2].len(), rows[0][3].as_str()), (1, 12, ""));
    assert!(rows[0][2].starts_with("ATGAA"), "{:?}", rows[0]);
}

#[test]
fn training_data_outside_the_vocabulary_is_dropped_warned_of_or_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    std::fs::write(
        p("given.csv"),
        "dna,protein,organism\nATGAAAGCGTAA,MWW_,51\nATGAAAGCGTAA,MKA*,51\nATGAAAGCGTAA,MKA,51\n",
    )
    .unwrap();
    let o = run("prepare-data", &["--input", &p("given.csv"), "--output", &p("t.jsonl")]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("residue 2 is W, but codon AAA encodes K"), "{}", stdout(&o));
    assert!(stdout(&o).contains("no stop symbol ('_' or '*') at its end, but the DNA ends in the stop codon TAA"));
    assert_eq!(std::fs::read_to_string(p("t.jsonl")).unwrap().lines().count(), 1, "MKA* is kept");
    let o = run("prepare-data", &["--input", &p("given.csv"), "--output", &p("t.jsonl"), "--keep-mismatched"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::read_to_string(p("t.jsonl")).unwrap().contains("W_AAA"));
    // finetune: a few unknown tokens are a warning, many a refusal naming the first.
    let prepared = p("train.jsonl");
    let o = run("prepare-data", &["--input", &demo("genes.csv"), "--output", &prepared]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut text = std::fs::read_to_string(&prepared).unwrap();
    text.push_str("{\"idx\": 99, \"codons\": \"M_ATG Q_ATG __TAA\", \"organism\": 51}\n");
    std::fs::write(p("few.jsonl"), &text).unwrap();
    let finetune = |data: &str| {
        let config = bigbird_fixture("config.json");
        let args = ["--dataset_dir", data, "--config", &config, "--precision", "f32", "--num_workers", "1", "--quiet"];
        command("finetune").args(args).args(["--max_steps", "1"]).output().unwrap()
    };
    let o = finetune(&p("few.jsonl"));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("1 of ") && stderr(&o).contains("\"Q_ATG\""), "{}", stderr(&o));
    std::fs::write(p("bad.jsonl"), "{\"idx\": 0, \"codons\": \"M_XYZ K_AAA __TAA\", \"organism\": 51}\n").unwrap();
    let o = finetune(&p("bad.jsonl"));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("1 of 3 tokens are not in the vocabulary (the first, \"M_XYZ\""), "{}", stderr(&o));
}

#[test]
fn commands_chain_and_stale_plots_go() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    let train = p("train.jsonl");
    assert!(run("prepare-data", &["--input", &demo("genes.csv"), "--output", &train]).status.success());
    // prepare_data's `protein` column feeds predict; predict's output feeds evaluate.
    std::fs::write(p("in.csv"), "protein,organism\nMKVLAW,51\nMK#,51\n").unwrap();
    let o = run(
        "predict",
        &["--method", "high-frequency", "--reference", &train, "--input", &p("in.csv"), "--output", &p("pred.csv")],
    );
    assert_eq!(o.status.code(), Some(1), "a failed row: {}", stderr(&o));
    let plots = dir.path().join("plots");
    std::fs::create_dir(&plots).unwrap();
    std::fs::write(plots.join("row-0009.svg"), "<svg/>").unwrap();
    std::fs::write(plots.join("notes.txt"), "mine").unwrap();
    let args = ["--input", &p("pred.csv"), "--reference", &train, "--output", &p("m.csv"), "--plot", &p("plots")];
    let o = run("evaluate", &args);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let (headers, rows) = read_csv(&dir.path().join("m.csv"));
    assert_eq!(headers.iter().filter(|h| *h == "error").count(), 1, "{headers:?}");
    let (csi, error) = (headers.iter().position(|h| h == "csi").unwrap(), headers.len() - 1);
    assert!(!rows[0][csi].is_empty() && rows[0][error].is_empty(), "{:?}", rows[0]);
    assert!(rows[1][csi].is_empty() && rows[1][error].contains('#'), "predict's error is kept: {:?}", rows[1]);
    assert!(!plots.join("row-0009.svg").exists(), "an earlier run's plot is removed");
    assert!(plots.join("row-0001.svg").exists() && plots.join("notes.txt").exists());
    // --dna-column names the column outright.
    let o = run("evaluate", &[&args[..6], &["--dna-column", "protein"]].concat());
    assert!(stderr(&o).contains("dna: "), "{}", stderr(&o));
    // tokenize reads "51" as the CSV commands do.
    std::fs::write(p("p.jsonl"), "{\"protein\": \"MKV\", \"organism\": \"51\"}\n").unwrap();
    let o = run("tokenize", &["--input", &p("p.jsonl"), "--output", &p("tok.jsonl")]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn unwritable_outputs_fail_before_the_work() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    std::fs::write(p("in.csv"), "protein_sequence,organism\nMKV,51\n").unwrap();
    let model = bigbird_fixture("");
    let o = run("predict", &["--model", &model, "--input", &p("in.csv"), "--output", &p("missing/x.csv")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("missing: the output's folder does not exist"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("predicted"), "nothing was predicted: {}", stderr(&o));
    std::fs::write(p("seqs.csv"), "dna,organism\nATGAAATAA,51\n").unwrap();
    std::fs::write(p("plot-file"), "").unwrap();
    let args = ["--input", &p("seqs.csv"), "--codon-table", &demo("genes.csv"), "--output", &p("m.csv")];
    let o = run("evaluate", &[&args[..], &["--plot", &p("plot-file")]].concat());
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--plot") && stderr(&o).contains("a file is there"), "{}", stderr(&o));
    assert!(!dir.path().join("m.csv").exists(), "no metrics were written");
}
