//! A predict request checked as `predict` checks its input ([`Prepared::new`], within
//! [`Limits`]), and its predictions finished into answers ([`Prepared::finish`]): for predict
//! requests and batch jobs' parts alike.
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::Response;
use codon_model::{OrganismTable, PredictOptions};

use crate::api::{PredictRequest, ProteinResult};
use crate::config::ServeConfig;
use crate::design::{self, Finish};
use crate::reply::{clip, error};
use crate::state::AppState;

/// Longest organism name a request may give: the model's longest, and at least
/// [`MIN_NAME_LIMIT`] characters, so that a near miss gets its suggestions.
pub(crate) fn max_organism_name(organisms: &OrganismTable) -> usize {
    organisms.names().iter().map(|n| n.chars().count()).max().unwrap_or(0).max(MIN_NAME_LIMIT)
}

/// The least [`max_organism_name`] allows.
const MIN_NAME_LIMIT: usize = 200;

/// How much one request may ask for.
#[derive(Clone, Copy)]
pub(crate) struct Limits {
    /// Proteins.
    pub(crate) proteins: usize,
    /// Residues × sequences.
    pub(crate) codons: usize,
}

/// One protein's predictions from the model, or its error.
type Answer = Result<Vec<codon_model::DnaPrediction>, String>;

/// A predict request checked and ready for the model: its proteins with their options, and what
/// finishing their predictions needs.
pub(crate) struct Prepared {
    /// The proteins that go to the model with their options, in order (each organism as its
    /// id: the worker matches no names).
    pub(crate) items: Vec<(codon_model::ProteinInput, PredictOptions)>,
    /// Each protein's organism id (it is in `items`; `None` when organisms were not matched),
    /// or the error that is its answer (an unknown organism: it does not go to the model).
    organisms: Vec<Result<Option<u32>, String>>,
    constraints: Vec<codon_design::Constraint>,
    best_effort: bool,
    codon_scores: bool,
}

