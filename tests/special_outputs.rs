//! Outputs that are not plain files (issue 42, items 1 and 2): `-` and `/dev/stdout` are standard
//! output, a device or a FIFO is written through and never replaced, a symlink keeps its link and
//! gets its target written, and a full disk under standard output is an error, not a short file.

use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

mod common;
use common::{bigbird_fixture, command};

const ECOLI: &str = "Escherichia coli general";

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `predict` of a two-protein FASTA file into `output`.
fn predict_to(dir: &Path, output: &str) -> Command {
    let input = dir.join("in.fasta");
    std::fs::write(&input, ">a\nMKV\n>b\nMALW\n").unwrap();
    let mut c = command("predict");
    c.args(["--model", &bigbird_fixture(""), "--input", input.to_str().unwrap(), "--organism", ECOLI]);
    c.args(["--output", output]);
    c
}

#[test]
fn dash_and_dev_stdout_write_to_standard_output() {
    let dir = tempfile::tempdir().unwrap();
    for output in ["-", "/dev/stdout"] {
        let o = predict_to(dir.path(), output).output().unwrap();
        assert!(o.status.success(), "{output}: {}", stderr(&o));
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.starts_with("id,") || text.contains("predicted_dna"), "{output}: {text}");
        assert_eq!(text.lines().count(), 3, "{output}: a header and two rows: {text}");
    }
    assert!(std::fs::symlink_metadata("/dev/stdout").unwrap().file_type().is_symlink(), "/dev/stdout is still a link");
}

#[test]
fn a_symlinked_output_keeps_its_link_and_its_target_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("target.csv");
    std::fs::write(&target, "old\n").unwrap();
    let link = dir.path().join("out.csv");
    std::os::unix::fs::symlink("target.csv", &link).unwrap();
    let o = predict_to(dir.path(), link.to_str().unwrap()).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the link was replaced");
    let written = std::fs::read_to_string(&target).unwrap();
    assert_eq!(written.lines().count(), 3, "{written}");
}

#[test]
fn a_device_is_written_through_not_replaced() {
    let dir = tempfile::tempdir().unwrap();
    // A link to /dev/null stands for the device: the test must not risk /dev/null itself.
    let null = dir.path().join("null");
    std::os::unix::fs::symlink("/dev/null", &null).unwrap();
    for (name, args) in [
        ("predict", None),
        ("tokenize", Some(vec!["--input".to_string(), common::demo("proteins.jsonl"), "--allow-failures".to_string()])),
    ] {
        let o = match args {
            None => predict_to(dir.path(), null.to_str().unwrap()).output().unwrap(),
            Some(args) => command(name).args(&args).args(["--output", null.to_str().unwrap()]).output().unwrap(),
        };
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        assert!(std::fs::metadata("/dev/null").unwrap().file_type().is_char_device(), "{name} replaced /dev/null");
        assert!(std::fs::symlink_metadata(&null).unwrap().file_type().is_symlink(), "{name} replaced the link");
    }
}

#[test]
fn a_fifo_is_written_through() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("out.fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
    };
    let o = predict_to(dir.path(), fifo.to_str().unwrap()).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    // Checked before the join: a replaced FIFO leaves the reader waiting for a writer forever.
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo(), "the FIFO was replaced");
    let read = reader.join().unwrap();
    assert_eq!(read.lines().count(), 3, "{read}");
}

#[test]
fn a_full_disk_under_standard_output_is_an_error() {
    let model = bigbird_fixture("");
    let long: String = "MKVLA".repeat(200);
    for args in [
        vec!["--list-organisms".to_string()],
        vec!["--model".into(), model.clone(), "--protein".into(), long, "--organism".into(), ECOLI.into()],
    ] {
        let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
        let o = command("predict").args(&args).stdout(Stdio::from(full)).output().unwrap();
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains("cannot write to standard output") && err.contains("No space left"), "{args:?}: {err}");
        assert_eq!(err.lines().filter(|l| l.starts_with("error:")).count(), 1, "{err}");
    }
}
