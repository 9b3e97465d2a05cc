//! `data`: tokenize + mask + pad throughput of the masked-LM collator, in tokens/s.
//!
//! The workload is 96 demo-like records of 150..900 codons per batch, as in the
//! fixture README's collator measurement. `collate/1-thread` is one core; `collate/N-threads`
//! collates independent batches on N rayon threads to show the scaling.
//!
//! ```text
//! cargo bench --bench data
//! ```

use codon_data::{MlmCollator, TrainingRecord};
use codon_model::{vocab::VOCAB, CodonTokenizer};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

fn records(n: usize, seed: u64) -> Vec<TrainingRecord> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n)
        .map(|i| {
            let len = rng.random_range(150..900);
            let mut toks: Vec<String> = (0..len).map(|_| VOCAB[rng.random_range(26..90)].to_uppercase()).collect();
            toks.push("__TAA".into());
            TrainingRecord { idx: i as u64, codons: toks.join(" "), organism: (i % 164) as u32 }
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let collator = MlmCollator::new(CodonTokenizer::new().expect("tokenizer"));
    let batches: Vec<Vec<TrainingRecord>> = (0..8).map(|s| records(96, s)).collect();
    let tokens_per_batch: usize = batches[0].iter().map(|r| r.num_tokens() + 2).sum();

    let mut group = c.benchmark_group("collate");
    group.sample_size(20);
    group.throughput(Throughput::Elements(tokens_per_batch as u64));
    group.bench_function("1-thread", |b| {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        b.iter(|| collator.collate(&batches[0], &mut rng).expect("collate"))
    });
    // The library path: the same batch through the `tokenizers` pipeline, for comparison.
    group.bench_function("1-thread-tokenizers-pipeline", |b| {
        let tok = collator.tokenizer();
        b.iter(|| batches[0].iter().map(|r| tok.encode_with_library(&r.codons).expect("encode").len()).sum::<usize>())
    });
    group.finish();

    let total_tokens: usize = batches.iter().flatten().map(|r| r.num_tokens() + 2).sum();
    let mut group = c.benchmark_group("collate-parallel");
    group.sample_size(20);
    group.throughput(Throughput::Elements(total_tokens as u64));
    for threads in [1, 2] {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool");
        group.bench_with_input(BenchmarkId::new("threads", threads), &threads, |b, _| {
            b.iter(|| {
                pool.install(|| {
                    batches
                        .par_iter()
                        .enumerate()
                        .map(|(i, recs)| {
                            let mut rng = ChaCha8Rng::seed_from_u64(i as u64);
                            collator.collate(recs, &mut rng).expect("collate").encoding.input_ids.len()
                        })
                        .sum::<usize>()
                })
            })
        });
    }
    group.finish();

    // Control: pure compute with no memory traffic, for this machine's 2-thread ceiling.
    let mut group = c.benchmark_group("control-compute");
    group.sample_size(20);
    for threads in [1, 2] {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool");
        group.bench_with_input(BenchmarkId::new("threads", threads), &threads, |b, _| {
            b.iter(|| {
                pool.install(|| {
                    (0..8u64)
                        .into_par_iter()
                        .map(|i| {
                            let mut rng = ChaCha8Rng::seed_from_u64(i);
                            (0..2_000_000).fold(0u32, |acc, _| acc ^ rng.next_u32())
                        })
                        .reduce(|| 0, |a, b| a ^ b)
                })
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
