//! Batch jobs: a file's proteins as one job, predicted a few at a time through the model's
//! queue (behind interactive requests: [`crate::batcher`]), with progress.
//!
//! Jobs live in a database, not in memory ([`JobStore`]): a job's proteins are written when it
//! is accepted, and each part's results as the part finishes (one transaction per part), so a
//! server that is killed resumes its unfinished jobs where they stopped when it starts again on
//! the same database, and serves the finished ones until they expire ([`KEEP_FINISHED`]).
//! Results are read back a page at a time. One server keeps its jobs in an SQLite file
//! ([`SqliteJobStore`]); several replicas share one PostgreSQL database ([`PostgresJobStore`]),
//! claiming parts under a lease so that a replica that dies leaves its parts to the others.
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use serde::{Deserialize, Serialize};

use crate::api::{ProteinItem, ProteinResult};

mod postgres;
mod sqlite;

pub use postgres::{PostgresJobStore, PostgresTarget};
pub use sqlite::{default_db_path, SqliteJobStore};

/// How long a replica's claim on a part lasts by default (`--jobs-lease-secs`): it is renewed
/// while the part runs, and a replica that dies loses it this long after its last renewal.
pub const LEASE: Duration = Duration::from_secs(30);

/// Where the jobs are kept: an SQLite file (one server), or a PostgreSQL database that several
/// replicas share.
#[derive(Clone, Debug)]
pub enum JobsDb {
    /// An SQLite file, created with its folder; one server holds it at a time.
    File(PathBuf),
    /// A PostgreSQL database (`postgres://…`): any number of replicas.
    Postgres(PostgresTarget),
}

impl JobsDb {
    /// `--jobs-db`'s value: a `postgres://` or `postgresql://` URL, else a file's path. A URL
    /// is checked now (its syntax; nothing is connected), and its password never shown.
    pub fn parse(value: &std::ffi::OsStr) -> Result<Self, StoreError> {
        match value.to_str() {
            Some(url) if PostgresTarget::is_url(url) => Ok(Self::Postgres(PostgresTarget::parse(url)?)),
            _ => Ok(Self::File(PathBuf::from(value))),
        }
    }
}

impl From<PathBuf> for JobsDb {
    fn from(path: PathBuf) -> Self {
        Self::File(path)
    }
}

impl From<&Path> for JobsDb {
    fn from(path: &Path) -> Self {
        Self::File(path.to_path_buf())
    }
}

impl std::fmt::Display for JobsDb {
    /// The file's path, or the URL without its password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::File(path) => write!(f, "{}", path.display()),
            Self::Postgres(target) => write!(f, "{target}"),
        }
    }
}

/// What saving a part did ([`JobStore::record_part`]): for a job done meanwhile (another run
/// of the part finished it) every result was saved already; for a cancelled or failed one, none
/// is taken and both are zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Recorded {
    /// Results saved now.
    pub saved: usize,
    /// Results whose protein had one already (saved by another run of the part): kept as they
    /// were, so each protein's result counts once.
    pub already_saved: usize,
}

impl Recorded {
    /// A running job's part of `len` results, `saved` of them new.
    fn of(len: usize, saved: usize) -> Self {
        Self { saved, already_saved: len.saturating_sub(saved) }
    }
}

/// How servers that share a store share its work ([`JobStore::sharing`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sharing {
    /// How often a server looks for jobs other servers accepted, parts whose claims lapsed,
    /// and jobs cancelled elsewhere.
    pub poll: Duration,
    /// Most parts one server holds claims on at once (running or waiting in its queue): a
    /// server that dies leaves at most these to wait for their lease.
    pub parts_in_flight: usize,
}

/// Proteins in one part of a job by default (`--job-part-proteins`).
pub const PART: usize = 8;

/// Residues in one part of a job by default (`--job-part-residues`); a protein longer than
/// this is a part of its own.
pub const PART_RESIDUES: usize = 4_000;

/// How long a finished job's results are kept.
pub const KEEP_FINISHED: Duration = Duration::from_secs(3600);

