//! The HTTP side: routes, limits, the API key, and starting and stopping the server.
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use codon_model::{OrganismTable, PredictOptions, Predictor};
use tokio::sync::oneshot;

use codon_eval::References;

use crate::api::{
    organism_ref, ErrorBody, EvaluateRequest, EvaluateResponse, EvaluateResult, Organism, PredictRequest,
    PredictResponse, ProteinResult,
};
use crate::batcher::{self, BatchPolicy, Counters, Job, Lane, Queue, Refused};
use crate::design::{self, Finish};
use crate::histogram::{Histogram, SECONDS};
use crate::jobs::{
    JobProtein, JobReport, JobStatus, Jobs, PartBounds, PartInput, ResultsPage, SqliteJobStore, StoreError,
};

/// What the server listens on and what it accepts.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// The address to bind: 127.0.0.1 unless told otherwise.
    pub host: IpAddr,
    /// The port (0: any free one).
    pub port: u16,
    /// A bearer token every request but `/health` must carry.
    pub api_key: Option<String>,
    /// Largest request body.
    pub max_body_bytes: usize,
    /// Most proteins in one request.
    pub max_proteins: usize,
    /// Most residues in one protein.
    pub max_residues: usize,
    /// Most sequences asked for one protein (`num_sequences`).
    pub max_sequences: usize,
    /// Most codons one request may ask for: residues × sequences, over its proteins (each
    /// carries the model's 64 scores until its answer is made).
    pub max_codons: usize,
    /// Most codons a request with `codon_scores` may ask for: each codon's 64 scores go into the
    /// answer's JSON (about 0.7 KB a codon), so this cap bounds the answer's size.
    pub max_scored_codons: usize,
    /// Most proteins in one batch job (`POST /v1/jobs`).
    pub max_job_proteins: usize,
    /// Most codons one batch job may ask for (its results are kept for an hour).
    pub max_job_codons: usize,
    /// Largest batch job body.
    pub max_job_body_bytes: usize,
    /// How big one part of a batch job may be: the model runs at most one part beside the
    /// predict requests it gathers, so this bounds a predict request's wait behind jobs.
    pub job_part: PartBounds,
    /// The jobs database's size cap, bytes: past it the oldest finished jobs go, and a new job
    /// that still does not fit is refused (503).
    pub jobs_db_max_bytes: u64,
    /// How long a stop waits for the requests in flight and the job parts the model has taken;
    /// past it connections are closed and parts abandoned (they run again at the next start).
    pub stop_grace: Duration,
    /// Most predict requests waiting; past it, 503 with `Retry-After`.
    pub queue_capacity: usize,
    /// How the model's worker gathers requests into batches.
    pub batch: BatchPolicy,
    /// How long a request may wait for its answer; a request still queued then is dropped unrun.
    pub request_timeout: Duration,
    /// The forward passes' attention, token budget and padding limit.
    pub forward: PredictOptions,
    /// Per-organism codon statistics: with them every sequence carries its metrics, and
    /// `/v1/evaluate` its CSI, CFD and %MinMax.
    pub reference: Option<Arc<References>>,
    /// Origins a browser may call the API from (CORS); none: no CORS headers. Requests that
    /// carry another Origin than these or the server's own page are refused (403).
    pub cors_origins: Vec<String>,
    /// DNS names the server answers to besides its address (the Host header; against DNS
    /// rebinding): a request naming another host is refused (421).
    pub allowed_hosts: Vec<String>,
    /// How long a request's head may take to arrive, and how long a kept-alive connection may
    /// sit idle.
    pub header_timeout: Duration,
    /// How long a request's body may take to arrive, from its head.
    pub body_timeout: Duration,
    /// Connections open at once; past it new ones wait to be accepted.
    pub max_connections: usize,
    /// The SQLite file batch jobs are kept in (created with its folder), so that they survive a
    /// restart; `None`: a private temporary file that goes with the server (the `serve` example
    /// defaults to [`crate::jobs::default_db_path`]).
    pub jobs_db: Option<std::path::PathBuf>,
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: 8080,
            api_key: None,
            max_body_bytes: 1 << 20,
            max_proteins: 256,
            max_residues: 10_000,
            max_sequences: codon_model::MAX_NUM_SEQUENCES,
            max_codons: 1_000_000,
            max_scored_codons: 100_000,
            max_job_proteins: 10_000,
            max_job_codons: 20_000_000,
            max_job_body_bytes: 32 << 20,
            job_part: PartBounds::default(),
            jobs_db_max_bytes: crate::jobs::MAX_DB_BYTES,
            stop_grace: STOP_GRACE,
            queue_capacity: 64,
            batch: BatchPolicy { window: Duration::from_millis(5), max_proteins: 256 },
            request_timeout: Duration::from_secs(120),
            forward: PredictOptions::default(),
            reference: None,
            cors_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(60),
            max_connections: 512,
            jobs_db: None,
        }
    }
}

