//! From a forward pass's logits to DNA: each position's choice among the codons it allows (argmax,
//! or temperature + top-p sampling), known codons kept, the protein the DNA codes checked.
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{DnaPrediction, PredictOptions, Prepared, SequenceScore};
use crate::error::{CodonError, Result};
use crate::vocab::{codon_ids_for, codon_of, translate_codon, FIRST_CODON_ID, LAST_CODON_ID};

/// A prepared protein's predictions from its residues' logits under `options`: argmax, or
/// `num_sequences` samples from a generator seeded by `options.seed` alone (so a protein's samples
/// do not depend on its batch), best first.
pub(super) fn decode(prepared: &Prepared, logits: &[Vec<f32>], options: &PredictOptions) -> Result<Vec<DnaPrediction>> {
    let mut rng = ChaCha8Rng::seed_from_u64(options.seed);
    let allowed = allowed_codons(prepared, options.match_protein);
    let log_probs = codon_log_probs(logits, &allowed);
    let scores = options.keep_codon_scores.then(|| log_probs.clone());
    let mut predictions = Vec::with_capacity(options.num_sequences);
    for _ in 0..options.num_sequences {
        let mut dna = String::with_capacity(3 * logits.len());
        for (row, allowed) in logits.iter().zip(&allowed) {
            let id = if allowed.len() == 1 {
                allowed[0]
            } else if options.deterministic {
                argmax(row, allowed)
            } else {
                sample_top_p(row, allowed, options.temperature, options.top_p, &mut rng)
            };
            let codon = codon_of(id).unwrap_or(*b"NNN");
            dna.push_str(std::str::from_utf8(&codon).unwrap_or("NNN"));
        }
        predictions.push(DnaPrediction {
            organism: prepared.organism.clone(),
            protein: prepared.protein.clone(),
            processed_input: prepared.merged.clone(),
            score: SequenceScore::of(&log_probs, &dna)?,
            predicted_dna: dna,
            codon_log_probs: scores.clone(),
        });
    }
    // Samples best first (a stable sort: equal scores keep their draw order).
    predictions.sort_by(|a, b| b.score.log_likelihood.total_cmp(&a.score.log_likelihood));
    Ok(predictions)
}

/// Infill: the codon id kept at each residue, from DNA with `NNN` where the model chooses. The DNA
/// has the protein's length × 3, with or without the stop codon `prediction_residues` appends.
pub(super) fn known_codons(dna: &str, residues: &[char]) -> Result<Vec<Option<u32>>> {
    let dna = dna.trim().to_ascii_uppercase();
    if let Some((i, c)) = dna.char_indices().find(|(_, c)| !matches!(c, 'A' | 'C' | 'G' | 'T' | 'N')) {
        return Err(CodonError::KnownDna(format!(
            "{c:?} at position {}: use A, C, G, T, and NNN for a codon to predict",
            i + 1
        )));
    }
    let codons = dna.len() / 3;
    if !dna.len().is_multiple_of(3)
        || !(codons == residues.len() || codons + 1 == residues.len() && residues.last() == Some(&'_'))
    {
        return Err(CodonError::KnownDna(format!(
            "{} nucleotides for a protein of {} residues (stop included): give {} (or {} without the stop codon)",
            dna.len(),
            residues.len(),
            3 * residues.len(),
            3 * residues.len() - 3
        )));
    }
    let mut known: Vec<Option<u32>> = dna
        .as_bytes()
        .chunks_exact(3)
        .zip(residues)
        .enumerate()
        .map(|(i, (codon, &aa))| match codon {
            b"NNN" => Ok(None),
            c if c.contains(&b'N') => Err(CodonError::KnownDna(format!(
                "codon {} ({}) mixes known and unknown bases: write a codon out or as NNN",
                i + 1,
                String::from_utf8_lossy(c)
            ))),
            c if translate_codon(c) == Some(aa) => {
                Ok(codon_ids_for(aa).iter().copied().find(|&id| codon_of(id).as_ref().map(|x| &x[..]) == Some(c)))
            }
            c => Err(CodonError::KnownDna(format!(
                "codon {} ({}) encodes {} but the protein has {aa} there",
                i + 1,
                String::from_utf8_lossy(c),
                translate_codon(c).unwrap_or('?')
            ))),
        })
        .collect::<Result<_>>()?;
    known.resize(residues.len(), None);
    Ok(known)
}

