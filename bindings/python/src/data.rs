//! Upstream's `CodonData` helpers that users call, over this library's preprocessing.

use pyo3::prelude::*;

use codon_model::sequence::{preprocess_protein, ProteinConfig};

use crate::errors::value_error;

/// `preprocess_protein_sequence`: upper case, whitespace removed, ambiguous letters resolved at
/// random (upstream's default), letters checked, one final stop `_`.
#[pyfunction]
fn preprocess_protein_sequence(protein: &str) -> PyResult<String> {
    preprocess_protein(protein, &ProteinConfig::default(), &mut rand::rng()).map_err(value_error)
}

/// `get_merged_seq`: the model's input text, `M_ATG A_GCT …` (`M_UNK …` without DNA).
#[pyfunction]
#[pyo3(signature = (protein, dna=""))]
fn merged_sequence(protein: &str, dna: &str) -> PyResult<String> {
    codon_model::merged_sequence(protein, dna).map_err(value_error)
}

/// `get_amino_acid_sequence`'s translation, with `_` for stops.
#[pyfunction]
fn translate(dna: &str) -> PyResult<String> {
    codon_data::translate::translate(dna).map_err(value_error)
}

/// `is_correct_seq`: a start codon, one stop at the end, whole codons of A, C, G and T.
#[pyfunction]
fn is_correct_seq(dna: &str, protein: &str) -> bool {
    codon_data::translate::is_correct_seq(dna, protein)
}

/// The model's vocabulary, token by id (upstream's tokenizer file holds the same).
#[pyfunction]
fn vocabulary() -> Vec<&'static str> {
    codon_model::vocab::VOCAB.to_vec()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(vocabulary, m)?)?;
    m.add_function(wrap_pyfunction!(preprocess_protein_sequence, m)?)?;
    m.add_function(wrap_pyfunction!(merged_sequence, m)?)?;
    m.add_function(wrap_pyfunction!(translate, m)?)?;
    m.add_function(wrap_pyfunction!(is_correct_seq, m)?)
}