impl ServeConfig {
    /// Refuse settings that cannot work, in one line each: an API key no client can send
    /// (every request would get 401), a CORS origin or host name no browser sends, no
    /// connections or zero timeouts.
    pub fn validate(&self) -> Result<(), ServeError> {
        let refuse = |setting: String, reason: &str| Err(ServeError::Config { setting, reason: reason.to_string() });
        if let Some(key) = &self.api_key {
            if let Some(reason) = crate::net::api_key_problem(key) {
                // The key itself is a secret: not shown.
                return refuse("the API key".into(), reason);
            }
        }
        for origin in &self.cors_origins {
            if let Some(reason) = crate::net::origin_problem(origin) {
                return refuse(format!("CORS origin {origin:?}"), &reason);
            }
        }
        for name in &self.allowed_hosts {
            if let Some(reason) = crate::net::name_problem(name.trim_end_matches('.').to_ascii_lowercase().as_str()) {
                return refuse(format!("host name {name:?}"), reason);
            }
        }
        if !(1..=1_000_000).contains(&self.max_connections) {
            return refuse(format!("connection limit {}", self.max_connections), "from 1 to 1000000");
        }
        if self.job_part.proteins == 0 || self.job_part.residues == 0 {
            return refuse("job part bounds".into(), "at least one protein and one residue");
        }
        if self.jobs_db_max_bytes < MIN_DB_BYTES {
            return refuse(format!("jobs database cap {} bytes", self.jobs_db_max_bytes), "at least 1 MiB");
        }
        for (setting, t) in [("header timeout", self.header_timeout), ("body timeout", self.body_timeout)] {
            if t.is_zero() {
                return refuse(setting.into(), "must be more than zero");
            }
        }
        Ok(())
    }
}

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// A thread or the async runtime could not start, or the server failed while running.
    #[error("the server failed: {0}")]
    Io(#[from] std::io::Error),
    /// A setting that cannot work, refused before the server binds.
    #[error("{setting}: {reason}")]
    Config {
        /// The setting, and its value where that helps.
        setting: String,
        /// Why it cannot work.
        reason: String,
    },
    /// The jobs database could not be opened or read.
    #[error("{0}")]
    Jobs(#[from] StoreError),
}

/// How a server stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped {
    /// Batch jobs still unfinished in the jobs database: the next start on it resumes them.
    pub jobs_left: usize,
}

/// How long a stop waits for the requests in flight before it closes their connections (the
/// default of [`ServeConfig::stop_grace`]).
const STOP_GRACE: Duration = Duration::from_secs(30);

/// The least size cap a jobs database may have.
const MIN_DB_BYTES: u64 = 1 << 20;

/// What the scheduler of batch jobs hears from the handlers.
enum JobEvent {
    /// A job was accepted: its parts are to run.
    New(String),
    /// A job was cancelled: its parts still to run or running are dropped.
    Cancelled(String),
}

/// What the handlers share.
pub(crate) struct AppState {
    queue: Queue,
    counters: Arc<Counters>,
    organisms: OrganismTable,
    config: ServeConfig,
    /// Seconds from a predict request's arrival to its answer.
    latency: Histogram,
    /// Proteins the model predicted (not those it refused, such as an unknown organism).
    predicted: std::sync::atomic::AtomicU64,
    /// The batch jobs, in their database.
    jobs: Jobs,
    /// New and cancelled jobs for the scheduler ([`schedule_jobs`]).
    job_events: tokio::sync::mpsc::UnboundedSender<JobEvent>,
    /// The model's device, for its memory in `/metrics` (NPUs).
    device: candle_core::Device,
    /// Each organism's %MinMax band, computed once when first asked for.
    bands: std::sync::Mutex<std::collections::HashMap<u32, Option<Arc<codon_eval::plot::ProfileBand>>>>,
}

impl AppState {
    /// An organism's %MinMax band from the reference's sequences (cached).
    fn band(&self, organism: Option<u32>) -> Option<Arc<codon_eval::plot::ProfileBand>> {
        let organism = organism?;
        let mut bands = self.bands.lock().unwrap_or_else(|p| p.into_inner());
        bands
            .entry(organism)
            .or_insert_with(|| design::band(self.config.reference.as_deref(), organism).map(Arc::new))
            .clone()
    }
}

/// A server running on threads of its own.
pub struct RunningServer {
    /// The address it listens on.
    pub addr: SocketAddr,
    stop: Option<tokio::sync::watch::Sender<bool>>,
    /// The HTTP thread's end: what it served, sent as it stops.
    ended: Option<std::sync::Mutex<std::sync::mpsc::Receiver<Result<(), ServeError>>>>,
    /// The jobs, counted at the stop.
    store: Jobs,
    /// How long a stop may take past the grace before the threads are left behind.
    grace: Duration,
}

impl RunningServer {
    /// Bind `config`'s address and serve `predictor` until [`RunningServer::stop`] (or a signal the
    /// caller turns into one).
    pub fn start(predictor: Predictor, config: ServeConfig) -> Result<Self, ServeError> {
        config.validate()?;
        // The jobs database first: a path that cannot hold it is one error before anything runs.
        let store: Jobs = match &config.jobs_db {
            Some(path) => Arc::new(SqliteJobStore::open(path, config.jobs_db_max_bytes)?),
            None => Arc::new(SqliteJobStore::temporary(config.jobs_db_max_bytes)?),
        };
        // Jobs a killed or stopped server left are resumed where they stopped.
        store.expire()?;
        let pending = store.unfinished()?;
        let addr = SocketAddr::new(config.host, config.port);
        let listener = std::net::TcpListener::bind(addr).map_err(|source| ServeError::Bind { addr, source })?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let limits = crate::net::ConnLimits::of(&config);
        let grace = config.stop_grace;
        let counters = Arc::new(Counters::default());
        let organisms = predictor.organisms().clone();
        let device = predictor.model().device().clone();
        let (queue, worker) =
            batcher::start(predictor, config.forward.clone(), config.batch, config.queue_capacity, counters.clone())?;
        let (job_events, jobs_in) = tokio::sync::mpsc::unbounded_channel();
        let state = Arc::new(AppState {
            queue,
            counters,
            organisms,
            config,
            latency: Histogram::new(SECONDS),
            predicted: Default::default(),
            jobs: store.clone(),
            job_events,
            device,
            bands: Default::default(),
        });
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let (end, ended) = std::sync::mpsc::channel();
        std::thread::Builder::new().name("codon-serve http".into()).spawn(move || {
            let served = serve_until_stopped(state, listener, pending, jobs_in, stopped, addr, limits, grace, worker);
            let _ = end.send(served);
        })?;
        Ok(Self { addr, stop: Some(stop), ended: Some(std::sync::Mutex::new(ended)), store, grace })
    }

