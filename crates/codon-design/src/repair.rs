//! Repair a coding sequence until it meets its constraints, by synonymous codon changes ranked
//! by the model's own log-probabilities.
//!
//! While a violation is left (the leftmost first), every synonymous change of one codon inside
//! its region is tried, then every pair when no single change helps. A change is accepted when it
//! lowers that constraint's severity and raises no constraint's; among those, the one costing the
//! least log-probability wins. Severities are whole numbers, so this reaches a fixed point.

use std::collections::HashSet;

use codon_vocab::vocab::{codon_index, translate_codon};

use crate::constraints::{violations, Constraint, KmerCounts, Violation};
use crate::error::{DesignError, Result};

/// How hard to look, and what to do when a constraint cannot be met.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairOptions {
    /// Keep going past an unsatisfiable violation (it is reported in [`Repair::remaining`]).
    pub best_effort: bool,
    /// Pairs of changes are tried only in regions of at most this many codons.
    pub max_pair_codons: usize,
}

impl Default for RepairOptions {
    fn default() -> Self {
        Self { best_effort: false, max_pair_codons: 12 }
    }
}

/// One synonymous codon change.
#[derive(Debug, Clone, PartialEq)]
pub struct Edit {
    /// 0-based codon index (nucleotides `3·codon .. 3·codon+3`).
    pub codon: usize,
    /// The codon before.
    pub old: String,
    /// The codon after (same amino acid).
    pub new: String,
    /// The violation it removes or reduces.
    pub reason: String,
    /// Log-probability given up: score(old) − score(new).
    pub cost: f64,
}

/// The repaired sequence and what was done to it.
#[derive(Debug, Clone, PartialEq)]
pub struct Repair {
    /// The DNA after every edit.
    pub dna: String,
    /// The edits, in the order they were made.
    pub edits: Vec<Edit>,
    /// Total log-probability given up.
    pub cost: f64,
    /// Violations left (only with [`RepairOptions::best_effort`]).
    pub remaining: Vec<Violation>,
}

/// The codon of an index (A<C<G<T order).
fn codon_bytes(index: usize) -> [u8; 3] {
    codon_vocab::vocab::codon_at(index).unwrap_or(*b"NNN")
}

fn codon_text(index: usize) -> String {
    String::from_utf8_lossy(&codon_bytes(index)).into_owned()
}

/// The other codons of a codon's amino acid that the model may choose at that position.
fn synonyms(codon: usize, scores: &[f32; 64]) -> Vec<usize> {
    let aa = translate_codon(&codon_bytes(codon));
    (0..64).filter(|&c| c != codon && scores[c].is_finite() && translate_codon(&codon_bytes(c)) == aa).collect()
}

/// A set of codon changes (codon, new codon index) and its cost.
type Candidate = (f64, Vec<(usize, usize)>);

/// Keep the cheaper of `best` and a new candidate; a codon the model may not choose (score −∞)
/// makes a candidate infinitely costly, and such a candidate is never kept.
fn keep_cheaper(best: &mut Option<Candidate>, cost: f64, changes: Vec<(usize, usize)>) {
    if cost.is_finite() && best.as_ref().is_none_or(|(b, _)| cost < *b) {
        *best = Some((cost, changes));
    }
}

