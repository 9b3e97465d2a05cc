//! The jobs in a PostgreSQL database that several replicas share ([`PostgresJobStore`]): any
//! replica accepts a job and answers its polls, every replica works on every job, and parts are
//! claimed under a lease so that a replica that dies leaves its unfinished parts to the others.
//!
//! A replica claims a part with `SELECT … FOR UPDATE SKIP LOCKED` on the proteins without a
//! result whose claim is missing or lapsed, and marks them `claimed_by` itself until
//! `claimed_until` (now plus the lease, on the database's clock); it renews its claims every
//! third of a lease while their parts wait and run, and gives them back when it stops. A part's
//! results are saved in one transaction that keeps any result already saved, so a part run twice
//! (its claim lapsed while it ran) counts once. Each operation runs on a small runtime of the
//! store's own and is retried with backoff when the connection is lost.
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod};

use super::{
    keep_secs, new_id, residues_of, JobProtein, JobReport, JobStatus, JobStore, PartBounds, PartInput, Recorded,
    ResultsPage, Sharing, StoreError, MAX_JOBS, MAX_PAGE, MAX_PAGE_BYTES, NOT_PREDICTED,
};
use crate::api::ProteinResult;

mod passfile;
mod retry;
mod schema;
mod target;
mod tls;

use retry::Failure;
pub use target::PostgresTarget;

/// Connections one replica keeps at most.
const POOL_SIZE: usize = 8;

/// How long an operation is retried while the connection fails before it gives up
/// ([`StoreError::Unavailable`]).
const RETRY_FOR: Duration = Duration::from_secs(30);

/// How long one attempt at an operation may take.
const ATTEMPT_LIMIT: Duration = Duration::from_secs(60);

/// Parts one replica holds claims on at once: one running, the next ones waiting, so that the
/// model is never idle for a round trip; a replica that dies leaves at most these to their lease.
const PARTS_IN_FLIGHT: usize = 4;

/// How often a replica looks for jobs others accepted, at most.
const POLL: Duration = Duration::from_secs(1);

/// The advisory lock taken while a job is accepted or room is made ("CODN" and 2): the job
/// count and the byte cap are then checked by one replica at a time.
const ROOM_LOCK: i64 = 0x434f_444e_0000_0002;

/// What the store's operations share.
struct Inner {
    pool: Pool,
    /// The database without its password.
    shown: String,
    /// The password, scrubbed from any message that would carry it.
    secret: Option<String>,
    /// This replica's name in `claimed_by`: its host, process and a random tag.
    me: String,
    /// How long a claim lasts without renewal.
    lease: Duration,
    /// The jobs' data cap, counted from their text ([`footprint`]).
    max_bytes: u64,
}

/// A runtime of the store's own, shut down without blocking when the store goes (a runtime
/// dropped inside another's tasks would panic).
struct OwnRuntime(Option<tokio::runtime::Runtime>);

impl Drop for OwnRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

/// The jobs in a PostgreSQL database shared by any number of replicas (`docs/serve.md`).
pub struct PostgresJobStore {
    inner: Arc<Inner>,
    runtime: OwnRuntime,
    /// The TLS version of the first connection, or `None` when it is not encrypted.
    tls: Option<String>,
}

