//! `codon-data`: CodonTransformer's data side.
//!
//! - [`prepare`](mod@prepare): CSV / FASTA gene records → upstream-format JSONL training files;
//! - [`JsonlDataset`]: a streaming, counted, sharded, shuffled view of such a file;
//! - [`MlmCollator`]: tokenization, dynamic padding and CodonTransformer's masking;
//! - [`DataLoader`]: worker threads that build batches ahead of training.
//!
//! ```no_run
//! use codon_data::{DataLoader, JsonlDataset, LoaderConfig, MalformedPolicy, MlmCollator};
//! use codon_vocab::CodonTokenizer;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dataset = JsonlDataset::open("train.jsonl", MalformedPolicy::Error)?;
//! let collator = MlmCollator::new(CodonTokenizer::new()?);
//! let loader = DataLoader::new(dataset, collator, LoaderConfig { batch_size: 6, ..Default::default() })?;
//! println!("{} batches per epoch", loader.batches_per_epoch());
//! for batch in loader.epoch(0) {
//!     let batch = batch?;
//!     println!("{} x {}", batch.encoding.batch_size, batch.encoding.seq_len);
//! }
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

pub mod collator;
pub mod dataset;
pub mod error;
pub mod loader;
pub mod prepare;
pub mod record;
pub mod text_input;
pub mod translate;

pub use collator::{synthetic_mlm_batch, MaskingConfig, MlmBatch, MlmCollator, IGNORE_INDEX};
pub use dataset::{JsonlDataset, MalformedPolicy, Shard, UnknownTokens, MAX_UNKNOWN_TOKEN_FRACTION};
pub use error::{DataError, Result};
pub use loader::{mix_seed, DataLoader, EpochBatches, LoaderConfig};
pub use prepare::{prepare, GeneRecord, InputFormat, PrepareOptions, PrepareReport};
pub use record::TrainingRecord;
pub use translate::{check_cds, is_correct_seq, translate, CdsDefect};
