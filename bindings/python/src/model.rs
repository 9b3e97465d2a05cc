//! A model opened for prediction, and its `predict` and `score` over batches.

use std::path::PathBuf;

use candle_core::DType;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use codon_app::DeviceSpec;
use codon_design::{repair, ConstraintSpec, Repair, RepairOptions};
use codon_model::bigbird::AttentionType;
use codon_model::predict::SequenceScore;
use codon_model::{DnaPrediction, OrganismRef, PredictOptions, Predictor, ProteinInput};

use crate::errors::{codon_error, load_error, value_error};
use crate::guard::{in_chunks, threads_here};

/// Most sequences one protein may ask for (`num_sequences`), as the `codon` program bounds it: a
/// count past it would only allocate without bound (`2**40` sequences aborted the interpreter).
pub use codon_model::MAX_NUM_SEQUENCES;

/// Tokens in a chunk of a batch on the CPU: Ctrl-C and `progress` wait for the chunk in progress,
/// which takes 2.4 to 3.7 s for CodonTransformer on 2 busy Zen 4 cores (8,192 tokens took 19 to
/// 22 s), and a batch took no longer (docs/python.md).
const CPU_CHUNK_TOKENS: usize = 1024;

/// Tokens in a chunk of a batch: `CPU_CHUNK_TOKENS` on the CPU; on a GPU or an NPU, where a
/// forward pass of the library's largest batch takes a fraction of a second, that batch.
fn chunk_tokens(predictor: &Predictor, options: &PredictOptions) -> usize {
    if predictor.model().device().is_cpu() {
        CPU_CHUNK_TOKENS.min(options.max_batch_tokens)
    } else {
        options.max_batch_tokens
    }
}

/// Tokens of a protein of `residues` residues in a forward pass (`[CLS]` and `[SEP]` added).
fn tokens(residues: usize) -> usize {
    residues.saturating_add(2)
}

/// An organism as upstream takes it: its id or its name.
#[derive(FromPyObject)]
pub enum Organism {
    /// An id in the model's organism table.
    Id(i64),
    /// A name exactly as in the model's organism table.
    Name(String),
}

impl From<Organism> for OrganismRef {
    fn from(o: Organism) -> Self {
        match o {
            Organism::Id(id) => OrganismRef::Id(id),
            Organism::Name(name) => OrganismRef::Name(name),
        }
    }
}

fn attention_type(name: &str) -> PyResult<AttentionType> {
    match name {
        "original_full" => Ok(AttentionType::OriginalFull),
        "block_sparse" => Ok(AttentionType::BlockSparse),
        other => Err(PyValueError::new_err(format!(
            "attention_type {other:?}: expected \"original_full\" or \"block_sparse\""
        ))),
    }
}

fn dtype(name: &str) -> PyResult<DType> {
    match name {
        "float32" | "f32" => Ok(DType::F32),
        "bfloat16" | "bf16" => Ok(DType::BF16),
        "float16" | "f16" => Ok(DType::F16),
        other => {
            Err(PyValueError::new_err(format!("dtype {other:?}: expected \"float32\", \"bfloat16\" or \"float16\"")))
        }
    }
}

/// A BigBird model on a device, with its tokenizer and organism table, ready to predict.
#[pyclass(frozen, module = "codon_ascend._native")]
pub struct Model {
    predictor: Predictor,
    device: String,
    attention: AttentionType,
}

/// Open `model` (a folder, a `.ckpt`/`.pt`/`.safetensors` file or a Hub id; upstream's published
/// model without one) on `device` in `dtype`.
#[pyfunction]
#[pyo3(signature = (model=None, device="cpu", dtype="float32", attention_type="original_full", config=None))]
fn load_model(
    py: Python<'_>,
    model: Option<PathBuf>,
    device: &str,
    dtype: &str,
    attention_type: &str,
    config: Option<PathBuf>,
) -> PyResult<Model> {
    let spec: DeviceSpec = device.parse().map_err(value_error)?;
    let (dtype, attention) = (self::dtype(dtype)?, self::attention_type(attention_type)?);
    threads_here("load_model")?;
    let predictor = py.detach(|| -> anyhow::Result<Predictor> {
        let device = spec.open()?;
        Ok(codon_app::open_predictor(model.as_deref(), config.as_deref(), &device, dtype)?)
    });
    let predictor = predictor.map_err(|e| match e.downcast_ref::<codon_app::DeviceError>() {
        Some(codon_app::DeviceError::NoCuda(id)) => PyRuntimeError::new_err(no_cuda(*id)),
        Some(_) => PyRuntimeError::new_err(codon_app::error_line(e.as_ref())),
        None => load_error(&e),
    })?;
    Ok(Model { predictor, device: spec.to_string(), attention })
}

/// The one line a CPU-only build answers `cuda:N` with: what it is, which build to install and how.
fn no_cuda(id: usize) -> String {
    format!(
        "cuda:{id}: this codon_ascend is the CPU-only build (no CUDA in it); on the GPU host, from a checkout, install \
         the GPU build with `{GPU_INSTALL}` (docs/python.md, \"The GPU build\"), or use device=\"cpu\""
    )
}