    /// Stop accepting connections, finish the requests in flight and the batch jobs' parts the
    /// model has taken (saved), then return with the number of jobs left to resume.
    pub fn stop(mut self) -> Result<Stopped, ServeError> {
        self.finish()
    }

    /// Serve until SIGINT or SIGTERM, then [`RunningServer::stop`].
    pub fn stop_on_signal(self) -> Result<Stopped, ServeError> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        runtime.block_on(async {
            #[cfg(unix)]
            {
                let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            #[cfg(not(unix))]
            tokio::signal::ctrl_c().await?;
            Ok::<(), std::io::Error>(())
        })?;
        self.stop()
    }

    fn finish(&mut self) -> Result<Stopped, ServeError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
        }
        let Some(ended) = self.ended.take() else { return Ok(Stopped { jobs_left: 0 }) };
        // The HTTP thread keeps to the grace by itself; this bound holds even if it cannot (a
        // handler stuck outside the runtime's control): the threads are then left behind, and
        // with them the parts they ran, which the next start runs again.
        let ended = ended.into_inner().unwrap_or_else(|p| p.into_inner());
        match ended.recv_timeout(self.grace + LEFT_BEHIND_AFTER + Duration::from_secs(2)) {
            Ok(served) => served?,
            Err(_) => {
                eprintln!("codon-serve: the server did not stop within {:?}; its threads were left behind", self.grace)
            }
        }
        Ok(Stopped { jobs_left: self.store.unfinished()?.len() })
    }
}

/// How long past the grace a stop waits for the HTTP thread and the model's worker before it
/// leaves them behind.
const LEFT_BEHIND_AFTER: Duration = Duration::from_secs(3);

/// The HTTP thread: the runtime, the router and the jobs' scheduler until a stop, then a stop
/// bounded by `grace` (the model's worker finishes its batch within it, or is left behind).
#[allow(clippy::too_many_arguments)]
fn serve_until_stopped(
    state: Arc<AppState>,
    listener: std::net::TcpListener,
    pending: Vec<String>,
    jobs_in: tokio::sync::mpsc::UnboundedReceiver<JobEvent>,
    stopped: tokio::sync::watch::Receiver<bool>,
    addr: SocketAddr,
    limits: crate::net::ConnLimits,
    grace: Duration,
    worker: std::thread::JoinHandle<()>,
) -> Result<(), ServeError> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let queue = state.queue.clone();
    let served = runtime.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let scheduler = tokio::spawn(schedule_jobs(state.clone(), pending, jobs_in, stopped.clone()));
        let serve = crate::net::serve(listener, router(state, addr), limits, stopped.clone());
        // On a stop the scheduler finishes the parts the worker has taken and saves them, and
        // the requests in flight are answered, within the grace; a client that never finishes
        // its request cannot hold the stop.
        let mut grace_clock = stopped;
        let deadline = async move {
            let _ = grace_clock.wait_for(|stop| *stop).await;
            tokio::time::sleep(grace).await;
        };
        let all = async move {
            let (served, _) = tokio::join!(serve, scheduler);
            served
        };
        tokio::select! {
            served = all => served,
            () = deadline => Ok(()),
        }
    });
    // Nothing more runs: what waits is dropped, and the worker exits after its batch.
    queue.close();
    drop(queue);
    // Handlers still running go with the runtime (blocking tasks are left to finish alone).
    runtime.shutdown_timeout(Duration::from_millis(500));
    // The worker's batch may be long (a big predict request): it is left behind rather than
    // waited for past the grace (the process exits without it; the parts it ran run again).
    let until = Instant::now() + LEFT_BEHIND_AFTER;
    while !worker.is_finished() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    if worker.is_finished() {
        let _ = worker.join();
    }
    served?;
    Ok(())
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

