//! Batch jobs in PostgreSQL shared by replicas (issue #62), against a real server
//! (`tools/postgres.sh` starts one and exports `CODON_TEST_POSTGRES_URL`; under CI a missing URL
//! fails every test, elsewhere they are skipped with a line). Each test has a database of its
//! own. Two replicas share a 2,000-protein job (every result once, in order; a poll on either
//! answers; each part computed once), a replica killed with SIGKILL mid-part leaves its parts to
//! the other, claims are renewed while parts wait, a replica that stops gives its claims back,
//! a job is cancelled from the other replica, a PostgreSQL restart mid-job loses nothing, a
//! foreign database is left untouched, and a wrong password is one clear line.
mod common;
use common::{call, predictor};

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use codon_serve::api::ProteinResult;
use codon_serve::batcher::BatchPolicy;
use codon_serve::jobs::{JobReport, JobStatus, JobStore, JobsDb, PartBounds, PostgresJobStore, PostgresTarget};
use codon_serve::{RunningServer, ServeConfig};

/// Tests take it shared; the restart takes it alone, so that no other test sees the server go.
static SERVER: RwLock<()> = RwLock::new(());

fn shared() -> RwLockReadGuard<'static, ()> {
    SERVER.read().unwrap_or_else(|p| p.into_inner())
}

/// The test server's URL: missing under CI fails the test, elsewhere skips it with a line.
fn server_url() -> Option<String> {
    match std::env::var("CODON_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
            assert!(
                !ci,
                "CI is set and CODON_TEST_POSTGRES_URL is not: tools/test starts PostgreSQL (tools/postgres.sh)"
            );
            println!(
                "skipped: no CODON_TEST_POSTGRES_URL (eval \"$(tools/postgres.sh start /tmp/pg)\" starts a server)"
            );
            None
        }
    }
}

/// Statements on the test server as its superuser, each row's columns as text.
fn sql(url: &str, statements: &str) -> Vec<Vec<Option<String>>> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
        let connection = tokio::spawn(connection);
        let mut rows = Vec::new();
        for message in client.simple_query(statements).await.unwrap() {
            if let tokio_postgres::SimpleQueryMessage::Row(row) = message {
                rows.push((0..row.len()).map(|i| row.get(i).map(str::to_string)).collect());
            }
        }
        drop(client);
        let _ = connection.await;
        rows
    })
}

/// A database of the test's own, dropped at its end.
struct Db {
    admin: String,
    name: String,
    url: String,
}

impl Db {
    fn new() -> Option<Self> {
        let admin = server_url()?;
        let name = format!("codon_test_{}", rand_tag());
        sql(&admin, &format!("CREATE DATABASE {name}"));
        let (base, query) = admin.split_once('?').map_or((admin.as_str(), None), |(b, q)| (b, Some(q)));
        let server = &base[..base.rfind('/').unwrap()];
        let url = format!("{server}/{name}{}", query.map(|q| format!("?{q}")).unwrap_or_default());
        Some(Self { admin, name, url })
    }

    fn target(&self) -> PostgresTarget {
        PostgresTarget::parse(&self.url).unwrap()
    }

    fn sql(&self, statements: &str) -> Vec<Vec<Option<String>>> {
        sql(&self.url, statements)
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        let _ = std::panic::catch_unwind(|| {
            sql(&self.admin, &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name))
        });
    }
}

/// A random tag (the standard library's randomly keyed hasher), for names that must not collide.
fn rand_tag() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}

/// A replica on `db` whose job parts each wait `window` for company (slower parts), with
/// claims of `lease`.
fn replica_config(db: &Db, window: Duration, lease: Duration) -> ServeConfig {
    ServeConfig {
        port: 0,
        jobs_db: Some(JobsDb::Postgres(db.target())),
        jobs_lease: lease,
        queue_capacity: 8,
        batch: BatchPolicy { window, max_proteins: 64 },
        ..ServeConfig::default()
    }
}

fn replica(db: &Db, window: Duration, lease: Duration) -> RunningServer {
    RunningServer::start(predictor(), replica_config(db, window, lease)).unwrap()
}