impl PostgresJobStore {
    /// Connect to `target` (with libpq's variables for what its URL leaves out), check its
    /// schema and create the tables in an empty one: a database whose schema holds other tables
    /// ([`StoreError::PostgresForeign`]) or jobs of another version
    /// ([`StoreError::PostgresVersion`]) is refused, and nothing is written to it. The jobs'
    /// data is capped at `max_bytes`; this replica's claims last `lease` unless renewed.
    pub fn open(target: &PostgresTarget, max_bytes: u64, lease: Duration) -> Result<Self, StoreError> {
        let settings = target.settings(&|key| std::env::var(key).ok().filter(|v| !v.is_empty()))?;
        let connector = tls::connector(settings.ssl_mode, settings.root_cert.as_deref())?;
        let failed = |reason: String| StoreError::Postgres { target: settings.shown.clone(), op: "starting", reason };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("codon-serve postgres")
            .enable_all()
            .build()
            .map_err(|e| failed(e.to_string()))?;
        let connect_timeout = settings.config.get_connect_timeout().copied().unwrap_or(ATTEMPT_LIMIT);
        let secret = settings.config.get_password().map(|p| String::from_utf8_lossy(p).into_owned());
        // Verified: a connection is checked before it is lent, so one the server dropped (a
        // restart) is replaced rather than failing the operation.
        let manager = Manager::from_config(
            settings.config,
            connector,
            ManagerConfig { recycling_method: RecyclingMethod::Verified },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(ATTEMPT_LIMIT))
            .create_timeout(Some(connect_timeout + Duration::from_secs(5)))
            .recycle_timeout(Some(Duration::from_secs(5)))
            .build()
            .map_err(|e| failed(e.to_string()))?;
        let inner = Arc::new(Inner { pool, shown: settings.shown, secret, me: replica_name(), lease, max_bytes });
        let mut store = Self { inner, runtime: OwnRuntime(Some(runtime)), tls: None };
        store.call("opening", RETRY_FOR, |mut client, inner| async move {
            schema::set_up(&mut client, &inner.shown).await
        })?;
        store.tls = store.call("reading the connection's TLS", RETRY_FOR, |client, _| async move {
            let row =
                client.query_opt("SELECT version FROM pg_stat_ssl WHERE pid = pg_backend_pid() AND ssl", &[]).await?;
            Ok(row.map(|r| r.get::<_, String>(0)))
        })?;
        if let Some(runtime) = &store.runtime.0 {
            runtime.spawn(renew_claims(store.inner.clone()));
        }
        Ok(store)
    }

    /// The TLS version the connection uses (such as `TLSv1.3`), or `None` when it is not
    /// encrypted (a unix socket, `sslmode=disable`, or a server that offers no TLS).
    pub fn tls(&self) -> Option<&str> {
        self.tls.as_deref()
    }

    /// This replica's name in the `claimed_by` column: its host, process id and a random tag.
    pub fn replica(&self) -> &str {
        &self.inner.me
    }

    /// Run `attempt` with a pooled connection on the store's runtime, trying again with backoff
    /// while it fails for the connection's sake, for at most `retry_for`.
    fn call<T, F, Fut>(&self, op: &'static str, retry_for: Duration, attempt: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Fn(Object, Arc<Inner>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, Failure>> + Send + 'static,
    {
        let inner = self.inner.clone();
        let gone = || StoreError::Postgres {
            target: self.inner.shown.clone(),
            op,
            reason: "the store's runtime has stopped".into(),
        };
        let Some(runtime) = &self.runtime.0 else { return Err(gone()) };
        let (answer, answered) = std::sync::mpsc::sync_channel(1);
        runtime.spawn(async move {
            let _ = answer.send(retrying(&inner, op, retry_for, attempt).await);
        });
        // A blocking wait, not a runtime's block_on: the caller may be on another runtime.
        answered.recv().unwrap_or_else(|_| Err(gone()))
    }
}

/// `attempt` until it succeeds, fails for good, or has failed for the connection's sake for
/// `retry_for`.
async fn retrying<T, F, Fut>(
    inner: &Arc<Inner>,
    op: &'static str,
    retry_for: Duration,
    attempt: F,
) -> Result<T, StoreError>
where
    F: Fn(Object, Arc<Inner>) -> Fut,
    Fut: Future<Output = Result<T, Failure>>,
{
    let started = Instant::now();
    let mut delay = retry::first_backoff();
    loop {
        let outcome = match inner.pool.get().await {
            Ok(client) => match tokio::time::timeout(ATTEMPT_LIMIT, attempt(client, inner.clone())).await {
                Ok(outcome) => outcome,
                Err(_) => Err(Failure::TimedOut),
            },
            Err(e) => Err(Failure::from(e)),
        };
        let failure = match outcome {
            Ok(value) => return Ok(value),
            Err(Failure::Store(e)) => return Err(e),
            Err(failure) => failure,
        };
        let reason = inner.scrub(failure.describe());
        if !failure.is_transient() {
            return Err(StoreError::Postgres { target: inner.shown.clone(), op, reason });
        }
        if started.elapsed() + delay > retry_for {
            return Err(StoreError::Unavailable {
                target: inner.shown.clone(),
                op,
                retried: started.elapsed(),
                reason,
            });
        }
        tokio::time::sleep(delay).await;
        delay = retry::next_backoff(delay);
    }
}

impl Inner {
    /// `text` without the password.
    fn scrub(&self, text: String) -> String {
        match &self.secret {
            Some(secret) if !secret.is_empty() => text.replace(secret.as_str(), "***"),
            _ => text,
        }
    }