fn router(state: Arc<AppState>, addr: SocketAddr) -> Router {
    let guard = Arc::new(crate::net::Guard::new(&state.config, addr));
    let any_origin = state.config.cors_origins.iter().any(|o| o.trim() == "*");
    let origins: Vec<HeaderValue> = state.config.cors_origins.iter().filter_map(|o| o.trim().parse().ok()).collect();
    let router = Router::new()
        .route("/", get(crate::page::index))
        .route("/health", get(health))
        .route("/v1/organisms", get(organisms))
        .route("/v1/enzymes", get(enzymes))
        .route("/v1/predict", post(predict))
        .route("/v1/evaluate", post(evaluate))
        .route("/v1/jobs", post(create_job))
        .route("/v1/jobs/{id}", get(job).delete(cancel_job))
        .route("/metrics", get(metrics))
        // The handlers read their bodies with the limit, after the API key.
        .layer(DefaultBodyLimit::disable())
        // Inside CORS, so that an allowed origin's page can read the guard's refusals.
        .layer(axum::middleware::from_fn_with_state(guard, crate::net::guard))
        .with_state(state);
    if origins.is_empty() {
        return router;
    }
    let allowed = if any_origin { tower_http::cors::AllowOrigin::any() } else { origins.into() };
    router.layer(
        tower_http::cors::CorsLayer::new()
            .allow_origin(allowed)
            .allow_methods([axum::http::Method::GET, axum::http::Method::POST, axum::http::Method::DELETE])
            .allow_headers([header::CONTENT_TYPE, header::AUTHORIZATION]),
    )
}

/// A JSON error answer (its message [`clip`]ped: it never echoes megabytes of the request).
fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(ErrorBody { error: clip(&message.into()) })).into_response()
}

/// Most characters of the caller's text an error message repeats in one piece (a quoted value
/// or a word).
const ECHO_CHARS: usize = 100;

/// Most characters in an error message.
const MESSAGE_CHARS: usize = 1_000;

/// `message` with every quoted value and every word longer than [`ECHO_CHARS`] cut to that
/// length (saying how much was cut), and the whole cut to [`MESSAGE_CHARS`]: errors name what
/// they refuse, but a request of long names does not come back as a long answer.
pub(crate) fn clip(message: &str) -> String {
    if message.chars().count() <= ECHO_CHARS {
        return message.to_string();
    }
    let mut out = String::with_capacity(message.len().min(4 * MESSAGE_CHARS));
    // Inside a quote: its character, the characters kept and those cut.
    let mut quote: Option<char> = None;
    let (mut kept, mut cut, mut escaped) = (0usize, 0usize, false);
    let flush = |out: &mut String, cut: &mut usize| {
        if *cut > 0 {
            out.push_str(&format!("… ({cut} more characters)"));
            *cut = 0;
        }
    };
    for c in message.chars() {
        match quote {
            Some(q) if c == q && !escaped => {
                flush(&mut out, &mut cut);
                out.push(c);
                quote = None;
                kept = 0;
            }
            Some(_) => {
                escaped = c == '\\' && !escaped;
                if kept < ECHO_CHARS {
                    out.push(c);
                    kept += 1;
                } else {
                    cut += 1;
                }
            }
            None => {
                if c.is_whitespace() {
                    flush(&mut out, &mut cut);
                    kept = 0;
                    out.push(c);
                } else if c == '"' || c == '`' {
                    flush(&mut out, &mut cut);
                    out.push(c);
                    quote = Some(c);
                    (kept, escaped) = (0, false);
                } else if kept < ECHO_CHARS {
                    out.push(c);
                    kept += 1;
                } else {
                    cut += 1;
                }
            }
        }
    }
    flush(&mut out, &mut cut);
    if out.chars().count() > MESSAGE_CHARS {
        let end = out.char_indices().nth(MESSAGE_CHARS).map_or(out.len(), |(i, _)| i);
        out.truncate(end);
        out.push('…');
    }
    out
}

/// `Err(401)` unless the request carries the configured bearer token.
fn authorize(state: &AppState, headers: &HeaderMap) -> Result<(), Response> {
    let Some(key) = &state.config.api_key else { return Ok(()) };
    if crate::net::key_matches(key, headers.get(header::AUTHORIZATION)) {
        return Ok(());
    }
    let mut response = error(StatusCode::UNAUTHORIZED, "this server needs an API key: Authorization: Bearer KEY");
    response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    Err(response)
}

async fn health(State(state): State<Arc<AppState>>) -> Response {
    Json(serde_json::json!({ "status": "ok", "organisms": state.organisms.len() })).into_response()
}

async fn organisms(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
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
async fn enzymes(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Err(denied) = authorize(&state, &headers) {
        return denied;
    }
    let list: Vec<serde_json::Value> = codon_design::enzymes::ENZYMES
        .iter()
        .map(|(name, site)| serde_json::json!({ "name": name, "site": site }))
        .collect();
    Json(list).into_response()
}

async fn predict(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
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

/// `POST /v1/jobs`'s body: a predict request, its options kept as given (they are saved with
/// the job and read again for each part).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct JobRequest {
    proteins: Vec<crate::api::ProteinItem>,
    #[serde(default)]
    options: Option<serde_json::Value>,
}

/// A job's limits: its proteins and codons.
fn job_limits(config: &ServeConfig) -> Limits {
    Limits { proteins: config.max_job_proteins, codons: config.max_job_codons }
}

/// A 500 for a failure of the jobs database (logged: it is the server's fault, not the caller's).
fn store_failed(e: impl std::fmt::Display) -> Response {
    eprintln!("codon-serve: {e}");
    error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
}

/// `POST /v1/jobs`: a predict request of up to `max_job_proteins` proteins as a job, saved in the
/// jobs database and answered at once (202) with its id; `GET /v1/jobs/{id}` follows it.
async fn create_job(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
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
        Err(e) => Err(store_failed(e)),
    }
}