/// Most jobs held at once: past it the oldest finished job goes, and when every job held is
/// running a new one is refused with 503.
pub const MAX_JOBS: usize = 256;

/// The jobs database's size cap by default (`--jobs-db-max-mb`), in bytes.
pub const MAX_DB_BYTES: u64 = 2 << 30;

/// The write-ahead log is cut back to this size after each checkpoint.
const WAL_LIMIT_BYTES: i64 = 64 << 20;

/// Results in one page of `GET /v1/jobs/{id}` when `limit` is not given.
pub const PAGE: usize = 100;

/// Most results one page may ask for (`limit`).
pub const MAX_PAGE: usize = 1000;

/// A page stops after the result that takes it past this many bytes of JSON (it always holds
/// one), so one poll holds a bounded amount whatever the proteins' lengths.
pub const MAX_PAGE_BYTES: usize = 8 << 20;

/// The `application_id` written into a jobs database, so that another program's SQLite file
/// given by mistake is refused rather than changed ("CODN").
const APPLICATION_ID: i32 = 0x434f_444e;

/// The schema's version (`user_version`).
const SCHEMA_VERSION: i32 = 1;

/// How big one part of a job may be: the model's worker runs at most one part beside the
/// interactive requests it gathers, so these bound how long a predict request can wait behind
/// a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartBounds {
    /// Most proteins in a part (at least one).
    pub proteins: usize,
    /// Most residues in a part; a protein longer than this is a part of its own.
    pub residues: usize,
}

impl Default for PartBounds {
    fn default() -> Self {
        Self { proteins: PART, residues: PART_RESIDUES }
    }
}

/// Where a job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobStatus {
    /// Parts are still being predicted.
    Running,
    /// Every protein has its result (or its own error).
    Done,
    /// The job stopped for good (its proteins could not be run, or its results not saved).
    Failed,
    /// The job was cancelled (`DELETE /v1/jobs/{id}`); the results it had are kept.
    Cancelled,
}

impl JobStatus {
    fn parse(s: &str) -> Self {
        match s {
            "done" => Self::Done,
            "running" => Self::Running,
            "cancelled" => Self::Cancelled,
            _ => Self::Failed,
        }
    }
}

/// `GET /v1/jobs/{id}`: progress, and a page of the results once done.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobReport {
    /// The job's id.
    pub id: String,
    /// Where it stands.
    pub status: JobStatus,
    /// Proteins predicted so far.
    pub done: usize,
    /// Proteins in the job.
    pub total: usize,
    /// The index of the page's first result (with `results`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<usize>,
    /// A page of the results, in order from `offset`, once the job has finished (done, failed
    /// or cancelled; a protein it did not reach reads as its error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub results: Option<Vec<ProteinResult>>,
    /// The `offset` of the next page, while results are left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<usize>,
    /// Why the job failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One protein of a job as it is kept: a predict request's protein item.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobProtein {
    /// Amino-acid letters.
    pub protein: String,
    /// The organism's name, or its id.
    pub organism: serde_json::Value,
    /// Known DNA for infill.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dna: Option<String>,
}

impl From<ProteinItem> for JobProtein {
    fn from(item: ProteinItem) -> Self {
        Self { protein: item.protein, organism: item.organism, dna: item.dna }
    }
}

impl From<JobProtein> for ProteinItem {
    fn from(p: JobProtein) -> Self {
        Self { protein: p.protein, organism: p.organism, dna: p.dna }
    }
}

/// A part of a job to predict: its proteins and the job's options.
#[derive(Debug, Clone)]
pub struct PartInput {
    /// The job's options, as the request gave them.
    pub options: serde_json::Value,
    /// The index of the part's first protein in the job.
    pub first: usize,
    /// The part's proteins, in order (consecutive, each still without a result).
    pub proteins: Vec<JobProtein>,
}

