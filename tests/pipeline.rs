//! The data pipeline end to end on the bundled demo data.

mod common;

use codon_data::{
    prepare, DataLoader, JsonlDataset, LoaderConfig, MalformedPolicy, MlmCollator, PrepareOptions, TrainingRecord,
};
use codon_model::{vocab, CodonTokenizer};

fn read_records(path: &std::path::Path) -> Vec<TrainingRecord> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn demo_csv_prepares_with_reported_drops() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("train.jsonl");
    let report = prepare(&common::demo_data_dir().join("genes.csv"), &out, &PrepareOptions::default()).unwrap();
    assert_eq!((report.read, report.written, report.dropped_total()), (40, 36, 4));
    assert!(report.dropped.contains_key("Invalid organism name: Homo sapien."));
    let records = read_records(&out);
    assert_eq!(records.len(), 36);
    let organisms: std::collections::BTreeSet<u32> = records.iter().map(|r| r.organism).collect();
    assert_eq!(organisms.into_iter().collect::<Vec<_>>(), [0, 2, 51, 59, 77, 120]);
    for r in &records {
        // Every merged token pairs an amino acid with a codon that encodes it, ending with a stop.
        let tokens: Vec<&str> = r.codons.split(' ').collect();
        assert!(tokens.last().unwrap().starts_with("__T"), "{}", r.idx);
        for t in tokens {
            let (aa, codon) = t.split_at(1);
            let aa = aa.chars().next().unwrap();
            assert_eq!(vocab::translate_codon(&codon.as_bytes()[1..]), Some(aa), "record {} token {t}", r.idx);
        }
    }
}

#[test]
fn demo_fasta_prepares_with_organisms_from_headers() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("train.jsonl");
    let report = prepare(&common::demo_data_dir().join("genes.fasta"), &out, &PrepareOptions::default()).unwrap();
    assert_eq!((report.read, report.written), (12, 12));
    // The CSV and the FASTA hold the same first twelve records.
    let csv_out = dir.path().join("csv.jsonl");
    prepare(&common::demo_data_dir().join("genes.csv"), &csv_out, &PrepareOptions::default()).unwrap();
    assert_eq!(read_records(&out), read_records(&csv_out)[..12]);
}

#[test]
fn loader_runs_over_prepared_demo_data() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("train.jsonl");
    prepare(&common::demo_data_dir().join("genes.csv"), &out, &PrepareOptions::default()).unwrap();
    let dataset = JsonlDataset::open(&out, MalformedPolicy::Error).unwrap();
    let config = LoaderConfig { batch_size: 5, num_workers: 2, bucket_batches: Some(2), ..Default::default() };
    let loader = DataLoader::new(dataset, MlmCollator::new(CodonTokenizer::new().unwrap()), config).unwrap();
    assert_eq!(loader.batches_per_epoch(), 8);
    let batches: Vec<_> = loader.epoch(0).map(Result::unwrap).collect();
    assert_eq!(batches.len(), 8);
    assert_eq!(batches.iter().map(|b| b.encoding.batch_size).sum::<usize>(), 36);
    for b in &batches {
        assert_eq!(b.encoding.input_ids.len(), b.encoding.batch_size * b.encoding.seq_len);
        assert!(b.labels.iter().any(|&l| l >= 0));
    }
}
