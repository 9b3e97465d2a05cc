//! DNA prediction, the equivalent of upstream `predict_dna_sequence`, plus batches.
//!
//! One forward pass over `[CLS] x_unk … __unk [SEP]` with full attention, then an
//! independent choice per position: argmax, or temperature + top-p sampling. Choices are
//! restricted to codon tokens (so the DNA is always ACGT), and with `match_protein` to the
//! codons of each residue's amino acid (so the DNA translates back to the protein).
//! Proteins longer than 2046 residues are predicted in overlapping windows.

use candle_core::{DType, Device};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::bigbird::{AttentionType, BigBirdForMaskedLM, ForwardMode, ModelInput};
use crate::error::{CodonError, Result, TensorContext};
use crate::organisms::{OrganismRef, OrganismTable};
use crate::sequence::{preprocess_protein, ProteinConfig};
use crate::tokenizer::CodonTokenizer;
use crate::vocab::{codon_of, MAX_AMINO_ACIDS};

/// Context tokens on each side of a window's own residues when a protein is split.
mod decode;

use decode::{allowed_codons, coding_protein, codon_log_probs, decode, known_codons};

const WINDOW_CONTEXT: usize = 256;

/// Prediction settings; the defaults are upstream's.
#[derive(Debug, Clone, PartialEq)]
pub struct PredictOptions {
    /// Argmax (true) or sampling (false).
    pub deterministic: bool,
    /// Sampling temperature (> 0).
    pub temperature: f64,
    /// Nucleus mass in (0, 1].
    pub top_p: f64,
    /// Sequences per protein (sampling only when > 1).
    pub num_sequences: usize,
    /// Only allow codons of each residue's amino acid.
    pub match_protein: bool,
    /// Seed of the sampler.
    pub seed: u64,
    /// Attention for the forward pass (upstream: original_full).
    pub attention: AttentionType,
    /// Most tokens per forward pass in batch prediction (rows × padded length).
    pub max_batch_tokens: usize,
    /// Keep each residue's log-probabilities of the 64 codons ([`DnaPrediction::codon_log_probs`]).
    pub keep_codon_scores: bool,
    /// Most padding a batch carries, as a fraction of its real tokens ([`max_padding_fraction_on`]).
    pub max_padding_fraction: f64,
}

/// Most padding a prediction batch carries, as a fraction of its real tokens: a longer protein
/// that would pad the batch beyond it starts the next batch. On the CPU a pass of several rows
/// costs little less per row than one row alone (352 tokens, AMD EPYC Zen 4, 2 cores: 0.41 s
/// per row in pairs, 0.42 s alone), so padding soon costs more than sharing saves (48 proteins
/// of 80-600 residues: 21.1-21.6 s at 0.1, 20.4 s at 0.02).
pub const MAX_PADDING_FRACTION: f64 = 0.02;

/// Most padding a prediction batch carries on an accelerator, where a pass's fixed costs
/// (launches, the copy back) make fewer, padded batches win up to a point: 48 proteins of
/// 100-600 residues on an H100, warm (`predict_timing`), took in f32 0.197 s without a limit,
/// 0.160 s at 0.3 and 0.156 s at 0.1; in bf16 0.087 s, 0.084 s and 0.089 s.
pub const ACCELERATOR_MAX_PADDING_FRACTION: f64 = 0.3;

/// The padding a prediction batch may carry on `device`: [`MAX_PADDING_FRACTION`] on the CPU,
/// [`ACCELERATOR_MAX_PADDING_FRACTION`] elsewhere.
pub fn max_padding_fraction_on(device: &Device) -> f64 {
    if device.is_cpu() {
        MAX_PADDING_FRACTION
    } else {
        ACCELERATOR_MAX_PADDING_FRACTION
    }
}

impl Default for PredictOptions {
    fn default() -> Self {
        Self {
            deterministic: true,
            temperature: 0.2,
            top_p: 0.95,
            num_sequences: 1,
            match_protein: false,
            seed: 0,
            attention: AttentionType::OriginalFull,
            max_batch_tokens: 8192,
            keep_codon_scores: false,
            max_padding_fraction: MAX_PADDING_FRACTION,
        }
    }
}