/// `n` distinct proteins of 6 to 40 residues (a result's place is checked by its translation).
fn proteins(n: usize) -> Vec<String> {
    const LETTERS: &[u8] = b"ACDEFGHIKLMNPQRSTVWY";
    (0..n)
        .map(|i| {
            let tail: String = (0..5 + i % 35).map(|k| LETTERS[(i * 7 + k * 13 + i / 20) % 20] as char).collect();
            format!("M{tail}")
        })
        .collect()
}

fn job_body(proteins: &[String]) -> String {
    let items: Vec<String> = proteins.iter().map(|p| format!(r#"{{"protein": "{p}", "organism": 51}}"#)).collect();
    format!(r#"{{"proteins": [{}], "options": {{"match_protein": true}}}}"#, items.join(","))
}

fn submit(addr: std::net::SocketAddr, proteins: &[String]) -> String {
    let (status, text) = call(addr, "POST", "/v1/jobs", Some(&job_body(proteins)));
    assert_eq!(status, 202, "{text}");
    serde_json::from_str::<JobReport>(&text).unwrap().id
}

fn report(addr: std::net::SocketAddr, path: &str) -> JobReport {
    let (status, text) = call(addr, "GET", path, None);
    assert_eq!(status, 200, "{path}: {text}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// Poll job `id` on `addr` until `until` holds (at most two minutes).
fn wait_for(addr: std::net::SocketAddr, id: &str, until: impl Fn(&JobReport) -> bool) -> JobReport {
    wait_within(addr, id, Duration::from_secs(120), until)
}

/// Poll job `id` on `addr` until `until` holds, for at most `limit`.
fn wait_within(addr: std::net::SocketAddr, id: &str, limit: Duration, until: impl Fn(&JobReport) -> bool) -> JobReport {
    let started = Instant::now();
    loop {
        let r = report(addr, &format!("/v1/jobs/{id}"));
        if until(&r) {
            return r;
        }
        assert!(started.elapsed() < limit, "job {id} did not get there within {limit:?}: {r:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every result of a finished job, page after page.
fn all_results(addr: std::net::SocketAddr, id: &str) -> Vec<ProteinResult> {
    let (mut results, mut next) = (Vec::new(), Some(0));
    while let Some(offset) = next {
        let page = report(addr, &format!("/v1/jobs/{id}?offset={offset}&limit=1000"));
        results.extend(page.results.unwrap());
        next = page.next_offset;
        assert!(results.len() <= 100_000, "pages never end");
    }
    results
}

/// The standard genetic code's protein of `dna` (its stop codon dropped).
fn translate(dna: &str) -> String {
    const CODE: &[u8] = b"FFLLSSSSYY**CC*WLLLLPPPPHHQQRRRRIIIMTTTTNNKKSSRRVVVVAAAADDEEGGGG";
    let base = |b: u8| match b {
        b'T' => 0,
        b'C' => 1,
        b'A' => 2,
        _ => 3,
    };
    let protein: String =
        dna.as_bytes().chunks(3).map(|c| CODE[base(c[0]) * 16 + base(c[1]) * 4 + base(c[2])] as char).collect();
    protein.trim_end_matches('*').to_string()
}

/// Each protein has its result, in its place.
fn check_in_order(proteins: &[String], results: &[ProteinResult]) {
    assert_eq!(results.len(), proteins.len());
    for (i, (protein, result)) in proteins.iter().zip(results).enumerate() {
        let dna = &result.sequences.first().unwrap_or_else(|| panic!("{i}: {result:?}")).dna;
        assert_eq!(&translate(dna), protein, "result {i} is not its protein's");
    }
}

fn metric(addr: std::net::SocketAddr, name: &str) -> u64 {
    let (_, text) = call(addr, "GET", "/metrics", None);
    let prefix = format!("{name} ");
    text.lines().find_map(|l| l.strip_prefix(&prefix)).and_then(|v| v.trim().parse().ok()).unwrap()
}

/// Wait until the replica at `addr` has nothing of a job left under way: no part waits, and
/// every protein it predicted was saved or found saved (a job done elsewhere may still have
/// parts running here, whose repeats count only once they end).
fn settle(addr: std::net::SocketAddr) {
    let started = Instant::now();
    let mut quiet = 0;
    while quiet < 3 {
        let idle = metric(addr, "codon_queue_depth") == 0
            && metric(addr, PREDICTED) == metric(addr, SAVED) + metric(addr, REPEATED);
        quiet = if idle { quiet + 1 } else { 0 };
        assert!(started.elapsed() < Duration::from_secs(30), "the replica at {addr} never settled");
        std::thread::sleep(Duration::from_millis(100));
    }
}

const PREDICTED: &str = "codon_proteins_total";
const SAVED: &str = "codon_job_results_saved_total";
const REPEATED: &str = "codon_job_results_repeated_total";

#[test]
fn two_replicas_share_a_job_each_result_once_in_order_and_either_answers() {
    let _shared = shared();
    let Some(db) = Db::new() else { return };
    // A's parts wait 10 ms for company, so that alone it would take longer than B takes to
    // hear of the job (its next look at the store, within a second).
    let a = replica(&db, Duration::from_millis(10), Duration::from_secs(30));
    let b = replica(&db, Duration::ZERO, Duration::from_secs(30));
    let proteins = proteins(2_000);
    let started = Instant::now();
    let id = submit(a.addr, &proteins);
    // B answers for a job it did not accept, while the work goes on.
    let first = report(b.addr, &format!("/v1/jobs/{id}"));
    assert_eq!((first.status, first.total), (JobStatus::Running, 2_000), "{first:?}");
    let during = wait_for(b.addr, &id, |r| r.done > 0 || r.status != JobStatus::Running);
    assert!(during.status == JobStatus::Running && during.done < 2_000, "no poll on B saw the job running: {during:?}");
    let done = wait_for(b.addr, &id, |r| r.status != JobStatus::Running);
    let took = started.elapsed();
    assert_eq!((done.status, done.done, done.total), (JobStatus::Done, 2_000, 2_000), "{done:?}");
    let on_b = all_results(b.addr, &id);
    check_in_order(&proteins, &on_b);
    assert!(all_results(a.addr, &id) == on_b, "the replicas page the same results");
    // Each part computed once, by one replica or the other; both worked.
    settle(a.addr);
    settle(b.addr);
    let (predicted_a, predicted_b) = (metric(a.addr, PREDICTED), metric(b.addr, PREDICTED));
    let (saved_a, saved_b) = (metric(a.addr, SAVED), metric(b.addr, SAVED));
    println!("2,000 proteins on two replicas: {took:.2?}; A predicted {predicted_a}, B {predicted_b}");
    assert_eq!(predicted_a + predicted_b, 2_000, "a part was computed twice (A {predicted_a}, B {predicted_b})");
    assert_eq!((saved_a + saved_b, metric(a.addr, REPEATED) + metric(b.addr, REPEATED)), (2_000, 0));
    assert!(predicted_a > 0 && predicted_b > 0, "one replica did all the work: A {predicted_a}, B {predicted_b}");
    assert_eq!(db.sql("SELECT count(*) FROM proteins WHERE claimed_by IS NOT NULL")[0][0].as_deref(), Some("0"));
}

const CHILD_URL: &str = "CODON_SERVE_TEST_PG_CHILD_URL";
const CHILD_WINDOW_MS: &str = "CODON_SERVE_TEST_PG_CHILD_WINDOW_MS";
const CHILD_LEASE_MS: &str = "CODON_SERVE_TEST_PG_CHILD_LEASE_MS";

/// Not a test of its own: replica A of the kill test, in a child process (this test binary
/// again) so that it can be killed with SIGKILL.
#[test]
fn child_replica() {
    let Ok(url) = std::env::var(CHILD_URL) else { return };
    let ms = |key: &str| Duration::from_millis(std::env::var(key).unwrap().parse().unwrap());
    let config = ServeConfig {
        port: 0,
        jobs_db: Some(JobsDb::Postgres(PostgresTarget::parse(&url).unwrap())),
        jobs_lease: ms(CHILD_LEASE_MS),
        queue_capacity: 8,
        batch: BatchPolicy { window: ms(CHILD_WINDOW_MS), max_proteins: 64 },
        ..ServeConfig::default()
    };
    let server = RunningServer::start(predictor(), config).unwrap();
    println!("ADDR {}", server.addr);
    // The parent kills this process long before.
    std::thread::sleep(Duration::from_secs(300));
}

/// Replica A in a child process on `db`, and its address.
fn spawn_replica(db: &Db, window: Duration, lease: Duration) -> (std::process::Child, std::net::SocketAddr) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["child_replica", "--exact", "--nocapture", "--test-threads", "1"])
        .env(CHILD_URL, &db.url)
        .env(CHILD_WINDOW_MS, window.as_millis().to_string())
        .env(CHILD_LEASE_MS, lease.as_millis().to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let addr = loop {
        let line = lines.next().expect("the child replica never printed its address").unwrap();
        if let Some((_, addr)) = line.split_once("ADDR ") {
            break addr.trim().parse().unwrap();
        }
    };
    // Its output is drained, so that it never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    (child, addr)
}

#[test]
fn a_replica_killed_mid_part_leaves_its_parts_to_the_other() {
    let _shared = shared();
    let Some(db) = Db::new() else { return };
    let lease = Duration::from_secs(2);
    // A's parts are slow (each waits 150 ms for company), so it is always mid-part.
    let (mut a, a_addr) = spawn_replica(&db, Duration::from_millis(150), lease);
    let b = replica(&db, Duration::ZERO, lease);
    let proteins = proteins(2_000);
    let id = submit(a_addr, &proteins);
    let a_claims = format!("SELECT count(*) FROM proteins WHERE result IS NULL AND claimed_by LIKE '%/{}/%'", a.id());
    let started = Instant::now();
    // Both at work, A holding claims (mid-part).
    while metric(a_addr, SAVED) < 8 || metric(b.addr, SAVED) < 8 || db.sql(&a_claims)[0][0].as_deref() == Some("0") {
        assert!(started.elapsed() < Duration::from_secs(60), "A and B never worked together");
        std::thread::sleep(Duration::from_millis(10));
    }
    let held: u64 = db.sql(&a_claims)[0][0].as_deref().unwrap().parse().unwrap();
    let predicted_a = metric(a_addr, PREDICTED);
    a.kill().unwrap();
    let killed = Instant::now();
    a.wait().unwrap();
    let at_kill = report(b.addr, &format!("/v1/jobs/{id}"));
    assert!(at_kill.status == JobStatus::Running, "the job ended before the kill: {at_kill:?}");
    // Within the lease, B's next look at the store (a second) and B's parts: a generous bound
    // for a loaded machine; the time taken is printed below.
    let done = wait_within(b.addr, &id, lease + Duration::from_secs(15), |r| r.status != JobStatus::Running);
    let after_kill = killed.elapsed();
    assert_eq!((done.status, done.done), (JobStatus::Done, 2_000), "{done:?}");
    check_in_order(&proteins, &all_results(b.addr, &id));
    settle(b.addr);
    let predicted_b = metric(b.addr, PREDICTED);
    let repeated = (predicted_a + predicted_b).saturating_sub(2_000);
    println!(
        "A killed holding {held} proteins' claims, {} of 2,000 done: B finished {after_kill:.2?} later (lease {lease:?}); \
         proteins computed twice: {repeated} (A {predicted_a} before the kill, B {predicted_b})",
        at_kill.done
    );
    // The kill's repeats are bounded by A's claims.
    assert!(repeated <= held + 8, "{repeated} proteins computed twice; A held {held} claims");
    assert_eq!(metric(b.addr, REPEATED), 0, "B saved over a result");
}

#[test]
fn claims_are_renewed_while_parts_wait_so_none_runs_twice() {
    let _shared = shared();
    let Some(db) = Db::new() else { return };
    let lease = Duration::from_secs(2);
    // A's parts take a second each and A claims four at once: its last ones wait past the lease.
    let a = replica(&db, Duration::from_millis(1_000), lease);
    let b = replica(&db, Duration::ZERO, lease);
    let proteins = proteins(64);
    let id = submit(a.addr, &proteins);
    let done = wait_for(b.addr, &id, |r| r.status != JobStatus::Running);
    assert_eq!((done.status, done.done), (JobStatus::Done, 64), "{done:?}");
    check_in_order(&proteins, &all_results(a.addr, &id));
    // A's parts still queued when B finished the job (had their claims lapsed) run to their end.
    settle(a.addr);
    settle(b.addr);
    let (saved_a, predicted_a, predicted_b) =
        (metric(a.addr, SAVED), metric(a.addr, PREDICTED), metric(b.addr, PREDICTED));
    assert!(saved_a >= 24, "A saved {saved_a}: its parts did not outlast the lease");
    assert_eq!(predicted_a + predicted_b, 64, "a part ran twice (A {predicted_a}, B {predicted_b})");
}

#[test]
fn a_stopped_replica_gives_its_claims_back_at_once() {
    let _shared = shared();
    let Some(db) = Db::new() else { return };
    // A long lease: B finishes soon after A stops only if A gave its claims back.
    let lease = Duration::from_secs(30);
    let a = replica(&db, Duration::from_millis(400), lease);
    let b = replica(&db, Duration::ZERO, lease);
    let proteins = proteins(400);
    let id = submit(a.addr, &proteins);
    let claims = "SELECT count(*) FROM proteins WHERE result IS NULL AND claimed_by IS NOT NULL";
    wait_for(b.addr, &id, |r| r.done >= 8);
    assert_ne!(db.sql(claims)[0][0].as_deref(), Some("0"), "A held no claims");
    assert_eq!(a.stop().unwrap().jobs_left, 1, "the job runs on in the database");
    let done = wait_within(b.addr, &id, Duration::from_secs(10), |r| r.status != JobStatus::Running);
    assert_eq!((done.status, done.done), (JobStatus::Done, 400), "{done:?}");
    check_in_order(&proteins, &all_results(b.addr, &id));
}

#[test]
fn a_job_is_cancelled_on_the_replica_that_did_not_accept_it() {
    let _shared = shared();
    let Some(db) = Db::new() else { return };
    // Slow parts (800 ms each): A holds four, so some still wait in its queue when it hears.
    let a = replica(&db, Duration::from_millis(800), Duration::from_secs(5));
    let b = replica(&db, Duration::from_millis(500), Duration::from_secs(5));
    let id = submit(a.addr, &proteins(800));
    wait_for(b.addr, &id, |r| r.done >= 16);
    let (status, text) = call(b.addr, "DELETE", &format!("/v1/jobs/{id}"), None);
    assert_eq!(status, 200, "{text}");
    assert_eq!(report(a.addr, &format!("/v1/jobs/{id}")).status, JobStatus::Cancelled);
    // A hears of it at its next look (a second): the part the model runs may end, the parts
    // waiting in its queue are dropped unrun, and no later one starts.
    std::thread::sleep(Duration::from_millis(2_500));
    let settled = (metric(a.addr, PREDICTED), metric(b.addr, PREDICTED));
    assert!(metric(a.addr, "codon_expired_total") >= 1, "A ran every part it had queued after the cancel");
    std::thread::sleep(Duration::from_millis(1_000));
    assert_eq!((metric(a.addr, PREDICTED), metric(b.addr, PREDICTED)), settled, "parts kept running after the cancel");
    let cancelled = report(b.addr, &format!("/v1/jobs/{id}"));
    assert!(cancelled.done < 800 && cancelled.results.is_some(), "{cancelled:?}");
}

#[test]
fn a_postgres_restart_mid_job_loses_nothing() {
    let _alone = SERVER.write().unwrap_or_else(|p| p.into_inner());
    let Some(db) = Db::new() else { return };
    let dir = std::env::var("CODON_TEST_POSTGRES_DIR").expect("CODON_TEST_POSTGRES_DIR (tools/postgres.sh)");
    let a = replica(&db, Duration::from_millis(40), Duration::from_secs(5));
    let proteins = proteins(400);
    let id = submit(a.addr, &proteins);
    wait_for(a.addr, &id, |r| r.done >= 40);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/postgres.sh");
    let restarted = Command::new("bash").args([script, "restart", &dir]).status().unwrap();
    assert!(restarted.success(), "tools/postgres.sh restart failed");
    let done = wait_for(a.addr, &id, |r| r.status != JobStatus::Running);
    assert_eq!((done.status, done.done), (JobStatus::Done, 400), "{done:?}");
    check_in_order(&proteins, &all_results(a.addr, &id));
    // A part whose save met the restart was saved when the server came back, not run again.
    assert_eq!((metric(a.addr, PREDICTED), metric(a.addr, SAVED), metric(a.addr, REPEATED)), (400, 400, 0));
}

/// The error a replica's start on `config` ends with, and how long it took.
fn start_error(config: ServeConfig) -> (String, Duration) {
    let started = Instant::now();
    match RunningServer::start(predictor(), config) {
        Ok(_) => panic!("the server started"),
        Err(e) => (e.to_string(), started.elapsed()),
    }
}

#[test]
fn a_foreign_database_or_another_version_is_refused_and_left_untouched() {
    let _shared = shared();
    let Some(db) = Db::new() else { return };
    db.sql("CREATE TABLE notes (text TEXT); INSERT INTO notes VALUES ('keep me');");
    let tables = "SELECT string_agg(tablename, ',' ORDER BY tablename) FROM pg_tables WHERE schemaname = 'public'";
    let (message, _) = start_error(replica_config(&db, Duration::ZERO, Duration::from_secs(30)));
    assert!(
        message.contains("not a jobs database") && message.contains("untouched") && message.contains("notes"),
        "{message}"
    );
    assert_eq!(db.sql(tables)[0][0].as_deref(), Some("notes"), "tables were made beside the foreign one");
    assert_eq!(db.sql("SELECT text FROM notes")[0][0].as_deref(), Some("keep me"));
    // Jobs of another version of the schema: refused, and left as they were.
    let Some(other) = Db::new() else { return };
    other.sql(
        "CREATE TABLE jobs (id TEXT PRIMARY KEY); CREATE TABLE proteins (job TEXT);
         COMMENT ON TABLE jobs IS 'codon-serve jobs, schema 99'; INSERT INTO jobs VALUES ('old');",
    );
    let (message, _) = start_error(replica_config(&other, Duration::ZERO, Duration::from_secs(30)));
    assert!(message.contains("schema version 99") && message.contains("untouched"), "{message}");
    assert_eq!(other.sql(tables)[0][0].as_deref(), Some("jobs,proteins"));
    assert_eq!(other.sql("SELECT count(*) FROM pg_indexes WHERE tablename = 'proteins'")[0][0].as_deref(), Some("0"));
    assert_eq!(other.sql("SELECT id FROM jobs")[0][0].as_deref(), Some("old"));
}

#[test]
fn a_wrong_password_is_one_clear_line_without_the_password() {
    let _shared = shared();
    let Some(db) = Db::new() else { return };
    let password =
        db.url.split_once("://").unwrap().1.split_once('@').unwrap().0.split_once(':').unwrap().1.to_string();
    let wrong = db.url.replacen(&format!(":{password}@"), ":not-the-Secret-42@", 1);
    let config = ServeConfig {
        jobs_db: Some(JobsDb::Postgres(PostgresTarget::parse(&wrong).unwrap())),
        ..replica_config(&db, Duration::ZERO, Duration::from_secs(30))
    };
    let (message, took) = start_error(config);
    assert!(!message.contains('\n'), "{message}");
    assert!(message.contains("password authentication failed"), "{message}");
    assert!(message.contains("postgres://codon@127.0.0.1:"), "{message}");
    assert!(!message.contains("not-the-Secret-42") && !message.contains(&password), "{message}");
    assert!(took < Duration::from_secs(5), "a refused password was retried for {took:?}");
}

const EIGHT: PartBounds = PartBounds { proteins: 8, residues: 1_000 };

fn result() -> ProteinResult {
    ProteinResult { sequences: Vec::new(), error: Some("x".into()) }
}

#[test]
fn replicas_skip_each_others_claims_until_they_lapse_or_are_given_back() {
    let _shared = shared();
    let Some(db) = Db::new() else { return };
    let lease = Duration::from_secs(1);
    let open = || PostgresJobStore::open(&db.target(), codon_serve::jobs::MAX_DB_BYTES, lease).unwrap();
    let (a, b) = (open(), open());
    let items: Vec<_> = proteins(20)
        .into_iter()
        .map(|protein| codon_serve::jobs::JobProtein { protein, organism: 51.into(), dna: None })
        .collect();
    let id = a.create(&serde_json::json!({}), &items).unwrap();
    let firsts =
        |store: &PostgresJobStore| store.next_part(&id, 0, EIGHT).unwrap().map(|p| (p.first, p.proteins.len()));
    assert_eq!(firsts(&a), Some((0, 8)));
    assert_eq!(firsts(&b), Some((8, 8)), "B skips A's claim");
    assert_eq!(firsts(&a), Some((16, 4)));
    assert_eq!(firsts(&b), None, "every part is claimed");
    let recorded = b.record_part(&id, 8, &vec![result(); 8]).unwrap();
    assert_eq!((recorded.saved, recorded.already_saved), (8, 0));
    let again = a.record_part(&id, 8, &vec![result(); 8]).unwrap();
    assert_eq!((again.saved, again.already_saved), (0, 8), "a part saved twice counts once");
    // A renews its claims while it lives: past its lease they still hold.
    std::thread::sleep(lease + Duration::from_millis(300));
    assert_eq!(firsts(&b), None, "A's claims lapsed while A lived");
    // A stops without a word: its claims lapse with the lease, and B takes its parts.
    drop(a);
    assert_eq!(firsts(&b), None);
    std::thread::sleep(lease + Duration::from_millis(200));
    assert_eq!(firsts(&b), Some((0, 8)));
    assert_eq!(firsts(&b), Some((16, 4)));
    // B gives its claims back: another replica takes them at once.
    b.release_claims().unwrap();
    let c = open();
    assert_eq!(firsts(&c), Some((0, 8)));
    let report = c.report(&id).unwrap().unwrap();
    assert_eq!((report.status, report.done, report.total), (JobStatus::Running, 8, 20));
    assert_eq!(c.unfinished().unwrap(), vec![id.clone()]);
    assert_eq!(c.cancel(&id).unwrap(), Some(JobStatus::Running));
    assert_eq!(firsts(&c), None, "no part of a cancelled job is claimed");
    let page = c.results_page(&id, 6, 4).unwrap();
    assert_eq!((page.results.len(), page.next_offset), (4, Some(10)));
    assert!(page.results[0].contains("not predicted") && page.results[2].contains("\"x\""), "{:?}", page.results);
    assert_eq!(c.cancel(&id).unwrap(), Some(JobStatus::Cancelled));
    assert!(c.report(&id).unwrap().is_none(), "a finished job is deleted");
}

#[test]
fn tls_is_used_where_offered_and_verified_when_asked() {
    let _shared = shared();
    let Some(db) = Db::new() else { return };
    let store =
        |url: &str| PostgresJobStore::open(&PostgresTarget::parse(url).unwrap(), 1 << 30, Duration::from_secs(30));
    let join = |option: &str| format!("{}{}{option}", db.url, if db.url.contains('?') { '&' } else { '?' });
    let dir = std::env::var("CODON_TEST_POSTGRES_DIR").expect("CODON_TEST_POSTGRES_DIR (tools/postgres.sh)");
    let cert = format!("{dir}/ca.crt");
    assert!(std::path::Path::new(&cert).is_file(), "tools/postgres.sh made no certificate (openssl)");
    // sslmode=prefer by default: the server offers TLS, so it is used.
    assert_eq!(store(&db.url).unwrap().tls(), Some("TLSv1.3"));
    assert_eq!(store(&join("sslmode=disable")).unwrap().tls(), None);
    let verified = store(&join(&format!("sslmode=verify-full&sslrootcert={cert}"))).unwrap();
    assert_eq!(verified.tls(), Some("TLSv1.3"));
    // A certificate that does not chain to the roots given is refused at once, in one line.
    let elsewhere = std::env::temp_dir().join(format!("codon-not-the-ca-{}.pem", rand_tag()));
    let made = Command::new("openssl")
        .args(["req", "-new", "-x509", "-days", "1", "-nodes", "-subj", "/CN=other", "-keyout", "/dev/null", "-out"])
        .arg(&elsewhere)
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(made.success());
    let refused = store(&join(&format!("sslmode=verify-ca&sslrootcert={}", elsewhere.display())));
    let _ = std::fs::remove_file(&elsewhere);
    let message = match refused {
        Ok(_) => panic!("a certificate of another CA was taken"),
        Err(e) => e.to_string(),
    };
    assert!(message.contains("TLS") && !message.contains('\n'), "{message}");
}
