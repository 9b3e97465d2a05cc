//! The launch budgets of a CodonTransformer training step (12 layers, block-sparse, 2 × 1024) on
//! each emulated part, from `step_counters` with the arithmetic skipped: launch counts are
//! deterministic, so they are held here where a timing could not be.
mod common;

/// `step_counters`' launch and AI CPU counts, and its modelled step in ms, on `soc`.
fn step(soc: &str, precision: &str) -> (u64, u64, f64) {
    let out = std::process::Command::new(common::example("step_counters"))
        .args(["--device", "npu-sim:0", "--precision", precision, "--batch", "2", "--length", "1024"])
        .args(["--layers", "12", "--steps", "2"])
        .env("CANDLE_ASCEND_SIM_SOC", soc)
        .env("CANDLE_ASCEND_SIM_NO_MATH", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{soc}: {stdout}{}", String::from_utf8_lossy(&out.stderr));
    let number = |prefix: &str| -> f64 {
        let at = stdout.find(prefix).unwrap_or_else(|| panic!("{soc}: no {prefix:?} in {stdout}")) + prefix.len();
        stdout[at..].split(|c: char| !(c.is_ascii_digit() || c == '.')).next().unwrap().parse().unwrap()
    };
    (number("launches ") as u64, number("(AI CPU ") as u64, number("modelled step "))
}

#[test]
fn a_training_step_stays_within_its_launch_budget_on_each_part() {
    let (launches, aicpu, modelled_ms) = step("Ascend910B3", "bf16");
    assert!(launches <= 1_500, "Ascend910B3 bf16: {launches} launches");
    assert_eq!(aicpu, 0, "Ascend910B3 bf16: AI CPU launches");
    assert!(modelled_ms > 0.0);
    let (launches, aicpu, _) = step("Ascend910A", "f16");
    assert!(launches <= 2_000, "Ascend910A f16: {launches} launches");
    // The 910's dropout masks only: one per dropout site (12 layers × 2, and the embeddings).
    assert_eq!(aicpu, 25, "Ascend910A f16: AI CPU launches");
}
