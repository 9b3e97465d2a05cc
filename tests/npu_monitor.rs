//! Device monitoring during training on the emulator's DCMI: every metrics row carries each
//! device's utilisation, HBM, temperature and power; a device that reports a fault mid-run stops
//! the run before its next step, naming the device and the vendor error code, and the last
//! checkpoint resumes.

mod common;
use common::{bigbird_fixture, command, demo, run};

#[test]
fn training_reports_each_device_and_stops_on_a_device_fault() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    assert!(run("prepare-data", &["--input", &demo("genes.csv"), "--output", &p("train.jsonl")]).status.success());
    let config = bigbird_fixture("config.json");
    let finetune = |steps: &str, metrics: &str, gpus: &str| {
        let mut c = command("finetune");
        c.args(["--dataset_dir", &p("train.jsonl"), "--config", &config, "--device", "npu-sim:0"])
            .args(["--max_steps", steps, "--batch_size", "2", "--num_workers", "1", "--quiet", "--num_gpus", gpus])
            .args(["--metrics", &p(metrics)])
            .env("CANDLE_ASCEND_SIM_MONITOR_DIR", p("monitor"))
            .env_remove("CANDLE_ASCEND_SIM_DEVICE_FAULT");
        c
    };
    let rows = |metrics: &str| -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(p(metrics)).unwrap();
        text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    };

    // Data-parallel over two devices: each row has both devices' figures, in rank order.
    let o = finetune("3", "ddp.jsonl", "2").output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for row in rows("ddp.jsonl") {
        let npu = row["npu"].as_array().unwrap_or_else(|| panic!("no npu figures: {row}"));
        let devices: Vec<&str> = npu.iter().map(|d| d["device"].as_str().unwrap()).collect();
        assert_eq!(devices, ["npu-sim:0", "npu-sim:1"], "{row}");
        for d in npu {
            let util = d["npu_util"].as_f64().unwrap();
            assert!((0.0..=100.0).contains(&util), "{d}");
            assert!(d["hbm_used_mb"].as_u64().unwrap() > 0, "the model's weights are on the device: {d}");
            // The modelled busy time of the work shows as power above the idle 70 W.
            assert!(d["temp_c"].as_f64().unwrap() >= 40.0 && d["power_w"].as_f64().unwrap() > 70.0, "{d}");
        }
    }

    // One device, a checkpoint every step; the launches of three steps (and what runs before the
    // first) bring the device to its injected fault during step 2 or 3, or the save after it.
    // The run stops there, saving nothing after the fault, and the last checkpoint resumes.
    let o = finetune("6", "clean.jsonl", "1").output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let three_steps: u64 = rows("clean.jsonl")[..3].iter().map(|r| r["device_launches"].as_u64().unwrap()).sum();
    let o = finetune("6", "fault.jsonl", "1")
        .args(["--checkpoint_dir", &p("ck"), "--save_every_n_steps", "1"])
        .env("CANDLE_ASCEND_SIM_DEVICE_FAULT", format!("0:0x80E18402:{three_steps}"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("npu-sim:0") && stderr.contains("0x80E18402") && stderr.contains("Critical"), "{stderr}");
    let done = rows("fault.jsonl").len();
    assert!((2..=3).contains(&done), "{done} steps ran: {stderr}");
    assert!(stderr.contains(&format!("stopped after step {done}, saving nothing since the fault")), "{stderr}");
    let saved: Vec<usize> = std::fs::read_dir(p("ck"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_prefix("step-")?.parse().ok())
        .collect();
    // The fault appears during a step (whose weights are then not saved) or during the save
    // after it (the save before the fault stands).
    let last = *saved.iter().max().expect("a checkpoint before the fault");
    assert!(last == done - 1 || last == done, "saved {saved:?} after {done} steps");
    let resumed =
        finetune("6", "resumed.jsonl", "1").args(["--resume", &p(&format!("ck/step-{last}"))]).output().unwrap();
    assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stderr));
    assert_eq!(rows("resumed.jsonl")[0]["step"].as_u64(), Some(last as u64 + 1));

    // A toolkit without the driver's DCMI: training works, with one warning and no figures.
    let sim = candle_ascend::emulated_root();
    std::fs::create_dir_all(p("bare/lib64")).unwrap();
    std::fs::copy(sim.join("version.cfg"), p("bare/version.cfg")).unwrap();
    for lib in std::fs::read_dir(sim.join("lib64")).unwrap() {
        let lib = lib.unwrap().path();
        if lib.file_name().unwrap() != "libdcmi.so" {
            std::fs::copy(&lib, p(&format!("bare/lib64/{}", lib.file_name().unwrap().to_string_lossy()))).unwrap();
        }
    }
    let o = finetune("2", "bare.jsonl", "1").env("CANDLE_ASCEND_SIM_ROOT", p("bare")).output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("monitoring")).collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(warnings[0].contains("libdcmi.so"), "{stderr}");
    assert!(rows("bare.jsonl").iter().all(|r| r.get("npu").is_none()));
}

/// `npu watch` lists every emulated device like `npu-smi info`, with an injected fault's
/// health and error code, and the processes using a device.
#[test]
fn npu_watch_lists_the_devices_their_faults_and_processes() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    assert!(run("prepare-data", &["--input", &demo("genes.csv"), "--output", &p("train.jsonl")]).status.success());
    // A training run on npu-sim:0 that lasts until killed.
    let mut trainer = command("finetune")
        .args(["--dataset_dir", &p("train.jsonl"), "--config", &bigbird_fixture("config.json")])
        .args(["--device", "npu-sim:0", "--max_steps", "100000", "--batch_size", "2", "--num_workers", "1", "--quiet"])
        .args(["--metrics", &p("m.jsonl")])
        .env("CANDLE_ASCEND_SIM_MONITOR_DIR", p("monitor"))
        .env_remove("CANDLE_ASCEND_SIM_DEVICE_FAULT")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while std::fs::read_to_string(p("m.jsonl")).map_or(true, |m| m.lines().count() < 1) {
        assert!(started.elapsed() < std::time::Duration::from_secs(120), "the trainer never finished a step");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let o = command("npu watch")
        .args(["--device", "npu-sim:0", "1"])
        .env("CANDLE_ASCEND_SIM_MONITOR_DIR", p("monitor"))
        .env("CANDLE_ASCEND_SIM_DEVICE_FAULT", "2:0x80E18402")
        .output()
        .unwrap();
    let _ = trainer.kill();
    let _ = trainer.wait();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{stdout}{}", String::from_utf8_lossy(&o.stderr));
    let table: Vec<&str> =
        stdout.lines().take_while(|l| !l.starts_with("-- ") || l == &stdout.lines().next().unwrap()).collect();
    let device_rows: Vec<&&str> = table.iter().filter(|l| l.starts_with("npu-sim:")).collect();
    assert_eq!(device_rows.len(), 8, "{stdout}");
    assert!(device_rows[2].contains("Critical") && device_rows[0].contains(" OK "), "{stdout}");
    assert!(table.iter().any(|l| l.contains("error codes: 0x80E18402")), "{stdout}");
    let trainer_line = format!("process {:>8} codon", trainer.id());
    assert!(table.iter().any(|l| l.contains(&trainer_line)), "{trainer_line:?} not in {stdout}");
}
