//! The repair on random proteins and random constraint sets, and its edge cases: a site across a
//! codon boundary, a palindromic site, constraints that conflict.

use codon_design::{repair, violations, Constraint, DesignError, RepairOptions};
use codon_vocab::vocab::{codon_at, codon_index, translate_codon};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const AMINO_ACIDS: &[u8] = b"ACDEFGHIKLMNPQRSTVWY";

fn codons_of(aa: char) -> Vec<usize> {
    (0..64).filter(|&c| translate_codon(&codon_at(c).unwrap()) == Some(aa)).collect()
}

fn translate(dna: &str) -> String {
    dna.as_bytes().chunks(3).map(|c| translate_codon(c).unwrap()).collect()
}

/// A random protein, a DNA drawn from random per-codon scores (the argmax, as the model's
/// deterministic choice), and those scores as log-probabilities.
fn random_case(rng: &mut ChaCha8Rng, residues: usize) -> (String, String, Vec<[f32; 64]>) {
    let mut protein: String = (0..residues - 1).map(|_| AMINO_ACIDS[rng.random_range(0..20)] as char).collect();
    protein.insert(0, 'M');
    let mut dna = String::new();
    let mut scores = Vec::new();
    for aa in protein.chars() {
        let mut row = [0f32; 64];
        for v in row.iter_mut() {
            *v = -rng.random_range(0.0f32..8.0);
        }
        let best = codons_of(aa).into_iter().max_by(|&a, &b| row[a].total_cmp(&row[b])).unwrap();
        dna.push_str(std::str::from_utf8(&codon_at(best).unwrap()).unwrap());
        scores.push(row);
    }
    (protein, dna, scores)
}

fn check_edits(before: &str, after: &str, edits: &[codon_design::Edit], scores: &[[f32; 64]]) {
    for e in edits {
        assert_eq!(translate(&e.old), translate(&e.new), "edit {e:?} is synonymous");
        let (old, new) = (codon_index(e.old.as_bytes()).unwrap(), codon_index(e.new.as_bytes()).unwrap());
        assert_eq!(e.cost, f64::from(scores[e.codon][old]) - f64::from(scores[e.codon][new]));
    }
    let changed = before.as_bytes().chunks(3).zip(after.as_bytes().chunks(3)).filter(|(a, b)| a != b).count();
    assert!(changed <= edits.len(), "every change is an edit");
}

#[test]
fn random_proteins_and_constraints_translate_back_and_meet_every_constraint() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let sites = ["BsaI", "BsmBI", "EcoRI", "BamHI", "NotI", "XhoI", "SapI", "HindIII"];
    let mut repaired = 0;
    for case in 0..60 {
        let residues = rng.random_range(20..200);
        let (protein, dna, scores) = random_case(&mut rng, residues);
        let mut constraints = Constraint::sites(&sites[..rng.random_range(1..sites.len())].join(",")).unwrap();
        if rng.random_bool(0.5) {
            constraints.push(Constraint::gc_window(rng.random_range(30..80), 25.0, 70.0).unwrap());
        }
        if rng.random_bool(0.5) {
            constraints.push(Constraint::MaxHomopolymer(rng.random_range(5..8)));
        }
        if rng.random_bool(0.3) {
            constraints.push(Constraint::MaxRepeat(rng.random_range(14..20)));
        }
        let planted = dna;
        let result =
            repair(&planted, &scores, &constraints, &RepairOptions { best_effort: true, ..Default::default() })
                .unwrap();
        assert_eq!(translate(&result.dna), protein, "case {case}: the protein never changes");
        check_edits(&planted, &result.dna, &result.edits, &scores);
        assert_eq!(result.remaining, violations(&constraints, result.dna.as_bytes()), "case {case}");
        match repair(&planted, &scores, &constraints, &RepairOptions::default()) {
            Ok(strict) => {
                assert!(
                    violations(&constraints, strict.dna.as_bytes()).is_empty(),
                    "case {case}: every constraint met"
                );
                assert_eq!(strict, result, "case {case}: best effort changes nothing when all is satisfiable");
                repaired += usize::from(!strict.edits.is_empty());
            }
            Err(e) => assert!(!result.remaining.is_empty(), "case {case}: {e} but best effort left nothing"),
        }
    }
    assert!(repaired > 10, "cases that needed edits: {repaired}");
}