impl PredictOptions {
    /// Upstream's argument checks, in upstream order and wording.
    pub fn validate(&self) -> Result<()> {
        let fail = |m: &str| Err(CodonError::Prediction(m.into()));
        if !(self.temperature.is_finite() && self.temperature > 0.0) {
            return fail("Temperature must be a positive float.");
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return fail("top_p must be a float between 0 and 1.");
        }
        if self.num_sequences < 1 {
            return fail("num_sequences must be a positive integer.");
        }
        if self.num_sequences > MAX_NUM_SEQUENCES {
            return fail(&format!("num_sequences must be at most {MAX_NUM_SEQUENCES}."));
        }
        if self.deterministic && self.num_sequences > 1 {
            return fail("Multiple sequences can only be generated in non-deterministic mode.");
        }
        Ok(())
    }
}

/// One predicted coding sequence (`DNASequencePrediction` upstream).
#[derive(Debug, Clone, PartialEq)]
pub struct DnaPrediction {
    /// Organism name.
    pub organism: String,
    /// The protein as given.
    pub protein: String,
    /// The merged model input (upper case).
    pub processed_input: String,
    /// Predicted DNA, one codon per residue (stop included).
    pub predicted_dna: String,
    /// With [`PredictOptions::keep_codon_scores`]: per residue, the model's log-probability of
    /// each codon (index A<C<G<T, see [`crate::vocab::codon_at`]) among the 64; a codon the
    /// prediction may not choose (not a synonym under `match_protein`, or not the known codon of
    /// an infill position) is −∞.
    pub codon_log_probs: Option<Vec<[f32; 64]>>,
    /// How likely the model finds this sequence ([`SequenceScore`]).
    pub score: SequenceScore,
}

/// One position's codon log-probabilities renormalised over the codons allowed there (the finite
/// ones): what [`SequenceScore`] sums; −∞ stays −∞.
pub fn renormalised(row: &[f32; 64]) -> [f64; 64] {
    let finite = row.iter().filter(|v| v.is_finite()).map(|&v| f64::from(v));
    let max = finite.clone().fold(f64::NEG_INFINITY, f64::max);
    let log_sum = max + finite.map(|v| (v - max).exp()).sum::<f64>().ln();
    row.map(|v| f64::from(v) - log_sum)
}

/// The least likely codons a [`SequenceScore`] lists.
pub const LOWEST_POSITIONS: usize = 5;

/// How likely the model finds a coding sequence, from the one forward pass over its protein: the
/// pseudo-log-likelihood. At each position the model's codon probabilities (temperature 1) are
/// renormalised over the codons allowed there (all 64 codons; the amino acid's synonyms under
/// `match_protein`; the known codon alone at an infill position), and the chosen codon's natural
/// log is taken. Higher is more likely; 0 is certain.
#[derive(Debug, Clone, PartialEq)]
pub struct SequenceScore {
    /// Σ over codons of ln p(codon).
    pub log_likelihood: f64,
    /// `log_likelihood` over the number of codons.
    pub mean_log_likelihood: f64,
    /// The least likely codons, lowest first: (position from 0, ln p), at most [`LOWEST_POSITIONS`].
    pub lowest: Vec<(usize, f64)>,
}

impl SequenceScore {
    /// Score `dna`'s codons against per-position codon log-probabilities (−∞: not allowed there),
    /// one row per codon from the first; `dna` may stop short of the rows (no stop codon).
    pub fn of(log_probs: &[[f32; 64]], dna: &str) -> Result<Self> {
        let codons = dna.as_bytes().chunks(3);
        if !dna.len().is_multiple_of(3) || dna.len() / 3 > log_probs.len() || dna.is_empty() {
            return Err(CodonError::Prediction(format!(
                "a DNA of {} bases does not fit {} codon positions",
                dna.len(),
                log_probs.len()
            )));
        }
        let mut per_codon = Vec::with_capacity(dna.len() / 3);
        for (pos, (codon, row)) in codons.zip(log_probs).enumerate() {
            let index = crate::vocab::codon_index(codon).ok_or_else(|| {
                CodonError::Prediction(format!("codon {} ({}) is not A/C/G/T", pos + 1, String::from_utf8_lossy(codon)))
            })?;
            per_codon.push((pos, renormalised(row)[index]));
        }
        let log_likelihood: f64 = per_codon.iter().map(|(_, lp)| lp).sum();
        let mean_log_likelihood = log_likelihood / per_codon.len() as f64;
        per_codon.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        per_codon.truncate(LOWEST_POSITIONS);
        Ok(Self { log_likelihood, mean_log_likelihood, lowest: per_codon })
    }
}