    /// The lease in seconds, for `make_interval`.
    fn lease_secs(&self) -> f64 {
        self.lease.as_secs_f64()
    }
}

/// This replica's name: `host/pid/tag`.
fn replica_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".into());
    format!("{host}/{}/{}", std::process::id(), &new_id(0)[..8])
}

/// Every third of a lease, push this replica's claims on parts of running jobs a lease ahead; a
/// failure is said once until renewals succeed again.
async fn renew_claims(inner: Arc<Inner>) {
    let every = inner.lease / 3;
    let mut failing = false;
    loop {
        tokio::time::sleep(every).await;
        let renewed = async {
            let client = inner.pool.get().await.map_err(Failure::from)?;
            client
                .execute(
                    "UPDATE proteins p SET claimed_until = now() + make_interval(secs => $2)
                     FROM jobs j
                     WHERE p.claimed_by = $1 AND p.result IS NULL AND j.id = p.job AND j.status = 'running'",
                    &[&inner.me, &inner.lease_secs()],
                )
                .await
                .map_err(Failure::from)
        };
        match tokio::time::timeout(every.max(Duration::from_millis(100)), renewed).await {
            Ok(Ok(_)) => failing = false,
            outcome if !failing => {
                failing = true;
                let why = match outcome {
                    Ok(Err(failure)) => inner.scrub(failure.describe()),
                    _ => "the server did not answer in time".into(),
                };
                eprintln!("codon-serve: the jobs database {}: renewing this server's claims: {why}", inner.shown);
            }
            _ => {}
        }
    }
}

/// What a job's text is counted as against the cap: about twice its bytes (the row, its key and
/// the write-ahead log's copy), as the SQLite store counts it.
fn footprint(bytes: usize) -> i64 {
    2 * (bytes as i64 + 24)
}

/// The database's clock in whole seconds (created, finished and expiry use it, so replicas agree).
const NOW_SECS: &str = "extract(epoch from now())::bigint";

/// Drop the jobs finished before `now - keep` (seconds), with their proteins; how many went.
async fn drop_expired(tx: &deadpool_postgres::Transaction<'_>) -> Result<usize, Failure> {
    let cut = format!("{NOW_SECS} - {}", keep_secs());
    tx.execute(
        &format!(
            "DELETE FROM proteins WHERE job IN (SELECT id FROM jobs WHERE finished IS NOT NULL AND finished < {cut})"
        ),
        &[],
    )
    .await?;
    let n = tx.execute(&format!("DELETE FROM jobs WHERE finished IS NOT NULL AND finished < {cut}"), &[]).await?;
    Ok(n as usize)
}

/// Drop job `id` with its proteins.
async fn drop_job(tx: &deadpool_postgres::Transaction<'_>, id: &str) -> Result<(), Failure> {
    tx.execute("DELETE FROM proteins WHERE job = $1", &[&id]).await?;
    tx.execute("DELETE FROM jobs WHERE id = $1", &[&id]).await?;
    Ok(())
}

/// Drop the finished job that finished first (never `except`); whether there was one.
async fn drop_oldest_finished(tx: &deadpool_postgres::Transaction<'_>, except: &str) -> Result<bool, Failure> {
    let oldest = tx
        .query_opt(
            "SELECT id FROM jobs WHERE finished IS NOT NULL AND id <> $1 ORDER BY finished, id LIMIT 1",
            &[&except],
        )
        .await?;
    match oldest {
        Some(row) => drop_job(tx, row.get::<_, &str>(0)).await.map(|()| true),
        None => Ok(false),
    }
}

/// The jobs' data as counted against the cap.
async fn used_bytes(tx: &deadpool_postgres::Transaction<'_>) -> Result<i64, Failure> {
    Ok(tx.query_one("SELECT coalesce(sum(bytes), 0)::bigint FROM jobs", &[]).await?.get(0))
}

fn json_error(op: &'static str) -> impl Fn(serde_json::Error) -> StoreError {
    move |source| StoreError::Json { op, source }
}

/// A job's proteins and options as saved, and what they count against the cap.
struct NewJob {
    id: String,
    options: String,
    items: Vec<String>,
    bytes: i64,
}

