//! The HTTP handlers: health, organisms, enzymes, predict, evaluate and metrics here; batch
//! jobs' in [`jobs`].
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use tokio::sync::oneshot;

use crate::api::{
    organism_ref, EvaluateRequest, EvaluateResponse, EvaluateResult, Organism, PredictRequest, PredictResponse,
};
use crate::batcher::{Job, Refused};
use crate::body::{parse_json, read_body, read_json};
use crate::design;
use crate::prepared::{max_organism_name, Limits, Prepared};
use crate::reply::{clip, error};
use crate::state::AppState;

mod jobs;

pub(crate) use jobs::{cancel_job, create_job, job};

/// `Err(401)` unless the request carries the configured bearer token.
pub(crate) fn authorize(state: &AppState, headers: &HeaderMap) -> Result<(), Response> {
    let Some(key) = &state.config.api_key else { return Ok(()) };
    if crate::net::key_matches(key, headers.get(header::AUTHORIZATION)) {
        return Ok(());
    }
    let mut response = error(StatusCode::UNAUTHORIZED, "this server needs an API key: Authorization: Bearer KEY");
    response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    Err(response)
}

pub(crate) async fn health(State(state): State<Arc<AppState>>) -> Response {
    Json(serde_json::json!({ "status": "ok", "organisms": state.organisms.len() })).into_response()
}

pub(crate) async fn organisms(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Err(denied) = authorize(&state, &headers) {
        return denied;
    }
    let list: Vec<Organism> = state
        .organisms
        .names()
        .iter()
        .enumerate()
        .map(|(id, name)| Organism { id: id as u32, name: name.clone() })
        .collect();
    Json(list).into_response()
}

/// `GET /v1/enzymes`: the restriction enzymes `avoid_sites` knows, with their sites.
pub(crate) async fn enzymes(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Err(denied) = authorize(&state, &headers) {
        return denied;
    }
    let list: Vec<serde_json::Value> = codon_design::enzymes::ENZYMES
        .iter()
        .map(|(name, site)| serde_json::json!({ "name": name, "site": site }))
        .collect();
    Json(list).into_response()
}

pub(crate) async fn predict(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    if let Err(denied) = authorize(&state, &headers) {
        return denied;
    }
    let arrived = Instant::now();
    let bytes = match read_body(body, state.config.max_body_bytes).await {
        Ok(bytes) => bytes,
        Err(refused) => return refused,
    };
    // Parsing and checking take time in proportion to the body: off the async threads.
    let working = state.clone();
    let prepared = tokio::task::spawn_blocking(move || {
        let request: PredictRequest = parse_json(&bytes)?;
        let limits = Limits { proteins: working.config.max_proteins, codons: working.config.max_codons };
        Prepared::new(&working, request, limits, true)
    })
    .await;
    let prepared = match prepared {
        Ok(Ok(p)) => p,
        Ok(Err(refused)) => return refused,
        Err(_) => return error(StatusCode::INTERNAL_SERVER_ERROR, "checking the request failed"),
    };
    // Every protein's answer may be known already (unknown organisms): the model is not asked.
    let results = if prepared.items.is_empty() {
        Vec::new()
    } else {
        let (reply, answer) = oneshot::channel();
        let deadline = Instant::now() + state.config.request_timeout;
        match state.queue.submit(Job { items: prepared.items.clone(), reply, deadline }) {
            Ok(()) => {}
            Err(Refused::Full) => {
                let mut busy =
                    error(StatusCode::SERVICE_UNAVAILABLE, "the prediction queue is full; try again shortly");
                busy.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                return busy;
            }
            Err(Refused::Closed) => return error(StatusCode::SERVICE_UNAVAILABLE, "the server is stopping"),
        }
        match tokio::time::timeout(state.config.request_timeout, answer).await {
            Ok(Ok(results)) => results,
            Ok(Err(_)) => {
                return error(StatusCode::SERVICE_UNAVAILABLE, "the request waited past its time in the queue")
            }
            Err(_) => {
                return error(StatusCode::GATEWAY_TIMEOUT, "the prediction took longer than the request's time limit")
            }
        }
    };
    let results = match prepared.finish(&state, results).await {
        Ok(results) => results,
        Err(failed) => return failed,
    };
    state.latency.observe_duration(arrived.elapsed());
    state.counters.requests.fetch_add(1, Ordering::Relaxed);
    Json(PredictResponse { results }).into_response()
}

pub(crate) async fn evaluate(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    if let Err(denied) = authorize(&state, &headers) {
        return denied;
    }
    let request: EvaluateRequest = match read_json(body, state.config.max_body_bytes).await {
        Ok(r) => r,
        Err(refused) => return refused,
    };
    if request.sequences.is_empty() {
        return error(StatusCode::BAD_REQUEST, "sequences: give at least one");
    }
    let max = state.config.max_proteins;
    if request.sequences.len() > max {
        let n = request.sequences.len();
        return error(StatusCode::PAYLOAD_TOO_LARGE, format!("sequences: {n} in one request; at most {max}"));
    }
    let working = state.clone();
    let results = tokio::task::spawn_blocking(move || {
        let references = working.config.reference.as_deref();
        let longest_name = max_organism_name(&working.organisms);
        request
            .sequences
            .iter()
            .map(|item| {
                let organism = item
                    .organism
                    .as_ref()
                    .map(|o| match o {
                        serde_json::Value::String(name) if name.trim().chars().count() > longest_name => Err(format!(
                            "organism: a name of {} characters; no organism's name is longer than {longest_name}",
                            name.trim().chars().count()
                        )),
                        o => organism_ref(o).and_then(|o| working.organisms.resolve(&o).map_err(|e| e.to_string())),
                    })
                    .transpose();
                let metrics = organism.and_then(|organism| {
                    let reference = design::organism_reference(references, organism)?;
                    let band = reference.as_ref().and_then(|_| working.band(organism));
                    design::metrics(&item.dna, reference.as_ref(), band.as_deref())
                });
                match metrics {
                    Ok(metrics) => EvaluateResult { metrics: Some(metrics), error: None },
                    Err(e) => EvaluateResult { metrics: None, error: Some(clip(&e)) },
                }
            })
            .collect()
    })
    .await;
    match results {
        Ok(results) => Json(EvaluateResponse { results }).into_response(),
        Err(_) => error(StatusCode::INTERNAL_SERVER_ERROR, "evaluating the sequences failed"),
    }
}

/// `GET /metrics`: the counters, the latency and the device memory as Prometheus text.
pub(crate) async fn metrics(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Err(denied) = authorize(&state, &headers) {
        return denied;
    }
    let text = crate::metrics::text(&crate::metrics::Readings {
        counters: &state.counters,
        predicted: state.predicted.load(Ordering::Relaxed),
        latency: &state.latency,
        memory: state.memory.as_deref(),
    });
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}