/// The jobs' parts, taken from each job in turn and run a few at a time (as many as the queue's
/// job lane holds), until the server stops; then the parts still waiting are withdrawn (the next
/// start resumes them) and those the model has taken are finished and saved.
async fn schedule_jobs(
    state: Arc<AppState>,
    pending: Vec<String>,
    mut events: tokio::sync::mpsc::UnboundedReceiver<JobEvent>,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    use std::collections::{HashMap, VecDeque};
    // Each job with the index its next part starts from.
    let mut turns: VecDeque<(String, usize)> = pending.into_iter().map(|id| (id, 0)).collect();
    let mut running = tokio::task::JoinSet::new();
    // Each job's parts under way, to be dropped if it is cancelled.
    let mut under_way: HashMap<String, Vec<tokio::task::AbortHandle>> = HashMap::new();
    let most = state.queue.background_capacity();
    let bounds = state.config.job_part;
    loop {
        if *stopped.borrow() {
            break;
        }
        if running.len() < most {
            if let Some((id, from)) = turns.pop_front() {
                let store = state.jobs.clone();
                let job = id.clone();
                match tokio::task::spawn_blocking(move || store.next_part(&job, from, bounds)).await {
                    Ok(Ok(Some(part))) => {
                        let next = part.first + part.proteins.len();
                        let handle = running.spawn(run_part(state.clone(), id.clone(), part, stopped.clone()));
                        let handles = under_way.entry(id.clone()).or_default();
                        handles.retain(|h| !h.is_finished());
                        handles.push(handle);
                        turns.push_back((id, next));
                    }
                    // Every part of the job has run or runs (or it was cancelled meanwhile).
                    Ok(Ok(None)) => {
                        if let Some(handles) = under_way.get_mut(&id) {
                            handles.retain(|h| !h.is_finished());
                        }
                    }
                    Ok(Err(e)) => fail_job(&state, id, e.to_string()).await,
                    Err(_) => fail_job(&state, id, "reading the job's next part failed".into()).await,
                }
                under_way.retain(|_, handles| !handles.is_empty());
                continue;
            }
        }
        tokio::select! {
            event = events.recv() => match event {
                Some(JobEvent::New(id)) => turns.push_back((id, 0)),
                Some(JobEvent::Cancelled(id)) => {
                    turns.retain(|(job, _)| *job != id);
                    // A part waiting in the queue is dropped unrun (its answer's receiver goes);
                    // one the model runs is finished, and its results not saved.
                    for handle in under_way.remove(&id).unwrap_or_default() {
                        handle.abort();
                    }
                }
                None => break,
            },
            Some(_) = running.join_next(), if !running.is_empty() => {
                // Finished parts' handles go (at most the lane's capacity are under way).
                under_way.retain(|_, handles| {
                    handles.retain(|h| !h.is_finished());
                    !handles.is_empty()
                });
            }
            changed = stopped.changed() => if changed.is_err() { break },
        }
    }
    state.queue.withdraw_background();
    while running.join_next().await.is_some() {}
}

/// Job `id` stopped for good with `why` (logged when even that cannot be saved).
async fn fail_job(state: &Arc<AppState>, id: String, why: String) {
    let store = state.jobs.clone();
    let failed = tokio::task::spawn_blocking(move || store.fail(&id, &why).map_err(|e| format!("job {id}: {e}"))).await;
    if let Ok(Err(e)) = failed {
        eprintln!("codon-serve: {e}");
    }
}

/// A part of job `id`: through the queue's job lane (waiting while it is full), finished as a
/// predict request's answers are, and saved. At a stop a part not yet taken by the model is
/// left for the next start.
async fn run_part(state: Arc<AppState>, id: String, input: PartInput, stopped: tokio::sync::watch::Receiver<bool>) {
    let first = input.first;
    let options = match serde_json::from_value(input.options) {
        Ok(options) => options,
        Err(e) => return fail_job(&state, id, format!("the saved options: {e}")).await,
    };
    let request = PredictRequest { proteins: input.proteins.into_iter().map(Into::into).collect(), options };
    let working = state.clone();
    let prepared = tokio::task::spawn_blocking(move || {
        Prepared::new(&working, request, job_limits(&working.config), true).map_err(|_| ())
    })
    .await;
    let Ok(Ok(prepared)) = prepared else {
        let why = "this server's limits refuse the job's proteins (they changed since it was accepted)";
        return fail_job(&state, id, why.into()).await;
    };
    let results = loop {
        if prepared.items.is_empty() {
            break Vec::new();
        }
        if *stopped.borrow() {
            return;
        }
        let (reply, answer) = oneshot::channel();
        let deadline = Instant::now() + state.config.request_timeout;
        match state.queue.submit_to(Lane::Background, Job { items: prepared.items.clone(), reply, deadline }) {
            // A part dropped unrun (it waited past its deadline, or a stop withdrew it) is sent
            // again unless the server is stopping.
            Ok(()) => match answer.await {
                Ok(results) => break results,
                Err(_) => continue,
            },
            Err(Refused::Full) => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(Refused::Closed) => return,
        }
    };
    let Ok(results) = prepared.finish(&state, results).await else {
        return fail_job(&state, id, "finishing the predictions failed".into()).await;
    };
    let store = state.jobs.clone();
    let job = id.clone();
    match tokio::task::spawn_blocking(move || store.record_part(&job, first, &results)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => fail_job(&state, id, e.to_string()).await,
        Err(_) => fail_job(&state, id, "saving the results failed".into()).await,
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
async fn job(
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
        Ok(Err(e)) => store_failed(e),
        Err(_) => store_failed("the jobs database: reading the job failed"),
    }
}

/// `DELETE /v1/jobs/{id}`: cancel a running job (its parts still to run are dropped, its
/// results so far kept and pageable until it expires; answered with its report), or delete a
/// finished one with its results (204).
async fn cancel_job(
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
        Ok(Err(e)) => store_failed(e),
        Err(_) => store_failed("the jobs database: cancelling the job failed"),
    }
}