/// Save `job` unless a try whose answer was lost saved it already; room is made first.
async fn insert_job(mut client: Object, inner: Arc<Inner>, job: Arc<NewJob>) -> Result<String, Failure> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&ROOM_LOCK]).await?;
    if tx.query_opt("SELECT 1 FROM jobs WHERE id = $1", &[&job.id]).await?.is_some() {
        return Ok(job.id.clone());
    }
    drop_expired(&tx).await?;
    loop {
        let held: i64 = tx.query_one("SELECT count(*) FROM jobs", &[]).await?.get(0);
        if (held as usize) < MAX_JOBS {
            break;
        }
        if !drop_oldest_finished(&tx, "").await? {
            return Err(StoreError::TooManyJobs.into());
        }
    }
    while used_bytes(&tx).await?.saturating_add(job.bytes) as u64 > inner.max_bytes {
        if !drop_oldest_finished(&tx, "").await? {
            return Err(StoreError::Full { cap: inner.max_bytes }.into());
        }
    }
    tx.execute(
        &format!(
            "INSERT INTO jobs (id, status, total, done, options, created, bytes) VALUES ($1, 'running', $2, 0, $3, {NOW_SECS}, $4)"
        ),
        &[&job.id, &(job.items.len() as i64), &job.options, &job.bytes],
    )
    .await?;
    tx.execute(
        "INSERT INTO proteins (job, idx, item)
         SELECT $1, t.i - 1, t.item FROM unnest($2::text[]) WITH ORDINALITY AS t(item, i)",
        &[&job.id, &job.items],
    )
    .await?;
    tx.commit().await?;
    Ok(job.id.clone())
}

/// Claim the next part of job `id` from `from` for this replica (see [`JobStore::next_part`]).
async fn claim_part(
    mut client: Object,
    inner: Arc<Inner>,
    id: Arc<str>,
    from: i64,
    bounds: PartBounds,
) -> Result<Option<PartInput>, Failure> {
    let tx = client.transaction().await?;
    let job = tx.query_opt("SELECT options FROM jobs WHERE id = $1 AND status = 'running'", &[&&*id]).await?;
    let Some(job) = job else { return Ok(None) };
    let options: String = job.get(0);
    // Rows another replica is claiming right now are skipped, not waited for; rows it has
    // claimed are passed over until their lease lapses.
    let select = tx
        .prepare_cached(
            "SELECT idx, item FROM proteins
             WHERE job = $1 AND idx >= $2 AND result IS NULL AND (claimed_until IS NULL OR claimed_until < now())
             ORDER BY idx LIMIT $3 FOR UPDATE SKIP LOCKED",
        )
        .await?;
    let rows = tx.query(&select, &[&&*id, &from, &(bounds.proteins.max(1) as i64)]).await?;
    let Some(first) = rows.first().map(|r| r.get::<_, i64>(0)) else { return Ok(None) };
    let (mut proteins, mut residues) = (Vec::new(), 0usize);
    for row in &rows {
        if row.get::<_, i64>(0) != first + proteins.len() as i64 {
            break;
        }
        let protein: JobProtein = serde_json::from_str(row.get(1)).map_err(json_error("reading a protein"))?;
        let n = residues_of(&protein);
        if !proteins.is_empty() && residues + n > bounds.residues {
            break;
        }
        residues += n;
        proteins.push(protein);
    }
    let end = first + proteins.len() as i64;
    let claim = tx
        .prepare_cached(
            "UPDATE proteins SET claimed_by = $1, claimed_until = now() + make_interval(secs => $2)
             WHERE job = $3 AND idx >= $4 AND idx < $5",
        )
        .await?;
    tx.execute(&claim, &[&inner.me, &inner.lease_secs(), &&*id, &first, &end]).await?;
    tx.commit().await?;
    let options = serde_json::from_str(&options).map_err(json_error("reading a job's options"))?;
    Ok(Some(PartInput { options, first: first as usize, proteins }))
}

