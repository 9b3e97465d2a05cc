//! The example programs, run as a user runs them (built on first use by `common::example`).

use std::path::Path;

mod common;
use common::{bigbird_fixture, command, demo, run};

#[test]
fn prepare_tokenize_collate() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();

    let out = run("prepare-data", &["--input", &demo("genes.csv"), "--output", &p("train.jsonl")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("read 40 records, wrote 36, dropped 4"), "{stdout}");

    // Two records fail: their errors are written, and the exit is non-zero unless --allow-failures.
    let out = run("tokenize", &["--input", &demo("proteins.jsonl"), "--output", &p("tokens.jsonl")]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("2 of 9 records failed"));
    let tokenize = ["--input", &demo("proteins.jsonl"), "--output", &p("tokens.jsonl"), "--allow-failures"];
    let out = run("tokenize", &tokenize);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<serde_json::Value> =
        std::fs::read_to_string(p("tokens.jsonl")).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 9);
    assert_eq!(lines[6]["merged"], "M_ATG A_GCT V_GTG __UNK");
    assert_eq!(lines[6]["input_ids"], serde_json::json!([1, 40, 65, 72, 25, 2]));
    assert_eq!(lines[6]["token_type_ids"], serde_json::json!([51, 51, 51, 51, 51, 51]));
    assert!(lines[7]["error"].as_str().unwrap().starts_with("Invalid characters in protein sequence."));
    assert!(lines[8]["error"].as_str().unwrap().starts_with("Invalid organism name: E. coli."));

    let args = ["--input", &p("train.jsonl"), "--batch-size", "6", "--seed", "5", "--output"];
    let a = run("collate", &[&args[..], &[&p("a.jsonl")]].concat());
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    let b = run("collate", &[&args[..], &[&p("b.jsonl"), "--workers", "0"]].concat());
    assert!(b.status.success());
    // The training commands' spellings work too (--batch_size, --num_workers).
    let snake = ["--input", &p("train.jsonl"), "--batch_size", "6", "--seed", "5", "--num_workers", "0", "--output"];
    let c = run("collate", &[&snake[..], &[&p("c.jsonl")]].concat());
    assert!(c.status.success(), "{}", String::from_utf8_lossy(&c.stderr));
    let text = std::fs::read_to_string(p("a.jsonl")).unwrap();
    assert_eq!(text, std::fs::read_to_string(p("b.jsonl")).unwrap(), "same seed, different workers");
    assert_eq!(text, std::fs::read_to_string(p("c.jsonl")).unwrap(), "same options, other spellings");
    let batches: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(batches.len(), 6);
    for key in ["input_ids", "attention_mask", "token_type_ids", "labels"] {
        assert_eq!(batches[0][key].as_array().unwrap().len(), 6, "{key}");
    }
}

#[test]
fn errors_are_one_line_and_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.csv").to_string_lossy().into_owned();
    let out_path = dir.path().join("o.jsonl").to_string_lossy().into_owned();
    for (name, args) in [
        ("prepare-data", vec!["--input", missing.as_str(), "--output", out_path.as_str()]),
        ("collate", vec!["--input", missing.as_str(), "--batch-size", "2", "--output", out_path.as_str()]),
        ("tokenize", vec!["--input", missing.as_str(), "--output", out_path.as_str()]),
    ] {
        let out = run(name, &args);
        assert_eq!(out.status.code(), Some(1), "{name}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "{name}: {stderr}");
        assert!(stderr.starts_with("error: ") && stderr.contains("missing.csv"), "{name}: {stderr}");
        assert!(!Path::new(&out_path).exists(), "{name} wrote no output");
    }
}

