//! Files from the fourth hostile trial (issue 57) that took all memory, aborted, cost time in
//! proportion to their size, or gave misleading messages: each is now one clear line and exit 1.

use std::io::Write;
use std::path::Path;
use std::process::Output;

mod common;
use common::{bigbird_fixture, command, demo, run};

const ECOLI: &str = "Escherichia coli general";

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Exit status 1 and one line of error that holds `message`.
fn one_line_error(o: &Output, message: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains(message), "{message:?} in {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
}

/// A `torch.save`-layout zip whose pickle's memo references double 40 times (416 bytes).
fn doubling_pickle(path: &Path) {
    let mut pkl = b"\x80\x02K\x01q\x00".to_vec();
    for i in 0..40u8 {
        pkl.extend_from_slice(&[b'h', i, b'h', i, 0x86, b'q', i + 1]);
    }
    pkl.push(b'.');
    let mut zip = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    zip.start_file("archive/data.pkl", zip::write::SimpleFileOptions::default()).unwrap();
    zip.write_all(&pkl).unwrap();
    zip.finish().unwrap();
}

#[test]
fn a_pickle_that_doubles_is_refused_as_a_checkpoint_and_as_a_model_folder() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("tiny.ckpt");
    doubling_pickle(&ckpt);
    let o = run("predict", &["--model", ckpt.to_str().unwrap(), "--protein", "MKV", "--organism", ECOLI]);
    one_line_error(&o, "expand past 256 MiB");
    // The old Hub layout: config.json and pytorch_model.bin.
    let folder = dir.path().join("model");
    std::fs::create_dir(&folder).unwrap();
    std::fs::copy(bigbird_fixture("config.json"), folder.join("config.json")).unwrap();
    doubling_pickle(&folder.join("pytorch_model.bin"));
    let o = run("predict", &["--model", folder.to_str().unwrap(), "--protein", "MKV", "--organism", ECOLI]);
    one_line_error(&o, "expand past 256 MiB");
}

#[test]
fn sizes_in_config_json_past_their_limits_are_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("model");
    std::fs::create_dir(&folder).unwrap();
    std::fs::copy(bigbird_fixture("model.safetensors"), folder.join("model.safetensors")).unwrap();
    let config = std::fs::read_to_string(bigbird_fixture("config.json")).unwrap();
    let huge = config.replace("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 100000000000");
    assert_ne!(huge, config);
    std::fs::write(folder.join("config.json"), &huge).unwrap();
    let o = run("predict", &["--model", folder.to_str().unwrap(), "--protein", "MKV", "--organism", ECOLI]);
    one_line_error(&o, "num_hidden_layers = 100000000000 is past this build's limit of 256");
    // init-model aborted, or panicked on a capacity overflow, before anything was written.
    let vocab = config.replace("\"vocab_size\": 90", "\"vocab_size\": 18446744073709551615");
    assert_ne!(vocab, config);
    let path = dir.path().join("vocab.json");
    std::fs::write(&path, vocab).unwrap();
    let out = dir.path().join("out");
    let o = run("init-model", &["--output", out.to_str().unwrap(), "--config", path.to_str().unwrap()]);
    one_line_error(&o, "vocab_size = 18446744073709551615 is past this build's limit");
    assert!(!out.exists());
}

