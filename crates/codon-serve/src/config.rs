//! What the server listens on and what it accepts ([`ServeConfig`], checked before it binds),
//! and why it could not start ([`ServeError`]).
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use codon_eval::References;
use codon_model::PredictOptions;

use crate::batcher::BatchPolicy;
use crate::jobs::{JobsDb, PartBounds, StoreError};

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
    /// Where batch jobs are kept, so that they survive a restart: an SQLite file (created with
    /// its folder; one server), or a PostgreSQL database that several replicas share; `None`: a
    /// private temporary file that goes with the server (`codon serve` defaults to
    /// [`crate::jobs::default_db_path`]).
    pub jobs_db: Option<JobsDb>,
    /// How long this server's claim on a part of a job in a shared (PostgreSQL) store lasts
    /// unless renewed (it is renewed every third of it while the part runs): a server that dies
    /// leaves its parts to the others this long after its last renewal. Not used with SQLite.
    pub jobs_lease: Duration,
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
            jobs_lease: crate::jobs::LEASE,
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
            if let Some(reason) = crate::names::api_key_problem(key) {
                // The key itself is a secret: not shown.
                return refuse("the API key".into(), reason);
            }
        }
        for origin in &self.cors_origins {
            if let Some(reason) = crate::names::origin_problem(origin) {
                return refuse(format!("CORS origin {origin:?}"), &reason);
            }
        }
        for name in &self.allowed_hosts {
            if let Some(reason) = crate::names::name_problem(name.trim_end_matches('.').to_ascii_lowercase().as_str()) {
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
        if !(MIN_LEASE..=MAX_LEASE).contains(&self.jobs_lease) {
            return refuse(format!("jobs lease of {} s", self.jobs_lease.as_secs_f64()), "from 1 second to 1 hour");
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

/// How long a stop waits for the requests in flight before it closes their connections (the
/// default of [`ServeConfig::stop_grace`]).
const STOP_GRACE: Duration = Duration::from_secs(30);

/// The least size cap a jobs database may have.
const MIN_DB_BYTES: u64 = 1 << 20;

/// The shortest lease on a part: it is renewed every third of it, so shorter would be renewals
/// more than anything.
const MIN_LEASE: Duration = Duration::from_secs(1);

/// The longest lease: a dead server's parts wait this long for another.
const MAX_LEASE: Duration = Duration::from_secs(3600);
