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
    /// Rules the DNA must meet, repaired by synonymous changes (`predict`'s constraint flags).
    #[serde(default)]
    pub constraints: Option<Constraints>,
}

/// The synthesis constraints of `predict`, as JSON.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Constraints {
    /// Restriction enzymes whose sites to avoid on both strands (the built-in table's names).
    #[serde(default)]
    pub avoid_sites: Vec<String>,
    /// Motifs to avoid on both strands, in IUPAC letters.
    #[serde(default)]
    pub avoid_motifs: Vec<String>,
    /// The GC percentage every window must keep.
    #[serde(default)]
    pub gc_window: Option<GcWindow>,
    /// Longest run of one base.
    #[serde(default)]
    pub max_homopolymer: Option<usize>,
    /// Longest exact repeat.
    #[serde(default)]
    pub max_repeat: Option<usize>,
    /// Keep the closest sequence and report what is left when a constraint cannot be met
    /// (otherwise that protein's answer is an error).
    #[serde(default)]
    pub best_effort: bool,
}

/// A GC window: every `window` nucleotides hold between `min` and `max` percent G or C.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GcWindow {
    /// Window length, nucleotides.
    pub window: usize,
    /// Lowest GC percentage.
    pub min: f64,
    /// Highest GC percentage.
    pub max: f64,
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
        let organism = organism_ref(&self.organism)?;
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
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProteinResult {
    /// The sequences, best first by log-likelihood; empty on error.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sequences: Vec<Sequence>,
    /// The error, as `predict` words it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One predicted coding sequence and its scores.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
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
    /// The model's probability of each chosen codon, in order (the page colours codons by it).
    #[serde(default)]
    pub codon_probs: Vec<f32>,
    /// The synonymous changes that met the constraints, in the order they were made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub edits: Vec<EditBody>,
    /// Log-probability given up by the edits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edit_cost: Option<f64>,
    /// Violations left (best effort only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remaining: Vec<String>,
    /// The sequence's metrics against the organism's reference, when the server has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<Metrics>,
}

/// One synonymous change of a repair.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EditBody {
    /// 1-based codon number.
    pub codon: usize,
    /// The codon before.
    pub old: String,
    /// The codon after.
    pub new: String,
    /// The violation it removes.
    pub reason: String,
    /// Log-probability given up.
    pub cost: f64,
}

/// A sequence's metrics, as `evaluate` computes them.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Metrics {
    /// GC percentage.
    pub gc_content: f64,
    /// Codon similarity index (needs a reference).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub csi: Option<f64>,
    /// Percentage of rare codons (needs a reference).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cfd: Option<f64>,
    /// Mean %MinMax (needs a reference; `None` below the window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minmax_mean: Option<f64>,
    /// The %MinMax profile, one value per window position (needs a reference).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub minmax: Vec<Option<f64>>,
    /// The organism's band at each window position: the 10th and 90th percentile of its
    /// reference sequences' profiles (needs a reference file with the organism's sequences).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub minmax_band: Vec<Option<[f64; 2]>>,
}

/// `POST /v1/evaluate`: coding sequences, each with its organism for the reference's metrics.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvaluateRequest {
    /// The sequences.
    pub sequences: Vec<EvaluateItem>,
}

/// One sequence to evaluate.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvaluateItem {
    /// The DNA (A/C/G/T, whole codons).
    pub dna: String,
    /// The organism (name or id) whose reference scores it; optional with a single table.
    #[serde(default)]
    pub organism: Option<serde_json::Value>,
}

/// The answer to `POST /v1/evaluate`: one result per sequence, in order.
#[derive(Debug, Serialize, Deserialize)]
pub struct EvaluateResponse {
    /// Each sequence's metrics, or its error.
    pub results: Vec<EvaluateResult>,
}

/// One sequence's metrics, or why they could not be computed.
#[derive(Debug, Serialize, Deserialize)]
pub struct EvaluateResult {
    /// The metrics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<Metrics>,
    /// The error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl From<&codon_model::DnaPrediction> for Sequence {
    fn from(p: &codon_model::DnaPrediction) -> Self {
        Self {
            dna: p.predicted_dna.clone(),
            log_likelihood: p.score.log_likelihood,
            mean_log_likelihood: p.score.mean_log_likelihood,
            codon_log_probs: p.codon_log_probs.as_ref().map(|rows| rows.iter().map(|r| r.to_vec()).collect()),
            codon_probs: Vec::new(),
            edits: Vec::new(),
            edit_cost: None,
            remaining: Vec::new(),
            metrics: None,
        }
    }
}

/// An organism given as a name or an id.
pub fn organism_ref(value: &serde_json::Value) -> Result<OrganismRef, String> {
    match value {
        serde_json::Value::String(name) => Ok(OrganismRef::parse(name)),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(id) => Ok(OrganismRef::Id(id)),
            None => Err(format!("organism {n}: an id is a whole number")),
        },
        other => Err(format!("organism {other}: give a name or an id")),
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
