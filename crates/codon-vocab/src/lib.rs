//! `codon-vocab`: CodonTransformer's vocabulary ([`vocab`]), organism table ([`organisms`]),
//! protein and DNA preprocessing and the merged sequence ([`sequence`]) and the tokenizer
//! ([`tokenizer`]). No candle: the data pipeline, the evaluation metrics and the design tools
//! build on it without a tensor library.
//!
//! ```
//! use codon_vocab::{merged_sequence, organism_id, CodonTokenizer};
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

pub mod error;
pub mod organisms;
pub mod sequence;
pub mod tokenizer;
pub mod vocab;

pub use error::{Result, VocabError};
pub use organisms::{
    organism_id, organism_name, parse_organism, OrganismRef, OrganismTable, DEFAULT_ORGANISM, NUM_ORGANISMS, ORGANISMS,
};
pub use sequence::{
    merged_sequence, merged_sequence_with, preprocess_dna, preprocess_protein, replace_ambiguous_codons,
    AmbiguousBehavior, ProteinConfig,
};
pub use tokenizer::{pad_rows, BatchEncoding, CodonTokenizer};