#[test]
fn a_site_across_a_codon_boundary_is_removed_by_the_cheapest_synonym() {
    // M K V S L: ATG AAG GTC TCA CTG holds GGTCTC (BsaI) across codons 2-4 (G|GTC|TC).
    let dna = "ATGAAGGTCTCACTG";
    let mut scores = vec![[-10f32; 64]; 5];
    for (i, c) in dna.as_bytes().chunks(3).enumerate() {
        scores[i][codon_index(c).unwrap()] = -0.1;
    }
    // Cheapest alternatives: GTG for V (cost 0.4), anything else costs 9.9.
    scores[2][codon_index(b"GTG").unwrap()] = -0.5;
    let bsai = Constraint::sites("BsaI").unwrap();
    let r = repair(dna, &scores, &bsai, &RepairOptions::default()).unwrap();
    assert_eq!(r.dna, "ATGAAGGTGTCACTG");
    assert_eq!(r.edits.len(), 1);
    assert_eq!((r.edits[0].codon, r.edits[0].old.as_str(), r.edits[0].new.as_str()), (2, "GTC", "GTG"));
    assert!((r.edits[0].cost - 0.4).abs() < 1e-6 && (r.cost - 0.4).abs() < 1e-6);
    assert!(r.edits[0].reason.contains("BsaI site GGTCTC at nucleotides 6-11"), "{}", r.edits[0].reason);
}

#[test]
fn a_palindromic_site_and_the_reverse_strand() {
    // E F: GAA TTC is EcoRI (GAATTC, its own reverse complement).
    let scores = vec![[-1f32; 64]; 2];
    let r = repair("GAATTC", &scores, &Constraint::sites("EcoRI").unwrap(), &RepairOptions::default()).unwrap();
    assert!(violations(&Constraint::sites("EcoRI").unwrap(), r.dna.as_bytes()).is_empty());
    assert_eq!(translate(&r.dna), "EF");
    // GAGACC is BsaI on the reverse strand: E T.
    let r = repair("GAGACC", &scores, &Constraint::sites("BsaI").unwrap(), &RepairOptions::default()).unwrap();
    assert_ne!(r.dna, "GAGACC");
    assert_eq!(translate(&r.dna), "ET");
}

#[test]
fn conflicting_constraints_name_the_one_that_cannot_be_met() {
    // W M W: TGG ATG TGG has no synonyms, so a GC window of at least 60 % cannot be met.
    let scores = vec![[-1f32; 64]; 3];
    let gc = vec![Constraint::gc_window(9, 60.0, 100.0).unwrap()];
    let err = repair("TGGATGTGG", &scores, &gc, &RepairOptions::default()).unwrap_err();
    assert!(matches!(&err, DesignError::Unsatisfiable { first_codon: 1, last_codon: 3, .. }), "{err}");
    assert!(err.to_string().contains("GC 60-100% in every 9-nt window"), "{err}");
    let r = repair("TGGATGTGG", &scores, &gc, &RepairOptions { best_effort: true, ..Default::default() }).unwrap();
    assert_eq!((r.dna.as_str(), r.edits.len(), r.remaining.len()), ("TGGATGTGG", 0, 1));

    // A A A: GCN codons; avoiding "GC" conflicts with the protein itself, avoiding "GCGGC" does not.
    let both = vec![Constraint::motif("GCGGC").unwrap(), Constraint::MaxHomopolymer(2)];
    let r = repair("GCGGCGGCG", &scores, &both, &RepairOptions::default()).unwrap();
    assert!(violations(&both, r.dna.as_bytes()).is_empty(), "{}", r.dna);
    let impossible = vec![Constraint::motif("GC").unwrap()];
    assert!(repair("GCGGCGGCG", &scores, &impossible, &RepairOptions::default()).is_err());
}
