//! `predict --method`: upstream's baselines from the same command and CSV format as the model,
//! with the reference statistics of the evaluation fixture.

mod common;
use common::{eval_fixture, run, write_eval_reference};

fn translate(dna: &str) -> String {
    codon_ascend::data::translate(dna).unwrap()
}

fn predicted(path: &std::path::Path) -> Vec<String> {
    let mut reader = csv::Reader::from_path(path).unwrap();
    let column = reader.headers().unwrap().iter().position(|h| h == "predicted_dna").unwrap();
    reader.records().map(|r| r.unwrap()[column].to_string()).collect()
}

#[test]
fn baselines_are_synonyms_reproducible_and_the_high_frequency_one_is_upstreams() {
    let fixture = eval_fixture();
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    write_eval_reference(&fixture, dir.path().join("train.jsonl").as_path());
    let mut input = String::from("protein_sequence,organism\n");
    let mut upstream = Vec::new();
    for (name, organism) in fixture["organisms"].as_object().unwrap() {
        let baseline = &organism["baseline"];
        // The fixture's protein ends with `_`; predict appends it when missing, so give it without.
        input.push_str(&format!("{},{name}\n", baseline["protein"].as_str().unwrap().trim_end_matches('_')));
        upstream.push((
            baseline["protein"].as_str().unwrap().to_string(),
            baseline["high_frequency_choice"].as_str().unwrap().to_string(),
        ));
    }
    std::fs::write(p("proteins.csv"), input).unwrap();

    let predict = |method: &str, seed: &str, out: &str| {
        let args = [
            "--method",
            method,
            "--reference",
            &p("train.jsonl"),
            "--input",
            &p("proteins.csv"),
            "--output",
            &p(out),
            "--seed",
            seed,
        ];
        let o = run("predict", &args);
        assert!(o.status.success(), "{method}: {}", String::from_utf8_lossy(&o.stderr));
        let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(
            stderr.contains("predicted 3/3 proteins") && stderr.contains("proteins/s"),
            "{method}: progress: {stderr}"
        );
        predicted(&dir.path().join(out))
    };
    let high = predict("high-frequency", "0", "hf.csv");
    for (dna, (protein, expected)) in high.iter().zip(&upstream) {
        assert_eq!(dna, expected, "{protein}: upstream's get_high_frequency_choice_sequence");
    }
    assert_eq!(predict("high-frequency", "9", "hf2.csv"), high, "deterministic");

    for method in ["background", "uniform"] {
        let a = predict(method, "3", "a.csv");
        assert_eq!(predict(method, "3", "b.csv"), a, "{method}: same seed, same DNA");
        assert_ne!(predict(method, "4", "c.csv"), a, "{method}: another seed, another draw");
        for (dna, (protein, _)) in a.iter().zip(&upstream) {
            assert_eq!(&translate(dna), protein, "{method}: the DNA encodes the protein");
        }
    }
}

#[test]
fn baselines_refuse_what_they_cannot_do() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    let o = run("predict", &["--method", "high-frequency", "--protein", "MKV", "--organism", "51"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--reference"), "{}", String::from_utf8_lossy(&o.stderr));
    let o = run("predict", &["--protein", "MKV", "--organism", "51"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--method model needs --model"));
    // Uniform choice needs no reference; every row of a CSV with a bad protein is reported in place.
    std::fs::write(p("in.csv"), "protein_sequence,organism\nMKV,51\nMK#,51\n").unwrap();
    let o = run("predict", &["--method", "uniform", "--input", &p("in.csv"), "--output", &p("out.csv")]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows = predicted(&dir.path().join("out.csv"));
    assert_eq!(translate(&rows[0]), "MKV_");
    assert!(rows[1].starts_with("ERROR: ") && rows[1].contains('#'), "{}", rows[1]);
}
