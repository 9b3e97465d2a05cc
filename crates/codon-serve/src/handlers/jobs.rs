//! The batch jobs' handlers: `POST /v1/jobs`, `GET /v1/jobs/{id}` (with its page of results)
//! and `DELETE /v1/jobs/{id}`.
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::authorize;
use crate::api::PredictRequest;
use crate::body::{parse_json, read_body};
use crate::jobs::{JobProtein, JobReport, JobStatus, ResultsPage, StoreError};
use crate::prepared::{job_limits, Prepared};
use crate::reply::error;
use crate::state::{AppState, JobEvent};

/// `POST /v1/jobs`'s body: a predict request, its options kept as given (they are saved with
/// the job and read again for each part).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct JobRequest {
    proteins: Vec<crate::api::ProteinItem>,
    #[serde(default)]
    options: Option<serde_json::Value>,
}

/// A 500 for a failure of the jobs database (logged: it is the server's fault, not the caller's).
fn store_failed(e: impl std::fmt::Display) -> Response {
    eprintln!("codon-serve: {e}");
    error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
}

/// A 503 with `Retry-After` when the jobs database is unreachable for now (a shared store's
/// server restarting), else [`store_failed`].
fn store_error(e: StoreError) -> Response {
    if !e.is_unavailable() {
        return store_failed(e);
    }
    eprintln!("codon-serve: {e}");
    let mut busy = error(StatusCode::SERVICE_UNAVAILABLE, e.to_string());
    busy.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    busy
}

/// `POST /v1/jobs`: a predict request of up to `max_job_proteins` proteins as a job, saved in the
/// jobs database and answered at once (202) with its id; `GET /v1/jobs/{id}` follows it.
pub(crate) async fn create_job(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    if let Err(denied) = authorize(&state, &headers) {
        return denied;
    }
    let bytes = match read_body(body, state.config.max_job_body_bytes).await {
        Ok(bytes) => bytes,
        Err(refused) => return refused,
    };
    // Parsing, checking and saving a job of thousands of proteins is the CPU's and the disk's
    // work: off the async threads.
    let working = state.clone();
    let created = tokio::task::spawn_blocking(move || new_job(&working, &bytes)).await;
    let (id, total) = match created {
        Ok(Ok(created)) => created,
        Ok(Err(refused)) => return refused,
        Err(_) => return store_failed("the jobs database: saving the job failed"),
    };
    state.counters.jobs.fetch_add(1, Ordering::Relaxed);
    // Without a scheduler (the server is stopping) the job waits in the database for the next start.
    let _ = state.job_events.send(JobEvent::New(id.clone()));
    let report = JobReport {
        id,
        status: JobStatus::Running,
        done: 0,
        total,
        offset: None,
        results: None,
        next_offset: None,
        error: None,
    };
    (StatusCode::ACCEPTED, Json(report)).into_response()
}

/// A job from its request body: checked whole as a predict request is, then saved; its id and
/// its number of proteins, or the refusal.
fn new_job(state: &AppState, bytes: &[u8]) -> Result<(String, usize), Response> {
    let request: JobRequest = parse_json(bytes)?;
    let options_json = request.options.unwrap_or_else(|| serde_json::json!({}));
    let options: crate::api::Options = serde_json::from_value(options_json.clone())
        .map_err(|e| error(StatusCode::BAD_REQUEST, format!("the request body: options: {e}")))?;
    if options.codon_scores {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "options.codon_scores: not offered for jobs (their results are kept)",
        ));
    }
    let proteins: Vec<JobProtein> = request
        .proteins
        .iter()
        .map(|p| JobProtein { protein: p.protein.clone(), organism: p.organism.clone(), dna: p.dna.clone() })
        .collect();
    // Checked whole as a predict request is; each part is prepared again from the database.
    Prepared::new(state, PredictRequest { proteins: request.proteins, options }, job_limits(&state.config), false)?;
    let total = proteins.len();
    match state.jobs.create(&options_json, &proteins) {
        Ok(id) => Ok((id, total)),
        Err(e @ (StoreError::TooManyJobs | StoreError::Full { .. })) => {
            let mut busy = error(StatusCode::SERVICE_UNAVAILABLE, e.to_string());
            busy.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("60"));
            Err(busy)
        }
        Err(e) => Err(store_error(e)),
    }
}

