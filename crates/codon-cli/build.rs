//! The commit `codon --version` names: `git rev-parse` of the checkout, when there is one.

fn main() {
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    if let Some(commit) = commit {
        println!("cargo:rustc-env=CODON_GIT_COMMIT={commit}");
    }
    // The workspace root two folders up holds .git (absent in a packaged crate: then the commit is "unknown").
    println!("cargo:rerun-if-changed=../../.git/HEAD");
    println!("cargo:rerun-if-changed=../../.git/refs/heads");
}
