//! What the server adds to the model's predictions, off the model's worker: the constraints'
//! repair (as `predict --avoid-sites …` does it), each chosen codon's probability, and the
//! metrics against the organism's reference when the server has one (as `evaluate`).
use codon_design::{repair, Constraint, ConstraintSpec, DesignError, RepairOptions};
use codon_eval::plot::ProfileBand;
use codon_eval::{Dna, MetricOptions, OrganismReference, References};
use codon_model::predict::{renormalised, SequenceScore};
use codon_model::DnaPrediction;

use crate::api::{Constraints, EditBody, Metrics, Sequence};

/// The constraints a request asks for, checked by the one function that checks `predict`'s flags.
pub fn constraints(spec: &Constraints) -> Result<Vec<Constraint>, String> {
    let spec = ConstraintSpec {
        avoid_sites: spec.avoid_sites.clone(),
        avoid_motifs: spec.avoid_motifs.clone(),
        gc_window: spec.gc_window.as_ref().map(|w| (w.window, w.min, w.max)),
        max_homopolymer: spec.max_homopolymer,
        max_repeat: spec.max_repeat,
    };
    spec.constraints().map_err(|e| api_words(&e))
}

/// A constraint error in the API's words: the JSON fields, not `predict`'s flags.
fn api_words(e: &DesignError) -> String {
    match e {
        DesignError::UnknownEnzyme(name) => {
            let known: Vec<&str> = codon_design::enzymes::ENZYMES.iter().map(|(n, _)| *n).collect();
            format!("avoid_sites: unknown enzyme {name:?} (known: {})", known.join(", "))
        }
        DesignError::InvalidMotif(motif) => {
            format!("avoid_motifs: {motif:?}: use IUPAC nucleotide letters (ACGT, RYSWKMBDHVN)")
        }
        DesignError::Unsatisfiable { constraint, violation, first_codon, last_codon } => format!(
            "cannot satisfy \"{constraint}\": {violation} (codons {first_codon}-{last_codon}); no synonymous change \
             removes it without breaking another constraint (\"best_effort\": true keeps going)"
        ),
        DesignError::InvalidConstraint(_) | DesignError::InvalidInput(_) => strip_flags(&e.to_string()),
    }
}

/// `m` without `predict`'s flag names (`--max-repeat 0: ...` → `max_repeat 0: ...`).
fn strip_flags(m: &str) -> String {
    let mut out = String::with_capacity(m.len());
    let mut rest = m;
    while let Some(at) = rest.find("--") {
        out.push_str(&rest[..at]);
        let flag = &rest[at + 2..];
        let end = flag.find(|c: char| !(c.is_ascii_alphanumeric() || c == '-')).unwrap_or(flag.len());
        out.push_str(&flag[..end].replace('-', "_"));
        rest = &flag[end..];
    }
    out.push_str(rest);
    out
}

/// How one protein's predictions become its answer.
pub struct Finish<'a> {
    /// The constraints to repair (none: the predictions as they are).
    pub constraints: &'a [Constraint],
    /// Keep the closest sequence when a constraint cannot be met.
    pub best_effort: bool,
    /// Return each position's 64 log-probabilities.
    pub codon_scores: bool,
    /// The organism's reference, for the metrics.
    pub reference: Option<&'a OrganismReference>,
    /// The organism's %MinMax band, beside the profile.
    pub band: Option<&'a ProfileBand>,
}

impl Finish<'_> {
    /// The answer's sequences, best first; an error when a constraint cannot be met (without
    /// best effort) or a prediction came without its scores.
    pub fn sequences(&self, predictions: &[DnaPrediction]) -> Result<Vec<Sequence>, String> {
        let mut out = Vec::with_capacity(predictions.len());
        for p in predictions {
            let scores = p.codon_log_probs.as_deref().ok_or("the prediction came without its codon scores")?;
            let mut sequence = Sequence::from(p);
            if !self.constraints.is_empty() {
                let options = RepairOptions { best_effort: self.best_effort, ..Default::default() };
                let fixed = repair(&p.predicted_dna, scores, self.constraints, &options).map_err(|e| api_words(&e))?;
                let score = SequenceScore::of(scores, &fixed.dna).map_err(|e| e.to_string())?;
                sequence.dna = fixed.dna;
                sequence.log_likelihood = score.log_likelihood;
                sequence.mean_log_likelihood = score.mean_log_likelihood;
                sequence.edits = fixed
                    .edits
                    .iter()
                    .map(|e| EditBody {
                        codon: e.codon + 1,
                        old: e.old.clone(),
                        new: e.new.clone(),
                        reason: e.reason.clone(),
                        cost: e.cost,
                    })
                    .collect();
                sequence.edit_cost = Some(fixed.cost);
                sequence.remaining = fixed.remaining.iter().map(ToString::to_string).collect();
            }
            sequence.codon_probs = codon_probs(scores, &sequence.dna);
            if !self.codon_scores {
                sequence.codon_log_probs = None;
            }
            if let Some(reference) = self.reference {
                sequence.metrics = Some(metrics(&sequence.dna, Some(reference), self.band)?);
            }
            out.push(sequence);
        }
        // A repair can reorder the sequences' likelihoods: best first, as without constraints.
        out.sort_by(|a, b| b.log_likelihood.total_cmp(&a.log_likelihood));
        Ok(out)
    }
}

/// The model's probability of each codon of `dna` at its position, renormalised over the
/// codons allowed there (as the log-likelihood is).
fn codon_probs(scores: &[[f32; 64]], dna: &str) -> Vec<f32> {
    dna.as_bytes()
        .chunks(3)
        .zip(scores)
        .map(|(codon, row)| codon_model::vocab::codon_index(codon).map_or(0.0, |c| renormalised(row)[c].exp() as f32))
        .collect()
}

/// `dna`'s metrics: GC always; CSI, CFD and %MinMax against `reference`, with the organism's
/// band where there is one.
pub fn metrics(
    dna: &str,
    reference: Option<&OrganismReference>,
    band: Option<&ProfileBand>,
) -> Result<Metrics, String> {
    let parsed = Dna::parse(dna).map_err(|e| e.to_string())?;
    let Some(reference) = reference else {
        return Ok(Metrics { gc_content: codon_eval::metrics::gc_content(parsed.as_str()), ..Default::default() });
    };
    let m = reference.evaluate(&parsed, None, &MetricOptions::default()).map_err(|e| e.to_string())?;
    Ok(Metrics {
        gc_content: m.gc_content,
        csi: m.csi.is_finite().then_some(m.csi),
        cfd: Some(m.cfd),
        minmax_mean: m.minmax_mean,
        minmax: m.minmax,
        minmax_band: band.map_or_else(Vec::new, |b| b.bounds.iter().map(|w| w.map(|(l, u)| [l, u])).collect()),
    })
}

/// The organism's %MinMax band from the reference's kept sequences (`None` without them).
pub fn band(references: Option<&References>, organism: u32) -> Option<ProfileBand> {
    let references = references?;
    let reference = references.for_organism(Some(organism)).ok()?;
    codon_eval::plot::reference_band(references.sequences(organism), &reference, &MetricOptions::default())
}

/// An organism's reference, when the server has references.
pub fn organism_reference(
    references: Option<&References>,
    organism: Option<u32>,
) -> Result<Option<OrganismReference>, String> {
    references.map(|r| r.for_organism(organism)).transpose()
}
