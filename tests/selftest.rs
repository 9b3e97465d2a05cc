//! `codon npu selftest` on the emulated part that `CANDLE_ASCEND_SIM_SOC` selects (CI runs an A2
//! part and a 910A): every route passes, and a fault injected into one op is reported by name,
//! in the table, the JSON report and the exit status.
mod common;

#[test]
fn the_self_test_passes_every_route_on_npu_sim() {
    let dev = candle_ascend::parse_device("npu-sim:0").unwrap();
    let report = codon_cli::selftest::run(&dev).unwrap();
    let failed: Vec<_> = report.failures().map(|c| format!("{} {}: {}", c.name, c.dtype, c.detail)).collect();
    assert!(failed.is_empty(), "{failed:#?}");
    // Every candle op in three dtypes, the all-reduce, and training in f32 and the part's half type.
    let ops = candle_ascend::op_table::all_ops().len();
    assert_eq!(report.cases.len(), 3 * ops + 3);
    assert_eq!(report.toolkit_version.as_deref(), Some("8.1.RC1"));
    let training: Vec<_> = report.cases.iter().filter(|c| c.name.starts_with("training")).collect();
    assert!(training.iter().all(|c| c.status == codon_cli::selftest::Status::Pass), "{training:#?}");
    // The training case ran the fused ops too (not just the candle op table).
    assert!(training[0].aclnn.iter().any(|op| op == "aclnnLayerNorm"), "{:?}", training[0].aclnn);
}

#[test]
fn a_failing_op_is_named_in_the_table_the_report_and_the_exit_status() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    let out = common::command("npu selftest")
        .args(["--device", "npu-sim:0", "--report"])
        .arg(&report)
        .env("CANDLE_ASCEND_SIM_FAIL_OP", "aclnnExp")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.lines().any(|l| l.starts_with("FAIL  exp ")), "{stdout}");
    assert!(stderr.contains("exp (f32)"), "{stderr}");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let exp = json["cases"].as_array().unwrap().iter().find(|c| c["name"] == "exp" && c["dtype"] == "f32").unwrap();
    assert_eq!(exp["status"], "fail");
    assert!(exp["detail"].as_str().unwrap().contains("aclnnExp"), "{exp}");
}

/// `codon npu env` prints which body runs each fused op, and why, from the one table: on an A2
/// the fused add-and-norm runs on the part; a 910A lacks the operator and says so.
#[test]
fn npu_env_prints_the_body_of_each_fused_op_and_why() {
    let out = common::command("npu env").args(["--device", "npu-sim:0"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let words = |l: &str| l.split_whitespace().collect::<Vec<_>>().join(" ");
    let line = |op: &str| stdout.lines().filter(|l| l.trim_start().starts_with(op)).map(words).collect::<Vec<_>>();
    let soc =
        candle_ascend::ascend_device(&candle_ascend::parse_device("npu-sim:0").unwrap()).unwrap().soc().name.clone();
    let add_norm = line("add_layer_norm ");
    assert_eq!(add_norm.len(), 2, "a table row and a reason: {stdout}");
    if soc.starts_with("Ascend910B") {
        assert!(add_norm[0].ends_with("ascend ascend ascend"), "{}", add_norm[0]);
        assert!(add_norm[1].contains("ascend") && add_norm[1].contains("aclnnAddLayerNorm"), "{}", add_norm[1]);
    } else {
        assert!(add_norm[0].ends_with("composed composed refused"), "{}", add_norm[0]);
        assert!(add_norm[1].contains("no aclnnAddLayerNorm in f16"), "{}", add_norm[1]);
    }
    // The CPU column: the block gather has no CPU body of its own.
    assert!(line("block_gather ")[0].starts_with("block_gather composed composed composed"), "{stdout}");
}