/// A page of a finished job's results, each as its JSON text (passed through without parsing).
#[derive(Debug, Clone, Default)]
pub struct ResultsPage {
    /// The results, in order.
    pub results: Vec<String>,
    /// Where the next page starts, while results are left.
    pub next_offset: Option<usize>,
}

/// Why the jobs database failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database's folder could not be created.
    #[error("cannot create the folder of the jobs database {path}: {source}")]
    Folder {
        /// The database's path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file could not be opened or set up as a jobs database.
    #[error("cannot open the jobs database {path}: {source}")]
    Open {
        /// The database's path.
        path: PathBuf,
        /// Why.
        source: rusqlite::Error,
    },
    /// The file is another program's SQLite database; it is left as it is.
    #[error("{path} is not a jobs database (it holds other data; it was left untouched): give another path")]
    Foreign {
        /// The database's path.
        path: PathBuf,
    },
    /// The path names something that is not a regular file (a device, a folder, a pipe).
    #[error("{path} is not a regular file ({kind}): the jobs database must be a file; give another --jobs-db PATH")]
    NotAFile {
        /// The database's path.
        path: PathBuf,
        /// What it is.
        kind: &'static str,
    },
    /// Another server holds the file (one server per jobs database).
    #[error(
        "another server holds the jobs database {path}: stop it, or give this server a database of its own with --jobs-db PATH"
    )]
    Held {
        /// The database's path.
        path: PathBuf,
    },
    /// Every job held is running ([`MAX_JOBS`]).
    #[error("{MAX_JOBS} jobs are held and all are running; try again later")]
    TooManyJobs,
    /// The database reached its size cap and no finished job is left to make room.
    #[error("the jobs database is full ({cap} bytes at most; --jobs-db-max-mb); try again when jobs have finished")]
    Full {
        /// The cap, in bytes.
        cap: u64,
    },
    /// The file's permissions could not be set.
    #[error("cannot make the jobs database {path} private to its owner: {source}")]
    Permissions {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A query failed.
    #[error("the jobs database: {op}: {source}")]
    Query {
        /// What was being done.
        op: &'static str,
        /// Why.
        source: rusqlite::Error,
    },
    /// A stored value did not read back, or a result did not write.
    #[error("the jobs database: {op}: {source}")]
    Json {
        /// What was being done.
        op: &'static str,
        /// Why.
        source: serde_json::Error,
    },
    /// `--jobs-db`'s PostgreSQL URL or its settings cannot be used (nothing was connected).
    #[error("the jobs database URL: {reason}")]
    PostgresUrl {
        /// Why, without the password.
        reason: String,
    },
    /// The PostgreSQL server refused or failed an operation for good (a wrong password, a
    /// database that does not exist, a missing privilege).
    #[error("the jobs database {target}: {op}: {reason}")]
    Postgres {
        /// The database, without its password.
        target: String,
        /// What was being done.
        op: &'static str,
        /// The server's or the connection's words.
        reason: String,
    },
    /// The PostgreSQL server could not be reached, or the connection kept failing, after
    /// retrying with backoff; nothing saved was lost, and the operation may be tried again.
    #[error("the jobs database {target} is unreachable ({op}; retried for {retried:?}): {reason}")]
    Unavailable {
        /// The database, without its password.
        target: String,
        /// What was being done.
        op: &'static str,
        /// How long it was retried.
        retried: Duration,
        /// The last failure.
        reason: String,
    },
    /// The PostgreSQL database (the schema tables are made in) holds other tables; it is left
    /// as it is.
    #[error("{target} is not a jobs database (its schema {schema} holds other tables: {tables}; it was left untouched): give an empty database or schema")]
    PostgresForeign {
        /// The database, without its password.
        target: String,
        /// The schema looked in.
        schema: String,
        /// A few of the tables found.
        tables: String,
    },
    /// The PostgreSQL database holds jobs of another version of the schema; it is left as it is.
    #[error("the jobs database {target} has schema version {found}; this server reads version {expected} (it was left untouched)")]
    PostgresVersion {
        /// The database, without its password.
        target: String,
        /// The version found.
        found: String,
        /// The version this server reads.
        expected: i32,
    },
}