/// One protein to predict: its organism, and for infill its known codons.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProteinInput {
    /// The protein.
    pub protein: String,
    /// The organism, by name or id.
    pub organism: OrganismRef,
    /// Infill: DNA of the protein's length × 3 with `NNN` for each codon to predict; the other
    /// codons are kept exactly and fed to the model as `aa_codon` tokens.
    pub known_dna: Option<String>,
}

impl From<&(String, OrganismRef)> for ProteinInput {
    fn from((protein, organism): &(String, OrganismRef)) -> Self {
        Self { protein: protein.clone(), organism: organism.clone(), known_dna: None }
    }
}

/// A model, its tokenizer and a device, ready to predict.
pub struct Predictor {
    model: BigBirdForMaskedLM,
    tokenizer: CodonTokenizer,
    organisms: OrganismTable,
}

/// A protein prepared for the model.
struct Prepared {
    organism_id: u32,
    organism: String,
    protein: String,
    merged: String,
    /// Amino acid of each merged token.
    residues: Vec<char>,
    /// The codon id kept at each residue (infill), `None` where the model chooses.
    known: Vec<Option<u32>>,
}

fn refuse_empty(protein: &str) -> Result<()> {
    if protein.is_empty() {
        return Err(CodonError::Prediction("Protein sequence cannot be empty.".into()));
    }
    Ok(())
}

/// The most sequences sampled per protein: each is a full decode and a DNA kept in memory, so
/// a count from outside (a request, a notebook) must be bounded. The CLI, the service and the
/// Python package take the same bound.
pub const MAX_NUM_SEQUENCES: usize = 100;

/// The longest protein predicted, in characters: windows bound the model's memory, but each
/// residue's tokens, scores and DNA are kept for the whole protein (about 3 KB a residue). The
/// longest known protein, titin, has under 36,000.
pub const MAX_PREDICTION_RESIDUES: usize = 100_000;

/// The residues a prediction decodes, one codon each: the protein as the model sees it (upper
/// case, ambiguous letters resolved as upstream does by default, with seed 0; an internal `*`
/// a stop; `_` appended when the protein does not end with a stop). Baselines decode the same.
/// A protein over [`MAX_PREDICTION_RESIDUES`] is an error.
pub fn prediction_residues(protein: &str) -> Result<String> {
    refuse_empty(protein)?;
    let length = protein.trim_end().chars().count();
    if length > MAX_PREDICTION_RESIDUES {
        return Err(CodonError::Prediction(format!(
            "The protein has {length} residues; at most {MAX_PREDICTION_RESIDUES} are predicted."
        )));
    }
    // Internal '*' is a stop here: upstream's tokenizer would split it into two tokens.
    let cleaned: String = {
        let trimmed = protein.trim_end();
        let last = trimmed.len().saturating_sub(1);
        trimmed.char_indices().map(|(i, c)| if c == '*' && i < last { '_' } else { c }).collect()
    };
    Ok(preprocess_protein(&cleaned, &ProteinConfig::default(), &mut ChaCha8Rng::seed_from_u64(0))?)
}

impl Predictor {
    /// A predictor over a loaded model, which must have CodonTransformer's vocabulary and
    /// organism table.
    pub fn new(model: BigBirdForMaskedLM) -> Result<Self> {
        Self::with_organisms(model, OrganismTable::builtin())
    }

    /// A predictor whose organisms are `organisms` (the table stored with a model that was taught
    /// new ones, see [`OrganismTable::for_model`]); the model needs a token-type row for each.
    pub fn with_organisms(model: BigBirdForMaskedLM, organisms: OrganismTable) -> Result<Self> {
        let c = model.config();
        if c.vocab_size != crate::vocab::VOCAB_SIZE || c.type_vocab_size < organisms.len() {
            return Err(CodonError::Config(format!(
                "prediction needs CodonTransformer's vocabulary ({} tokens) and a token type per organism ({}); the model has vocab_size {} and type_vocab_size {}",
                crate::vocab::VOCAB_SIZE,
                organisms.len(),
                c.vocab_size,
                c.type_vocab_size
            )));
        }
        Ok(Self { model, tokenizer: CodonTokenizer::new()?, organisms })
    }

