//! `codon-serve`: CodonTransformer over HTTP. One model, loaded once, runs on a worker thread of
//! its own; the async runtime only parses, checks and answers. Concurrent predict requests that
//! arrive within a short window share forward passes ([`batcher`]), each protein decoded with
//! its own request's options, so a batched answer is the one-by-one answer
//! ([`codon_model::Predictor::predict_each`]).
//!
//! Endpoints (JSON): `GET /health`, `GET /v1/organisms`, `GET /v1/enzymes`, `POST /v1/predict`,
//! `POST /v1/evaluate`, `POST /v1/jobs` with `GET /v1/jobs/{id}`, and `GET /metrics` (Prometheus
//! text); `GET /` is a web page over them.
//! See [`api`] for the bodies.
#![warn(missing_docs)]

pub mod api;
pub mod batcher;
mod body;
pub mod config;
pub mod design;
mod handlers;
pub mod histogram;
mod job_runner;
pub mod jobs;
pub mod metrics;
mod names;
mod net;
mod page;
mod prepared;
mod reply;
pub mod server;
mod state;

pub use config::{ServeConfig, ServeError};
pub use metrics::{DeviceMemory, MemoryReading};
pub use server::{RunningServer, Stopped};
