//! `codon-serve`: CodonTransformer over HTTP. One model, loaded once, runs on a worker thread of
//! its own; the async runtime only parses, checks and answers. Concurrent predict requests that
//! arrive within a short window share forward passes ([`batcher`]), each protein decoded with
//! its own request's options, so a batched answer is the one-by-one answer
//! ([`codon_model::Predictor::predict_each`]).
//!
//! Endpoints (JSON): `GET /health`, `GET /v1/organisms`, `POST /v1/predict`, and `GET /metrics`
//! (Prometheus text). See [`api`] for the bodies.
#![warn(missing_docs)]

pub mod api;
pub mod batcher;
mod server;

pub use server::{RunningServer, ServeConfig, ServeError};
