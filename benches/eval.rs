//! `eval`: upstream's evaluation metrics per sequence of 1,000 codons, one core, in sequences/s:
//! each metric alone and all of them (`OrganismReference::evaluate`).
//!
//! ```text
//! cargo bench --bench eval
//! ```
//! The side-by-side comparison with upstream's Python is `benches/compare_upstream_eval.py`.

use codon_eval::metrics::{cfd, complexity, gc_content, min_max_profile};
use codon_eval::{CodonCounts, Dna, MetricOptions, OrganismReference};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// ATG, `codons - 2` random sense codons drawn with a skewed per-codon weight, TAA.
fn sequences(n: usize, codons: usize, seed: u64) -> Vec<Dna> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let sense: Vec<&str> =
        (0..64).map(codon_eval::genetic_code::codon_text).filter(|c| !matches!(*c, "TAA" | "TAG" | "TGA")).collect();
    let weights: Vec<f64> = sense.iter().map(|_| rng.random::<f64>().powi(3) + 0.02).collect();
    let total: f64 = weights.iter().sum();
    (0..n)
        .map(|_| {
            let mut dna = String::from("ATG");
            for _ in 0..codons - 2 {
                let mut x = rng.random::<f64>() * total;
                let i = weights.iter().position(|w| {
                    x -= w;
                    x < 0.0
                });
                dna.push_str(sense[i.unwrap_or(sense.len() - 1)]);
            }
            dna.push_str("TAA");
            Dna::parse(&dna).expect("generated DNA")
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let reference =
        OrganismReference::from_counts(&sequences(200, 300, 1).iter().collect::<CodonCounts>()).expect("reference");
    let dna = sequences(8, 1000, 2);
    let options = MetricOptions::default();
    let mut group = c.benchmark_group("metrics-1000-codons");
    group.sample_size(20);
    group.throughput(Throughput::Elements(dna.len() as u64));
    group.bench_function("all", |b| {
        b.iter(|| dna.iter().map(|d| reference.evaluate(d, None, &options).expect("metrics").csi).sum::<f64>())
    });
    group.bench_function("csi", |b| b.iter(|| dna.iter().map(|d| reference.weights.csi(d)).sum::<f64>()));
    group.bench_function("gc", |b| b.iter(|| dna.iter().map(|d| gc_content(d.as_str())).sum::<f64>()));
    group.bench_function("cfd", |b| {
        b.iter(|| dna.iter().map(|d| cfd(d, &reference.frequencies, 0.3).expect("cfd")).sum::<f64>())
    });
    group.bench_function("minmax", |b| {
        b.iter(|| {
            dna.iter().map(|d| min_max_profile(d, &reference.frequencies, 18).expect("minmax").len()).sum::<usize>()
        })
    });
    group.bench_function("complexity", |b| b.iter(|| dna.iter().map(|d| complexity(d.as_str())).sum::<f64>()));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
