//! `codon-train`: a reusable trainer for CodonTransformer.
//!
//! AdamW with torch's semantics and f32 state, OneCycleLR (and other schedules), bf16 mixed
//! precision with f32 master weights, f16 with dynamic loss scaling, gradient accumulation
//! and clipping, anomaly detection, JSONL metrics, atomic resumable checkpoints.
//!
//! ```no_run
//! use codon_train::{MaskedLmData, MaskedLmModel, Precision, Trainer, TrainerConfig};
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
#![warn(missing_docs)]

mod buckets;
pub mod checkpoint;
pub mod collective;
pub mod config;
pub mod error;
pub mod malloc_tuning;
pub mod masked_lm;
pub mod model;
pub mod new_organism;
pub mod optim;
pub mod precision;
pub mod progress;
mod run_folder;
pub mod schedule;
mod status;
mod step;
pub mod trainer;

pub use candle_core::backprop::GradientObserver;
pub use collective::Collective;
pub use config::{AnomalyPolicy, TrainerConfig, TrainerConfigBuilder};
pub use error::{Result, TrainError};
pub use malloc_tuning::retain_freed_memory;
pub use masked_lm::{MaskedLmData, MaskedLmModel};
pub use model::{backward_scaled, BatchSource, Checkpointable, TrainableModel};
pub use new_organism::NewOrganismModel;
pub use optim::{clip_by_norm, global_norm, AdamW, AdamWConfig, Parameters};
pub use precision::Precision;
pub use progress::{DeviceProbe, DeviceStepStats, StepMetrics, TrainReport};
pub use run_folder::RunIdentity;
pub use schedule::{Constant, Decay, OneCycleLr, Scheduler, WarmupDecay};
pub use status::RunStatus;
pub use trainer::Trainer;
