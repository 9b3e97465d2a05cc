//! The JSON bodies of the API and their checks. Unknown fields are refused, so a misspelt option
//! is an error rather than a silent default.
use codon_model::{OrganismRef, PredictOptions, ProteinInput};
use serde::{Deserialize, Serialize};

/// `POST /v1/predict`: proteins, each with its organism (name or id), and the options that
/// `predict` takes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PredictRequest {
    /// The proteins to predict.
    pub proteins: Vec<ProteinItem>,
    /// Sampling and decoding options; upstream's defaults (argmax) when absent.
    #[serde(default)]
    pub options: Options,
}

/// One protein and its organism.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProteinItem {
    /// Amino-acid letters (a trailing stop is optional).
    pub protein: String,
    /// The organism's name, or its id as a number.
    pub organism: serde_json::Value,
    /// Known DNA for infill: codons kept, `NNN` where the model chooses.
    #[serde(default)]
    pub dna: Option<String>,
}

/// Decoding options, as `predict`'s flags.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Options {
    /// Sample at this temperature instead of taking the most likely codon.
    pub temperature: Option<f64>,
    /// Nucleus mass when sampling (0, 1].
    pub top_p: Option<f64>,
    /// Sequences per protein (sampling).
    pub num_sequences: Option<usize>,
    /// The sampler's seed.
    pub seed: Option<u64>,
    /// Only codons of each residue's amino acid.
    #[serde(default)]
    pub match_protein: bool,
    /// Return each codon's log-probabilities over the 64 codons.
    #[serde(default)]
    pub codon_scores: bool,
}

impl Options {
    /// The predictor's options.
    pub fn to_predict_options(&self) -> PredictOptions {
        let defaults = PredictOptions::default();
        PredictOptions {
            deterministic: self.temperature.is_none(),
            temperature: self.temperature.unwrap_or(defaults.temperature),
            top_p: self.top_p.unwrap_or(defaults.top_p),
            num_sequences: self.num_sequences.unwrap_or(1),
            seed: self.seed.unwrap_or(0),
            match_protein: self.match_protein,
            keep_codon_scores: self.codon_scores,
            ..defaults
        }
    }
}

impl ProteinItem {
    /// The predictor's input; the organism as a name or an id.
    pub fn to_input(&self) -> Result<ProteinInput, String> {
        let organism = match &self.organism {
            serde_json::Value::String(name) => OrganismRef::parse(name),
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(id) => OrganismRef::Id(id),
                None => return Err(format!("organism {n}: an id is a whole number")),
            },
            other => return Err(format!("organism {other}: give a name or an id")),
        };
        Ok(ProteinInput { protein: self.protein.clone(), organism, known_dna: self.dna.clone() })
    }
}

/// The answer to `POST /v1/predict`: one result per protein, in order.
#[derive(Debug, Serialize, Deserialize)]
pub struct PredictResponse {
    /// Each protein's sequences, or its error.
    pub results: Vec<ProteinResult>,
}

/// One protein's sequences (best first), or why it could not be predicted.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct ProteinResult {
    /// The sequences, best first by log-likelihood; empty on error.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sequences: Vec<Sequence>,
    /// The error, as `predict` words it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One predicted coding sequence and its scores.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct Sequence {
    /// The DNA.
    pub dna: String,
    /// Σ ln p of its codons (the model's pseudo-log-likelihood).
    pub log_likelihood: f64,
    /// The same per codon.
    pub mean_log_likelihood: f64,
    /// Each position's log-probabilities of the 64 codons, when asked for (`null` where the
    /// codon may not be chosen: ln 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub codon_log_probs: Option<Vec<Vec<f32>>>,
}

impl From<&codon_model::DnaPrediction> for Sequence {
    fn from(p: &codon_model::DnaPrediction) -> Self {
        Self {
            dna: p.predicted_dna.clone(),
            log_likelihood: p.score.log_likelihood,
            mean_log_likelihood: p.score.mean_log_likelihood,
            codon_log_probs: p.codon_log_probs.as_ref().map(|rows| rows.iter().map(|r| r.to_vec()).collect()),
        }
    }
}

/// `GET /v1/organisms`: the model's organism table.
#[derive(Debug, Serialize, Deserialize)]
pub struct Organism {
    /// The id the model takes.
    pub id: u32,
    /// Its name.
    pub name: String,
}

/// An error answer: `{"error": "..."}`.
#[derive(Debug, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What went wrong, in one line.
    pub error: String,
}