    /// The organisms this predictor knows.
    pub fn organisms(&self) -> &OrganismTable {
        &self.organisms
    }

    /// The model.
    pub fn model(&self) -> &BigBirdForMaskedLM {
        &self.model
    }

    /// Residues per model input: CodonTransformer's 2046, or fewer when the model's position
    /// table is shorter (`[CLS]` and `[SEP]` take two positions).
    fn window_len(&self) -> usize {
        MAX_AMINO_ACIDS.min(self.model.config().max_position_embeddings.saturating_sub(2)).max(1)
    }

    fn prepare(&self, input: &ProteinInput) -> Result<Prepared> {
        // Upstream's order: an empty protein, then the organism, then the protein's letters.
        refuse_empty(&input.protein)?;
        let organism_id = self.organisms.resolve(&input.organism)?;
        let residues: Vec<char> = prediction_residues(&input.protein)?.chars().collect();
        let known = match &input.known_dna {
            Some(dna) => known_codons(dna, &residues)?,
            None => vec![None; residues.len()],
        };
        let merged = residues
            .iter()
            .zip(&known)
            .map(|(aa, id)| {
                let codon =
                    id.and_then(codon_of).map_or("UNK".to_string(), |c| String::from_utf8_lossy(&c).into_owned());
                format!("{aa}_{codon}")
            })
            .collect::<Vec<_>>()
            .join(" ");
        Ok(Prepared {
            organism_id,
            organism: self.organisms.name(i64::from(organism_id))?.to_string(),
            protein: input.protein.clone(),
            merged,
            residues,
            known,
        })
    }

    /// Predict DNA for one protein: `num_sequences` predictions.
    pub fn predict(
        &self,
        protein: &str,
        organism: impl Into<OrganismRef>,
        options: &PredictOptions,
    ) -> Result<Vec<DnaPrediction>> {
        options.validate()?;
        let prepared =
            self.prepare(&ProteinInput { protein: protein.to_string(), organism: organism.into(), known_dna: None })?;
        let mut results = self.predict_prepared(&[prepared], options)?;
        results.pop().ok_or_else(|| CodonError::Prediction("no prediction".into()))
    }

    /// Predict many proteins, batching proteins of similar length. Results keep the input
    /// order; a protein that fails validation gets its own error.
    pub fn predict_batch(
        &self,
        items: &[(String, OrganismRef)],
        options: &PredictOptions,
    ) -> Result<Vec<Result<Vec<DnaPrediction>>>> {
        let inputs: Vec<ProteinInput> = items.iter().map(ProteinInput::from).collect();
        self.predict_batch_with_progress(&inputs, options, &mut |_| {})
    }

    /// [`Predictor::predict_batch`], calling `progress(n)` as each `n` proteins are done (the
    /// ones refused before any forward pass first, then each forward batch's).
    pub fn predict_batch_with_progress(
        &self,
        items: &[ProteinInput],
        options: &PredictOptions,
        progress: &mut dyn FnMut(usize),
    ) -> Result<Vec<Result<Vec<DnaPrediction>>>> {
        options.validate()?;
        self.in_batches(items, options, progress, |_, prepared| self.predict_prepared(prepared, options))
    }

