//! `evaluate` run as a user runs it, on the upstream golden sequences
//! (`tests/fixtures/eval/upstream_metrics.json`): its CSV carries upstream's values, bad rows are
//! named and make it exit non-zero, `--codon-table` reads a Kazusa table, and `--plot` writes
//! SVG that parses as XML and names its series.

use std::path::Path;

use serde_json::Value;

mod common;
use common::{eval_fixture as fixture, run, write_eval_reference as write_reference};

fn read_csv(path: &Path) -> (Vec<String>, Vec<Vec<String>>) {
    let mut reader = csv::Reader::from_path(path).unwrap();
    let headers = reader.headers().unwrap().iter().map(str::to_string).collect();
    let rows = reader.records().map(|r| r.unwrap().iter().map(str::to_string).collect()).collect();
    (headers, rows)
}

fn assert_close(what: &str, ours: &str, upstream: &Value) {
    let ours: f64 = ours.parse().unwrap_or_else(|_| panic!("{what}: {ours:?} is not a number"));
    let upstream = upstream.as_f64().unwrap();
    assert!((ours - upstream).abs() <= 1e-9 * upstream.abs(), "{what}: ours {ours}, upstream {upstream}");
}

#[test]
fn evaluate_writes_upstreams_metrics_and_a_summary() {
    let fixture = fixture();
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f);
    write_reference(&fixture, &p("train.jsonl"));
    let mut input = csv::Writer::from_path(p("seqs.csv")).unwrap();
    input.write_record(["name", "dna", "organism", "reference_dna"]).unwrap();
    // Per upstream test: its DNA alone (every metric but similarity), then upstream's
    // similarity pair (the high-frequency DNA against the test DNA).
    let mut expected = Vec::new();
    for (name, organism) in fixture["organisms"].as_object().unwrap() {
        for test in organism["tests"].as_array().unwrap().iter().filter(|t| t["cfd"].as_f64().is_some()) {
            let s = &test["similarity"];
            // The organism by id for one of them, by name for the others.
            let id_or_name = if name == "Homo sapiens" { organism["id"].to_string() } else { name.clone() };
            let what = format!("{name}: {}", test["kind"]);
            input.write_record([&what, test["dna"].as_str().unwrap(), &id_or_name, ""]).unwrap();
            expected.push((what.clone(), test.clone(), false));
            input
                .write_record([&what, s["predicted"].as_str().unwrap(), &id_or_name, s["original"].as_str().unwrap()])
                .unwrap();
            expected.push((what, test.clone(), true));
        }
    }
    input.flush().unwrap();
    drop(input);

    let p_str = |f: &str| p(f).to_string_lossy().into_owned();
    let out = run(
        "evaluate",
        &["--input", &p_str("seqs.csv"), "--reference", &p_str("train.jsonl"), "--output", &p_str("metrics.csv")],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let (headers, rows) = read_csv(&p("metrics.csv"));
    assert_eq!(
        headers,
        [
            "name",
            "dna",
            "organism",
            "reference_dna",
            "csi",
            "gc_content",
            "cfd",
            "minmax_mean",
            "similarity",
            "complexity",
            "error"
        ]
    );
    assert_eq!(rows.len(), expected.len());
    for (row, (what, test, is_similarity_pair)) in rows.iter().zip(&expected) {
        assert_eq!(row[10], "", "{what}: no error");
        if *is_similarity_pair {
            assert_close(&format!("{what} similarity"), &row[8], &test["similarity"]["window_1"]);
        } else {
            assert_eq!(row[8], "", "{what}: no reference_dna, no similarity");
            assert_close(&format!("{what} csi"), &row[4], &test["csi"]);
            assert_close(&format!("{what} gc"), &row[5], &test["gc_content"]);
            assert_close(&format!("{what} cfd"), &row[6], &test["cfd"]);
            match test["minmax_mean_ignoring_none"].as_f64() {
                Some(_) => assert_close(&format!("{what} minmax"), &row[7], &test["minmax_mean_ignoring_none"]),
                None => assert_eq!(row[7], "", "{what}: no window, no mean"),
            }
            if test["complexity"].as_f64().is_some() {
                assert_close(&format!("{what} complexity"), &row[9], &test["complexity"]);
            }
        }
    }
    assert_eq!(rows.len(), 22, "eleven upstream test sequences, each alone and as a similarity pair");
    for name in ["Escherichia coli general", "Homo sapiens", "Bacillus subtilis"] {
        assert!(stdout.lines().any(|l| l.starts_with(name)), "summary row for {name}: {stdout}");
    }
    assert!(stdout.contains("csi mean ± sd"), "{stdout}");
}