/// The documented command that builds and installs the GPU build from a checkout.
const GPU_INSTALL: &str = "bindings/python/install-gpu.sh";

/// `device`'s canonical spelling (`cpu`, `cuda:N`, `npu:N`, `npu-sim:N`), or `ValueError` for a
/// name that is not a device. The device is not opened.
#[pyfunction]
fn canonical_device(device: &str) -> PyResult<String> {
    device.parse::<DeviceSpec>().map(|spec| spec.to_string()).map_err(value_error)
}

/// `progress` as the batch calls take it: `None`, or a callable `progress(done, total)`.
fn callable_or_none(progress: Option<Bound<'_, PyAny>>) -> PyResult<Option<Bound<'_, PyAny>>> {
    match progress {
        Some(p) if p.is_none() => Ok(None),
        Some(p) if !p.is_callable() => Err(PyTypeError::new_err(format!(
            "progress: a callable progress(done, total) or None, not a {}",
            p.get_type().name()?
        ))),
        p => Ok(p),
    }
}

/// Score and, with constraints, the repair of one prediction, as a dict.
fn prediction_dict<'py>(py: Python<'py>, p: DnaPrediction, repaired: Option<Repair>) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("organism", p.organism)?;
    d.set_item("protein", p.protein)?;
    d.set_item("processed_input", p.processed_input)?;
    let score = match (&repaired, &p.codon_log_probs) {
        (Some(r), Some(log_probs)) => SequenceScore::of(log_probs, &r.dna).map_err(|e| codon_error(&e))?,
        _ => p.score,
    };
    d.set_item("predicted_dna", repaired.as_ref().map_or(p.predicted_dna, |r| r.dna.clone()))?;
    score_into(&d, &score)?;
    if let Some(r) = repaired {
        let edits = PyList::empty(py);
        for e in &r.edits {
            let edit = PyDict::new(py);
            edit.set_item("codon", e.codon)?;
            edit.set_item("old", &e.old)?;
            edit.set_item("new", &e.new)?;
            edit.set_item("reason", &e.reason)?;
            edit.set_item("cost", e.cost)?;
            edits.append(edit)?;
        }
        d.set_item("edits", edits)?;
        d.set_item("repair_cost", r.cost)?;
        d.set_item("unmet_constraints", r.remaining.iter().map(ToString::to_string).collect::<Vec<_>>())?;
    }
    Ok(d)
}

fn score_into(d: &Bound<'_, PyDict>, score: &SequenceScore) -> PyResult<()> {
    d.set_item("log_likelihood", score.log_likelihood)?;
    d.set_item("mean_log_likelihood", score.mean_log_likelihood)?;
    d.set_item("least_likely_codons", &score.lowest)
}

#[pymethods]
impl Model {
    /// The device the model runs on (`cpu`, `cuda:N`, `npu:N`, `npu-sim:N`).
    #[getter]
    fn device(&self) -> &str {
        &self.device
    }

    /// The organisms the model knows, in id order.
    #[getter]
    fn organisms(&self) -> Vec<String> {
        self.predictor.organisms().names().to_vec()
    }

