//! What the emulator tests share: running a test under the SoC profile it needs.

/// True when this process emulates `soc`; otherwise runs `test` in a child that does, and
/// returns false after checking that it passed (the SoC is chosen when the toolkit initialises,
/// once per process, so a test for another part needs a process of its own).
pub fn on_soc(soc: &str, test: &str) -> bool {
    if std::env::var("CANDLE_ASCEND_SIM_SOC").as_deref() == Ok(soc) {
        return true;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
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
