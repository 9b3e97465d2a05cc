//! `predict --method`: upstream's baselines from the same command and CSV format as the model,
//! with the reference statistics of the evaluation fixture.

mod common;
use common::{eval_fixture, run, write_eval_reference};

fn translate(dna: &str) -> String {
    codon_data::translate(dna).unwrap()
}

fn predicted(path: &std::path::Path) -> Vec<String> {
    column(path, "predicted_dna")
}

fn column(path: &std::path::Path, name: &str) -> Vec<String> {
    let mut reader = csv::Reader::from_path(path).unwrap();
    let column = reader.headers().unwrap().iter().position(|h| h == name).unwrap();
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
    // Without --model the model is upstream's published one, from the Hub (here offline and not cached).
    let o = common::command("predict")
        .args(["--protein", "MKV", "--organism", "51"])
        .env("HF_HUB_OFFLINE", "1")
        .env("HF_HUB_CACHE", p("empty-cache"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let message = String::from_utf8_lossy(&o.stderr);
    assert!(message.contains("adibvafa/CodonTransformer@main") && message.contains("--model DIR"), "{message}");
    // Uniform choice needs no reference; every row of a CSV with a bad protein is reported in place.
    std::fs::write(p("in.csv"), "protein_sequence,organism\nMKV,51\nMK#,51\n").unwrap();
    let args = ["--method", "uniform", "--input", &p("in.csv"), "--output", &p("out.csv"), "--allow-failures"];
    let o = run("predict", &args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows = predicted(&dir.path().join("out.csv"));
    assert_eq!(translate(&rows[0]), "MKV_");
    assert!(rows[1].is_empty(), "a failed row has no DNA: {}", rows[1]);
    let errors = column(&dir.path().join("out.csv"), "error");
    assert!(errors[0].is_empty() && errors[1].contains('#'), "{errors:?}");
}

#[test]
fn constraints_are_met_by_reported_synonymous_edits() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    let model = common::bigbird_fixture("");
    let protein = "MALWMRLLPLLALLALWGPDPAAAFVNQHLCGSHLVEALYLVCGERGFFYTPKTRREAEDLQVGQVELGGGPGAGSLQPLALEGSLQKRGIVEQCCTSICSLYQLENYCN";
    let base = ["--model", &model, "--protein", protein, "--organism", "51", "--match-protein"];
    let plain = run("predict", &base);
    assert!(plain.status.success(), "{}", String::from_utf8_lossy(&plain.stderr));
    let plain_dna = String::from_utf8_lossy(&plain.stdout).trim().to_string();
    let flags = [
        "--gc-window",
        "50",
        "--gc-min",
        "30",
        "--gc-max",
        "65",
        "--avoid-sites",
        "BsaI,EcoRI",
        "--max-homopolymer",
        "5",
    ];
    let o = run("predict", &[&base[..], &flags[..]].concat());
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut lines = stdout.lines();
    let dna = lines.next().unwrap().to_string();
    assert_eq!(translate(&dna), format!("{protein}_"), "the protein never changes");
    let gc_ok = dna.as_bytes().windows(50).all(|w| {
        let gc = w.iter().filter(|b| matches!(b, b'G' | b'C')).count() as f64 * 2.0;
        (30.0..=65.0).contains(&gc)
    });
    assert!(gc_ok && !dna.contains("GGTCTC") && !dna.contains("GAGACC") && !dna.contains("GAATTC"), "{dna}");
    let edits: Vec<&str> = stdout.lines().filter(|l| l.starts_with("edit: codon ")).collect();
    let changed = plain_dna.as_bytes().chunks(3).zip(dna.as_bytes().chunks(3)).filter(|(a, b)| a != b).count();
    assert!(changed > 0 && edits.len() >= changed, "the fixture model's DNA needed edits: {stdout}");
    assert!(stdout.contains("log-probability cost: "), "{stdout}");

    // A constraint the protein rules out: exit 1 naming it; --best-effort reports what is left.
    let impossible = [
        "--protein",
        "MWWMW",
        "--organism",
        "51",
        "--match-protein",
        "--gc-window",
        "9",
        "--gc-min",
        "60",
        "--gc-max",
        "100",
    ];
    let o = run("predict", &[&["--model", model.as_str()][..], &impossible[..]].concat());
    assert_eq!(o.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("cannot satisfy \"GC 60-100% in every 9-nt window\"") && stderr.contains("codons 1-"),
        "{stderr}"
    );
    let o = run("predict", &[&["--model", model.as_str(), "--best-effort"][..], &impossible[..]].concat());
    assert!(o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("remaining: GC 60-100%"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );

    // In a batch: edits, cost and remaining columns; known codons (infill) kept through the repair.
    std::fs::write(
        p("in.csv"),
        format!("protein_sequence,organism,dna\n{protein},51,\nMKVLAW,51,ATGNNNGTANNNGCGTGG\n"),
    )
    .unwrap();
    let args = ["--model", &model, "--input", &p("in.csv"), "--output", &p("out.csv"), "--match-protein"];
    let o = run("predict", &[&args[..], &flags[..]].concat());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut reader = csv::Reader::from_path(dir.path().join("out.csv")).unwrap();
    let headers: Vec<String> = reader.headers().unwrap().iter().map(str::to_string).collect();
    assert_eq!(
        headers,
        [
            "protein_sequence",
            "organism",
            "dna",
            "predicted_dna",
            "edits",
            "edit_cost",
            "remaining",
            "error",
            "log_likelihood",
            "mean_log_likelihood",
            "least_likely_codons"
        ]
    );
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(&rows[0][3], dna, "the batch repairs as the single prediction does");
    assert!(rows[0][4].contains("GC 30-65% in every 50-nt window"), "{}", &rows[0][4]);
    let infilled = &rows[1][3];
    assert_eq!((&infilled[..3], &infilled[6..9], &infilled[12..18]), ("ATG", "GTA", "GCGTGG"), "{infilled}");
    assert_eq!(translate(infilled), "MKVLAW_");
}

#[test]
fn infill_errors_name_the_problem() {
    let model = common::bigbird_fixture("");
    for (dna, expected) in [
        ("ATGNNNGTA", "9 nucleotides for a protein of 7 residues"),
        ("ATGNNNGTANNNGCGTGC", "codon 6 (TGC) encodes C but the protein has W there"),
        ("ATGNNNGTANNNGCGTGU", "'U' at position 18"),
    ] {
        let o = run("predict", &["--model", &model, "--protein", "MKVLAW", "--organism", "51", "--dna", dna]);
        assert_eq!(o.status.code(), Some(1), "{dna}");
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(stderr.contains(expected), "{dna}: {stderr}");
    }
}

#[test]
fn a_model_with_its_own_organism_table_predicts_for_its_new_organism() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(common::bigbird_fixture("config.json")).unwrap()).unwrap();
    config["type_vocab_size"] = serde_json::json!(165);
    std::fs::write(p("config.json"), config.to_string()).unwrap();
    let o = run("init-model", &["--output", &p("model"), "--config", &p("config.json")]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut names: Vec<String> = codon_model::ORGANISMS.iter().map(|n| n.to_string()).collect();
    names.push("Nova organism".into());
    std::fs::write(dir.path().join("model/organisms.json"), serde_json::to_string(&names).unwrap()).unwrap();

    for organism in ["Nova organism", "164"] {
        let o =
            run("predict", &["--model", &p("model"), "--protein", "MKV", "--organism", organism, "--match-protein"]);
        assert!(o.status.success(), "{organism}: {}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(translate(String::from_utf8_lossy(&o.stdout).trim()), "MKV_");
    }
    let o = run("predict", &["--model", &p("model"), "--protein", "MKV", "--organism", "Nova organsm"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("Did you mean: Nova organism"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = run("predict", &["--model", &p("model"), "--list-organisms"]);
    assert!(String::from_utf8_lossy(&o.stdout).lines().any(|l| l == "164\tNova organism"));
    // Without the table the new id is unknown; a table with more organisms than rows is refused.
    let o = run("predict", &["--model", &common::bigbird_fixture(""), "--protein", "MKV", "--organism", "164"]);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("Invalid organism ID: 164"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    names.push("Another organism".into());
    std::fs::write(dir.path().join("model/organisms.json"), serde_json::to_string(&names).unwrap()).unwrap();
    let o = run("predict", &["--model", &p("model"), "--protein", "MKV", "--organism", "Nova organism"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("a token type per organism (166)"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
