//! Messages that say what is true (issue 26's second hostile trial): names as the user spells
//! them, the model actually used, the file at fault, no temporary names, flags that would be
//! ignored refused, and a warning whenever predicted DNA does not encode its protein.

use std::process::Output;

mod common;
use common::{bigbird_fixture, demo, run};

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn training_messages_name_what_is_used() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    let help = stdout(&run("finetune", &["--help"]));
    assert!(!help.contains("only 1") && help.contains("data-parallel over HCCL"), "{help}");
    let train = p("train.jsonl");
    assert!(run("prepare-data", &["--input", &demo("genes.csv"), "--output", &train]).status.success());
    let model = bigbird_fixture("");
    let base =
        ["--dataset_dir", train.as_str(), "--precision", "f32", "--num_workers", "1", "--quiet", "--max_steps", "2"];
    let o = run("finetune", &[&base[..], &["--model", &model]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains(&format!("configuration: {model}'s own model")), "{}", stdout(&o));
    // pretrain writes its own state-dict file.
    let (config, pre) = (bigbird_fixture("config.json"), p("pre"));
    let o = run("pretrain", &[&base[..], &["--config", &config, "--checkpoint_dir", &pre]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(dir.path().join("pre/pretrain.ckpt").is_file() && !dir.path().join("pre/finetune.ckpt").exists());
    // Several devices are NPUs over HCCL or GPUs over NCCL; the CPU is one device.
    let o = run("finetune", &[&base[..], &["--model", &model, "--num_gpus", "2"]].concat());
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(stderr(&o).contains("over NCCL on NVIDIA GPUs (--device cuda:K)"), "{}", stderr(&o));
    // A new organism is neither a number nor a known name in another case.
    for name in ["42", "homo sapiens"] {
        let o = run("finetune", &[&base[..], &["--model", &model, "--add-organism", name]].concat());
        assert_eq!(o.status.code(), Some(1), "{name}: {}", stdout(&o));
        assert!(stderr(&o).contains(&format!("new organism {name:?}")), "{}", stderr(&o));
    }
}

#[test]
fn prediction_flags_and_warnings() {
    let model = bigbird_fixture("");
    let o = run("predict", &["--method", "uniform", "--protein", "MKV", "--organism", "51", "--temperature", "0.5"]);
    assert!(stderr(&o).contains("--method uniform:"), "{}", stderr(&o));
    // --top-p samples, so it needs --temperature; a negative temperature reaches its check.
    let o = run("predict", &["--model", &model, "--protein", "MKV", "--organism", "51", "--top-p", "0.5"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--temperature"), "{}", stderr(&o));
    let o = run("predict", &["--model", &model, "--protein", "MKV", "--organism", "51", "--temperature", "-1"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("Temperature must be a positive float"), "{}", stderr(&o));
    // The fixture model picks codons of other amino acids for this protein unless --match-protein.
    let args = ["--model", &model, "--protein", "MKVLAWMMMKKK", "--organism", "51"];
    let o = run("predict", &args);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("warning: the predicted DNA does not encode the protein: residue 1 is M"),
        "{}",
        stderr(&o)
    );
    let o = run("predict", &[&args[..], &["--match-protein"]].concat());
    assert!(o.status.success() && !stderr(&o).contains("warning"), "{}", stderr(&o));
    // --tf32 would change nothing off a GPU, so it is refused there, before any work.
    for (command, first, device) in
        [("predict", "--model", "cpu"), ("finetune", "--model", "cpu"), ("npu", "env", "npu-sim:0")]
    {
        let first: &[&str] = if first == "env" { &["env"] } else { &["--model", &model] };
        let o = run(command, &[first, &["--device", device, "--tf32"]].concat());
        assert_eq!(o.status.code(), Some(1), "{command}: {}", stderr(&o));
        assert!(
            stderr(&o).contains(&format!("--tf32 applies to NVIDIA GPUs (cuda:N), not to {device}")),
            "{}",
            stderr(&o)
        );
    }
}

#[test]
fn errors_name_the_file_at_fault_and_never_a_temporary_one() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    std::fs::write(p("garbage.bin"), [0xffu8; 64]).unwrap();
    let model = bigbird_fixture("");
    let o = run("score", &["--model", &model, "--inputs", &p("garbage.bin"), "--output", &p("o.safetensors")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--inputs ") && stderr(&o).contains("garbage.bin"), "{}", stderr(&o));
    // A checkpoint of another size: each key listed once, and the way out named.
    let o = run("predict", &["--model", &bigbird_fixture("model.safetensors"), "--protein", "MKV", "--organism", "51"]);
    assert_eq!(o.status.code(), Some(1));
    let line = stderr(&o);
    assert!(line.contains("misshapen") && line.contains("(--config)"), "{line}");
    let missing = line.split(" missing (").nth(1).map(|rest| rest.split(';').next().unwrap_or("")).unwrap_or("");
    assert!(!missing.contains("bert.embeddings.word_embeddings"), "a misshapen key is not also missing: {line}");
    // A table that is wrong as a whole has no line number.
    std::fs::write(p("k.txt"), "UUU 1.0(10)\n").unwrap();
    std::fs::write(p("s.csv"), "dna,organism\nATGTAA,51\n").unwrap();
    let o = run("evaluate", &["--input", &p("s.csv"), "--codon-table", &p("k.txt"), "--output", &p("m.csv")]);
    assert!(stderr(&o).contains("k.txt: Kazusa codon-usage table lacks 63 codons"), "{}", stderr(&o));
    // An output folder that is not there is named as the output's, never as the input's, and
    // never by a temporary file's name; nothing is read first.
    let (gone, proteins, genes) = (p("gone/t.jsonl"), demo("proteins.jsonl"), demo("genes.csv"));
    let cases = [
        ("tokenize", vec!["--input", &proteins, "--output", &gone]),
        ("prepare-data", vec!["--input", &genes, "--output", &gone]),
        ("collate", vec!["--input", &genes, "--output", &gone, "--batch-size", "2"]),
    ];
    for (name, args) in cases {
        let o = run(name, &args);
        assert_eq!(o.status.code(), Some(1), "{name}");
        let line = stderr(&o);
        assert!(line.contains("gone: the output's folder does not exist"), "{name}: {line}");
        assert!(!line.contains(".t.jsonl.") && !line.contains(args[1]), "{name}: {line}");
    }
    // step_counters runs the steps it is asked for, and at least one.
    let o = run("dev step-counters", &["--steps", "0"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}
