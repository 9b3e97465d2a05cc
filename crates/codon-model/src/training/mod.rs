//! BigBird's masked language model as a [`codon_train::TrainableModel`]: [`MaskedLmModel`]
//! (fine-tuning and pre-training on [`MaskedLmData`]) and [`NewOrganismModel`] (teaching the
//! model an organism it has not seen).
//!
//! ```no_run
//! use codon_model::training::{MaskedLmData, MaskedLmModel};
//! use codon_train::{Precision, Trainer, TrainerConfig};
//! use codon_data::{DataLoader, JsonlDataset, LoaderConfig, MalformedPolicy, MlmCollator};
//! use codon_model::bigbird::{init_weights, AttentionType, BigBirdConfig, BigBirdForMaskedLM};
//! use codon_model::CodonTokenizer;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let device = candle_core::Device::Cpu;
//! let config = BigBirdConfig::default();
//! let weights = init_weights(&config, 0, &device, candle_core::DType::F32)?;
//! let model = MaskedLmModel::new(BigBirdForMaskedLM::from_named(config, weights)?, Precision::Bf16, AttentionType::BlockSparse)?;
//! let dataset = JsonlDataset::open("train.jsonl", MalformedPolicy::Error)?;
//! let loader = DataLoader::new(dataset, MlmCollator::new(CodonTokenizer::new()?), LoaderConfig::default())?;
//! let trainer = Trainer::new(TrainerConfig::builder().learning_rate(5e-5).max_epochs(1).precision(Precision::Bf16).build()?);
//! let report = trainer.fit(&model, &MaskedLmData::new(loader), None)?;
//! println!("{} steps", report.steps.len());
//! # Ok(()) }
//! ```

mod masked_lm;
mod new_organism;

pub use masked_lm::{MaskedLmData, MaskedLmModel};
pub use new_organism::NewOrganismModel;

/// The model's errors stop training like any other.
impl From<crate::CodonError> for codon_train::TrainError {
    fn from(e: crate::CodonError) -> Self {
        codon_train::TrainError::Model(Box::new(e))
    }
}
