//! Upstream's `CodonEvaluation` metrics, over this library's implementations of them.

use std::collections::HashMap;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use codon_eval::genetic_code::{codon_index, codon_text, is_stop};
use codon_eval::metrics::{cfd, complexity, gc_content, min_max_profile, similarity, MAX_MINMAX_WINDOW};
use codon_eval::{CodonCounts, CodonFrequencies, CsiWeights, Dna};

use crate::errors::value_error;

/// `{amino acid: ([codons], [frequencies])}`, upstream's codon-frequency table.
type FrequencyTable = HashMap<String, (Vec<String>, Vec<f64>)>;

fn codon(text: &str) -> PyResult<usize> {
    codon_index(text.to_ascii_uppercase().as_bytes())
        .ok_or_else(|| PyValueError::new_err(format!("{text:?} is not a codon (three of A, C, G, T)")))
}

fn dna(text: &str) -> PyResult<Dna> {
    Dna::parse(text).map_err(value_error)
}

fn frequencies(table: FrequencyTable) -> PyResult<CodonFrequencies> {
    let mut frequency = [0.0; 64];
    for (amino_acid, (codons, values)) in table {
        if codons.len() != values.len() {
            return Err(PyValueError::new_err(format!(
                "codon_frequencies[{amino_acid:?}]: {} codons but {} frequencies",
                codons.len(),
                values.len()
            )));
        }
        for (c, f) in codons.iter().zip(values) {
            frequency[codon(c)?] = f;
        }
    }
    Ok(CodonFrequencies::from_frequencies(frequency))
}

/// `get_CSI_weights`: each sense codon's relative adaptiveness in `sequences`.
#[pyfunction]
fn csi_weights(py: Python<'_>, sequences: Vec<String>) -> PyResult<HashMap<&'static str, f64>> {
    let parsed = sequences.iter().map(|s| dna(s)).collect::<PyResult<Vec<_>>>()?;
    let weights =
        py.detach(|| CsiWeights::from_counts(&parsed.iter().collect::<CodonCounts>())).map_err(value_error)?;
    Ok((0..64).filter_map(|c| Some((codon_text(c), weights.weight(c)?))).collect())
}

/// `get_CSI_value`: the geometric mean of `weights` over `dna`'s codons.
#[pyfunction]
fn csi_value(dna: &str, weights: HashMap<String, f64>) -> PyResult<f64> {
    let mut table = [f64::NAN; 64];
    for (c, w) in &weights {
        table[codon(c)?] = *w;
    }
    let sequence = self::dna(dna)?;
    if let Some(missing) = sequence.codons().iter().map(|&c| c as usize).find(|&c| !is_stop(c) && table[c].is_nan()) {
        return Err(PyValueError::new_err(format!("weights: no weight for codon {}", codon_text(missing))));
    }
    Ok(CsiWeights::from_weights(table).csi(&sequence))
}

/// `get_GC_content`: the percentage of G and C.
#[pyfunction]
fn gc(dna: &str) -> f64 {
    gc_content(dna)
}

/// `get_cfd`: the percentage of codons rarer than `threshold` of their amino acid's most frequent.
#[pyfunction]
fn codon_frequency_distribution(dna: &str, codon_frequencies: FrequencyTable, threshold: f64) -> PyResult<f64> {
    cfd(&self::dna(dna)?, &frequencies(codon_frequencies)?, threshold).map_err(value_error)
}

/// `get_min_max_percentage`: the %MinMax profile over windows of `window_size` codons.
#[pyfunction]
fn min_max_percentage(dna: &str, codon_frequencies: FrequencyTable, window_size: usize) -> PyResult<Vec<Option<f64>>> {
    // Refused here too, so the message names upstream's parameter.
    if window_size > MAX_MINMAX_WINDOW {
        return Err(PyValueError::new_err(format!("window_size {window_size}: at most {MAX_MINMAX_WINDOW} codons")));
    }
    min_max_profile(&self::dna(dna)?, &frequencies(codon_frequencies)?, window_size).map_err(value_error)
}

/// `get_sequence_complexity`.
#[pyfunction]
fn sequence_complexity(dna: &str) -> f64 {
    complexity(dna)
}

/// `get_sequence_similarity`: the percentage of positions (or windows) the two sequences share.
#[pyfunction]
fn sequence_similarity(original: &str, predicted: &str, window_length: usize) -> PyResult<f64> {
    similarity(original, predicted, window_length).map_err(value_error)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(csi_weights, m)?)?;
    m.add_function(wrap_pyfunction!(csi_value, m)?)?;
    m.add_function(wrap_pyfunction!(gc, m)?)?;
    m.add_function(wrap_pyfunction!(codon_frequency_distribution, m)?)?;
    m.add_function(wrap_pyfunction!(min_max_percentage, m)?)?;
    m.add_function(wrap_pyfunction!(sequence_complexity, m)?)?;
    m.add_function(wrap_pyfunction!(sequence_similarity, m)?)
}