impl Prepared {
    /// Check `request` as `predict` checks its input, within `limits`; with `resolve`, match
    /// each organism too (name matching takes time: a job's check leaves it to its parts).
    pub(crate) fn new(
        state: &AppState,
        request: PredictRequest,
        limits: Limits,
        resolve: bool,
    ) -> Result<Self, Response> {
        let config = &state.config;
        let max_proteins = limits.proteins;
        if request.proteins.is_empty() {
            return Err(error(StatusCode::BAD_REQUEST, "proteins: give at least one"));
        }
        if request.proteins.len() > max_proteins {
            let n = request.proteins.len();
            return Err(error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("proteins: {n} in one request; at most {max_proteins}"),
            ));
        }
        let mut options = request.options.to_predict_options();
        let constraints = match request.options.constraints.as_ref().map(design::constraints).transpose() {
            Ok(c) => c.unwrap_or_default(),
            Err(e) => return Err(error(StatusCode::BAD_REQUEST, format!("options.constraints: {e}"))),
        };
        // The scores give each codon's probability and let a repair weigh its changes.
        options.keep_codon_scores = true;
        if options.num_sequences > config.max_sequences {
            let n = options.num_sequences;
            return Err(error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("options: {n} sequences per protein; at most {}", config.max_sequences),
            ));
        }
        if let Err(e) = options.validate() {
            return Err(error(StatusCode::BAD_REQUEST, format!("options: {e}")));
        }
        let longest_name = max_organism_name(&state.organisms);
        let mut items = Vec::with_capacity(request.proteins.len());
        for (i, item) in request.proteins.iter().enumerate() {
            // No organism's name is this long: refused before any name matching, which takes
            // time in proportion to the name.
            if let serde_json::Value::String(name) = &item.organism {
                let chars = name.trim().chars().count();
                if chars > longest_name {
                    return Err(error(
                        StatusCode::BAD_REQUEST,
                        format!("proteins[{i}].organism: a name of {chars} characters; no organism's name is longer than {longest_name}"),
                    ));
                }
            }
            let residues = item.protein.chars().filter(|c| !c.is_whitespace()).count();
            if residues > config.max_residues {
                return Err(error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("proteins[{i}]: {residues} residues; at most {}", config.max_residues),
                ));
            }
            // The letters are checked as `predict` checks them, with its words.
            if let Err(e) = codon_model::prediction_residues(&item.protein) {
                return Err(error(StatusCode::BAD_REQUEST, format!("proteins[{i}]: {e}")));
            }
            match item.to_input() {
                Ok(input) => items.push((input, options.clone())),
                Err(e) => return Err(error(StatusCode::BAD_REQUEST, format!("proteins[{i}]: {e}"))),
            }
        }
        let residues: usize =
            request.proteins.iter().map(|p| p.protein.chars().filter(|c| !c.is_whitespace()).count()).sum();
        let codons = residues.saturating_mul(options.num_sequences.max(1));
        if codons > limits.codons {
            return Err(error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "{residues} residues × {} sequences: at most {} codons in one request",
                    options.num_sequences.max(1),
                    limits.codons
                ),
            ));
        }
        if request.options.codon_scores && codons > config.max_scored_codons {
            return Err(error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "{residues} residues × {} sequences with codon_scores: at most {} codons (each carries 64 scores)",
                    options.num_sequences.max(1),
                    config.max_scored_codons
                ),
            ));
        }
        // Organisms are matched here, on the blocking pool, rather than by the model's worker:
        // an unknown one is its protein's answer (in the model's words) and skips the model.
        let mut organisms = vec![Ok(None); items.len()];
        if resolve {
            organisms = items
                .iter()
                .map(|(input, _)| state.organisms.resolve(&input.organism).map(Some).map_err(|e| e.to_string()))
                .collect();
            let resolved = items.into_iter().zip(&organisms).filter_map(|((mut input, options), organism)| {
                let id = (*organism.as_ref().ok()?)?;
                input.organism = codon_model::OrganismRef::Id(i64::from(id));
                Some((input, options))
            });
            items = resolved.collect();
        }
        let best_effort = request.options.constraints.as_ref().is_some_and(|c| c.best_effort);
        Ok(Self { items, organisms, constraints, best_effort, codon_scores: request.options.codon_scores })
    }

    /// Each protein's answer from its predictions: the constraints' repair, the codons'
    /// probabilities and the metrics, on the runtime's blocking pool (it is the CPU's work).
    pub(crate) async fn finish(
        self,
        state: &Arc<AppState>,
        results: Vec<Result<Vec<codon_model::DnaPrediction>, String>>,
    ) -> Result<Vec<ProteinResult>, Response> {
        let state = state.clone();
        let predicted = results.iter().filter(|r| r.is_ok()).count() as u64;
        state.predicted.fetch_add(predicted, Ordering::Relaxed);
        tokio::task::spawn_blocking(move || {
            let references = state.config.reference.as_deref();
            // The model's answers in the places of the proteins it was given.
            let mut answers = results.into_iter();
            let all: Vec<(Answer, Option<u32>)> = self
                .organisms
                .iter()
                .map(|organism| match organism {
                    Ok(id) => (answers.next().unwrap_or_else(|| Err("the model gave no answer".into())), *id),
                    Err(e) => (Err(e.clone()), None),
                })
                .collect();
            all.into_iter()
                .map(|(r, organism)| {
                    let organism = &organism;
                    let finish = |predictions: Vec<codon_model::DnaPrediction>| {
                        let reference = design::organism_reference(references, *organism)?;
                        let band = reference.as_ref().and_then(|_| state.band(*organism));
                        Finish {
                            constraints: &self.constraints,
                            best_effort: self.best_effort,
                            codon_scores: self.codon_scores,
                            reference: reference.as_ref(),
                            band: band.as_deref(),
                        }
                        .sequences(&predictions)
                    };
                    match r.and_then(finish) {
                        Ok(sequences) => ProteinResult { sequences, error: None },
                        Err(e) => ProteinResult { sequences: Vec::new(), error: Some(clip(&e)) },
                    }
                })
                .collect()
        })
        .await
        .map_err(|_| error(StatusCode::INTERNAL_SERVER_ERROR, "finishing the predictions failed"))
    }
}

/// A job's limits: its proteins and codons.
pub(crate) fn job_limits(config: &ServeConfig) -> Limits {
    Limits { proteins: config.max_job_proteins, codons: config.max_job_codons }
}