/// A request body of at most `limit` bytes: 413 past the limit (read after the API key is
/// checked, and answered in JSON like every other error).
async fn read_body(body: Body, limit: usize) -> Result<axum::body::Bytes, Response> {
    axum::body::to_bytes(body, limit).await.map_err(|e| body_error(&e, limit))
}

/// A body as JSON: 400 when it does not parse, in JSON's words. Its time is in proportion to
/// the body's size: called off the async threads.
fn parse_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, Response> {
    // serde would say "expected struct PredictRequest with 2 elements": the caller wants JSON's words.
    let kind = match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'[') => Some("an array"),
        Some(b'"') => Some("a string"),
        Some(b'n') => Some("null"),
        Some(b't' | b'f') => Some("a boolean"),
        Some(b'-' | b'0'..=b'9') => Some("a number"),
        None => Some("empty"),
        Some(_) => None,
    };
    if let Some(kind) = kind {
        return Err(error(StatusCode::BAD_REQUEST, format!("the body must be a JSON object {{...}}, not {kind}")));
    }
    serde_json::from_slice(bytes)
        .map_err(|e| error(StatusCode::BAD_REQUEST, format!("the request body: {}", json_words(&e.to_string()))))
}

/// A request body of at most `limit` bytes as JSON ([`read_body`], then [`parse_json`] on the
/// blocking pool).
async fn read_json<T: serde::de::DeserializeOwned + Send + 'static>(body: Body, limit: usize) -> Result<T, Response> {
    let bytes = read_body(body, limit).await?;
    tokio::task::spawn_blocking(move || parse_json(&bytes))
        .await
        .unwrap_or_else(|_| Err(error(StatusCode::INTERNAL_SERVER_ERROR, "reading the request failed")))
}

/// Why a body could not be read: its deadline (408), its size limit (413), or the
/// connection (400).
fn body_error(e: &axum::Error, limit: usize) -> Response {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(late) = c.downcast_ref::<crate::net::BodyTimeout>() {
            return error(StatusCode::REQUEST_TIMEOUT, late.to_string());
        }
        if c.is::<http_body_util::LengthLimitError>() {
            return error(StatusCode::PAYLOAD_TOO_LARGE, format!("the request body: over {limit} bytes"));
        }
        cause = c.source();
    }
    error(StatusCode::BAD_REQUEST, format!("the request body: {e}"))
}

/// A serde message in JSON's words: `struct Options with 7 elements` is an object, a
/// sequence an array, a map an object.
fn json_words(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find("struct ") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "struct ".len()..];
        let name_end = after.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(after.len());
        let mut tail = &after[name_end..];
        // " with 2 elements" / " with 1 element"
        if let Some(with) = tail.strip_prefix(" with ") {
            let digits = with.find(|c: char| !c.is_ascii_digit()).unwrap_or(with.len());
            if digits > 0 {
                let words = &with[digits..];
                if let Some(t) = words.strip_prefix(" elements").or_else(|| words.strip_prefix(" element")) {
                    tail = t;
                }
            }
        }
        out.push_str("a JSON object");
        rest = tail;
    }
    out.push_str(rest);
    out.replace("invalid type: sequence", "invalid type: array").replace("invalid type: map", "invalid type: object")
}

/// Longest organism name a request may give: the model's longest, and at least
/// [`MIN_NAME_LIMIT`] characters, so that a near miss gets its suggestions.
fn max_organism_name(organisms: &OrganismTable) -> usize {
    organisms.names().iter().map(|n| n.chars().count()).max().unwrap_or(0).max(MIN_NAME_LIMIT)
}

/// The least [`max_organism_name`] allows.
const MIN_NAME_LIMIT: usize = 200;

/// How much one request may ask for.
#[derive(Clone, Copy)]
pub(crate) struct Limits {
    /// Proteins.
    proteins: usize,
    /// Residues × sequences.
    codons: usize,
}

/// One protein's predictions from the model, or its error.
type Answer = Result<Vec<codon_model::DnaPrediction>, String>;

/// A predict request checked and ready for the model: its proteins with their options, and what
/// finishing their predictions needs.
pub(crate) struct Prepared {
    /// The proteins that go to the model with their options, in order (each organism as its
    /// id: the worker matches no names).
    pub(crate) items: Vec<(codon_model::ProteinInput, PredictOptions)>,
    /// Each protein's organism id (it is in `items`; `None` when organisms were not matched),
    /// or the error that is its answer (an unknown organism: it does not go to the model).
    organisms: Vec<Result<Option<u32>, String>>,
    constraints: Vec<codon_design::Constraint>,
    best_effort: bool,
    codon_scores: bool,
}

