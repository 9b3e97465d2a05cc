//! Inputs from the third hostile trial (issue 42, items 4, 17, 19 and 20) that gave wrong,
//! misleading or no messages: each now gets a clear line or the right result.

use std::process::Output;

mod common;
use common::{bigbird_fixture, run};

const ECOLI: &str = "Escherichia coli general";

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn predict(args: &[&str]) -> Output {
    let model = bigbird_fixture("");
    run("predict", &[&["--model", model.as_str()], args].concat())
}

#[test]
fn num_sequences_is_capped_as_in_the_service() {
    let o = predict(&["--protein", "MKV", "--organism", ECOLI, "--temperature", "1", "--num-sequences", "100000000"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--num-sequences") && stderr(&o).contains("1..=100"), "{}", stderr(&o));
}

#[test]
fn subnormal_temperatures_give_the_greedy_dna_for_every_seed() {
    let protein = "MALWMRLLPLLALLALWGPDPAAA";
    let greedy = predict(&["--protein", protein, "--organism", ECOLI, "--match-protein"]);
    assert!(greedy.status.success(), "{}", stderr(&greedy));
    for (temperature, seed) in [("1e-310", "1"), ("1e-310", "2"), ("5e-324", "3")] {
        let args = ["--protein", protein, "--organism", ECOLI, "--match-protein", "--temperature", temperature];
        let o = predict(&[&args[..], &["--seed", seed]].concat());
        assert!(o.status.success(), "{}", stderr(&o));
        assert_eq!(o.stdout, greedy.stdout, "T={temperature} seed {seed}");
    }
}

#[test]
fn batch_messages_say_what_happened_and_where() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    // A FASTA output has no error column: the failed entry's error is on stderr.
    std::fs::write(p("in.fasta"), ">ok\nMKV\n>bad\nMK1V\n>ok\nMALW\n").unwrap();
    let o = predict(&["--input", &p("in.fasta"), "--organism", ECOLI, "--output", &p("out.fasta")]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(!err.contains("error column"), "{err}");
    assert!(err.contains("their errors are on stderr above") && err.contains("entry 2 (bad)"), "{err}");
    assert!(err.contains("entry 3 repeats the name ok of entry 1"), "duplicate names are warned of: {err}");

    // An empty input is an error, not a silent success.
    std::fs::write(p("empty.fasta"), "").unwrap();
    let o = predict(&["--input", &p("empty.fasta"), "--organism", ECOLI, "--output", &p("e.csv")]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("no sequences in the file"), "{}", stderr(&o));

    // --organism beside a CSV organism column: the column wins and a note says so.
    std::fs::write(p("in.csv"), "protein_sequence,organism\nMKV,Homo sapiens\nMALW,\n").unwrap();
    let o = predict(&["--input", &p("in.csv"), "--organism", ECOLI, "--output", &p("o.csv")]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("has an organism column, which wins over --organism (1 empty cells took it)"));

    // --score says it scored, and an empty DNA says it is empty.
    std::fs::write(p("dna.csv"), "dna,organism\nATGAAAGTTTAA,51\n,51\n").unwrap();
    let o = predict(&["--score", &p("dna.csv"), "--output", &p("s.csv")]);
    let err = stderr(&o);
    assert!(err.contains("scored 2/2 sequences") && !err.contains("predicted 2/2"), "{err}");
    assert!(err.contains("the DNA is empty") && !err.contains("0 bases"), "{err}");

    // An empty organism says so.
    let o = predict(&["--protein", "MKV", "--organism", ""]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("No organism given (the name is empty)"), "{}", stderr(&o));
}

/// Sizes from the command line past the data or the machine: each was a "capacity overflow"
/// panic (or an abort on terabytes) where a buffer was reserved for the whole size up front.
#[test]
fn sizes_past_the_data_grow_as_needed_and_sizes_past_the_machine_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    let o = run("prepare-data", &["--input", &common::demo("genes.csv"), "--output", &p("train.jsonl")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let huge = (1usize << 62).to_string();
    let collate = |out: &str, extra: &[&str]| {
        run("collate", &[&["--input", &p("train.jsonl"), "--output", &p(out)], extra].concat())
    };
    // A shuffle buffer larger than the data holds the data: the same batches as a 10,000 buffer.
    let o = collate("huge.jsonl", &["--shuffle-buffer", &huge]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = collate("small.jsonl", &["--shuffle-buffer", "10000"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(p("huge.jsonl")).unwrap(), std::fs::read(p("small.jsonl")).unwrap());
    // A batch larger than the data is the data.
    let o = collate("one.jsonl", &["--batch_size", &huge]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(p("one.jsonl")).unwrap().lines().count(), 1);

    let refused = |o: &Output, message: &str| {
        let err = stderr(o);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains(message) && err.trim_end().lines().count() == 1, "{message:?} in {err}");
    };
    let o = collate("x.jsonl", &["--batch_size", &huge, "--bucket-batches", "4"]);
    refused(&o, "a bucket window of 4 batches of 4611686018427387904 records is more records than can be counted");
    let o = collate("x.jsonl", &["--num_workers", "100000"]);
    refused(&o, "100000 workers: at most 256");

    // An accumulation larger than the data takes the epoch in one step.
    let args = ["--dataset_dir", &p("train.jsonl"), "--config", &bigbird_fixture("config.json"), "--quiet"];
    let o = run("finetune", &[&args[..], &["--accumulate_grad_batches", &huge, "--max_steps", "1"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));

    let o = run("evaluate", &["--input", &p("x.csv"), "--reference", &p("train.jsonl"), "--window", &huge]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--window") && stderr(&o).contains("1..=1000000"), "{}", stderr(&o));
}
