//! `codon-train`: a reusable trainer.
//!
//! AdamW with torch's semantics and f32 state, OneCycleLR (and other schedules), bf16 mixed
//! precision with f32 master weights, f16 with dynamic loss scaling, gradient accumulation
//! and clipping, anomaly detection, JSONL metrics, atomic resumable checkpoints.
//!
//! The trainer names no model and no device, in its code and in its build (the Ascend bodies of
//! the optimizer step come with the `ascend` feature): a model implements [`TrainableModel`] (BigBird's
//! masked LM does in `codon_model::training`), data-parallel ranks talk through a
//! [`Collective`], and device counters come through a [`DeviceProbe`].
#![warn(missing_docs)]

mod buckets;
pub mod checkpoint;
pub mod collective;
pub mod config;
pub mod error;
pub mod model;
pub mod optim;
pub mod precision;
pub mod progress;
pub mod rendezvous;
mod run_folder;
pub mod schedule;
mod status;
mod step;
mod step_folder;
pub mod trainer;

/// The candle this library is built on: candle-core 0.11.1 with the custom-backend slot, published
/// as `codon-candle-core`. Build a model's tensors with it (`codon_train::candle::Tensor`), and they
/// are the trainer's own type without a second candle in the build.
pub use candle_core as candle;
pub use candle_core::backprop::GradientObserver;
pub use collective::Collective;
pub use config::{AnomalyPolicy, RunIdentity, TrainerConfig, TrainerConfigBuilder};
pub use error::{Result, TrainError};
pub use model::{backward_scaled, BatchSource, Checkpointable, SameBatch, TrainableModel};
pub use optim::{clip_by_norm, global_norm, AdamW, AdamWConfig, Parameters};
pub use precision::Precision;
pub use progress::{DeviceProbe, DeviceSample, DeviceStepStats, StepMetrics, TrainReport};
pub use schedule::{Constant, Decay, OneCycleLr, Scheduler, WarmupDecay};
pub use status::RunStatus;
pub use trainer::Trainer;