    /// Score existing coding sequences ([`SequenceScore`]): one forward pass over each one's
    /// protein (its translation), as prediction makes, then the log-likelihood of its own codons.
    /// `options.match_protein` narrows each position to its synonyms, as in prediction. A
    /// sequence that is not a coding sequence gets its own error.
    pub fn score_batch(
        &self,
        items: &[(String, OrganismRef)],
        options: &PredictOptions,
        progress: &mut dyn FnMut(usize),
    ) -> Result<Vec<Result<SequenceScore>>> {
        options.validate()?;
        let dna: Vec<String> = items
            .iter()
            .map(|(d, _)| d.chars().filter(|c| !c.is_whitespace()).collect::<String>().to_uppercase())
            .collect();
        let proteins: Vec<Result<String>> = dna.iter().map(|d| coding_protein(d)).collect();
        let inputs: Vec<ProteinInput> = proteins
            .iter()
            .zip(items)
            .map(|(p, (_, organism))| ProteinInput {
                protein: p.as_deref().unwrap_or("").to_string(),
                organism: organism.clone(),
                known_dna: None,
            })
            .collect();
        let scored = self.in_batches(&inputs, options, progress, |indices, prepared| {
            let logits = self.residue_logits(prepared, options)?;
            Ok(indices
                .iter()
                .zip(prepared)
                .zip(logits)
                .map(|((&i, p), logits)| {
                    let allowed = allowed_codons(p, options.match_protein);
                    SequenceScore::of(&codon_log_probs(&logits?, &allowed), &dna[i])
                })
                .collect())
        })?;
        Ok(proteins.into_iter().zip(scored).map(|(p, s)| p.and_then(|_| s.and_then(|s| s))).collect())
    }

