//! Batch jobs in their database, over 127.0.0.1 with the tiny fixture model: a job survives a
//! killed server and a stop and is finished by the next start on the same file, a finished job
//! is served after a restart, its results come in pages, an unusable database path is one error
//! at start, and interactive requests are answered while jobs fill their share of the queue.
mod common;
use common::{call, predictor};

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use codon_serve::api::{PredictResponse, ProteinResult};
use codon_serve::batcher::BatchPolicy;
use codon_serve::jobs::{JobReport, JobStatus, JobStore, PartBounds, SqliteJobStore};
use codon_serve::{RunningServer, ServeConfig};

fn start(config: ServeConfig) -> RunningServer {
    RunningServer::start(predictor(), ServeConfig { port: 0, ..config }).unwrap()
}

/// A server whose job parts go one at a time, each waiting `window` for company: a job of a
/// few parts takes a while, so it can be stopped in the middle.
fn slow_jobs(db: &Path, window: Duration) -> ServeConfig {
    ServeConfig {
        port: 0,
        jobs_db: Some(db.into()),
        queue_capacity: 2,
        batch: BatchPolicy { window, max_proteins: 64 },
        ..ServeConfig::default()
    }
}

/// `n` proteins of a few lengths.
fn proteins(n: usize) -> Vec<String> {
    (0..n).map(|i| ["MKVLA", "MALWMRLLPLL", "MWCH", "MFWYMFWYKK"][i % 4].repeat(1 + i % 3)).collect()
}

