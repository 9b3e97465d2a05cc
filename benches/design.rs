//! `design`: the constraint repair on a 1,000-residue protein with five restriction sites and a
//! GC window (plus homopolymer and repeat limits), from scores that favour GC-rich codons so that
//! many windows start out too GC-rich. The issue's target: well under a second added per protein.
//!
//! ```text
//! cargo bench --bench design
//! ```

use codon_design::{repair, violations, Constraint, RepairOptions};
use codon_model::vocab::{codon_at, translate_codon};
use criterion::{criterion_group, criterion_main, Criterion};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A protein's argmax DNA under random scores tilted towards G and C by `gc_bias` per G/C base.
fn case(residues: usize, gc_bias: f32, seed: u64) -> (String, Vec<[f32; 64]>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let amino_acids = b"ACDEFGHIKLMNPQRSTVWY";
    let mut dna = String::new();
    let mut scores = Vec::new();
    for i in 0..residues {
        let aa = if i == 0 { 'M' } else { amino_acids[rng.random_range(0..20)] as char };
        let mut row = [0f32; 64];
        for (c, v) in row.iter_mut().enumerate() {
            let gc = codon_at(c).unwrap().iter().filter(|b| matches!(b, b'G' | b'C')).count() as f32;
            *v = -rng.random_range(0.0f32..4.0) + gc_bias * gc - 3.0 * gc_bias;
        }
        let best = (0..64)
            .filter(|&c| translate_codon(&codon_at(c).unwrap()) == Some(aa))
            .max_by(|&a, &b| row[a].total_cmp(&row[b]))
            .unwrap();
        dna.push_str(std::str::from_utf8(&codon_at(best).unwrap()).unwrap());
        scores.push(row);
    }
    (dna, scores)
}

fn bench(c: &mut Criterion) {
    let mut constraints = Constraint::sites("BsaI,BsmBI,EcoRI,BamHI,NotI").unwrap();
    constraints.push(Constraint::gc_window(50, 30.0, 65.0).unwrap());
    constraints.push(Constraint::MaxHomopolymer(6));
    constraints.push(Constraint::MaxRepeat(16));
    let options = RepairOptions { best_effort: true, ..Default::default() };
    let mut group = c.benchmark_group("repair-1000-residues");
    group.sample_size(10);
    for (name, bias) in [("model-like", 0.0f32), ("gc-rich", 1.5)] {
        let (dna, scores) = case(1000, bias, 3);
        let before = violations(&constraints, dna.as_bytes()).len();
        let after = repair(&dna, &scores, &constraints, &options).unwrap();
        eprintln!("{name}: {before} violations before, {} edits, {} left", after.edits.len(), after.remaining.len());
        group.bench_function(name, |b| b.iter(|| repair(&dna, &scores, &constraints, &options).unwrap().edits.len()));
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