/// Save a part's results (see [`JobStore::record_part`]).
async fn save_part(
    mut client: Object,
    inner: Arc<Inner>,
    id: Arc<str>,
    indices: Arc<Vec<i64>>,
    texts: Arc<Vec<String>>,
) -> Result<Recorded, Failure> {
    let tx = client.transaction().await?;
    // The job's row first: saves of one job go one at a time, and a cancel waits for them.
    let status = tx.query_opt("SELECT status FROM jobs WHERE id = $1 FOR UPDATE", &[&&*id]).await?;
    match status.map(|r| r.get::<_, String>(0)).as_deref() {
        Some("running") => {}
        // Finished by another run of its parts (a lapsed claim): every result was there already.
        Some("done") => return Ok(Recorded::of(texts.len(), 0)),
        _ => return Ok(Recorded::default()),
    }
    let save = tx
        .prepare_cached(
            "UPDATE proteins p SET result = r.result, claimed_by = NULL, claimed_until = NULL
             FROM unnest($2::bigint[], $3::text[]) AS r(idx, result)
             WHERE p.job = $1 AND p.idx = r.idx AND p.result IS NULL
             RETURNING octet_length(r.result)",
        )
        .await?;
    let saved = tx.query(&save, &[&&*id, &*indices, &*texts]).await?;
    let added: i64 = saved.iter().map(|r| footprint(r.get::<_, i32>(0).max(0) as usize)).sum();
    let count = saved.len() as i64;
    let finish = tx
        .prepare_cached(&format!(
            "UPDATE jobs SET done = done + $2, bytes = bytes + $3,
                 status = CASE WHEN done + $2 >= total THEN 'done' ELSE status END,
                 finished = CASE WHEN done + $2 >= total THEN {NOW_SECS} ELSE finished END
             WHERE id = $1"
        ))
        .await?;
    tx.execute(&finish, &[&&*id, &count, &added]).await?;
    if added > 0 && used_bytes(&tx).await? as u64 > inner.max_bytes {
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&ROOM_LOCK]).await?;
        while used_bytes(&tx).await? as u64 > inner.max_bytes {
            if !drop_oldest_finished(&tx, &id).await? {
                return Err(StoreError::Full { cap: inner.max_bytes }.into());
            }
        }
    }
    tx.commit().await?;
    Ok(Recorded::of(texts.len(), saved.len()))
}

impl JobStore for PostgresJobStore {
    fn create(&self, options: &serde_json::Value, proteins: &[JobProtein]) -> Result<String, StoreError> {
        let options = serde_json::to_string(options).map_err(json_error("saving the options"))?;
        let items = proteins
            .iter()
            .map(|p| serde_json::to_string(p).map_err(json_error("saving a protein")))
            .collect::<Result<Vec<String>, _>>()?;
        let bytes = footprint(options.len()) + items.iter().map(|i| footprint(i.len())).sum::<i64>();
        // The id is chosen once: a try whose commit's answer was lost finds its job saved.
        let job = Arc::new(NewJob { id: new_id(items.len()), options, items, bytes });
        self.call("saving a job", RETRY_FOR, move |client, inner| insert_job(client, inner, job.clone()))
    }

    fn next_part(&self, id: &str, from: usize, bounds: PartBounds) -> Result<Option<PartInput>, StoreError> {
        let id: Arc<str> = id.into();
        let from = from.min(i64::MAX as usize) as i64;
        self.call("claiming a part", RETRY_FOR, move |client, inner| {
            claim_part(client, inner, id.clone(), from, bounds)
        })
    }

    fn record_part(&self, id: &str, first: usize, results: &[ProteinResult]) -> Result<Recorded, StoreError> {
        let texts = results
            .iter()
            .map(|r| serde_json::to_string(r).map_err(json_error("saving a result")))
            .collect::<Result<Vec<String>, _>>()?;
        let indices: Arc<Vec<i64>> = Arc::new((0..texts.len()).map(|i| (first + i) as i64).collect());
        let (id, texts): (Arc<str>, _) = (id.into(), Arc::new(texts));
        self.call("saving a part", RETRY_FOR, move |client, inner| {
            save_part(client, inner, id.clone(), indices.clone(), texts.clone())
        })
    }

    fn fail(&self, id: &str, error: &str) -> Result<(), StoreError> {
        let (id, error) = (id.to_string(), error.to_string());
        self.call("failing a job", RETRY_FOR, move |client, _| {
            let (id, error) = (id.clone(), error.clone());
            async move {
                client
                    .execute(
                        &format!(
                            "UPDATE jobs SET status = 'failed', error = $1, finished = {NOW_SECS} WHERE id = $2 AND status = 'running'"
                        ),
                        &[&error, &id],
                    )
                    .await?;
                Ok(())
            }
        })
    }

