//! What the emulator tests share: running a test under the SoC profile it needs.

/// True when this process emulates `soc`; otherwise runs `test` in a child that does, and
/// returns false after checking that it passed (the SoC is chosen when the toolkit initialises,
/// once per process, so a test for another part needs a process of its own).
pub fn on_soc(soc: &str, test: &str) -> bool {
    if std::env::var("CANDLE_ASCEND_SIM_SOC").as_deref() == Ok(soc) {
        return true;
    }
    let out = self_command()
        .args(["--exact", test, "--test-threads=1", "--nocapture"])
        .env("CANDLE_ASCEND_SIM_SOC", soc)
        .output()
        .unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "{test} on {soc}:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    false
}

/// A command that runs this test binary again. A cross-built binary under qemu-user (cargo's
/// runner for the target) cannot start itself without binfmt_misc, so the child goes through
/// the same runner.
fn self_command() -> std::process::Command {
    let exe = std::env::current_exe().unwrap();
    let runner = cfg!(target_arch = "aarch64")
        .then(|| std::env::var("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER").ok())
        .flatten();
    let mut words = runner.as_deref().unwrap_or_default().split_whitespace();
    match words.next() {
        Some(program) => {
            let mut command = std::process::Command::new(program);
            command.args(words).arg(exe);
            command
        }
        None => std::process::Command::new(exe),
    }
}