impl Prepared {
    /// Check `request` as `predict` checks its input, within `limits`; with `resolve`, match
    /// each organism too (name matching takes time: a job's check leaves it to its parts).
    pub(crate) fn new(
        state: &AppState,
        request: PredictRequest,
        limits: Limits,
        resolve: bool,
    ) -> Result<Self, Response> {
        let config = &state.config;
        let max_proteins = limits.proteins;
        if request.proteins.is_empty() {
            return Err(error(StatusCode::BAD_REQUEST, "proteins: give at least one"));
        }
        if request.proteins.len() > max_proteins {
            let n = request.proteins.len();
            return Err(error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("proteins: {n} in one request; at most {max_proteins}"),
            ));
        }
        let mut options = request.options.to_predict_options();
        let constraints = match request.options.constraints.as_ref().map(design::constraints).transpose() {
            Ok(c) => c.unwrap_or_default(),
            Err(e) => return Err(error(StatusCode::BAD_REQUEST, format!("options.constraints: {e}"))),
        };
        // The scores give each codon's probability and let a repair weigh its changes.
        options.keep_codon_scores = true;
        if options.num_sequences > config.max_sequences {
            let n = options.num_sequences;
            return Err(error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("options: {n} sequences per protein; at most {}", config.max_sequences),
            ));
        }
        if let Err(e) = options.validate() {
            return Err(error(StatusCode::BAD_REQUEST, format!("options: {e}")));
        }
        let longest_name = max_organism_name(&state.organisms);
        let mut items = Vec::with_capacity(request.proteins.len());
        for (i, item) in request.proteins.iter().enumerate() {
            // No organism's name is this long: refused before any name matching, which takes
            // time in proportion to the name.
            if let serde_json::Value::String(name) = &item.organism {
                let chars = name.trim().chars().count();
                if chars > longest_name {
                    return Err(error(
                        StatusCode::BAD_REQUEST,
                        format!("proteins[{i}].organism: a name of {chars} characters; no organism's name is longer than {longest_name}"),
                    ));
                }
            }
            let residues = item.protein.chars().filter(|c| !c.is_whitespace()).count();
            if residues > config.max_residues {
                return Err(error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("proteins[{i}]: {residues} residues; at most {}", config.max_residues),
                ));
            }
            // The letters are checked as `predict` checks them, with its words.
            if let Err(e) = codon_model::prediction_residues(&item.protein) {
                return Err(error(StatusCode::BAD_REQUEST, format!("proteins[{i}]: {e}")));
            }
            match item.to_input() {
                Ok(input) => items.push((input, options.clone())),
                Err(e) => return Err(error(StatusCode::BAD_REQUEST, format!("proteins[{i}]: {e}"))),
            }
        }
        let residues: usize =
            request.proteins.iter().map(|p| p.protein.chars().filter(|c| !c.is_whitespace()).count()).sum();
        let codons = residues.saturating_mul(options.num_sequences.max(1));
        if codons > limits.codons {
            return Err(error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "{residues} residues × {} sequences: at most {} codons in one request",
                    options.num_sequences.max(1),
                    limits.codons
                ),
            ));
        }
        if request.options.codon_scores && codons > config.max_scored_codons {
            return Err(error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "{residues} residues × {} sequences with codon_scores: at most {} codons (each carries 64 scores)",
                    options.num_sequences.max(1),
                    config.max_scored_codons
                ),
            ));
        }
        // Organisms are matched here, on the blocking pool, rather than by the model's worker:
        // an unknown one is its protein's answer (in the model's words) and skips the model.
        let mut organisms = vec![Ok(None); items.len()];
        if resolve {
            organisms = items
                .iter()
                .map(|(input, _)| state.organisms.resolve(&input.organism).map(Some).map_err(|e| e.to_string()))
                .collect();
            let resolved = items.into_iter().zip(&organisms).filter_map(|((mut input, options), organism)| {
                let id = (*organism.as_ref().ok()?)?;
                input.organism = codon_model::OrganismRef::Id(i64::from(id));
                Some((input, options))
            });
            items = resolved.collect();
        }
        let best_effort = request.options.constraints.as_ref().is_some_and(|c| c.best_effort);
        Ok(Self { items, organisms, constraints, best_effort, codon_scores: request.options.codon_scores })
    }

    /// Each protein's answer from its predictions: the constraints' repair, the codons'
    /// probabilities and the metrics, on the runtime's blocking pool (it is the CPU's work).
    pub(crate) async fn finish(
        self,
        state: &Arc<AppState>,
        results: Vec<Result<Vec<codon_model::DnaPrediction>, String>>,
    ) -> Result<Vec<ProteinResult>, Response> {
        let state = state.clone();
        let predicted = results.iter().filter(|r| r.is_ok()).count() as u64;
        state.predicted.fetch_add(predicted, Ordering::Relaxed);
        tokio::task::spawn_blocking(move || {
            let references = state.config.reference.as_deref();
            // The model's answers in the places of the proteins it was given.
            let mut answers = results.into_iter();
            let all: Vec<(Answer, Option<u32>)> = self
                .organisms
                .iter()
                .map(|organism| match organism {
                    Ok(id) => (answers.next().unwrap_or_else(|| Err("the model gave no answer".into())), *id),
                    Err(e) => (Err(e.clone()), None),
                })
                .collect();
            all.into_iter()
                .map(|(r, organism)| {
                    let organism = &organism;
                    let finish = |predictions: Vec<codon_model::DnaPrediction>| {
                        let reference = design::organism_reference(references, *organism)?;
                        let band = reference.as_ref().and_then(|_| state.band(*organism));
                        Finish {
                            constraints: &self.constraints,
                            best_effort: self.best_effort,
                            codon_scores: self.codon_scores,
                            reference: reference.as_ref(),
                            band: band.as_deref(),
                        }
                        .sequences(&predictions)
                    };
                    match r.and_then(finish) {
                        Ok(sequences) => ProteinResult { sequences, error: None },
                        Err(e) => ProteinResult { sequences: Vec::new(), error: Some(clip(&e)) },
                    }
                })
                .collect()
        })
        .await
        .map_err(|_| error(StatusCode::INTERNAL_SERVER_ERROR, "finishing the predictions failed"))
    }
}