#[test]
fn a_megabyte_organism_in_a_csv_is_a_short_message() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.csv");
    std::fs::write(&input, format!("protein_sequence,organism\nMKV,{}\n", "Homo sapiens".repeat(100_000))).unwrap();
    let out = dir.path().join("out.csv");
    let model = bigbird_fixture("");
    let o = run("predict", &["--model", &model, "--input", input.to_str().unwrap(), "--output", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", &stderr(&o)[..stderr(&o).len().min(500)]);
    assert!(stderr(&o).len() < 2000, "the name is not repeated whole: {} bytes", stderr(&o).len());
    assert!(stderr(&o).contains("… (1200000 bytes)"), "{}", stderr(&o));
}

#[test]
fn inputs_with_a_byte_order_mark_compression_or_two_columns_of_one_name() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    let model = bigbird_fixture("");
    let predict = |input: &str, out: &str| {
        run("predict", &["--model", &model, "--input", input, "--organism", ECOLI, "--output", out])
    };
    std::fs::write(p("bom.fasta"), "\u{feff}>a\nMKV\n").unwrap();
    let o = predict(&p("bom.fasta"), &p("bom.csv"));
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::write(p("in.csv"), b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03").unwrap();
    one_line_error(&predict(&p("in.csv"), &p("o.csv")), "gzip-compressed; decompress it first");
    std::fs::write(p("dup.csv"), "protein_sequence,organism,protein_sequence\nMKV,Homo sapiens,MALW\n").unwrap();
    one_line_error(&predict(&p("dup.csv"), &p("o.csv")), "columns 1 and 3 are both named \"protein_sequence\"");
    // A FASTA name of a megabyte is cut in every warning.
    let long = "x".repeat(1 << 20);
    std::fs::write(p("long.fasta"), format!(">{long}\nMKV\n>{long}\nMKV\n")).unwrap();
    let o = predict(&p("long.fasta"), &p("long.csv"));
    assert!(o.status.success(), "{}", &stderr(&o)[..stderr(&o).len().min(500)]);
    assert!(stderr(&o).contains("… (1048576 bytes)") && stderr(&o).len() < 2000, "{} bytes", stderr(&o).len());
}

#[test]
fn export_refuses_to_write_binary_to_a_terminal() {
    let (mut master, mut slave) = (0, 0);
    // SAFETY: out-parameters for two descriptors; the rest may be null.
    let rc =
        unsafe { libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), std::ptr::null()) };
    assert_eq!(rc, 0);
    use std::os::fd::FromRawFd;
    // SAFETY: openpty returned two open descriptors that nothing else owns.
    let (master, slave) = unsafe { (std::fs::File::from_raw_fd(master), std::os::fd::OwnedFd::from_raw_fd(slave)) };
    // Whatever the program writes to the terminal is drained, so a wrong run cannot block.
    let drain = std::thread::spawn(move || {
        use std::io::Read;
        let (mut buf, mut total) = ([0u8; 4096], 0);
        // A terminal whose other side closed reads as an error (EIO): the end.
        while let Ok(n @ 1..) = (&master).read(&mut buf) {
            total += n;
        }
        total
    });
    let o = command("export")
        .args(["--model", &bigbird_fixture(""), "--output", "-"])
        .stdout(std::process::Stdio::from(slave))
        .output()
        .unwrap();
    one_line_error(&o, "--output -: a terminal; the ONNX model is binary");
    assert_eq!(drain.join().unwrap(), 0, "nothing reached the terminal");
}

#[test]
fn resume_checkpoints_past_their_epoch_with_impossible_counts_or_corrupt_moments_are_blamed() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    let o = run("prepare-data", &["--input", &demo("genes.csv"), "--output", &p("train.jsonl")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let config = bigbird_fixture("config.json");
    let finetune = |extra: &[&str]| {
        let args = ["--dataset_dir", &p("train.jsonl"), "--config", &config, "--num_workers", "1", "--quiet"];
        run("finetune", &[&args[..], &["--checkpoint_dir", &p("ck"), "--save_every_n_steps", "1"], extra].concat())
    };
    let o = finetune(&["--max_steps", "2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let state_path = p("ck/step-1/trainer_state.json");
    let state = std::fs::read_to_string(&state_path).unwrap();
    let mut value: serde_json::Value = serde_json::from_str(&state).unwrap();
    value["batch_in_epoch"] = 100_000.into();
    std::fs::write(&state_path, value.to_string()).unwrap();
    let o = finetune(&["--max_steps", "2", "--resume", &p("ck/step-1")]);
    one_line_error(&o, "it resumes at batch 100000 of an epoch of");
    // AdamW's count past the steps: it wrapped to step 0 (lr / 0, every weight NaN) or overflowed.
    let mut value: serde_json::Value = serde_json::from_str(&state).unwrap();
    value["optimizer_steps"] = serde_json::Value::from(u64::MAX);
    std::fs::write(&state_path, value.to_string()).unwrap();
    let o = finetune(&["--max_steps", "2", "--resume", &p("ck/step-1")]);
    one_line_error(&o, &format!("it counts {} optimizer steps in 1 steps", u64::MAX));
    value["optimizer_steps"] = serde_json::Value::from(1);
    value["loss_scaler"] = serde_json::json!({"scale": -1.0, "good_steps": 0});
    std::fs::write(&state_path, value.to_string()).unwrap();
    let o = finetune(&["--max_steps", "2", "--resume", &p("ck/step-1")]);
    one_line_error(&o, "its loss scaler (scale -1, 0 good steps) is not one training leaves");

    let moments_path = p("ck/step-2/optimizer.safetensors");
    let mut moments = candle_core::safetensors::load(&moments_path, &candle_core::Device::Cpu).unwrap();
    let (name, t) = moments.iter().next().map(|(n, t)| (n.clone(), t.clone())).unwrap();
    let nan = (t.ones_like().unwrap() * f64::NAN).unwrap();
    moments.insert(name.clone(), nan);
    candle_core::safetensors::save(&moments, &moments_path).unwrap();
    let o = finetune(&["--max_steps", "2", "--resume", &p("ck/step-2")]);
    one_line_error(&o, &format!("optimizer.safetensors holds NaN or infinite values in {name}"));
}