    /// Prepare every item, run `run` on batches of similar length, and give each item its result
    /// (or its own error) in input order; `run` gets the batch's item indices and prepared proteins.
    fn in_batches<T>(
        &self,
        items: &[ProteinInput],
        options: &PredictOptions,
        progress: &mut dyn FnMut(usize),
        run: impl Fn(&[usize], &[Prepared]) -> Result<Vec<T>>,
    ) -> Result<Vec<Result<T>>> {
        let mut out: Vec<Option<Result<T>>> = (0..items.len()).map(|_| None).collect();
        let mut ok: Vec<(usize, Prepared)> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            match self.prepare(item) {
                Ok(p) => ok.push((i, p)),
                Err(e) => out[i] = Some(Err(e)),
            }
        }
        ok.sort_by_key(|(_, p)| p.residues.len());
        let lengths: Vec<usize> = ok.iter().map(|(_, p)| p.residues.len().min(self.window_len()) + 2).collect();
        let mut items = ok.into_iter();
        let batches: Vec<Vec<(usize, Prepared)>> =
            length_buckets(&lengths, options.max_batch_tokens, options.max_padding_fraction)
                .into_iter()
                .map(|size| items.by_ref().take(size).collect())
                .collect();
        let refused = out.iter().filter(|o| o.is_some()).count();
        if refused > 0 {
            progress(refused);
        }
        for batch in batches {
            let (indices, prepared): (Vec<usize>, Vec<Prepared>) = batch.into_iter().unzip();
            let results = run(&indices, &prepared)?;
            progress(indices.len());
            for (i, r) in indices.into_iter().zip(results) {
                out[i] = Some(Ok(r));
            }
        }
        Ok(out.into_iter().map(|o| o.unwrap_or_else(|| Err(CodonError::Prediction("not predicted".into())))).collect())
    }

    /// Logits for each residue of each prepared protein: (residues, vocab) f32 on the host, or
    /// that protein's own error where its logits are not finite (rows of a pass are independent,
    /// so one broken row leaves the others' logits intact). The outer error is the pass's.
    fn residue_logits(&self, batch: &[Prepared], options: &PredictOptions) -> Result<Vec<Result<Vec<Vec<f32>>>>> {
        // Every protein becomes one or more windows of at most `window_len` tokens, overlapping
        // by up to WINDOW_CONTEXT residues of context on each side.
        let window_len = self.window_len();
        let context = WINDOW_CONTEXT.min(window_len / 4);
        struct Window {
            protein: usize,
            start: usize,
            end: usize,
            own_start: usize,
            own_end: usize,
        }
        let mut windows = Vec::new();
        for (p, prepared) in batch.iter().enumerate() {
            let len = prepared.residues.len();
            if len <= window_len {
                windows.push(Window { protein: p, start: 0, end: len, own_start: 0, own_end: len });
                continue;
            }
            let core = window_len - 2 * context;
            let mut own = 0;
            while own < len {
                let own_end = (own + core).min(len);
                let start = own.saturating_sub(context);
                let end = (start + window_len).min(len);
                let start = end.saturating_sub(window_len).min(start);
                windows.push(Window { protein: p, start, end, own_start: own, own_end });
                own = own_end;
            }
        }
        let tokens: Vec<Vec<&str>> = batch.iter().map(|p| p.merged.split(' ').collect()).collect();
        let mut rows = Vec::with_capacity(windows.len());
        for w in &windows {
            rows.push(self.tokenizer.encode(&tokens[w.protein][w.start..w.end].join(" "))?);
        }
        let organisms: Vec<u32> = windows.iter().map(|w| batch[w.protein].organism_id).collect();
        let enc = crate::tokenizer::pad_rows(&rows, &organisms)?;
        let input = ModelInput::from_encoding(&enc, self.model.config(), self.model.device())?;
        let logits = self.model.forward(&input, ForwardMode::eval(options.attention)).op("prediction forward")?;
        let logits: Vec<Vec<Vec<f32>>> = logits.to_dtype(DType::F32)?.to_device(&Device::Cpu)?.to_vec3()?;
        let mut out: Vec<Result<Vec<Vec<f32>>>> =
            batch.iter().map(|p| Ok(vec![Vec::new(); p.residues.len()])).collect();
        for (w, row_logits) in windows.iter().zip(logits) {
            let Ok(protein_logits) = &mut out[w.protein] else { continue };
            if let Some(pos) =
                (w.own_start..w.own_end).find(|&pos| row_logits[pos - w.start + 1].iter().any(|v| !v.is_finite()))
            {
                let p = &batch[w.protein];
                let head: String = p.protein.chars().take(24).collect();
                out[w.protein] = Err(CodonError::Prediction(format!(
                    "the model gave non-finite logits for residue {} of protein {head}{} ({}): its weights or inputs are broken",
                    pos + 1,
                    if p.protein.chars().count() > 24 { "…" } else { "" },
                    p.organism
                )));
                continue;
            }
            for pos in w.own_start..w.own_end {
                // +1 skips [CLS].
                protein_logits[pos] = row_logits[pos - w.start + 1].clone();
            }
        }
        Ok(out)
    }

    fn predict_prepared(&self, batch: &[Prepared], options: &PredictOptions) -> Result<Vec<Vec<DnaPrediction>>> {
        let logits = self.residue_logits(batch, options)?;
        batch.iter().zip(logits).map(|(prepared, logits)| decode(prepared, &logits?, options)).collect()
    }

    /// Predict the proteins of several requests in shared forward passes, each decoded with its
    /// own options (sampling, seed, `match_protein`, sequences, codon scores): what a server that
    /// batches concurrent requests runs. A protein's result is the one
    /// [`Predictor::predict_batch_with_progress`] gives it under its own options (its samples
    /// come from its own seed, never from its batch). The forward passes take `forward`'s
    /// attention, token budget and padding limit; an item whose options are invalid gets that
    /// error alone, a forward pass that fails gives its error to the proteins it carried, and a
    /// protein whose logits are not finite gets that error alone.
    pub fn predict_each(
        &self,
        items: &[(ProteinInput, PredictOptions)],
        forward: &PredictOptions,
    ) -> Result<EachPredicted> {
        forward.validate()?;
        let checked: Vec<Result<()>> = items.iter().map(|(_, o)| o.validate()).collect();
        let inputs: Vec<ProteinInput> = items
            .iter()
            .zip(&checked)
            .map(|((input, _), ok)| match ok {
                Ok(()) => input.clone(),
                // Refused before any forward pass; its own error replaces the result below.
                Err(_) => ProteinInput { protein: String::new(), ..input.clone() },
            })
            .collect();
        let passes = std::cell::RefCell::new(Vec::new());
        let predicted = self.in_batches(&inputs, forward, &mut |_| {}, |indices, prepared| {
            passes.borrow_mut().push(indices.len());
            // A pass that fails (a device error) fails its own proteins, not the other
            // requests' passes; a protein whose logits are not finite fails alone.
            Ok(match self.residue_logits(prepared, forward) {
                Ok(logits) => indices
                    .iter()
                    .zip(prepared)
                    .zip(logits)
                    .map(|((&i, p), l)| l.and_then(|l| decode(p, &l, &items[i].1)))
                    .collect(),
                Err(e) => {
                    let message = e.to_string();
                    indices.iter().map(|_| Err(CodonError::Prediction(message.clone()))).collect()
                }
            })
        })?;
        let results = checked.into_iter().zip(predicted).map(|(ok, result)| ok.and(result.and_then(|r| r))).collect();
        Ok(EachPredicted { results, pass_sizes: passes.into_inner() })
    }
}

