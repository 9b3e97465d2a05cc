//! `codon-model`: the model, BigBirdForMaskedLM with full and block-sparse attention
//! ([`bigbird`]), loaded from transformers' files; the [`Predictor`] that turns proteins into
//! DNA; safetensors writing ([`files`]). The vocabulary, organism table, merged-sequence
//! preprocessing and tokenizer are codon-vocab's, re-exported here.
//!
//! ```
//! use codon_model::{merged_sequence, organism_id, CodonTokenizer};
//!
//! let merged = merged_sequence("MAV", "").unwrap();
//! assert_eq!(merged, "M_UNK A_UNK V_UNK __UNK");
//! let tokenizer = CodonTokenizer::new().unwrap();
//! let organism = organism_id("Escherichia coli general").unwrap();
//! let batch = tokenizer.encode_batch(&[&merged], &[organism]).unwrap();
//! assert_eq!(batch.input_ids, [1, 15, 5, 22, 25, 2]);
//! assert_eq!(batch.token_type_ids, [51; 6]);
//! ```
#![warn(missing_docs)]

pub mod bigbird;
pub mod error;
pub mod files;
#[cfg(feature = "hub")]
pub mod hub;
pub mod predict;
#[cfg(feature = "training")]
pub mod training;

/// The candle this library is built on (see `codon_train::candle`): the model's `Tensor` and `Device`.
pub use candle_core as candle;
pub use codon_vocab::{organisms, sequence, tokenizer, vocab, VocabError};
pub use error::{CodonError, Result};
pub use organisms::{
    organism_id, organism_name, parse_organism, OrganismRef, OrganismTable, DEFAULT_ORGANISM, NUM_ORGANISMS, ORGANISMS,
};
pub use predict::{
    prediction_residues, DnaPrediction, EachPredicted, PredictOptions, Predictor, ProteinInput, MAX_NUM_SEQUENCES,
    MAX_PREDICTION_RESIDUES,
};
pub use sequence::{
    merged_sequence, merged_sequence_with, preprocess_dna, preprocess_protein, replace_ambiguous_codons,
    AmbiguousBehavior, ProteinConfig,
};
pub use tokenizer::{pad_rows, BatchEncoding, CodonTokenizer};