/// The codon ids each residue may take: its synonyms under `match_protein` (all 64 codons for a
/// residue without any), or all 64; the known codon alone at an infill position.
pub(super) fn allowed_codons(prepared: &Prepared, match_protein: bool) -> Vec<Vec<u32>> {
    prepared
        .residues
        .iter()
        .zip(&prepared.known)
        .map(|(&aa, known)| match known {
            Some(id) => vec![*id],
            None => {
                let ids = codon_ids_for(aa);
                if match_protein && !ids.is_empty() {
                    ids.to_vec()
                } else {
                    (FIRST_CODON_ID..=LAST_CODON_ID).collect()
                }
            }
        })
        .collect()
}

/// The protein a coding sequence encodes, without its final stop codon; an error for a length
/// that is not a multiple of 3, a base other than A/C/G/T, or a stop codon inside.
pub(super) fn coding_protein(dna: &str) -> Result<String> {
    if dna.is_empty() {
        return Err(CodonError::Input("the DNA is empty".into()));
    }
    if !dna.len().is_multiple_of(3) {
        return Err(CodonError::Input(format!("a DNA of {} bases is not a whole number of codons", dna.len())));
    }
    let codons: Vec<&[u8]> = dna.as_bytes().chunks(3).collect();
    let mut protein = String::with_capacity(codons.len());
    for (i, codon) in codons.iter().enumerate() {
        let aa = translate_codon(codon).ok_or_else(|| {
            CodonError::Input(format!("codon {} ({}) is not A/C/G/T", i + 1, String::from_utf8_lossy(codon)))
        })?;
        if aa == '_' || aa == '*' {
            if i + 1 == codons.len() {
                break;
            }
            return Err(CodonError::Input(format!(
                "stop codon {} inside the sequence (codon {})",
                String::from_utf8_lossy(codon),
                i + 1
            )));
        }
        protein.push(aa);
    }
    Ok(protein)
}

/// Per residue, the log-softmax of the 64 codon logits, −∞ outside the allowed ids.
pub(super) fn codon_log_probs(logits: &[Vec<f32>], allowed: &[Vec<u32>]) -> Vec<[f32; 64]> {
    logits
        .iter()
        .zip(allowed)
        .map(|(row, allowed)| {
            let codons = &row[FIRST_CODON_ID as usize..=LAST_CODON_ID as usize];
            let max = codons.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let log_sum = codons.iter().map(|v| (v - max).exp()).sum::<f32>().ln() + max;
            let mut out = [f32::NEG_INFINITY; 64];
            for &id in allowed {
                let i = (id - FIRST_CODON_ID) as usize;
                out[i] = codons[i] - log_sum;
            }
            out
        })
        .collect()
}

/// The allowed id with the largest logit (the first on ties, as torch's argmax).
fn argmax(row: &[f32], allowed: &[u32]) -> u32 {
    let mut best = allowed[0];
    for &id in allowed {
        if row[id as usize] > row[best as usize] {
            best = id;
        }
    }
    best
}

/// Temperature + top-p sampling over the allowed ids (`sample_non_deterministic` upstream):
/// p = softmax(logits / T); keep the smallest most-likely prefix whose mass reaches top_p
/// (entries whose preceding mass exceeds top_p are dropped); renormalise; draw.
/// The largest logit is taken away before dividing by T: a tiny (subnormal) temperature then
/// gives 0 for the best codon and -inf for the rest, which is argmax, where dividing first would
/// give inf - inf = NaN.
pub(super) fn sample_top_p(row: &[f32], allowed: &[u32], temperature: f64, top_p: f64, rng: &mut impl Rng) -> u32 {
    let max = allowed.iter().map(|&id| row[id as usize] as f64).fold(f64::NEG_INFINITY, f64::max);
    let scaled = allowed.iter().map(|&id| (row[id as usize] as f64 - max) / temperature);
    let mut probs: Vec<(f64, u32)> = scaled.zip(allowed).map(|(s, &id)| (s.exp(), id)).collect();
    let total: f64 = probs.iter().map(|p| p.0).sum();
    probs.iter_mut().for_each(|p| p.0 /= total);
    probs.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut kept = Vec::with_capacity(probs.len());
    let mut cumulative = 0.0;
    for (p, id) in probs {
        if cumulative > top_p {
            break;
        }
        kept.push((p, id));
        cumulative += p;
    }
    let mass: f64 = kept.iter().map(|k| k.0).sum();
    let mut draw = rng.random::<f64>() * mass;
    for (p, id) in &kept {
        if draw < *p {
            return *id;
        }
        draw -= p;
    }
    kept.last().map_or(allowed[0], |k| k.1)
}