async fn evaluate(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
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

async fn metrics(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Err(denied) = authorize(&state, &headers) {
        return denied;
    }
    let c = &state.counters;
    let text = format!(
        "# HELP codon_predict_requests_total Predict requests answered with results (refusals and batch jobs' parts not included).\n\
         # TYPE codon_predict_requests_total counter\n\
         codon_predict_requests_total {}\n\
         # HELP codon_gathered_batches_total Batches of requests the model's worker gathered.\n\
         # TYPE codon_gathered_batches_total counter\n\
         codon_gathered_batches_total {}\n\
         # HELP codon_forward_passes_total Forward passes run (a gathered batch runs one per length bucket).\n\
         # TYPE codon_forward_passes_total counter\n\
         codon_forward_passes_total {}\n\
         # HELP codon_proteins_total Proteins the model predicted, batch jobs' included (not those refused, such as an unknown organism).\n# TYPE codon_proteins_total counter\n\
         codon_proteins_total {}\n\
         # HELP codon_queue_depth Predict requests waiting.\n# TYPE codon_queue_depth gauge\n\
         codon_queue_depth {}\n\
         # HELP codon_expired_total Requests dropped unrun after their caller gave up.\n# TYPE codon_expired_total counter\n\
         codon_expired_total {}\n\
         # HELP codon_jobs_total Batch jobs accepted.\n# TYPE codon_jobs_total counter\n\
         codon_jobs_total {}\n\
         # HELP codon_job_part_proteins_max The most batch-job proteins one gathered batch carried (at most one part).\n# TYPE codon_job_part_proteins_max gauge\n\
         codon_job_part_proteins_max {}\n\
         # HELP codon_job_part_residues_max The most batch-job residues one gathered batch carried.\n# TYPE codon_job_part_residues_max gauge\n\
         codon_job_part_residues_max {}\n\
         # HELP codon_job_part_proteins_beside_predict_max The most batch-job proteins a gathered batch carried beside a predict request.\n# TYPE codon_job_part_proteins_beside_predict_max gauge\n\
         codon_job_part_proteins_beside_predict_max {}\n{}",
        c.requests.load(Ordering::Relaxed),
        c.batches.load(Ordering::Relaxed),
        c.pass_proteins.count(),
        state.predicted.load(Ordering::Relaxed),
        c.queued.load(Ordering::Relaxed),
        c.expired.load(Ordering::Relaxed),
        c.jobs.load(Ordering::Relaxed),
        c.most_job_proteins.load(Ordering::Relaxed),
        c.most_job_residues.load(Ordering::Relaxed),
        c.most_job_proteins_beside_interactive.load(Ordering::Relaxed),
        state.latency.prometheus("codon_predict_seconds", "Seconds from a predict request's arrival to its answer.")
            + &c.pass_proteins.prometheus("codon_forward_pass_proteins", "Proteins per forward pass (the batch sizes)."),
    );
    let text = text + &device_memory(&state.device);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

/// An NPU's memory as Prometheus gauges (`aclrtGetMemInfo`: what the driver has handed out, the
/// allocator's cache included, and the total); nothing on other devices.
fn device_memory(device: &candle_core::Device) -> String {
    let Some(npu) = candle_ascend::ascend_device(device) else { return String::new() };
    let Ok((free, total)) = npu.memory_info() else { return String::new() };
    let name = npu.name();
    format!(
        "# HELP codon_device_memory_used_bytes Device memory in use (the allocator's cache included).\n\
         # TYPE codon_device_memory_used_bytes gauge\n\
         codon_device_memory_used_bytes{{device=\"{name}\"}} {}\n\
         # HELP codon_device_memory_total_bytes Device memory in all.\n# TYPE codon_device_memory_total_bytes gauge\n\
         codon_device_memory_total_bytes{{device=\"{name}\"}} {total}\n",
        total.saturating_sub(free)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_cuts_long_quoted_values_and_words_and_keeps_the_rest() {
        assert_eq!(clip("short"), "short");
        let name = "y".repeat(5_000);
        let clipped = clip(&format!("proteins[0]: unknown organism \"{name}\"; did you mean \"Homo sapiens\"?"));
        assert_eq!(
            clipped,
            format!(
                "proteins[0]: unknown organism \"{}… (4900 more characters)\"; did you mean \"Homo sapiens\"?",
                "y".repeat(100)
            )
        );
        let word = clip(&format!("Invalid organism name: {name}. Please use a valid name."));
        assert!(word.starts_with(&format!("Invalid organism name: {}…", "y".repeat(100))), "{word}");
        assert!(word.ends_with("Please use a valid name."), "{word}");
        // An escaped quote does not end the value.
        let escaped = clip(&format!("\"{}\\\"{}\" after", "a".repeat(99), "b".repeat(300)));
        assert!(escaped.ends_with("more characters)\" after"), "{escaped}");
        let many = clip(&"word ".repeat(1_000));
        assert_eq!(many.chars().count(), MESSAGE_CHARS + 1);
    }
}
