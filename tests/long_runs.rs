//! Long runs neither fail late nor end in silence (issue 26's second hostile trial): a checkpoint
//! folder that cannot be written fails before the first step, a run that saves nothing says so
//! at the start, SIGINT and SIGTERM say where the run stood and exit with the shell's status, and
//! a schedule torch cannot make names the settings that work.
#![cfg(unix)]

use std::path::Path;
use std::process::{Command, Output, Stdio};

mod common;
use common::{bigbird_fixture, command, demo, run};

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `finetune` of the tiny fixture model on the demo data prepared in `dir`.
fn finetune(dir: &Path, extra: &[&str]) -> Command {
    let train = dir.join("train.jsonl");
    if !train.exists() {
        let o = run("prepare-data", &["--input", &demo("genes.csv"), "--output", &train.to_string_lossy()]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let mut c = command("finetune");
    c.args(["--dataset_dir", &train.to_string_lossy(), "--config", &bigbird_fixture("config.json")])
        .args(["--precision", "f32", "--num_workers", "1", "--quiet"])
        .args(extra);
    c
}

#[test]
fn an_unusable_checkpoint_folder_fails_before_the_first_step() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    std::fs::write(p("a-file"), "").unwrap();
    let args = ["--checkpoint_dir", &p("a-file/ck"), "--metrics", &p("m.jsonl"), "--max_steps", "3"];
    let o = finetune(dir.path(), &args).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("a-file/ck cannot be created"), "{}", stderr(&o));
    assert!(std::fs::read_to_string(p("m.jsonl")).unwrap_or_default().is_empty(), "no step ran");
    // Without a folder, the run says at its start that nothing will be saved.
    let o = finetune(dir.path(), &["--max_steps", "3"]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let said = out.find("nothing will be saved").expect("said at the start");
    assert!(said < out.find("optimizer steps").unwrap(), "{out}");
}

#[test]
fn sigint_and_sigterm_say_where_the_run_stood() {
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck");
    for (signal, status) in [("-TERM", 143), ("-INT", 130)] {
        let _ = std::fs::remove_dir_all(&ck);
        let args = ["--checkpoint_dir", &ck.to_string_lossy(), "--save_every_n_steps", "1"];
        let child = finetune(dir.path(), &args)
            .args(["--max_epochs", "1000", "--max_steps", "100000"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Interrupt once a checkpoint is in place (a step takes milliseconds here).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while !ck.join("step-2").is_dir() {
            assert!(std::time::Instant::now() < deadline, "no checkpoint was saved");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let killed = Command::new("kill").args([signal, &child.id().to_string()]).status().unwrap();
        assert!(killed.success());
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(status), "{signal}: {}", stderr(&o));
        let line = stderr(&o);
        assert!(line.starts_with("interrupted at step ") && line.contains("; last checkpoint "), "{line}");
        assert!(line.trim_end().contains(&format!("{}", ck.join("step-").display())), "{line}");
    }
}

#[test]
fn a_schedule_torch_cannot_make_names_the_settings_that_do() {
    let dir = tempfile::tempdir().unwrap();
    let o = finetune(dir.path(), &["--max_steps", "10"]).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("train 9 or 11 steps (max_steps) instead"), "{}", stderr(&o));
    let o = finetune(dir.path(), &["--max_steps", "11"]).output().unwrap();
    assert!(o.status.success(), "the suggestion works: {}", stderr(&o));
}