    fn cancel(&self, id: &str) -> Result<Option<JobStatus>, StoreError> {
        let id = id.to_string();
        // Set once this call's cancel has been sent to commit: a try after a lost answer then
        // takes the job it finds cancelled for its own doing, rather than deleting it.
        let sent = Arc::new(AtomicBool::new(false));
        self.call("cancelling a job", RETRY_FOR, move |mut client, _| {
            let (id, sent) = (id.clone(), sent.clone());
            async move {
                let tx = client.transaction().await?;
                let row = tx.query_opt("SELECT status FROM jobs WHERE id = $1 FOR UPDATE", &[&id]).await?;
                let Some(status) = row.map(|r| JobStatus::parse(r.get(0))) else { return Ok(None) };
                if status == JobStatus::Cancelled && sent.load(Ordering::SeqCst) {
                    return Ok(Some(JobStatus::Running));
                }
                if status == JobStatus::Running {
                    tx.execute(
                        &format!(
                            "UPDATE jobs SET status = 'cancelled', error = 'cancelled', finished = {NOW_SECS} WHERE id = $1"
                        ),
                        &[&id],
                    )
                    .await?;
                    sent.store(true, Ordering::SeqCst);
                } else {
                    drop_job(&tx, &id).await?;
                }
                tx.commit().await?;
                Ok(Some(status))
            }
        })
    }

    fn report(&self, id: &str) -> Result<Option<JobReport>, StoreError> {
        let id = id.to_string();
        self.call("reading a job", RETRY_FOR, move |client, _| {
            let id = id.clone();
            async move {
                let select = client
                    .prepare_cached(&format!(
                        "SELECT status, done, total, error FROM jobs
                         WHERE id = $1 AND (finished IS NULL OR finished >= {NOW_SECS} - {})",
                        keep_secs()
                    ))
                    .await?;
                let row = client.query_opt(&select, &[&id]).await?;
                Ok(row.map(|r| JobReport {
                    status: JobStatus::parse(r.get(0)),
                    done: r.get::<_, i64>(1) as usize,
                    total: r.get::<_, i64>(2) as usize,
                    error: r.get(3),
                    id: id.clone(),
                    offset: None,
                    results: None,
                    next_offset: None,
                }))
            }
        })
    }

    fn results_page(&self, id: &str, offset: usize, limit: usize) -> Result<ResultsPage, StoreError> {
        let id = id.to_string();
        let (from, limit) = (offset.min(i64::MAX as usize) as i64, limit.min(MAX_PAGE) as i64);
        self.call("reading results", RETRY_FOR, move |client, _| {
            let id = id.clone();
            async move {
                let Some(total) = client.query_opt("SELECT total FROM jobs WHERE id = $1", &[&id]).await? else {
                    return Ok(ResultsPage::default());
                };
                let total = total.get::<_, i64>(0) as usize;
                let select = client
                    .prepare_cached("SELECT result FROM proteins WHERE job = $1 AND idx >= $2 ORDER BY idx LIMIT $3")
                    .await?;
                let (mut results, mut bytes) = (Vec::new(), 0);
                for row in client.query(&select, &[&id, &from, &limit]).await? {
                    // A protein without a result (the job stopped before it) reads as its error.
                    let text: String = row.get::<_, Option<String>>(0).unwrap_or_else(|| NOT_PREDICTED.to_string());
                    bytes += text.len();
                    results.push(text);
                    if bytes >= MAX_PAGE_BYTES {
                        break;
                    }
                }
                let end = offset.saturating_add(results.len());
                let next_offset = (end < total && !results.is_empty()).then_some(end);
                Ok(ResultsPage { results, next_offset })
            }
        })
    }

    fn unfinished(&self) -> Result<Vec<String>, StoreError> {
        self.call("listing unfinished jobs", RETRY_FOR, |client, _| async move {
            let rows = client.query("SELECT id FROM jobs WHERE status = 'running' ORDER BY created, id", &[]).await?;
            Ok(rows.iter().map(|r| r.get(0)).collect())
        })
    }

    fn expire(&self) -> Result<usize, StoreError> {
        self.call("dropping expired jobs", RETRY_FOR, |mut client, _| async move {
            let tx = client.transaction().await?;
            let n = drop_expired(&tx).await?;
            tx.commit().await?;
            Ok(n)
        })
    }

    fn sharing(&self) -> Option<Sharing> {
        Some(Sharing { poll: POLL.min(self.inner.lease / 2), parts_in_flight: PARTS_IN_FLIGHT })
    }

    fn release_claims(&self) -> Result<(), StoreError> {
        // A stop does not wait long for a server that is gone: the claims then lapse by themselves.
        self.call("giving back this server's claims", Duration::from_secs(3), |client, inner| async move {
            client
                .execute(
                    "UPDATE proteins SET claimed_by = NULL, claimed_until = NULL WHERE claimed_by = $1 AND result IS NULL",
                    &[&inner.me],
                )
                .await?;
            Ok(())
        })
    }
}