impl StoreError {
    /// Whether the store could not be reached for a while (retried and given up), rather than
    /// refused the operation: the same operation may succeed later.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Unavailable { .. })
    }
}

/// Where the server keeps its jobs: an SQLite file for one server ([`SqliteJobStore`]), or a
/// PostgreSQL database several replicas share ([`PostgresJobStore`], `docs/serve.md`).
pub trait JobStore: Send + Sync {
    /// A new running job of `proteins` with `options`, under a new unguessable id. Expired jobs
    /// go first, then the oldest finished ones while the store is full (of jobs, or of bytes);
    /// [`StoreError::TooManyJobs`] or [`StoreError::Full`] when that is not enough.
    fn create(&self, options: &serde_json::Value, proteins: &[JobProtein]) -> Result<String, StoreError>;
    /// The next part of running job `id` from protein `from` on: the consecutive proteins
    /// without a result from the first such one, within `bounds` (at least one protein);
    /// `None` when the job is not running or no protein from `from` on lacks its result. A
    /// shared store claims the part for this server (other servers skip it while the claim
    /// holds).
    fn next_part(&self, id: &str, from: usize, bounds: PartBounds) -> Result<Option<PartInput>, StoreError>;
    /// Save the results of the proteins from `first` on, in one transaction, while the job
    /// runs (a cancelled or failed job takes no more); the job is done when every protein has
    /// one. A result already saved is kept (a part run twice counts once).
    fn record_part(&self, id: &str, first: usize, results: &[ProteinResult]) -> Result<Recorded, StoreError>;
    /// Job `id` stopped for good with `error`.
    fn fail(&self, id: &str, error: &str) -> Result<(), StoreError>;
    /// Cancel job `id` if it runs (its results so far are kept until it expires), or delete it
    /// with its results if it has finished; the status it had, `None` when unknown.
    fn cancel(&self, id: &str) -> Result<Option<JobStatus>, StoreError>;
    /// Job `id`'s progress, without results; `None` when unknown or expired.
    fn report(&self, id: &str) -> Result<Option<JobReport>, StoreError>;
    /// At most `limit` of job `id`'s results from `offset` (and at most about
    /// [`MAX_PAGE_BYTES`]).
    fn results_page(&self, id: &str, offset: usize, limit: usize) -> Result<ResultsPage, StoreError>;
    /// The running jobs' ids, oldest job first.
    fn unfinished(&self) -> Result<Vec<String>, StoreError>;
    /// Drop the jobs finished more than [`KEEP_FINISHED`] ago; how many went.
    fn expire(&self) -> Result<usize, StoreError>;
    /// How servers sharing this store share its work; `None` (the default) for a store that one
    /// server holds alone.
    fn sharing(&self) -> Option<Sharing> {
        None
    }
    /// Give back the claims on parts this server took and will not finish (it is stopping), so
    /// that the other servers take them at once rather than when their leases end.
    fn release_claims(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

fn now_secs() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

/// A new unguessable id (128 bits from the standard library's randomly keyed hashers).
fn new_id(salt: usize) -> String {
    use std::hash::{BuildHasher, Hasher};
    let state = std::collections::hash_map::RandomState::new();
    let (mut a, mut b) = (state.build_hasher(), state.build_hasher());
    a.write_usize(salt);
    b.write_u128(SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    format!("{:016x}{:016x}", a.finish(), b.finish())
}

fn keep_secs() -> i64 {
    KEEP_FINISHED.as_secs() as i64
}

/// Residues of a protein as a part counts them (its letters, whitespace aside).
fn residues_of(protein: &JobProtein) -> usize {
    protein.protein.chars().filter(|c| !c.is_whitespace()).count()
}

/// What a page shows for a protein the job stopped before.
const NOT_PREDICTED: &str = r#"{"error":"not predicted: the job stopped before this protein"}"#;

/// The server's store, shared by its handlers.
pub type Jobs = std::sync::Arc<dyn JobStore>;