fn job_body(proteins: &[String]) -> String {
    let items: Vec<String> = proteins.iter().map(|p| format!(r#"{{"protein": "{p}", "organism": 51}}"#)).collect();
    format!(r#"{{"proteins": [{}], "options": {{"match_protein": true}}}}"#, items.join(","))
}

/// Submit a job; its id.
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

/// Poll job `id` until `until` holds (at most a minute).
fn wait_for(addr: std::net::SocketAddr, id: &str, until: impl Fn(&JobReport) -> bool) -> JobReport {
    let started = Instant::now();
    loop {
        let r = report(addr, &format!("/v1/jobs/{id}"));
        if until(&r) {
            return r;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "job {id} never got there: {r:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Every result of a finished job, page after page.
fn all_results(addr: std::net::SocketAddr, id: &str) -> Vec<ProteinResult> {
    let mut results = Vec::new();
    let mut next = Some(0);
    while let Some(offset) = next {
        let page = report(addr, &format!("/v1/jobs/{id}?offset={offset}"));
        assert_eq!(page.offset, Some(offset));
        results.extend(page.results.unwrap());
        next = page.next_offset;
        assert!(results.len() <= 100_000, "pages never end");
    }
    results
}

/// Each result is the one a predict request gets for its protein alone.
fn check_results(addr: std::net::SocketAddr, proteins: &[String], results: &[ProteinResult]) {
    assert_eq!(results.len(), proteins.len());
    for (protein, result) in proteins.iter().zip(results) {
        let alone = job_body(std::slice::from_ref(protein));
        let (status, text) = call(addr, "POST", "/v1/predict", Some(&alone));
        assert_eq!(status, 200, "{text}");
        let alone: PredictResponse = serde_json::from_str(&text).unwrap();
        assert_eq!(result.sequences[0].dna, alone.results[0].sequences[0].dna, "{protein}");
    }
}

const CHILD_DB: &str = "CODON_SERVE_TEST_CHILD_DB";
const CHILD_WAITS_FOR_SIGNAL: &str = "CODON_SERVE_TEST_CHILD_SIGNAL";
const CHILD_WINDOW_MS: &str = "CODON_SERVE_TEST_CHILD_WINDOW_MS";
/// The child's stop grace in milliseconds, and job parts without bounds.
const CHILD_GRACE_MS: &str = "CODON_SERVE_TEST_CHILD_GRACE_MS";

/// Not a test of its own: the server of the tests below, run in a child process (this test
/// binary again) so that it can be killed with SIGKILL, or stopped with SIGTERM.
#[test]
fn child_server() {
    let Some(db) = std::env::var_os(CHILD_DB) else { return };
    let window = std::env::var(CHILD_WINDOW_MS).ok().and_then(|ms| ms.parse().ok()).unwrap_or(150);
    let mut config = slow_jobs(Path::new(&db), Duration::from_millis(window));
    if window == 0 {
        // The measurement's server: the usual queue.
        config = ServeConfig { queue_capacity: ServeConfig::default().queue_capacity, ..config };
    }
    if let Some(grace) = std::env::var(CHILD_GRACE_MS).ok().and_then(|ms| ms.parse().ok()) {
        config.stop_grace = Duration::from_millis(grace);
        config.job_part = PartBounds { proteins: 10_000, residues: 100_000_000 };
    }
    let server = RunningServer::start(predictor(), config).unwrap();
    println!("ADDR {}", server.addr);
    if std::env::var_os(CHILD_WAITS_FOR_SIGNAL).is_some() {
        let stopped = server.stop_on_signal().unwrap();
        println!("LEFT {}", stopped.jobs_left);
        return;
    }
    // The parent kills this process long before.
    std::thread::sleep(Duration::from_secs(120));
}

type Lines = std::io::Lines<BufReader<std::process::ChildStdout>>;

/// The child server on `db`, its output and its address.
fn spawn_child(db: &Path, wait_for_signal: bool) -> (std::process::Child, Lines, std::net::SocketAddr) {
    spawn_child_with(db, wait_for_signal, 150)
}

fn spawn_child_with(
    db: &Path,
    wait_for_signal: bool,
    window_ms: u64,
) -> (std::process::Child, Lines, std::net::SocketAddr) {
    spawn_child_env(db, wait_for_signal, window_ms, &[])
}

fn spawn_child_env(
    db: &Path,
    wait_for_signal: bool,
    window_ms: u64,
    env: &[(&str, &str)],
) -> (std::process::Child, Lines, std::net::SocketAddr) {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.envs(env.iter().copied());
    command.env(CHILD_WINDOW_MS, window_ms.to_string());
    command.args(["child_server", "--exact", "--nocapture", "--test-threads", "1"]).env(CHILD_DB, db);
    if wait_for_signal {
        command.env(CHILD_WAITS_FOR_SIGNAL, "1");
    }
    let mut child = command.stdout(Stdio::piped()).spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let addr = next_word(&mut lines, "ADDR ").parse().unwrap();
    (child, lines, addr)
}

/// What follows `tag` on the child's next line that has it (libtest may print its own words
/// before ours on the same line).
fn next_word(lines: &mut Lines, tag: &str) -> String {
    loop {
        let line = lines.next().unwrap_or_else(|| panic!("the child server never printed {tag}")).unwrap();
        if let Some((_, word)) = line.split_once(tag) {
            return word.trim().to_string();
        }
    }
}

#[test]
fn a_job_survives_a_kill_and_resumes_on_restart() {
    let dir = tempfile::tempdir().unwrap();
    // A folder that does not exist yet: it is created.
    let db = dir.path().join("data").join("jobs.sqlite3");
    let (mut child, _lines, addr) = spawn_child(&db, false);
    let proteins = proteins(40);
    let id = submit(addr, &proteins);
    let before = wait_for(addr, &id, |r| r.done >= 8);
    assert_eq!(before.status, JobStatus::Running, "{before:?}");
    // kill -9: nothing is saved on the way out.
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(std::net::TcpStream::connect(addr).is_err(), "the killed server is gone");

    let server =
        RunningServer::start(predictor(), ServeConfig { port: 0, jobs_db: Some(db.into()), ..ServeConfig::default() })
            .unwrap();
    let resumed = report(server.addr, &format!("/v1/jobs/{id}"));
    assert_eq!(resumed.total, 40);
    assert!(resumed.done >= 8, "the parts saved before the kill are kept: {resumed:?}");
    let done = wait_for(server.addr, &id, |r| r.status != JobStatus::Running);
    assert_eq!((done.status, done.done), (JobStatus::Done, 40), "{done:?}");
    check_results(server.addr, &proteins, &all_results(server.addr, &id));
    assert_eq!(server.stop().unwrap().jobs_left, 0);
}

#[test]
fn sigterm_saves_the_part_in_flight_and_says_how_many_jobs_are_left() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("jobs.sqlite3");
    let (mut child, mut lines, addr) = spawn_child(&db, true);
    let proteins = proteins(40);
    let id = submit(addr, &proteins);
    wait_for(addr, &id, |r| r.done >= 8);
    let sent = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(sent.success());
    assert_eq!(next_word(&mut lines, "LEFT "), "1", "one job left to resume");
    assert!(child.wait().unwrap().success());

    finishes_after_a_restart(&db, &id, &proteins);
}

/// A new server on `db` holds whole saved parts of job `id` (of 40 proteins) and finishes it.
fn finishes_after_a_restart(db: &Path, id: &str, proteins: &[String]) {
    let server = start(slow_jobs(db, Duration::ZERO));
    let resumed = report(server.addr, &format!("/v1/jobs/{id}"));
    assert!(resumed.done >= 8 && resumed.done.is_multiple_of(8), "whole parts were saved: {resumed:?}");
    let done = wait_for(server.addr, id, |r| r.status != JobStatus::Running);
    assert_eq!((done.status, done.done), (JobStatus::Done, 40), "{done:?}");
    check_results(server.addr, proteins, &all_results(server.addr, id));
}

#[test]
fn a_stop_saves_the_part_in_flight_and_the_next_start_finishes_the_job() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("jobs.sqlite3");
    let server = start(slow_jobs(&db, Duration::from_millis(200)));
    let addr = server.addr;
    let proteins = proteins(40);
    let id = submit(addr, &proteins);
    wait_for(addr, &id, |r| r.done >= 8);
    let stopped = server.stop().unwrap();
    assert_eq!(stopped.jobs_left, 1, "the job is left to resume");

    finishes_after_a_restart(&db, &id, &proteins);
}

#[test]
fn a_finished_job_is_served_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("jobs.sqlite3");
    let config = ServeConfig { port: 0, jobs_db: Some(db.clone().into()), ..ServeConfig::default() };
    let server = start(config.clone());
    let proteins = proteins(12);
    let id = submit(server.addr, &proteins);
    wait_for(server.addr, &id, |r| r.status == JobStatus::Done);
    let before = all_results(server.addr, &id);
    assert_eq!(server.stop().unwrap().jobs_left, 0);

    let server = start(config);
    let after = report(server.addr, &format!("/v1/jobs/{id}"));
    assert_eq!((after.status, after.done, after.total), (JobStatus::Done, 12, 12));
    assert_eq!(all_results(server.addr, &id), before);
    check_results(server.addr, &proteins, &before);
}

#[test]
fn a_finished_jobs_results_come_in_pages() {
    let server = start(ServeConfig::default());
    let proteins: Vec<String> = (0..120).map(|i| "MKVLAW"[..1 + i % 6].to_string()).collect();
    let id = submit(server.addr, &proteins);
    wait_for(server.addr, &id, |r| r.status == JobStatus::Done);
    // One poll answers one page (100 by default), not the whole job.
    let first = report(server.addr, &format!("/v1/jobs/{id}"));
    assert_eq!((first.done, first.total), (120, 120));
    assert_eq!(first.results.as_ref().map(Vec::len), Some(100));
    assert_eq!((first.offset, first.next_offset), (Some(0), Some(100)));
    let rest = report(server.addr, &format!("/v1/jobs/{id}?offset=100"));
    assert_eq!((rest.results.as_ref().map(Vec::len), rest.next_offset), (Some(20), None));
    let all = all_results(server.addr, &id);
    assert_eq!(all.len(), 120);
    let middle = report(server.addr, &format!("/v1/jobs/{id}?offset=3&limit=7"));
    assert_eq!(middle.results.unwrap(), all[3..10].to_vec());
    assert_eq!(middle.next_offset, Some(10));
    let (status, text) = call(server.addr, "GET", &format!("/v1/jobs/{id}?limit=lots"), None);
    assert_eq!(status, 400, "{text}");
    for (protein, result) in proteins.iter().zip(&all) {
        let dna = &result.sequences[0].dna;
        assert_eq!(dna.len(), protein.len() * 3 + 3, "{protein}: {dna}");
    }
}

#[test]
fn an_unusable_jobs_db_is_one_clear_error_at_start_and_a_foreign_file_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("notes.txt");
    std::fs::write(&file, "keep me\n").unwrap();
    // A folder that cannot be made: a file stands where it would go.
    let db = file.join("jobs.sqlite3");
    let config = ServeConfig { port: 0, jobs_db: Some(db.clone().into()), ..ServeConfig::default() };
    let message = match RunningServer::start(predictor(), config) {
        Ok(_) => panic!("a server started on {}", db.display()),
        Err(e) => e.to_string(),
    };
    assert!(message.contains(&db.display().to_string()) && message.contains("jobs database"), "{message}");
    // A file that is not a database is refused, and kept as it was.
    let config = ServeConfig { port: 0, jobs_db: Some(file.clone().into()), ..ServeConfig::default() };
    let message = match RunningServer::start(predictor(), config) {
        Ok(_) => panic!("a server started on {}", file.display()),
        Err(e) => e.to_string(),
    };
    assert!(message.contains(&file.display().to_string()), "{message}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me\n");
}

/// A request slow enough to keep the worker busy for a while: 100 proteins of 2,000 residues.
fn slow_request() -> String {
    let protein: String = (0..2000).map(|i| ['A', 'C', 'D', 'E', 'K', 'L', 'M', 'W'][i * 7 % 8]).collect();
    let item = format!(r#"{{"protein": "M{protein}", "organism": 51}}"#);
    format!(r#"{{"proteins": [{}]}}"#, vec![item; 100].join(", "))
}

fn metric(addr: std::net::SocketAddr, name: &str) -> u64 {
    let (_, text) = call(addr, "GET", "/metrics", None);
    let prefix = format!("{name} ");
    text.lines().find_map(|l| l.strip_prefix(&prefix)).and_then(|v| v.trim().parse().ok()).unwrap()
}

fn wait_for_metric(addr: std::net::SocketAddr, name: &str, at_least: u64) {
    for _ in 0..1000 {
        if metric(addr, name) >= at_least {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("{name} never reached {at_least}");
}

#[test]
fn interactive_requests_are_answered_while_jobs_fill_the_queue() {
    // One request per batch, and room for four waiting.
    let batch = BatchPolicy { window: Duration::ZERO, max_proteins: 1 };
    let server = start(ServeConfig { batch, queue_capacity: 4, ..ServeConfig::default() });
    let addr = server.addr;
    let slow = slow_request();
    std::thread::scope(|scope| {
        let busy = scope.spawn(|| call(addr, "POST", "/v1/predict", Some(&slow)));
        wait_for_metric(addr, "codon_gathered_batches_total", 1);
        // Six jobs of two parts each: more parts than the whole queue holds.
        let jobs: Vec<String> = (0..6).map(|_| submit(addr, &proteins(16))).collect();
        wait_for_metric(addr, "codon_queue_depth", 2);
        // Time for every job to push what it can.
        std::thread::sleep(Duration::from_millis(300));
        let small = r#"{"proteins": [{"protein": "MKV", "organism": 51}]}"#;
        let (status, text) = call(addr, "POST", "/v1/predict", Some(small));
        assert_eq!(status, 200, "the queue was full of job parts: {text}");
        let answer: PredictResponse = serde_json::from_str(&text).unwrap();
        assert_eq!(answer.results[0].sequences[0].dna.len(), 12);
        assert_eq!(busy.join().unwrap().0, 200);
        for id in &jobs {
            let done = wait_for(addr, id, |r| r.status != JobStatus::Running);
            assert_eq!((done.status, done.done), (JobStatus::Done, 16));
        }
    });
}

/// `VmRSS` or `VmHWM` (peak) of process `pid`, in MiB.
fn memory_mib(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb / 1024.0
}

/// A measurement, not a check (`--ignored --nocapture`): a server in a child process, its
/// resident memory after accepting 16, 32, 48 and 64 jobs of 10,000 proteins of 301 residues, and its peak
/// while eight clients read one finished job's 10,000 results at once.
#[test]
#[ignore]
fn memory_of_jobs_and_polls() {
    let dir = tempfile::tempdir().unwrap();
    let residues: String = (0..300).map(|i| ['A', 'C', 'D', 'E', 'K', 'L', 'M', 'W'][i * 7 % 8]).collect();
    let body = vec![format!("M{residues}"); 10_000];
    // A finished job of 10,000 proteins, read by eight clients at once.
    let (mut child, _lines, addr) = spawn_child_with(&dir.path().join("reads.sqlite3"), false, 0);
    let pid = child.id();
    let big = submit(addr, &body);
    let started = Instant::now();
    while report(addr, &format!("/v1/jobs/{big}")).status == JobStatus::Running {
        assert!(started.elapsed() < Duration::from_secs(600));
        std::thread::sleep(Duration::from_millis(200));
    }
    let whole: usize = all_results(addr, &big).iter().map(|r| serde_json::to_string(r).unwrap().len()).sum();
    let before = memory_mib(pid, "VmRSS:");
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
    std::thread::scope(|scope| {
        for _ in 0..8 {
            scope.spawn(|| assert_eq!(all_results(addr, &big).len(), 10_000));
        }
    });
    let peak = memory_mib(pid, "VmHWM:");
    println!(
        "server: 8 parallel reads of a {:.1} MB result: RSS {before:.0} MiB before, peak {peak:.0} MiB (+{:.0})",
        whole as f64 / 1e6,
        peak - before
    );
    child.kill().unwrap();
    child.wait().unwrap();
    // 32 jobs accepted by a server whose parts go slowly (one at a time, 150 ms each).
    let (mut child, _lines, addr) = spawn_child_with(&dir.path().join("accepts.sqlite3"), false, 150);
    let pid = child.id();
    submit(addr, &proteins(1));
    let before = memory_mib(pid, "VmRSS:");
    for n in 1..=64 {
        submit(addr, &body);
        if n % 16 == 0 {
            let after = memory_mib(pid, "VmRSS:");
            println!(
                "server: {n} jobs of 10,000 proteins accepted: RSS {before:.0} -> {after:.0} MiB (+{:.0})",
                after - before
            );
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Job parts are bounded in proteins and residues, and a gathered batch holds at most one: the
/// metrics' largest part (in any batch, and beside a predict request) stays within the bounds
/// while two jobs fill their lane and predict requests keep coming. Counted, not timed.
#[test]
fn a_predict_request_waits_for_at_most_one_small_job_part() {
    let server = start(ServeConfig::default());
    let addr = server.addr;
    let bounds = ServeConfig::default().job_part;
    // Parts bounded by their proteins (30 residues each), and by their residues (1,500 each).
    let short: Vec<String> = (0..400).map(|i| "MKVLAWCHDE".repeat(3)[..30 - i % 3].to_string()).collect();
    let long: Vec<String> =
        (0..30).map(|_| (0..1500).map(|i| ['A', 'C', 'D', 'E', 'K', 'L', 'M', 'W'][i * 7 % 8]).collect()).collect();
    let jobs = [submit(addr, &short), submit(addr, &long)];
    let small = r#"{"proteins": [{"protein": "MKV", "organism": 51}]}"#;
    let mut asked = 0;
    while metric(addr, "codon_job_part_proteins_beside_predict_max") == 0 {
        let (status, text) = call(addr, "POST", "/v1/predict", Some(small));
        assert_eq!(status, 200, "{text}");
        asked += 1;
        assert!(asked < 2_000, "no predict request was ever gathered beside a job part");
    }
    for id in &jobs {
        let done = wait_for(addr, id, |r| r.status != JobStatus::Running);
        assert_eq!(done.status, JobStatus::Done, "{done:?}");
    }
    let most = metric(addr, "codon_job_part_proteins_max");
    let beside = metric(addr, "codon_job_part_proteins_beside_predict_max");
    let residues = metric(addr, "codon_job_part_residues_max");
    assert!(most <= bounds.proteins as u64, "a batch carried {most} job proteins (bound {})", bounds.proteins);
    assert!(beside <= bounds.proteins as u64, "a predict request waited beside {beside} job proteins");
    assert!(residues <= bounds.residues as u64, "a batch carried {residues} job residues (bound {})", bounds.residues);
    assert!(residues >= 3_000, "the long job's parts held two proteins each: {residues}");
    server.stop().unwrap();
}

/// SIGTERM while the model runs a long job part: the server is gone within its grace and a
/// few seconds (the part is abandoned and left to the next start), not when the part ends.
#[test]
fn sigterm_stops_within_the_grace_while_a_long_part_runs() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("jobs.sqlite3");
    // A grace of one second, and job parts without bounds: the whole job is one long part.
    let (mut child, mut lines, addr) = spawn_child_env(&db, true, 0, &[(CHILD_GRACE_MS, "1000")]);
    let residues: String = (0..2000).map(|i| ['A', 'C', 'D', 'E', 'K', 'L', 'M', 'W'][i * 7 % 8]).collect();
    let id = submit(addr, &vec![format!("M{residues}"); LONG_PART_PROTEINS]);
    // The model has taken the part.
    wait_for_metric(addr, "codon_job_part_proteins_max", LONG_PART_PROTEINS as u64);
    let signalled = Instant::now();
    let sent = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(sent.success());
    assert_eq!(next_word(&mut lines, "LEFT "), "1", "the job is left to resume");
    assert!(child.wait().unwrap().success());
    let took = signalled.elapsed();
    assert!(took < Duration::from_secs(20), "the stop took {took:?} with a grace of 1 s");
    // The job waits for the next start, which runs its part again.
    let store = SqliteJobStore::open(&db, codon_serve::jobs::MAX_DB_BYTES).unwrap();
    assert_eq!(store.unfinished().unwrap(), vec![id]);
}

/// Proteins of 2,000 residues in the long part: over a minute of the fixture model's time on
/// two cores, against a stop bound of 20 s.
const LONG_PART_PROTEINS: usize = 2_000;
