//! Helpers shared by the tests that run the example programs as a user does. The examples are
//! built on first use (a no-op when `cargo test` has built them already), so any one test file
//! runs on a fresh clone.
#![allow(dead_code)] // each test file uses its own subset

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The example program `name`, built with this test's profile if it is not up to date.
pub fn example(name: &str) -> PathBuf {
    // target/<profile>/deps/cli-<hash> -> target/<profile>/examples/<name>
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(Path::parent).unwrap();
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = Command::new(cargo);
        build.args(["build", "--quiet", "--examples", "-p", "codon-ascend"]);
        // What cargo set for this test binary is not the outer build's environment: build scripts
        // that watch such variables (ring's watch CARGO_PKG_NAME and CARGO_MANIFEST_DIR) would
        // otherwise rebuild here, and again in the next plain build.
        for (key, _) in std::env::vars_os() {
            let key = key.to_string_lossy();
            let per_crate = ["CARGO_MANIFEST_DIR", "CARGO_MANIFEST_PATH", "CARGO_MANIFEST_LINKS", "CARGO_CRATE_NAME"]
                .contains(&key.as_ref())
                || [
                    "CARGO_BIN_NAME",
                    "CARGO_PRIMARY_PACKAGE",
                    "CARGO_TARGET_TMPDIR",
                    "CARGO_RUSTC_CURRENT_DIR",
                    "OUT_DIR",
                ]
                .contains(&key.as_ref())
                || key.starts_with("CARGO_PKG_");
            if per_crate {
                build.env_remove(key.as_ref());
            }
        }
        if profile_dir.file_name().is_some_and(|p| p == "release") {
            build.arg("--release");
        }
        match build.current_dir(env!("CARGO_MANIFEST_DIR")).status() {
            Ok(s) if s.success() => Ok(()),
            other => Err(format!("building the examples failed: {other:?}")),
        }
    });
    if let Err(e) = built {
        panic!("{e}");
    }
    profile_dir.join("examples").join(name)
}

/// Run example `name` with `args` and collect its output. The Hub is offline: a test that
/// reached for a published model by accident fails at once with the model's name.
pub fn run(name: &str, args: &[&str]) -> std::process::Output {
    Command::new(example(name)).args(args).env("HF_HUB_OFFLINE", "1").output().unwrap()
}

/// A file of the bundled demo data.
pub fn demo(file: &str) -> String {
    codon_ascend::demo_data_dir().join(file).to_string_lossy().into_owned()
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
