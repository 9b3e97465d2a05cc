//! What `predict` writes and reads besides CSV: scores users can rank by, ranked samples, FASTA
//! and JSON Lines outputs, FASTA inputs, `--score` of existing DNA, and `evaluate` on FASTA. The
//! model is the tiny fixture (random weights), so the tests check structure and consistency; the
//! score's definition is checked against hand-computed values in codon-model's tests.

mod common;
use common::{bigbird_fixture, run};

const ECOLI: &str = "Escherichia coli general";

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn read_csv(path: &std::path::Path) -> (Vec<String>, Vec<Vec<String>>) {
    let mut r = csv::Reader::from_path(path).unwrap();
    let headers = r.headers().unwrap().iter().map(str::to_string).collect();
    (headers, r.records().map(|rec| rec.unwrap().iter().map(str::to_string).collect()).collect())
}

fn column(headers: &[String], name: &str) -> usize {
    headers.iter().position(|h| h == name).unwrap_or_else(|| panic!("no {name} in {headers:?}"))
}

/// FASTA entries: (header, sequence).
fn fasta(path: &std::path::Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut entries: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        match line.strip_prefix('>') {
            Some(h) => entries.push((h.to_string(), String::new())),
            None => entries.last_mut().unwrap().1.push_str(line),
        }
    }
    entries
}

#[test]
fn samples_are_ranked_by_log_likelihood_in_csv_fasta_and_jsonl() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    std::fs::write(p("in.fasta"), ">ins [organism=Homo sapiens]\nMALWMRLLPLL\nALLALW\n>gfp\nMSKGEELFTGVV\n").unwrap();
    let model = bigbird_fixture("");
    let sampling = ["--temperature", "1.0", "--num-sequences", "3", "--match-protein", "--seed", "7"];
    for out in ["pred.csv", "pred.fasta", "pred.jsonl"] {
        let (input, output) = (p("in.fasta"), p(out));
        let mut args = vec!["--model", &model, "--input", &input, "--organism", ECOLI, "--output", &output];
        args.extend(sampling);
        if out.ends_with("jsonl") {
            args.push("--per-codon");
        }
        let o = run("predict", &args);
        assert!(o.status.success(), "{out}: {}", stderr(&o));
        assert!(String::from_utf8_lossy(&o.stdout).contains("best first by log-likelihood"), "{out}");
    }
    // CSV: the FASTA's names and organisms as columns, three rows per protein, best first.
    let (headers, rows) = read_csv(&dir.path().join("pred.csv"));
    let (name, organism, ll) =
        (column(&headers, "name"), column(&headers, "organism"), column(&headers, "log_likelihood"));
    assert_eq!(rows.len(), 6);
    assert_eq!(
        rows.iter().map(|r| r[organism].as_str()).collect::<Vec<_>>()[..4],
        ["Homo sapiens", "Homo sapiens", "Homo sapiens", ECOLI]
    );
    for protein in rows.chunks(3) {
        let ll: Vec<f64> = protein.iter().map(|r| r[ll].parse().unwrap()).collect();
        assert!(ll.windows(2).all(|w| w[0] >= w[1]) && ll[0] > ll[2], "{} not best first: {ll:?}", protein[0][name]);
        let mean: f64 = protein[0][column(&headers, "mean_log_likelihood")].parse().unwrap();
        let codons = protein[0][column(&headers, "predicted_dna")].len() / 3;
        assert!((mean * codons as f64 - ll[0]).abs() < 1e-2 * codons as f64, "mean {mean} × {codons} vs {}", ll[0]);
        assert_eq!(protein[0][column(&headers, "least_likely_codons")].split(';').count(), 5);
    }
    // FASTA: the same sequences and scores, the rank and organism in each header.
    let entries = fasta(&dir.path().join("pred.fasta"));
    assert_eq!(entries.len(), 6);
    for (row, (header, dna)) in rows.iter().zip(&entries) {
        assert_eq!(dna, &row[column(&headers, "predicted_dna")]);
        assert!(header.starts_with(&row[name]), "{header}");
        assert!(header.contains(&format!("[organism={}]", row[organism])), "{header}");
        assert!(header.contains(&format!("log_likelihood={}", row[ll])), "{header} vs {}", row[ll]);
    }
    assert!(entries[1].0.contains("rank=2"), "{}", entries[1].0);
    // JSON Lines with --per-codon: each position's allowed codons (the synonyms, under
    // --match-protein) with probabilities summing to 1, and the chosen codons' logs summing to the score.
    let text = std::fs::read_to_string(dir.path().join("pred.jsonl")).unwrap();
    let objects: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(objects.len(), 6);
    for (object, row) in objects.iter().zip(&rows) {
        let dna = object["predicted_dna"].as_str().unwrap();
        assert_eq!(dna, row[column(&headers, "predicted_dna")]);
        let per_codon = object["codon_probabilities"].as_array().unwrap();
        assert_eq!(per_codon.len(), dna.len() / 3);
        let mut ll = 0.0;
        for (k, position) in per_codon.iter().enumerate() {
            let probabilities = position.as_object().unwrap();
            let total: f64 = probabilities.values().map(|v| v.as_f64().unwrap()).sum();
            assert!((total - 1.0).abs() < 1e-6, "position {k}: {total}");
            let chosen = &dna[3 * k..3 * k + 3];
            let aa = codon_data::translate(chosen).unwrap();
            assert!(probabilities.keys().all(|c| codon_data::translate(c).unwrap() == aa), "{probabilities:?}");
            ll += probabilities[chosen].as_f64().unwrap().ln();
        }
        assert!((ll - object["log_likelihood"].as_f64().unwrap()).abs() < 1e-3, "{ll} vs {}", object["log_likelihood"]);
    }
}

