//! Helpers shared by the tests that run the example programs as a user does. `cargo test`
//! builds the examples before it runs any test.
#![allow(dead_code)] // each test file uses its own subset

use std::path::{Path, PathBuf};
use std::process::Command;

/// The built example program `name`.
pub fn example(name: &str) -> PathBuf {
    // target/<profile>/deps/cli-<hash> -> target/<profile>/examples/<name>
    let exe = std::env::current_exe().unwrap();
    let path = exe.parent().and_then(Path::parent).unwrap().join("examples").join(name);
    assert!(
        path.exists(),
        "{} is not built: run the whole suite (`cargo test`), which builds the examples",
        path.display()
    );
    path
}

/// Run example `name` with `args` and collect its output.
pub fn run(name: &str, args: &[&str]) -> std::process::Output {
    Command::new(example(name)).args(args).output().unwrap()
}

/// A file of the bundled demo data.
pub fn demo(file: &str) -> String {
    codon_ascend::demo_data_dir().join(file).to_string_lossy().into_owned()
}

/// A file (or, with "", the folder) of the tiny BigBird fixture.
pub fn bigbird_fixture(rel: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bigbird").join(rel).to_string_lossy().into_owned()
}