#[test]
fn bad_rows_are_named_written_and_make_the_exit_non_zero() {
    let fixture = fixture();
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    write_reference(&fixture, dir.path().join("train.jsonl").as_path());
    let good = fixture["organisms"]["Escherichia coli general"]["tests"][0]["dna"].as_str().unwrap();
    let rows = [
        ("ATGGCTGC", "Escherichia coli general"),
        ("ATGNNNTAA", "Escherichia coli general"),
        (good, "Danio rerio"),
        (good, "Escherichia coli generall"),
        (good, "Escherichia coli general"),
    ];
    let mut text = String::from("dna,organism\n");
    for (dna, organism) in rows {
        text.push_str(&format!("{dna},{organism}\n"));
    }
    std::fs::write(p("seqs.csv"), text).unwrap();
    let out = run("evaluate", &["--input", &p("seqs.csv"), "--reference", &p("train.jsonl"), "--output", &p("m.csv")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    for expected in [
        "row 1 (line 2): dna: DNA length 8 is not a multiple of 3",
        "row 2 (line 3): dna: DNA has 'N' at position 4",
        "row 3 (line 4): organism 24 (Danio rerio) has no sequences in the reference set",
        "row 4 (line 5): organism: Invalid organism name",
        "error: 4 of 5 rows could not be evaluated",
    ] {
        assert!(stderr.contains(expected), "{expected:?} in {stderr}");
    }
    let (_, written) = read_csv(dir.path().join("m.csv").as_path());
    assert_eq!(written.len(), 5, "every row is written");
    assert!(written[..4].iter().all(|r| r[2].is_empty() && !r.last().unwrap().is_empty()));
    assert!(!written[4][2].is_empty() && written[4].last().unwrap().is_empty(), "the good row is evaluated");
    let args = ["--input", &p("seqs.csv"), "--reference", &p("train.jsonl"), "--output", &p("m.csv")];
    let out = run("evaluate", &[&args[..], &["--allow-failures"]].concat());
    assert!(out.status.success(), "--allow-failures exits 0: {}", String::from_utf8_lossy(&out.stderr));

    // An empty reference is refused before any row.
    std::fs::write(p("empty.jsonl"), "").unwrap();
    let out = run("evaluate", &["--input", &p("seqs.csv"), "--reference", &p("empty.jsonl"), "--output", &p("m2.csv")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr.contains("empty.jsonl has no codons"), "{stderr}");
}

#[test]
fn a_kazusa_table_and_plots() {
    let fixture = fixture();
    let organism = &fixture["organisms"]["Bacillus subtilis"];
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    // The table: the reference ORFs' codon counts, in Kazusa's layout (RNA letters, per-thousand
    // frequency, count in parentheses).
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for r in organism["references"].as_array().unwrap() {
        for codon in r["dna"].as_str().unwrap().as_bytes().chunks(3) {
            *counts.entry(String::from_utf8_lossy(codon).replace('T', "U")).or_default() += 1;
        }
    }
    let total: usize = counts.values().sum();
    let mut table = String::from("Bacillus subtilis [synthetic]: 7 CDS's\n\n");
    for first in "UCAG".chars() {
        for third in "UCAG".chars() {
            let cells: Vec<String> = "UCAG"
                .chars()
                .map(|second| {
                    let codon: String = [first, second, third].iter().collect();
                    let n = counts.get(&codon).copied().unwrap_or(0);
                    format!("{codon} {:4.1}({n:6})", 1000.0 * n as f64 / total as f64)
                })
                .collect();
            table.push_str(&cells.join("  "));
            table.push('\n');
        }
    }
    std::fs::write(p("bsub.txt"), table).unwrap();
    let tests = organism["tests"].as_array().unwrap();
    let mut input = String::from("dna,reference_dna\n");
    for t in &tests[..3] {
        input.push_str(&format!("{},{}\n", t["dna"].as_str().unwrap(), tests[0]["dna"].as_str().unwrap()));
    }
    std::fs::write(p("seqs.csv"), input).unwrap();
    let plots = dir.path().join("plots");
    let out = run(
        "evaluate",
        &[
            "--input",
            &p("seqs.csv"),
            "--codon-table",
            &p("bsub.txt"),
            "--output",
            &p("m.csv"),
            "--plot",
            &plots.to_string_lossy(),
        ],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (headers, rows) = read_csv(dir.path().join("m.csv").as_path());
    let csi = headers.iter().position(|h| h == "csi").unwrap();
    for (row, t) in rows.iter().zip(tests) {
        assert_close("csi from the Kazusa table", &row[csi], &t["csi"]);
    }

    let mut names = Vec::new();
    for entry in std::fs::read_dir(&plots).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let doc = roxmltree::Document::parse(&text).unwrap_or_else(|e| panic!("{}: not XML: {e}", path.display()));
        assert_eq!(doc.root_element().tag_name().name(), "svg");
        let texts: Vec<String> = doc.descendants().filter_map(|n| n.text()).map(|t| t.trim().to_string()).collect();
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let required: &[&str] = if file == "summary.svg" {
            &["CSI: quartiles and range", "GC content (%) of each sequence", "(codon table)"]
        } else {
            &["sequence", "reference_dna", "window start (codon)"]
        };
        for name in required {
            assert!(texts.iter().any(|t| t == name), "{file} names {name:?}: {texts:?}");
        }
        names.push(file);
    }
    names.sort();
    assert_eq!(names, ["row-0001.svg", "row-0002.svg", "row-0003.svg", "summary.svg"]);
}