#[test]
fn score_gives_a_sequence_the_score_its_prediction_had() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    std::fs::write(p("in.csv"), format!("protein_sequence,organism\nMKVLAWQRST,{ECOLI}\nMSKGEELF,Homo sapiens\n"))
        .unwrap();
    let model = bigbird_fixture("");
    let o =
        run("predict", &["--model", &model, "--input", &p("in.csv"), "--output", &p("pred.csv"), "--match-protein"]);
    assert!(o.status.success(), "{}", stderr(&o));
    // predict's output is scored as it is (its predicted_dna column), and a FASTA of the same DNA
    // scores the same.
    let o = run(
        "predict",
        &["--model", &model, "--score", &p("pred.csv"), "--output", &p("scores.csv"), "--match-protein"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let (ph, predicted) = read_csv(&dir.path().join("pred.csv"));
    let (sh, scored) = read_csv(&dir.path().join("scores.csv"));
    let mut fasta_input = String::new();
    for (a, b) in predicted.iter().zip(&scored) {
        assert_eq!(a[column(&ph, "log_likelihood")], b[column(&sh, "log_likelihood")]);
        fasta_input.push_str(&format!(
            ">s [organism={}]\n{}\n",
            a[column(&ph, "organism")],
            a[column(&ph, "predicted_dna")]
        ));
    }
    std::fs::write(p("seqs.fa"), fasta_input).unwrap();
    let o = run("predict", &["--model", &model, "--score", &p("seqs.fa"), "--match-protein"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "row,log_likelihood,mean_log_likelihood,least_likely_codons,error");
    for (line, row) in lines[1..].iter().zip(&predicted) {
        assert_eq!(line.split(',').nth(1), Some(row[column(&ph, "log_likelihood")].as_str()), "{line}");
    }
    // Not a coding sequence: its own error, and a non-zero exit.
    std::fs::write(p("bad.csv"), format!("dna,organism\nATGTAAGCT,{ECOLI}\nATGAAAGC,{ECOLI}\n")).unwrap();
    let o = run("predict", &["--model", &model, "--score", &p("bad.csv")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("stop codon TAA inside") && stderr(&o).contains("not a whole number of codons"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn fasta_proteins_need_an_organism_and_per_codon_needs_jsonl() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    std::fs::write(p("in.fasta"), ">tagged [organism=Homo sapiens]\nMKV\n>untagged\nMAV\n").unwrap();
    let model = bigbird_fixture("");
    let o = run("predict", &["--model", &model, "--input", &p("in.fasta"), "--output", &p("o.csv")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("entry untagged has no [organism=NAME] tag"), "{}", stderr(&o));
    let o = run(
        "predict",
        &["--model", &model, "--input", &p("in.fasta"), "--organism", ECOLI, "--output", &p("o.csv"), "--per-codon"],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--per-codon") && stderr(&o).contains(".jsonl"), "{}", stderr(&o));
    assert!(!dir.path().join("o.csv").exists());
}

#[test]
fn evaluate_reads_fasta_as_it_reads_csv() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    let o = run("prepare-data", &["--input", &common::demo("genes.csv"), "--output", &p("train.jsonl")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let genes =
        [("a", "ATGGCTGCTAAAGGTCTGTAA", "Escherichia coli general"), ("b", "ATGAAGAAGCTGCTGGCCTGA", "Homo sapiens")];
    let mut csv_text = String::from("name,dna,organism\n");
    let mut fasta_text = String::new();
    for (name, dna, organism) in genes {
        csv_text.push_str(&format!("{name},{dna},{organism}\n"));
        fasta_text.push_str(&format!(">{name} some description [organism={organism}]\n{}\n{}\n", &dna[..9], &dna[9..]));
    }
    std::fs::write(p("in.csv"), csv_text).unwrap();
    std::fs::write(p("in.fasta"), fasta_text).unwrap();
    for input in ["in.csv", "in.fasta"] {
        let o = run(
            "evaluate",
            &["--input", &p(input), "--reference", &p("train.jsonl"), "--output", &p(&format!("{input}.metrics.csv"))],
        );
        assert!(o.status.success(), "{input}: {}", stderr(&o));
    }
    let (a_headers, a_rows) = read_csv(&dir.path().join("in.csv.metrics.csv"));
    let (b_headers, b_rows) = read_csv(&dir.path().join("in.fasta.metrics.csv"));
    assert_eq!(a_headers, b_headers);
    assert_eq!(a_rows, b_rows);
    let (csi, error) = (column(&a_headers, "csi"), column(&a_headers, "error"));
    assert!(a_rows.iter().all(|r| r[error].is_empty() && r[csi].parse::<f64>().is_ok()), "{a_rows:?}");
}