/// `offset` and `limit` of `GET /v1/jobs/{id}?offset=&limit=` (`limit` at most [`crate::jobs::MAX_PAGE`]).
fn page_params(query: Option<&str>) -> Result<(usize, usize), Response> {
    let (mut offset, mut limit) = (0, crate::jobs::PAGE);
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let number = || {
            value
                .parse::<usize>()
                .map_err(|_| error(StatusCode::BAD_REQUEST, format!("{key}={value}: give a whole number of results")))
        };
        match key {
            "offset" => offset = number()?,
            "limit" => match number()? {
                0 => return Err(error(StatusCode::BAD_REQUEST, "limit=0: give at least 1 (a page holds up to 1000)")),
                n => limit = n.min(crate::jobs::MAX_PAGE),
            },
            _ => {}
        }
    }
    Ok((offset, limit))
}

/// The report with its page of results, the results' saved JSON passed through unparsed.
fn report_with_page(mut report: JobReport, page: Option<ResultsPage>, offset: usize) -> Response {
    let Some(page) = page else { return Json(report).into_response() };
    report.offset = Some(offset);
    report.next_offset = page.next_offset;
    let head = match serde_json::to_string(&report) {
        Ok(head) => head,
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, format!("the job's report: {e}")),
    };
    let size = head.len() + page.results.iter().map(|r| r.len() + 1).sum::<usize>() + 16;
    let mut body = String::with_capacity(size);
    body.push_str(head.strip_suffix('}').unwrap_or(&head));
    body.push_str(",\"results\":[");
    for (i, result) in page.results.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(result);
    }
    body.push_str("]}");
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// `GET /v1/jobs/{id}?offset=&limit=`: the job's progress, and once done a page of its results
/// (`limit`, [`crate::jobs::PAGE`] by default, from `offset`; `next_offset` while more are left).
pub(crate) async fn job(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    axum::extract::Path(id): axum::extract::Path<String>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> Response {
    if let Err(denied) = authorize(&state, &headers) {
        return denied;
    }
    let (offset, limit) = match page_params(query.as_deref()) {
        Ok(page) => page,
        Err(refused) => return refused,
    };
    let store = state.jobs.clone();
    let job = id.clone();
    let read = tokio::task::spawn_blocking(move || {
        let Some(report) = store.report(&job)? else { return Ok(None) };
        // A finished job's results are pageable, a failed or cancelled one's too (the
        // proteins it did not reach read as their errors).
        let page = match report.status {
            JobStatus::Done | JobStatus::Failed | JobStatus::Cancelled => {
                Some(store.results_page(&job, offset, limit)?)
            }
            JobStatus::Running => None,
        };
        Ok::<_, StoreError>(Some((report, page)))
    })
    .await;
    match read {
        Ok(Ok(Some((report, page)))) => report_with_page(report, page, offset),
        Ok(Ok(None)) => error(StatusCode::NOT_FOUND, format!("no job {id} (finished jobs are kept for an hour)")),
        Ok(Err(e)) => store_error(e),
        Err(_) => store_failed("the jobs database: reading the job failed"),
    }
}

/// `DELETE /v1/jobs/{id}`: cancel a running job (its parts still to run are dropped, its
/// results so far kept and pageable until it expires; answered with its report), or delete a
/// finished one with its results (204).
pub(crate) async fn cancel_job(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Response {
    if let Err(denied) = authorize(&state, &headers) {
        return denied;
    }
    let store = state.jobs.clone();
    let job = id.clone();
    let cancelled = tokio::task::spawn_blocking(move || {
        let Some(before) = store.cancel(&job)? else { return Ok(None) };
        Ok::<_, StoreError>(Some((before, store.report(&job)?)))
    })
    .await;
    match cancelled {
        Ok(Ok(Some((JobStatus::Running, report)))) => {
            let _ = state.job_events.send(JobEvent::Cancelled(id.clone()));
            match report {
                Some(report) => Json(report).into_response(),
                None => StatusCode::NO_CONTENT.into_response(),
            }
        }
        Ok(Ok(Some(_))) => StatusCode::NO_CONTENT.into_response(),
        Ok(Ok(None)) => error(StatusCode::NOT_FOUND, format!("no job {id} (finished jobs are kept for an hour)")),
        Ok(Err(e)) => store_error(e),
        Err(_) => store_failed("the jobs database: cancelling the job failed"),
    }
}