/// What [`Predictor::predict_each`] gives: each item's predictions or error, in order, and the
/// forward passes that carried them.
#[derive(Debug)]
pub struct EachPredicted {
    /// Each item's predictions, or its own error.
    pub results: Vec<Result<Vec<DnaPrediction>>>,
    /// Proteins in each forward pass run (one pass per length bucket), in order.
    pub pass_sizes: Vec<usize>,
}

/// The sizes of consecutive batches of rows of `lengths` tokens (sorted ascending): each batch
/// stays under `max_tokens` (rows × its longest row) and pads at most `max_padding` of its
/// tokens. A row longer than the budget is a batch of its own.
fn length_buckets(lengths: &[usize], max_tokens: usize, max_padding: f64) -> Vec<usize> {
    let mut sizes = Vec::new();
    let (mut rows, mut tokens) = (0, 0);
    for &len in lengths {
        // The longest so far: the batch's rows are padded to it.
        let padded = (rows + 1) * len;
        let wasteful = padded as f64 > (1.0 + max_padding) * (tokens + len) as f64;
        if rows > 0 && (padded > max_tokens || wasteful) {
            sizes.push(rows);
            (rows, tokens) = (0, 0);
        }
        rows += 1;
        tokens += len;
    }
    if rows > 0 {
        sizes.push(rows);
    }
    sizes
}

#[cfg(test)]
mod tests {
    use super::decode::sample_top_p;
    use super::*;

    #[test]
    fn more_sequences_than_the_bound_are_refused() {
        let options = |num_sequences| PredictOptions { deterministic: false, num_sequences, ..Default::default() };
        options(MAX_NUM_SEQUENCES).validate().unwrap();
        let err = options(MAX_NUM_SEQUENCES + 1).validate().unwrap_err().to_string();
        assert_eq!(err, "num_sequences must be at most 100.");
    }

    #[test]
    fn proteins_past_the_residue_limit_are_refused() {
        // A 100-million-residue protein aborted `predict --input`; a million took 2.87 GB.
        let at_limit = "M".repeat(MAX_PREDICTION_RESIDUES);
        assert_eq!(prediction_residues(&at_limit).unwrap().len(), MAX_PREDICTION_RESIDUES + 1);
        let err = prediction_residues(&format!("{at_limit}K")).unwrap_err().to_string();
        assert!(err.contains("100001 residues; at most 100000"), "{err}");
    }

    #[test]
    fn tiny_temperatures_sample_the_argmax() {
        let row = [0.5f32, 3.0, -1.0, 2.5, 7.25, 7.0];
        let allowed = [0u32, 1, 2, 3, 4, 5];
        for temperature in [1e-310, 5e-324, 1e-12] {
            for seed in 0..20 {
                let mut rng = ChaCha8Rng::seed_from_u64(seed);
                assert_eq!(sample_top_p(&row, &allowed, temperature, 0.95, &mut rng), 4, "T={temperature:e}");
            }
        }
        let allowed = [0u32, 2, 3];
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        assert_eq!(sample_top_p(&row, &allowed, 1e-310, 0.95, &mut rng), 3, "the best allowed codon");
    }

    #[test]
    fn batches_hold_similar_lengths_under_the_token_budget() {
        // 100 and 101 pad by 1%; 300 would pad the pair threefold; 3 × 305 > 900 tokens.
        let cpu = MAX_PADDING_FRACTION;
        assert_eq!(length_buckets(&[100, 101, 300, 301, 305], 900, cpu), [2, 2, 1]);
        assert_eq!(length_buckets(&[100, 101, 300, 301, 305], 900, f64::INFINITY), [3, 2], "only the budget splits");
        assert_eq!(length_buckets(&[5000], 900, cpu), [1], "a row over the budget is a batch of its own");
        assert_eq!(length_buckets(&[50; 10], 1, cpu), [1; 10]);
        assert!(length_buckets(&[], 900, cpu).is_empty());
    }
}