/// Repair `dna` (whole A/C/G/T codons) given `scores[i][c]`, the model's log-probability of codon
/// index `c` (A<C<G<T order) at codon `i`.
pub fn repair(dna: &str, scores: &[[f32; 64]], constraints: &[Constraint], options: &RepairOptions) -> Result<Repair> {
    let bytes = dna.as_bytes();
    if !bytes.len().is_multiple_of(3) || bytes.len() / 3 != scores.len() {
        return Err(DesignError::InvalidInput(format!(
            "{} nucleotides for {} scored codons",
            bytes.len(),
            scores.len()
        )));
    }
    let mut codons: Vec<usize> = bytes
        .chunks_exact(3)
        .enumerate()
        .map(|(i, c)| {
            codon_index(c).ok_or_else(|| DesignError::InvalidInput(format!("codon {} is not A/C/G/T", i + 1)))
        })
        .collect::<Result<_>>()?;
    let mut seq = bytes.to_vec();
    let set = |seq: &mut Vec<u8>, i: usize, c: usize| seq[3 * i..3 * i + 3].copy_from_slice(&codon_bytes(c));
    let cost_of = |i: usize, from: usize, to: usize| f64::from(scores[i][from]) - f64::from(scores[i][to]);
    let mut edits = Vec::new();
    let mut skipped: HashSet<(usize, usize)> = HashSet::new();
    loop {
        let found = violations(constraints, &seq);
        let Some(target) = found.iter().find(|v| !skipped.contains(&(v.constraint, v.start))) else { break };
        let (first, last) = (target.start / 3, (target.end - 1) / 3);
        let kmers: Vec<Option<KmerCounts>> =
            constraints.iter().map(|c| c.repeat_k().map(|k| KmerCounts::new(k, &seq))).collect();
        // Accepted when the target's constraint gets better and none gets worse. Only the span of
        // the changed codons is rescored: everything else is untouched.
        let accepts = |old: &[u8], new: &[u8], from: usize, to: usize| {
            let mut target_better = false;
            for (c, constraint) in constraints.iter().enumerate() {
                let change = match &kmers[c] {
                    Some(counts) => counts.severity_change(old, new, from, to),
                    None => {
                        constraint.local_severity(new, from, to) as i64
                            - constraint.local_severity(old, from, to) as i64
                    }
                };
                if change > 0 {
                    return false;
                }
                target_better |= c == target.constraint && change < 0;
            }
            target_better
        };
        let mut best: Option<Candidate> = None;
        let mut trial = seq.clone();
        for i in first..=last {
            for alt in synonyms(codons[i], &scores[i]) {
                set(&mut trial, i, alt);
                if accepts(&seq, &trial, 3 * i, 3 * i + 3) {
                    keep_cheaper(&mut best, cost_of(i, codons[i], alt), vec![(i, alt)]);
                }
            }
            set(&mut trial, i, codons[i]);
        }
        if best.is_none() && last - first < options.max_pair_codons {
            for i in first..=last {
                for a in synonyms(codons[i], &scores[i]) {
                    set(&mut trial, i, a);
                    for j in i + 1..=last {
                        for b in synonyms(codons[j], &scores[j]) {
                            set(&mut trial, j, b);
                            if accepts(&seq, &trial, 3 * i, 3 * j + 3) {
                                keep_cheaper(
                                    &mut best,
                                    cost_of(i, codons[i], a) + cost_of(j, codons[j], b),
                                    vec![(i, a), (j, b)],
                                );
                            }
                        }
                        set(&mut trial, j, codons[j]);
                    }
                }
                set(&mut trial, i, codons[i]);
            }
        }
        match best {
            Some((_, changes)) => {
                for (i, c) in changes {
                    edits.push(Edit {
                        codon: i,
                        old: codon_text(codons[i]),
                        new: codon_text(c),
                        reason: target.to_string(),
                        cost: cost_of(i, codons[i], c),
                    });
                    codons[i] = c;
                    set(&mut seq, i, c);
                }
            }
            None if options.best_effort => {
                skipped.insert((target.constraint, target.start));
            }
            None => {
                return Err(DesignError::Unsatisfiable {
                    constraint: constraints[target.constraint].describe(),
                    violation: target.to_string(),
                    first_codon: first + 1,
                    last_codon: last + 1,
                })
            }
        }
    }
    let remaining = violations(constraints, &seq);
    let cost = edits.iter().map(|e| e.cost).sum();
    let dna = String::from_utf8(seq).map_err(|e| DesignError::InvalidInput(e.to_string()))?;
    Ok(Repair { dna, edits, cost, remaining })
}