/// `--device`, `--dtype`, `--precision` and `--attention` are typed: `--help` lists the
/// choices, a typo is refused by the parser (status 2) with a suggestion, and a device that
/// parses but cannot open is an ordinary error (status 1).
#[test]
fn shared_flags_are_typed() {
    let help = String::from_utf8_lossy(&run("finetune", &["--help"]).stdout).into_owned();
    for choice in ["- auto:", "- bf16:", "- f16:", "- f32:", "- block-sparse:", "- full:"] {
        assert!(help.contains(choice), "{choice}: {help}");
    }
    let out = run("finetune", &["--precision", "bf17"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("invalid value 'bf17'") && stderr.contains("a similar value exists: 'bf16'"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let out = run("predict", &["--device", "gpu:0", "--protein", "MKV", "--organism", "51"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected cpu, npu:N, npu-sim:N or cuda:N"));
    let out = run("score", &["--attention", "ful", "--model", "m", "--inputs", "i", "--output", "o"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("a similar value exists: 'full'"));
    // Spelled right but absent: the emulator has 8 devices by default.
    let out = run("npu env", &["--device", "npu-sim:99"]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn score_reproduces_transformers_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.safetensors").to_string_lossy().into_owned();
    let run_score = |extra: &[&str]| {
        let model_dir = bigbird_fixture("");
        let inputs = bigbird_fixture("case_pad_b2_45/inputs.safetensors");
        let mut args = vec!["--model", model_dir.as_str(), "--inputs", inputs.as_str(), "--output", out.as_str()];
        args.extend_from_slice(extra);
        let o = run("score", &args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        candle_core::safetensors::load(&out, &candle_core::Device::Cpu).unwrap()
    };
    let got = run_score(&["--attention", "block-sparse", "--train", "--grads"]);
    let want = candle_core::safetensors::load(
        bigbird_fixture("case_pad_b2_45/sparse_train.safetensors"),
        &candle_core::Device::Cpu,
    )
    .unwrap();
    let max_diff = |a: &candle_core::Tensor, b: &candle_core::Tensor| {
        (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap()
    };
    assert!(max_diff(&got["logits"], &want["logits"]) < 1e-5);
    assert!(max_diff(&got["loss"], &want["loss"]) < 1e-5);
    assert_eq!(got.len(), 2 + 44, "logits, loss and one gradient per parameter");
    let g = "bert.encoder.layer.1.intermediate.dense.weight";
    assert!(max_diff(&got[g], &want[&format!("grad.{g}")]) < 1e-6);
    // The same on the emulated NPU, against transformers' golden values.
    let got = run_score(&["--attention", "block-sparse", "--train", "--grads", "--device", "npu-sim:0"]);
    assert!(max_diff(&got["logits"], &want["logits"]) < 1e-5);
    assert!(max_diff(&got["loss"], &want["loss"]) < 1e-5);
    assert_eq!(got.len(), 2 + 44);
    assert!(max_diff(&got[g], &want[&format!("grad.{g}")]) < 1e-6);
    let got = run_score(&["--attention", "full"]);
    let want = candle_core::safetensors::load(
        bigbird_fixture("case_pad_b2_45/full_eval.safetensors"),
        &candle_core::Device::Cpu,
    )
    .unwrap();
    assert!(max_diff(&got["logits"], &want["logits"]) < 1e-5);
    assert_eq!(got.len(), 2);
}

#[test]
fn init_model_then_predict() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model").to_string_lossy().into_owned();
    let o = run("init-model", &["--output", &model, "--config", &bigbird_fixture("config.json"), "--seed", "3"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("156538 parameters"));

    let o = run(
        "predict",
        &["--model", &model, "--protein", "MWWMW", "--organism", "Escherichia coli general", "--match-protein"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let dna = String::from_utf8_lossy(&o.stdout).trim().to_string();
    let protein: String = dna.as_bytes().chunks(3).map(|c| codon_model::vocab::translate_codon(c).unwrap()).collect();
    assert_eq!(protein, "MWWMW_");

    let csv_in = dir.path().join("in.csv");
    std::fs::write(&csv_in, "id,protein_sequence,organism\n1,MKV,51\n2,MK?,51\n3,MALW*,Homo sapiens\n").unwrap();
    let csv_out = dir.path().join("out.csv").to_string_lossy().into_owned();
    let batch = ["--model", &model, "--input", &csv_in.to_string_lossy(), "--output", &csv_out, "--match-protein"];
    // A failed row makes the exit non-zero once every row is written, unless --allow-failures.
    let o = run("predict", &batch);
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("1 of 3 rows failed"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(Path::new(&csv_out).exists());
    let o = run("predict", &[&batch[..], &["--allow-failures"]].concat());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Not a terminal: plain progress lines, the last one for the whole batch.
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("predicted 3/3 proteins,") && stderr.contains("proteins/s, ETA 0 s"), "{stderr}");
    let mut reader = csv::Reader::from_path(&csv_out).unwrap();
    assert_eq!(
        reader.headers().unwrap().iter().collect::<Vec<_>>(),
        [
            "id",
            "protein_sequence",
            "organism",
            "predicted_dna",
            "error",
            "log_likelihood",
            "mean_log_likelihood",
            "least_likely_codons"
        ]
    );
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 3);
    assert_eq!((rows[0][3].len(), &rows[0][4]), (12, ""));
    assert_eq!(&rows[1][3], "", "a failed row has no DNA");
    assert!(rows[1][4].starts_with("Invalid characters in protein sequence."), "{:?}", &rows[1]);
    assert_eq!(rows[2][3].len(), 15);

    let o = run("predict", &["--model", &model, "--protein", "MK", "--organism", "51", "--device", "npu:0"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&o.stderr).lines().count(), 1);
}

#[test]
fn finetune_flags_resume_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    let o = run("prepare-data", &["--input", &demo("genes.csv"), "--output", &p("train.jsonl")]);
    assert!(o.status.success());
    let config = bigbird_fixture("config.json");
    // snake_case flags
    let o = run(
        "finetune",
        &[
            "--dataset_dir",
            &p("train.jsonl"),
            "--checkpoint_dir",
            &p("ck"),
            "--batch_size",
            "6",
            "--max_epochs",
            "1",
            "--num_workers",
            "2",
            "--save_every_n_steps",
            "3",
            "--precision",
            "f32",
            "--config",
            &config,
            "--learning_rate",
            "1e-3",
            "--metrics",
            &p("m.jsonl"),
            "--quiet",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("starting from a random initialisation"), "{out}");
    assert!(dir.path().join("ck/step-3").is_dir() && dir.path().join("ck/step-6").is_dir());
    assert!(dir.path().join("ck/finetune.ckpt").is_file());
    let metrics = std::fs::read_to_string(p("m.jsonl")).unwrap();
    assert_eq!(metrics.lines().count(), 6);
    // kebab-case flags, resuming from step 3: steps 4..6 again, with the same losses.
    let o = run(
        "finetune",
        &[
            "--dataset-dir",
            &p("train.jsonl"),
            "--checkpoint-dir",
            &p("ck2"),
            "--batch-size",
            "6",
            "--max-epochs",
            "1",
            "--num-workers",
            "1",
            "--precision",
            "f32",
            "--config",
            &config,
            "--learning-rate",
            "1e-3",
            "--resume",
            &p("ck/step-3"),
            "--metrics",
            &p("m2.jsonl"),
            "--quiet",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let loss = |text: &str| -> Vec<(u64, f64)> {
        text.lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .map(|v| (v["step"].as_u64().unwrap(), v["loss"].as_f64().unwrap()))
            .collect()
    };
    assert_eq!(loss(&std::fs::read_to_string(p("m2.jsonl")).unwrap()), loss(&metrics)[3..]);
    // Errors: one line, non-zero.
    // (A value clap refuses is a usage error: status 2, also on one line.)
    for (args, status) in [
        (vec!["--dataset_dir", p("train.jsonl").leak(), "--num_gpus", "4"], 1),
        (vec!["--dataset_dir", p("missing.jsonl").leak()], 1),
        (vec!["--dataset_dir", p("train.jsonl").leak(), "--precision", "fp8"], 2),
        // Was a "capacity overflow" panic (status 101) before the device list was made.
        (vec!["--dataset_dir", p("train.jsonl").leak(), "--num_gpus", "18446744073709551615"], 2),
    ] {
        let o = run("finetune", &args);
        assert_eq!(o.status.code(), Some(status), "{args:?}");
        assert_eq!(String::from_utf8_lossy(&o.stderr).lines().count(), 1, "{}", String::from_utf8_lossy(&o.stderr));
    }
    let o = run("pretrain", &["--model", &bigbird_fixture(""), "--dataset_dir", &p("train.jsonl")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("from scratch"));
}

/// `finetune --device npu-sim:0` on each emulated part: the 910A trains in f16 and f32 (auto
/// picks f16) and refuses bf16 before any step, naming the part and the alternative; the 910B3
/// trains in bf16 (auto picks it).
#[test]
fn finetune_on_npu_sim_follows_each_part() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    assert!(run("prepare-data", &["--input", &demo("genes.csv"), "--output", &p("train.jsonl")]).status.success());
    let config = bigbird_fixture("config.json");
    let train = |soc: &str, precision: &str| {
        command("finetune")
            .args(["--dataset_dir", &p("train.jsonl"), "--config", &config, "--device", "npu-sim:0"])
            .args(["--precision", precision, "--max_steps", "2", "--batch_size", "2", "--num_workers", "1", "--quiet"])
            .args(["--metrics", &p(&format!("{soc}-{precision}.jsonl"))])
            .env("CANDLE_ASCEND_SIM_SOC", soc)
            .output()
            .unwrap()
    };
    for (soc, precision, chosen) in [
        ("Ascend910A", "f16", "F16"),
        ("Ascend910A", "f32", "F32"),
        ("Ascend910A", "auto", "F16"),
        ("Ascend910B3", "bf16", "Bf16"),
        ("Ascend910B3", "auto", "Bf16"),
    ] {
        let o = train(soc, precision);
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{soc} {precision}: {stdout}{}", String::from_utf8_lossy(&o.stderr));
        assert!(stdout.contains(&format!("({soc}), precision {chosen}")), "{soc} {precision}: {stdout}");
        assert!(stdout.contains("preflight on") && stdout.contains("2 optimizer steps"), "{stdout}");
        // Every metrics row counts the step's AI CPU launches; the fixture has no dropout, whose
        // masks are the 910A's one AI CPU kernel, so there are none on either part.
        let metrics = std::fs::read_to_string(p(&format!("{soc}-{precision}.jsonl"))).unwrap();
        for row in metrics.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()) {
            let (launches, aicpu) = (row["device_launches"].as_u64().unwrap(), row["aicpu_launches"].as_u64().unwrap());
            assert!(launches > 0 && aicpu == 0, "{soc}: {row}");
            // The modelled time of the step on the part, and its MFU, are there too.
            let (step_ms, mfu) = (row["modelled_step_ms"].as_f64().unwrap(), row["modelled_mfu"].as_f64().unwrap());
            assert!(step_ms > 0.0 && mfu > 0.0 && mfu < 1.0, "{soc}: {row}");
        }
    }
    // Two emulated devices, data-parallel over the emulator's HCCL.
    let o = command("finetune")
        .args(["--dataset_dir", &p("train.jsonl"), "--config", &config, "--device", "npu-sim:0", "--num_gpus", "2"])
        .args(["--max_steps", "2", "--batch_size", "2", "--num_workers", "1", "--quiet"])
        .args(["--metrics", &p("ddp.jsonl")])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "--num_gpus 2: {stdout}{}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout.contains("data-parallel over HCCL") && stdout.contains("2 optimizer steps"), "{stdout}");
    // The MFU is one device's: its own tokens over its own modelled time and peak.
    let metrics = std::fs::read_to_string(p("ddp.jsonl")).unwrap();
    for row in metrics.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()) {
        let mfu = row["modelled_mfu"].as_f64().unwrap();
        assert!(mfu > 0.0 && mfu < 1.0, "--num_gpus 2: {row}");
    }
    let o = train("Ascend910A", "bf16");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        stderr.contains("Ascend910A") && stderr.contains("no BF16") && stderr.contains("--precision f16"),
        "{stderr}"
    );
    assert!(!String::from_utf8_lossy(&o.stdout).contains("optimizer steps"), "a step ran before the refusal");
}

/// `predict --device npu-sim:0` preflights the prediction on the part before predicting, and
/// refuses bf16 on a 910A before loading anything, naming the part and the alternatives.
#[test]
fn predict_on_npu_sim_preflights_each_part() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model").to_string_lossy().into_owned();
    let o = run("init-model", &["--output", &model, "--config", &bigbird_fixture("config.json"), "--seed", "3"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let predict = |soc: &str, dtype: &str| {
        command("predict")
            .args(["--model", &model, "--protein", "MWWMW", "--organism", "51", "--match-protein"])
            .args(["--device", "npu-sim:0", "--dtype", dtype])
            .env("CANDLE_ASCEND_SIM_SOC", soc)
            .output()
            .unwrap()
    };
    for (soc, dtype) in [("Ascend910A", "f16"), ("Ascend910A", "f32"), ("Ascend910B3", "bf16")] {
        let o = predict(soc, dtype);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{soc} {dtype}: {stderr}");
        assert!(stderr.contains(&format!("preflight on {soc}")), "{soc} {dtype}: {stderr}");
        assert_eq!(String::from_utf8_lossy(&o.stdout).trim().len(), 18, "{soc} {dtype}: MWWMW plus a stop");
    }
    let o = predict("Ascend910A", "bf16");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr.contains("Ascend910A") && stderr.contains("no BF16") && stderr.contains("--dtype f16"), "{stderr}");
    assert!(!stderr.contains("preflight on"), "{stderr}");
}

/// A free TCP port on loopback for a rendezvous.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Two processes of one rank each (torchrun's variables, rendezvous on loopback) train exactly
/// as one process with `--num_gpus 2`; when one of them is killed, the other stops within
/// HCCL_EXEC_TIMEOUT with one line that names its rank.
#[test]
fn two_processes_train_as_one_process_with_two_devices_and_fail_together() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    assert!(run("prepare-data", &["--input", &demo("genes.csv"), "--output", &p("train.jsonl")]).status.success());
    // The fixture model with dropout on, trained with clipping.
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(bigbird_fixture("config.json")).unwrap()).unwrap();
    config["hidden_dropout_prob"] = 0.1.into();
    config["attention_probs_dropout_prob"] = 0.1.into();
    std::fs::write(p("config.json"), config.to_string()).unwrap();
    let config = p("config.json");
    let finetune = |steps: &str, metrics: &str| {
        let mut c = command("finetune");
        c.args(["--dataset_dir", &p("train.jsonl"), "--config", &config, "--device", "npu-sim:0"])
            .args(["--precision", "f32", "--max_steps", steps, "--batch_size", "2", "--num_workers", "1", "--quiet"])
            .args(["--gradient_clip", "0.5", "--metrics", metrics]);
        c
    };
    let losses = |path: &str| -> Vec<f64> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["loss"].as_f64().unwrap())
            .collect()
    };
    let o = finetune("8", &p("one.jsonl")).args(["--num_gpus", "2"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let port = free_port().to_string();
    let spawn = |rank: &str, steps: &str, metrics: &str| {
        finetune(steps, metrics)
            .envs([("WORLD_SIZE", "2"), ("RANK", rank), ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", &port)])
            // Bounds a hang without failing a rank that a loaded machine holds back a few seconds.
            .env("HCCL_EXEC_TIMEOUT", "60")
            .env("HCCL_CONNECT_TIMEOUT", "5")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let ranks = [spawn("0", "8", &p("two.jsonl")), spawn("1", "8", &p("two-1.jsonl"))];
    for (rank, child) in ranks.into_iter().enumerate() {
        let o = child.wait_with_output().unwrap();
        let (stdout, stderr) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        assert!(o.status.success(), "{stdout}{stderr}");
        // Each rank says whom it waits for, where and until when, and what became of a timeout it set.
        let whom = if rank == 0 {
            "waiting for ranks 1-1 to connect to 127.0.0.1:"
        } else {
            "waiting for rank 0 at 127.0.0.1:"
        };
        assert!(stdout.contains(whom) && stdout.contains("for up to 140 s (until "), "{stdout}");
        assert!(
            stderr.contains(
                "HCCL_CONNECT_TIMEOUT=5 is outside HCCL's range [120, 7200] s, so it becomes 120 s: ranks wait 140 s"
            ),
            "{stderr}"
        );
    }
    assert_eq!(losses(&p("one.jsonl")).len(), 8);
    assert_eq!(losses(&p("one.jsonl")), losses(&p("two.jsonl")));
    assert!(!Path::new(&p("two-1.jsonl")).exists(), "rank 1 writes no metrics");
    // Rank 0's rows carry both ranks' devices, as DCMI sees them (rank 1's is not opened here).
    for line in std::fs::read_to_string(p("two.jsonl")).unwrap().lines() {
        let row: serde_json::Value = serde_json::from_str(line).unwrap();
        let npu = row["npu"].as_array().unwrap_or_else(|| panic!("no npu figures: {row}"));
        let devices: Vec<&str> = npu.iter().map(|d| d["device"].as_str().unwrap()).collect();
        assert_eq!(devices, ["npu-sim:0", "npu-sim:1"], "{row}");
    }
    // The same through a rendezvous file instead of TCP.
    let spawn = |rank: &str, metrics: &str| {
        finetune("8", metrics)
            .args(["--rendezvous", &p("root-info")])
            .envs([("WORLD_SIZE", "2"), ("RANK", rank)])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    for child in [spawn("0", &p("file.jsonl")), spawn("1", &p("file-1.jsonl"))] {
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    }
    assert_eq!(losses(&p("one.jsonl")), losses(&p("file.jsonl")));

    // Kill rank 1 once rank 0 has saved a checkpoint (a step takes about 0.1 s here, so the
    // kill lands long before step 40): rank 0 stops within the timeout, and the checkpoints left
    // behind resume.
    let port = free_port().to_string();
    let spawn = |rank: &str| {
        finetune("40", &p(&format!("kill-{rank}.jsonl")))
            .args(["--checkpoint_dir", &p("ck"), "--save_every_n_steps", "1", "--keep_last", "2"])
            .envs([("WORLD_SIZE", "2"), ("RANK", rank), ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", &port)])
            .env("HCCL_EXEC_TIMEOUT", "5")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (rank0, mut rank1) = (spawn("0"), spawn("1"));
    let started = std::time::Instant::now();
    while std::fs::read_to_string(p("kill-0.jsonl")).map_or(true, |m| m.lines().count() < 2) {
        assert!(started.elapsed() < std::time::Duration::from_secs(120), "rank 0 never finished a step");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    rank1.kill().unwrap();
    let killed = std::time::Instant::now();
    let o = rank0.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(killed.elapsed() < std::time::Duration::from_secs(30), "{:?}", killed.elapsed());
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("rank 0 of 2") && stderr.contains("HCCL_EXEC_TIMEOUT"), "{stderr}");
    let _ = rank1.wait();
    let mut saved: Vec<usize> = std::fs::read_dir(p("ck"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_prefix("step-")?.parse().ok())
        .collect();
    saved.sort();
    let last = *saved.last().expect("a checkpoint was saved");
    // The same schedule, now on two devices of one process, continues from the last step.
    let resumed = finetune("40", &p("resumed.jsonl"))
        .args(["--num_gpus", "2", "--resume", &p(&format!("ck/step-{last}"))])
        .output()
        .unwrap();
    assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stderr));
    let first = std::fs::read_to_string(p("resumed.jsonl")).unwrap();
    let first: serde_json::Value = serde_json::from_str(first.lines().next().unwrap()).unwrap();
    assert_eq!(first["step"].as_u64(), Some(last as u64 + 1));
}