    /// Predict DNA for each protein: per protein, a list of `num_sequences` dicts, or the exception
    /// its input raised. Batches proteins of similar length; releases the GIL while it runs, and
    /// between batches runs Python's signal handlers (Ctrl-C) and calls `progress(done, total)`.
    #[pyo3(signature = (
        proteins, organisms, *, deterministic=true, temperature=0.2, top_p=0.95, num_sequences=1,
        match_protein=false, seed=0, attention_type=None, known_dna=None, avoid_sites=vec![],
        avoid_motifs=vec![], gc_window=None, max_homopolymer=None, max_repeat=None, best_effort=false,
        progress=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn predict(
        &self,
        py: Python<'_>,
        proteins: Vec<String>,
        organisms: Vec<Organism>,
        deterministic: bool,
        temperature: f64,
        top_p: f64,
        num_sequences: usize,
        match_protein: bool,
        seed: u64,
        attention_type: Option<&str>,
        known_dna: Option<Vec<Option<String>>>,
        avoid_sites: Vec<String>,
        avoid_motifs: Vec<String>,
        gc_window: Option<(usize, f64, f64)>,
        max_homopolymer: Option<usize>,
        max_repeat: Option<usize>,
        best_effort: bool,
        progress: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let progress = callable_or_none(progress)?;
        if organisms.len() != proteins.len() {
            return Err(PyValueError::new_err(format!(
                "{} proteins but {} organisms: give one organism per protein",
                proteins.len(),
                organisms.len()
            )));
        }
        if num_sequences > MAX_NUM_SEQUENCES {
            return Err(PyValueError::new_err(format!(
                "num_sequences {num_sequences}: at most {MAX_NUM_SEQUENCES} sequences per protein"
            )));
        }
        let known_dna = known_dna.unwrap_or_else(|| vec![None; proteins.len()]);
        if known_dna.len() != proteins.len() {
            return Err(PyValueError::new_err(format!(
                "{} proteins but {} known_dna entries",
                proteins.len(),
                known_dna.len()
            )));
        }
        let constraints = ConstraintSpec { avoid_sites, avoid_motifs, gc_window, max_homopolymer, max_repeat }
            .constraints()
            .map_err(value_error)?;
        let options = PredictOptions {
            deterministic,
            temperature,
            top_p,
            num_sequences,
            match_protein,
            seed,
            attention: attention_type.map(self::attention_type).transpose()?.unwrap_or(self.attention),
            keep_codon_scores: !constraints.is_empty(),
            max_padding_fraction: codon_model::predict::max_padding_fraction_on(self.predictor.model().device()),
            ..Default::default()
        };
        options.validate().map_err(|e| codon_error(&e))?;
        threads_here("Model.predict")?;
        let inputs: Vec<ProteinInput> = proteins
            .into_iter()
            .zip(organisms)
            .zip(known_dna)
            .map(|((protein, organism), known_dna)| ProteinInput { protein, organism: organism.into(), known_dna })
            .collect();
        let repair_options = RepairOptions { best_effort, ..Default::default() };
        let repaired = |p: DnaPrediction| {
            let repaired = match &p.codon_log_probs {
                Some(scores) if !constraints.is_empty() => {
                    Some(repair(&p.predicted_dna, scores, &constraints, &repair_options))
                }
                _ => None,
            };
            (p, repaired)
        };
        let results = in_chunks(
            py,
            &inputs,
            |input: &ProteinInput| tokens(input.protein.len()),
            chunk_tokens(&self.predictor, &options),
            progress.as_ref(),
            |chunk| {
                let predicted = self
                    .predictor
                    .predict_batch_with_progress(chunk, &options, &mut |_| {})
                    .map_err(|e| codon_error(&e))?;
                Ok(predicted
                    .into_iter()
                    .map(|each| each.map(|predictions| predictions.into_iter().map(&repaired).collect::<Vec<_>>()))
                    .collect())
            },
        )?;
        let mut out = Vec::with_capacity(results.len());
        for each in results {
            match each {
                Ok(predictions) => {
                    let list = PyList::empty(py);
                    for (p, repaired) in predictions {
                        let repaired = repaired.transpose().map_err(value_error)?;
                        list.append(prediction_dict(py, p, repaired)?)?;
                    }
                    out.push(list.into_any().unbind());
                }
                Err(e) => out.push(codon_error(&e).into_value(py).into_any()),
            }
        }
        Ok(out)
    }

    /// Score coding sequences: per sequence, a dict with its log-likelihood, mean log-likelihood
    /// and least likely codons, or the exception it raised. Releases the GIL while it runs, and
    /// between batches runs Python's signal handlers (Ctrl-C) and calls `progress(done, total)`.
    #[pyo3(signature = (dna, organisms, *, match_protein=false, attention_type=None, progress=None))]
    fn score(
        &self,
        py: Python<'_>,
        dna: Vec<String>,
        organisms: Vec<Organism>,
        match_protein: bool,
        attention_type: Option<&str>,
        progress: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let progress = callable_or_none(progress)?;
        if organisms.len() != dna.len() {
            return Err(PyValueError::new_err(format!(
                "{} sequences but {} organisms: give one organism per sequence",
                dna.len(),
                organisms.len()
            )));
        }
        let options = PredictOptions {
            match_protein,
            attention: attention_type.map(self::attention_type).transpose()?.unwrap_or(self.attention),
            max_padding_fraction: codon_model::predict::max_padding_fraction_on(self.predictor.model().device()),
            ..Default::default()
        };
        options.validate().map_err(|e| codon_error(&e))?;
        threads_here("Model.score")?;
        let items: Vec<(String, OrganismRef)> = dna.into_iter().zip(organisms.into_iter().map(Into::into)).collect();
        let scores = in_chunks(
            py,
            &items,
            |item: &(String, OrganismRef)| tokens(item.0.len() / 3),
            chunk_tokens(&self.predictor, &options),
            progress.as_ref(),
            |chunk| self.predictor.score_batch(chunk, &options, &mut |_| {}).map_err(|e| codon_error(&e)),
        )?;
        let mut out = Vec::with_capacity(items.len());
        for each in scores {
            match each {
                Ok(score) => {
                    let d = PyDict::new(py);
                    score_into(&d, &score)?;
                    out.push(d.into_any().unbind());
                }
                Err(e) => out.push(codon_error(&e).into_value(py).into_any()),
            }
        }
        Ok(out)
    }

    fn __repr__(&self) -> String {
        let c = self.predictor.model().config();
        format!(
            "Model(layers={}, hidden_size={}, organisms={}, device={:?})",
            c.num_hidden_layers,
            c.hidden_size,
            self.predictor.organisms().len(),
            self.device
        )
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Model>()?;
    m.add("MAX_NUM_SEQUENCES", MAX_NUM_SEQUENCES)?;
    m.add("CUDA", cfg!(feature = "cuda"))?;
    m.add_function(wrap_pyfunction!(canonical_device, m)?)?;
    m.add_function(wrap_pyfunction!(load_model, m)?)
}
