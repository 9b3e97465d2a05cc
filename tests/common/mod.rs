//! Helpers shared by the tests that run the `codon` program as a user does (cargo builds it
//! before the integration tests run: `CARGO_BIN_EXE_codon`).
#![allow(dead_code)] // each test file uses its own subset

use std::path::{Path, PathBuf};
use std::process::Command;

/// The installed program.
pub fn codon_exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_codon"))
}

/// `codon SUBCOMMAND…`: `name` is the subcommand's words (`"predict"`, `"npu env"`,
/// `"dev step-counters"`).
pub fn command(name: &str) -> Command {
    let mut c = Command::new(codon_exe());
    c.args(name.split_whitespace());
    c
}

/// Run `codon name` with `args` and collect its output. The Hub is offline: a test that
/// reached for a published model by accident fails at once with the model's name.
pub fn run(name: &str, args: &[&str]) -> std::process::Output {
    command(name).args(args).env("HF_HUB_OFFLINE", "1").output().unwrap()
}

/// The bundled demo data (`crates/codon-cli/demo`): genes as CSV and FASTA, proteins as JSONL.
pub fn demo_data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crates/codon-cli/demo")
}

/// A file of the bundled demo data.
pub fn demo(file: &str) -> String {
    demo_data_dir().join(file).to_string_lossy().into_owned()
}

/// A file (or, with "", the folder) of the tiny BigBird fixture.
pub fn bigbird_fixture(rel: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bigbird").join(rel).to_string_lossy().into_owned()
}

/// The upstream evaluation golden values (`tests/fixtures/eval/upstream_metrics.json`).
pub fn eval_fixture() -> serde_json::Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/eval/upstream_metrics.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The evaluation fixture's reference ORFs as a training JSONL (merged `A_CCC` tokens, organism ids).
pub fn write_eval_reference(fixture: &serde_json::Value, path: &Path) {
    let mut text = String::new();
    for (idx, organism) in fixture["organisms"].as_object().unwrap().values().enumerate() {
        for r in organism["references"].as_array().unwrap() {
            let (dna, protein) = (r["dna"].as_str().unwrap(), r["protein"].as_str().unwrap());
            let tokens: Vec<String> = protein
                .chars()
                .zip(dna.as_bytes().chunks(3))
                .map(|(a, c)| format!("{a}_{}", String::from_utf8_lossy(c)))
                .collect();
            let record = serde_json::json!({"idx": idx, "codons": tokens.join(" "), "organism": organism["id"]});
            text.push_str(&record.to_string());
            text.push('\n');
        }
    }
    std::fs::write(path, text).unwrap();
}
