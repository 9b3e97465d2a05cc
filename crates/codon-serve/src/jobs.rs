//! Batch jobs: a file's proteins as one job, predicted a few at a time through the model's
//! queue (behind interactive requests: [`crate::batcher`]), with progress.
//!
//! Jobs live in a database, not in memory ([`JobStore`], [`SqliteJobStore`]): a job's proteins
//! are written when it is accepted, and each part's results as the part finishes (one
//! transaction per part), so a server that is killed resumes its unfinished jobs where they
//! stopped when it starts again on the same file, and serves the finished ones until they
//! expire ([`KEEP_FINISHED`]). Results are read back a page at a time.
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use serde::{Deserialize, Serialize};

use crate::api::{ProteinItem, ProteinResult};

/// Proteins per part of a job.
pub const PART: usize = 8;

/// How long a finished job's results are kept.
pub const KEEP_FINISHED: Duration = Duration::from_secs(3600);

/// Most jobs held at once: past it the oldest finished job goes, and when every job held is
/// running a new one is refused with 503.
pub const MAX_JOBS: usize = 256;

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
}

impl JobStatus {
    fn parse(s: &str) -> Self {
        match s {
            "done" => Self::Done,
            "running" => Self::Running,
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
    /// A page of the results, in order from `offset`, once the job is done.
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
    /// The part's proteins, in order.
    pub proteins: Vec<JobProtein>,
}

/// An unfinished job: the parts it still needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    /// The job's id.
    pub id: String,
    /// Its parts without results (part `k` holds proteins `k * PART ..`), in order.
    pub parts: Vec<usize>,
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
}

/// Where the server keeps its jobs. The server needs only these operations, so a store shared
/// by several replicas (PostgreSQL, say) can stand in for [`SqliteJobStore`] (`docs/serve.md`).
pub trait JobStore: Send + Sync {
    /// A new running job of `proteins` with `options`, under a new unguessable id; `None` when
    /// [`MAX_JOBS`] are running. Expired jobs go first, then the oldest finished one if full.
    fn create(&self, options: &serde_json::Value, proteins: &[JobProtein]) -> Result<Option<String>, StoreError>;
    /// Part `part` of job `id` (its proteins and the job's options); `None` without such a part.
    fn part(&self, id: &str, part: usize) -> Result<Option<PartInput>, StoreError>;
    /// Save the results of the proteins from `first` on, in one transaction; the job is done
    /// when every protein has one. A result already saved is kept (a part run twice counts once).
    fn record_part(&self, id: &str, first: usize, results: &[ProteinResult]) -> Result<(), StoreError>;
    /// Job `id` stopped for good with `error`.
    fn fail(&self, id: &str, error: &str) -> Result<(), StoreError>;
    /// Job `id`'s progress, without results; `None` when unknown or expired.
    fn report(&self, id: &str) -> Result<Option<JobReport>, StoreError>;
    /// At most `limit` of job `id`'s results from `offset` (and at most about
    /// [`MAX_PAGE_BYTES`]).
    fn results_page(&self, id: &str, offset: usize, limit: usize) -> Result<ResultsPage, StoreError>;
    /// The running jobs with the parts they still need, oldest job first.
    fn unfinished(&self) -> Result<Vec<Pending>, StoreError>;
    /// Drop the jobs finished more than [`KEEP_FINISHED`] ago; how many went.
    fn expire(&self) -> Result<usize, StoreError>;
}

/// The server's store, shared by its handlers.
pub type Jobs = std::sync::Arc<dyn JobStore>;

/// The jobs in an SQLite file (WAL mode; one transaction per part). Nothing of a job is kept in
/// memory: its proteins and results are read back from the file when needed.
pub struct SqliteJobStore {
    connection: Mutex<Connection>,
}

/// The default database: `$XDG_DATA_HOME/codon/jobs.sqlite3`, else
/// `~/.local/share/codon/jobs.sqlite3` (the platform's data folder elsewhere).
pub fn default_db_path() -> Option<PathBuf> {
    dirs::data_dir().map(|dir| dir.join("codon").join("jobs.sqlite3"))
}

fn now_secs() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

fn query(op: &'static str) -> impl FnOnce(rusqlite::Error) -> StoreError {
    move |source| StoreError::Query { op, source }
}

impl SqliteJobStore {
    /// Open (or create, with its folder) the jobs database at `path`. Only the server holds it
    /// while it runs: a second server on the same file is refused.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        if let Some(folder) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(folder)
                .map_err(|source| StoreError::Folder { path: path.to_path_buf(), source })?;
        }
        let open = |source| StoreError::Open { path: path.to_path_buf(), source };
        let connection = Connection::open(path).map_err(open)?;
        // Exclusive: a second server on the file would run the same jobs twice.
        connection.pragma_update(None, "locking_mode", "EXCLUSIVE").map_err(open)?;
        let mode: String = connection.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0)).map_err(open)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(open(rusqlite::Error::InvalidParameterName(format!("journal mode {mode}, not WAL"))));
        }
        // WAL with NORMAL survives a killed process (not a power cut), at a fraction of FULL's cost.
        connection.pragma_update(None, "synchronous", "NORMAL").map_err(open)?;
        Self::set_up(connection, path)
    }

    /// A private database in a temporary file that goes when the store is dropped (jobs do not
    /// survive the server).
    pub fn temporary() -> Result<Self, StoreError> {
        let path = Path::new("");
        let connection = Connection::open(path).map_err(|source| StoreError::Open { path: path.into(), source })?;
        Self::set_up(connection, path)
    }

    fn set_up(mut connection: Connection, path: &Path) -> Result<Self, StoreError> {
        let open = |source| StoreError::Open { path: path.to_path_buf(), source };
        let tx = connection.transaction_with_behavior(TransactionBehavior::Exclusive).map_err(open)?;
        let app: i32 = tx.query_row("PRAGMA application_id", [], |r| r.get(0)).map_err(open)?;
        let version: i32 = tx.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(open)?;
        let objects: i64 = tx.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0)).map_err(open)?;
        // Someone else's database: leave it alone.
        if (app != 0 && app != APPLICATION_ID) || (app == 0 && objects > 0) {
            return Err(StoreError::Foreign { path: path.to_path_buf() });
        }
        if app == APPLICATION_ID && version != SCHEMA_VERSION {
            let why = format!("schema version {version}; this server reads version {SCHEMA_VERSION}");
            return Err(open(rusqlite::Error::InvalidParameterName(why)));
        }
        tx.execute_batch(&format!(
            "CREATE TABLE IF NOT EXISTS jobs (
                 id TEXT PRIMARY KEY,
                 status TEXT NOT NULL,
                 total INTEGER NOT NULL,
                 done INTEGER NOT NULL,
                 options TEXT NOT NULL,
                 error TEXT,
                 created INTEGER NOT NULL,
                 finished INTEGER
             );
             CREATE TABLE IF NOT EXISTS proteins (
                 job TEXT NOT NULL,
                 idx INTEGER NOT NULL,
                 item TEXT NOT NULL,
                 result TEXT,
                 PRIMARY KEY (job, idx)
             ) WITHOUT ROWID;
             PRAGMA application_id = {APPLICATION_ID};
             PRAGMA user_version = {SCHEMA_VERSION};"
        ))
        .map_err(open)?;
        tx.commit().map_err(open)?;
        Ok(Self { connection: Mutex::new(connection) })
    }

    fn connection(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.connection.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Drop the jobs finished before `before` (seconds), with their proteins.
fn drop_finished_before(tx: &rusqlite::Transaction<'_>, before: i64) -> Result<usize, StoreError> {
    tx.execute(
        "DELETE FROM proteins WHERE job IN (SELECT id FROM jobs WHERE finished IS NOT NULL AND finished < ?1)",
        [before],
    )
    .map_err(query("dropping expired jobs"))?;
    tx.execute("DELETE FROM jobs WHERE finished IS NOT NULL AND finished < ?1", [before])
        .map_err(query("dropping expired jobs"))
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

impl JobStore for SqliteJobStore {
    fn create(&self, options: &serde_json::Value, proteins: &[JobProtein]) -> Result<Option<String>, StoreError> {
        let options =
            serde_json::to_string(options).map_err(|source| StoreError::Json { op: "saving the options", source })?;
        let mut connection = self.connection();
        let tx = connection.transaction().map_err(query("starting a job"))?;
        drop_finished_before(&tx, now_secs() - keep_secs())?;
        let held: i64 = tx.query_row("SELECT count(*) FROM jobs", [], |r| r.get(0)).map_err(query("counting jobs"))?;
        if held as usize >= MAX_JOBS {
            let oldest: Option<i64> = tx
                .query_row("SELECT min(finished) FROM jobs WHERE finished IS NOT NULL", [], |r| r.get(0))
                .map_err(query("finding the oldest finished job"))?;
            let Some(oldest) = oldest else { return Ok(None) };
            // Everything finished at that second goes: at least the oldest job.
            drop_finished_before(&tx, oldest + 1)?;
        }
        let id = loop {
            let id = new_id(proteins.len());
            let taken: bool = tx
                .query_row("SELECT EXISTS (SELECT 1 FROM jobs WHERE id = ?1)", [&id], |r| r.get(0))
                .map_err(query("choosing an id"))?;
            if !taken {
                break id;
            }
        };
        tx.execute(
            "INSERT INTO jobs (id, status, total, done, options, created) VALUES (?1, 'running', ?2, 0, ?3, ?4)",
            params![id, proteins.len() as i64, options, now_secs()],
        )
        .map_err(query("saving a job"))?;
        {
            let mut insert = tx
                .prepare("INSERT INTO proteins (job, idx, item) VALUES (?1, ?2, ?3)")
                .map_err(query("saving a job's proteins"))?;
            for (i, protein) in proteins.iter().enumerate() {
                let item = serde_json::to_string(protein)
                    .map_err(|source| StoreError::Json { op: "saving a protein", source })?;
                insert.execute(params![id, i as i64, item]).map_err(query("saving a job's proteins"))?;
            }
        }
        tx.commit().map_err(query("saving a job"))?;
        Ok(Some(id))
    }

    fn part(&self, id: &str, part: usize) -> Result<Option<PartInput>, StoreError> {
        let connection = self.connection();
        let options: Option<String> = connection
            .query_row("SELECT options FROM jobs WHERE id = ?1", [id], |r| r.get(0))
            .optional()
            .map_err(query("reading a job"))?;
        let Some(options) = options else { return Ok(None) };
        let options = serde_json::from_str(&options)
            .map_err(|source| StoreError::Json { op: "reading a job's options", source })?;
        let first = part * PART;
        let mut select = connection
            .prepare("SELECT item FROM proteins WHERE job = ?1 AND idx >= ?2 AND idx < ?3 ORDER BY idx")
            .map_err(query("reading a part"))?;
        let items = select
            .query_map(params![id, first as i64, (first + PART) as i64], |r| r.get::<_, String>(0))
            .map_err(query("reading a part"))?;
        let mut proteins = Vec::with_capacity(PART);
        for item in items {
            let item = item.map_err(query("reading a part"))?;
            proteins.push(
                serde_json::from_str(&item).map_err(|source| StoreError::Json { op: "reading a protein", source })?,
            );
        }
        if proteins.is_empty() {
            return Ok(None);
        }
        Ok(Some(PartInput { options, first, proteins }))
    }

    fn record_part(&self, id: &str, first: usize, results: &[ProteinResult]) -> Result<(), StoreError> {
        let mut connection = self.connection();
        let tx = connection.transaction().map_err(query("saving a part"))?;
        let mut saved = 0;
        {
            let mut update = tx
                .prepare("UPDATE proteins SET result = ?1 WHERE job = ?2 AND idx = ?3 AND result IS NULL")
                .map_err(query("saving a part"))?;
            for (i, result) in results.iter().enumerate() {
                let text = serde_json::to_string(result)
                    .map_err(|source| StoreError::Json { op: "saving a result", source })?;
                saved += update.execute(params![text, id, (first + i) as i64]).map_err(query("saving a part"))?;
            }
        }
        tx.execute("UPDATE jobs SET done = done + ?1 WHERE id = ?2", params![saved as i64, id])
            .map_err(query("saving a part"))?;
        tx.execute(
            "UPDATE jobs SET status = 'done', finished = ?1 WHERE id = ?2 AND status = 'running' AND done >= total",
            params![now_secs(), id],
        )
        .map_err(query("saving a part"))?;
        tx.commit().map_err(query("saving a part"))
    }

    fn fail(&self, id: &str, error: &str) -> Result<(), StoreError> {
        self.connection()
            .execute(
                "UPDATE jobs SET status = 'failed', error = ?1, finished = ?2 WHERE id = ?3 AND status = 'running'",
                params![error, now_secs(), id],
            )
            .map_err(query("failing a job"))?;
        Ok(())
    }

    fn report(&self, id: &str) -> Result<Option<JobReport>, StoreError> {
        let expired_before = now_secs() - keep_secs();
        self.connection()
            .query_row(
                "SELECT status, done, total, error FROM jobs WHERE id = ?1 AND (finished IS NULL OR finished >= ?2)",
                params![id, expired_before],
                |r| {
                    Ok(JobReport {
                        id: id.to_string(),
                        status: JobStatus::parse(&r.get::<_, String>(0)?),
                        done: r.get::<_, i64>(1)? as usize,
                        total: r.get::<_, i64>(2)? as usize,
                        offset: None,
                        results: None,
                        next_offset: None,
                        error: r.get(3)?,
                    })
                },
            )
            .optional()
            .map_err(query("reading a job"))
    }

    fn results_page(&self, id: &str, offset: usize, limit: usize) -> Result<ResultsPage, StoreError> {
        let connection = self.connection();
        let total: Option<i64> = connection
            .query_row("SELECT total FROM jobs WHERE id = ?1", [id], |r| r.get(0))
            .optional()
            .map_err(query("reading a job"))?;
        let Some(total) = total else { return Ok(ResultsPage::default()) };
        let mut select = connection
            .prepare("SELECT result FROM proteins WHERE job = ?1 AND idx >= ?2 ORDER BY idx LIMIT ?3")
            .map_err(query("reading results"))?;
        let mut rows = select
            .query(params![id, offset.min(i64::MAX as usize) as i64, limit.min(MAX_PAGE) as i64])
            .map_err(query("reading results"))?;
        let (mut results, mut bytes) = (Vec::new(), 0);
        while let Some(row) = rows.next().map_err(query("reading results"))? {
            // A protein without a result (a job still running) reads as its error.
            let text: String = row
                .get::<_, Option<String>>(0)
                .map_err(query("reading results"))?
                .unwrap_or_else(|| r#"{"error":"no result yet"}"#.to_string());
            bytes += text.len();
            results.push(text);
            if bytes >= MAX_PAGE_BYTES {
                break;
            }
        }
        let end = offset.saturating_add(results.len());
        let next_offset = (end < total as usize && !results.is_empty()).then_some(end);
        Ok(ResultsPage { results, next_offset })
    }

    fn unfinished(&self) -> Result<Vec<Pending>, StoreError> {
        let connection = self.connection();
        let mut select = connection
            .prepare(&format!(
                "SELECT p.job, p.idx / {PART} AS part FROM proteins p JOIN jobs j ON j.id = p.job
                 WHERE j.status = 'running' AND p.result IS NULL
                 GROUP BY p.job, part ORDER BY j.rowid, part"
            ))
            .map_err(query("listing unfinished jobs"))?;
        let rows = select
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as usize)))
            .map_err(query("listing unfinished jobs"))?;
        let mut pending: Vec<Pending> = Vec::new();
        for row in rows {
            let (id, part) = row.map_err(query("listing unfinished jobs"))?;
            match pending.last_mut() {
                Some(last) if last.id == id => last.parts.push(part),
                _ => pending.push(Pending { id, parts: vec![part] }),
            }
        }
        Ok(pending)
    }

    fn expire(&self) -> Result<usize, StoreError> {
        let mut connection = self.connection();
        let tx = connection.transaction().map_err(query("dropping expired jobs"))?;
        let n = drop_finished_before(&tx, now_secs() - keep_secs())?;
        tx.commit().map_err(query("dropping expired jobs"))?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proteins(n: usize) -> Vec<JobProtein> {
        (0..n).map(|_| JobProtein { protein: "MKV".into(), organism: 51.into(), dna: None }).collect()
    }

    fn result() -> ProteinResult {
        ProteinResult { sequences: Vec::new(), error: Some("x".into()) }
    }

    #[test]
    fn a_job_is_done_when_every_protein_has_its_result() {
        let store = SqliteJobStore::temporary().unwrap();
        let options = serde_json::json!({"match_protein": true});
        let id = store.create(&options, &proteins(10)).unwrap().unwrap();
        assert_ne!(store.create(&options, &proteins(3)).unwrap().unwrap(), id, "ids differ");
        let part = store.part(&id, 1).unwrap().unwrap();
        assert_eq!((part.first, part.proteins.len(), &part.options), (8, 2, &options));
        assert!(store.part(&id, 2).unwrap().is_none());
        assert_eq!(store.unfinished().unwrap()[0], Pending { id: id.clone(), parts: vec![0, 1] });
        store.record_part(&id, 8, &[result(), result()]).unwrap();
        // The same part saved twice counts once.
        store.record_part(&id, 8, &[result(), result()]).unwrap();
        let r = store.report(&id).unwrap().unwrap();
        assert_eq!((r.status, r.done, r.total, r.results.is_none()), (JobStatus::Running, 2, 10, true));
        assert_eq!(store.unfinished().unwrap()[0].parts, vec![0]);
        store.record_part(&id, 0, &vec![result(); 8]).unwrap();
        let r = store.report(&id).unwrap().unwrap();
        assert_eq!((r.status, r.done), (JobStatus::Done, 10));
        let page = store.results_page(&id, 3, 4).unwrap();
        assert_eq!((page.results.len(), page.next_offset), (4, Some(7)));
        let last = store.results_page(&id, 7, 100).unwrap();
        assert_eq!((last.results.len(), last.next_offset), (3, None));
        let parsed: ProteinResult = serde_json::from_str(&last.results[0]).unwrap();
        assert_eq!(parsed, result());
        assert!(store.report("nope").unwrap().is_none());
        assert_eq!(store.unfinished().unwrap().len(), 1, "the other job");
    }

    #[test]
    fn a_full_store_drops_its_oldest_finished_job_and_refuses_only_when_all_run() {
        let store = SqliteJobStore::temporary().unwrap();
        let options = serde_json::json!({});
        let first = store.create(&options, &proteins(1)).unwrap().unwrap();
        store.record_part(&first, 0, &[result()]).unwrap();
        let running: Vec<String> =
            (1..MAX_JOBS).map(|_| store.create(&options, &proteins(1)).unwrap().unwrap()).collect();
        assert!(store.create(&options, &proteins(1)).unwrap().is_some(), "the finished job makes room");
        assert!(store.report(&first).unwrap().is_none());
        assert!(store.create(&options, &proteins(1)).unwrap().is_none(), "every job held is running");
        assert!(running.iter().all(|id| store.report(id).unwrap().is_some()));
    }
}
