//! The findings of a hostile trial of the service (issue #57), over 127.0.0.1 with the tiny
//! fixture model: long organism names are refused at once and never echoed whole, the jobs
//! database is checked before anything is written to it (another program's file, a device, a
//! file another server holds), it is private to its owner, a page of `limit=0` is refused, and
//! jobs can be cancelled, a failed or cancelled job's results still read page by page.
mod common;
use common::{call, predictor};

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use codon_serve::batcher::BatchPolicy;
use codon_serve::{RunningServer, ServeConfig};
use serde_json::Value;

fn start(config: ServeConfig) -> RunningServer {
    RunningServer::start(predictor(), ServeConfig { port: 0, ..config }).unwrap()
}

/// The error a start on `config` ends with.
fn start_error(config: ServeConfig) -> String {
    match RunningServer::start(predictor(), ServeConfig { port: 0, ..config }) {
        Ok(_) => panic!("the server started"),
        Err(e) => e.to_string(),
    }
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{}: {e}", &text[..text.len().min(300)]))
}

fn job_body(proteins: &[String]) -> String {
    let items: Vec<String> = proteins.iter().map(|p| format!(r#"{{"protein": "{p}", "organism": 51}}"#)).collect();
    format!(r#"{{"proteins": [{}]}}"#, items.join(","))
}

fn submit(addr: std::net::SocketAddr, proteins: &[String]) -> String {
    let (status, text) = call(addr, "POST", "/v1/jobs", Some(&job_body(proteins)));
    assert_eq!(status, 202, "{text}");
    json(&text)["id"].as_str().unwrap().to_string()
}

/// Job `id`'s report, polled until `until` holds (at most a minute).
fn wait_for(addr: std::net::SocketAddr, id: &str, until: impl Fn(&Value) -> bool) -> Value {
    let started = Instant::now();
    loop {
        let (status, text) = call(addr, "GET", &format!("/v1/jobs/{id}"), None);
        assert_eq!(status, 200, "{text}");
        let report = json(&text);
        if until(&report) {
            return report;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "job {id} never got there: {report}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_long_organism_name_is_refused_at_once_and_no_error_echoes_the_request_whole() {
    let server = start(ServeConfig::default());
    let addr = server.addr;
    // About 1 MB of name: a 400 that says how long it was, not the name back.
    let name = "Escherichia coli ".repeat(60_000);
    let body = format!(r#"{{"proteins": [{{"protein": "MKV", "organism": "{name}"}}]}}"#);
    let (status, text) = call(addr, "POST", "/v1/predict", Some(&body));
    assert_eq!(status, 400, "{}", &text[..text.len().min(300)]);
    assert!(text.len() < 1_200, "the answer is {} bytes: {}…", text.len(), &text[..300.min(text.len())]);
    assert!(text.contains("organism"), "{text}");
    // The same in a job, and in evaluate.
    let job = format!(r#"{{"proteins": [{{"protein": "MKV", "organism": "{name}"}}]}}"#);
    let (status, text) = call(addr, "POST", "/v1/jobs", Some(&job));
    assert_eq!(status, 400, "{}", &text[..text.len().min(300)]);
    assert!(text.len() < 1_200, "the answer is {} bytes", text.len());
    let evaluate = format!(r#"{{"sequences": [{{"dna": "ATGAAATAA", "organism": "{name}"}}]}}"#);
    let (status, text) = call(addr, "POST", "/v1/evaluate", Some(&evaluate));
    assert_eq!(status, 200, "{}", &text[..text.len().min(300)]);
    assert!(text.len() < 1_200, "the answer is {} bytes", text.len());
    // A long unknown field's name and a long unknown name within the limit: echoed cut short.
    let key = "k".repeat(500_000);
    let (status, text) = call(addr, "POST", "/v1/predict", Some(&format!(r#"{{"{key}": 1}}"#)));
    assert_eq!(status, 400);
    assert!(text.len() < 1_200, "the answer is {} bytes", text.len());
    let unknown = "x".repeat(180);
    let body = format!(r#"{{"proteins": [{{"protein": "MKV", "organism": "{unknown}"}}]}}"#);
    let (status, text) = call(addr, "POST", "/v1/predict", Some(&body));
    assert_eq!(status, 200, "{text}");
    let error = json(&text)["results"][0]["error"].as_str().unwrap().to_string();
    assert!(!error.contains(&"x".repeat(101)), "the name came back whole: {error}");
    assert!(error.contains(&"x".repeat(100)), "the name's start is kept: {error}");
    server.stop().unwrap();
}

/// An SQLite database of another program's: a table and a row, in rollback-journal mode.
fn foreign_db(path: &Path) -> Vec<u8> {
    let other = rusqlite::Connection::open(path).unwrap();
    other.execute_batch("CREATE TABLE notes (text TEXT); INSERT INTO notes VALUES ('keep me');").unwrap();
    drop(other);
    std::fs::read(path).unwrap()
}

#[test]
fn another_programs_database_is_refused_without_a_byte_written() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("foreign.db");
    let before = foreign_db(&db);
    let message = start_error(ServeConfig { jobs_db: Some(db.clone().into()), ..ServeConfig::default() });
    assert!(message.contains("not a jobs database") && message.contains("untouched"), "{message}");
    assert!(std::fs::read(&db).unwrap() == before, "the foreign database's bytes changed");
    let beside: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(beside, vec!["foreign.db".to_string()], "files were made beside it");
}

#[test]
fn a_device_or_a_folder_is_refused_as_the_jobs_database() {
    let journal = Path::new("/dev/null-journal");
    let journal_before = journal.exists();
    let message = start_error(ServeConfig { jobs_db: Some(Path::new("/dev/null").into()), ..ServeConfig::default() });
    assert!(message.contains("/dev/null") && message.contains("not a regular file"), "{message}");
    if !journal_before {
        assert!(!journal.exists(), "a journal was made beside /dev/null");
    }
    let dir = tempfile::tempdir().unwrap();
    let message = start_error(ServeConfig { jobs_db: Some(dir.path().into()), ..ServeConfig::default() });
    assert!(message.contains("not a regular file"), "{message}");
}

#[test]
fn a_second_server_on_the_same_database_is_told_another_server_holds_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("jobs.sqlite3");
    let first = start(ServeConfig { jobs_db: Some(db.clone().into()), ..ServeConfig::default() });
    let message = start_error(ServeConfig { jobs_db: Some(db.clone().into()), ..ServeConfig::default() });
    assert!(message.contains("another server holds"), "{message}");
    assert!(message.contains(&db.display().to_string()) && message.contains("--jobs-db"), "{message}");
    first.stop().unwrap();
    // Once the first has stopped, the file is free.
    start(ServeConfig { jobs_db: Some(db.into()), ..ServeConfig::default() }).stop().unwrap();
}

#[cfg(unix)]
#[test]
fn the_jobs_database_is_private_to_its_owner() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("data").join("jobs.sqlite3");
    let server = start(ServeConfig { jobs_db: Some(db.clone().into()), ..ServeConfig::default() });
    submit(server.addr, &["MKV".to_string()]);
    let files: Vec<PathBuf> = std::fs::read_dir(db.parent().unwrap()).unwrap().map(|e| e.unwrap().path()).collect();
    assert!(files.len() >= 2, "the database and its -wal: {files:?}");
    for file in &files {
        let mode = std::fs::metadata(file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}: {mode:o}", file.display());
    }
    server.stop().unwrap();
}

#[test]
fn a_page_of_no_results_is_refused() {
    let server = start(ServeConfig::default());
    let id = submit(server.addr, &["MKV".to_string(), "MWC".to_string()]);
    wait_for(server.addr, &id, |r| r["status"] == "done");
    let (status, text) = call(server.addr, "GET", &format!("/v1/jobs/{id}?limit=0"), None);
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("limit"), "{text}");
    let (status, text) = call(server.addr, "GET", &format!("/v1/jobs/{id}?limit=1"), None);
    assert_eq!(status, 200);
    assert_eq!(json(&text)["results"].as_array().unwrap().len(), 1);
    server.stop().unwrap();
}

/// `n` proteins of 20 to 60 residues.
fn proteins(n: usize) -> Vec<String> {
    (0..n).map(|i| "MKVLAWCHDE".repeat(2 + i % 5)).collect()
}

/// A server whose job parts go one at a time, each waiting `window` for company.
fn slow_jobs(db: Option<&Path>) -> ServeConfig {
    ServeConfig {
        jobs_db: db.map(Into::into),
        queue_capacity: 2,
        batch: BatchPolicy { window: Duration::from_millis(150), max_proteins: 64 },
        ..ServeConfig::default()
    }
}

#[test]
fn a_cancelled_job_stops_and_keeps_its_results() {
    let server = start(slow_jobs(None));
    let addr = server.addr;
    let id = submit(addr, &proteins(400));
    wait_for(addr, &id, |r| r["done"].as_u64().unwrap() >= 8);
    let (status, text) = call(addr, "DELETE", &format!("/v1/jobs/{id}"), None);
    assert_eq!(status, 200, "{text}");
    assert_eq!(json(&text)["status"], "cancelled", "{text}");
    // Counted, not timed: the parts the model had taken may finish, nothing after them does.
    let cancelled = wait_for(addr, &id, |r| r["status"] == "cancelled");
    let done = cancelled["done"].as_u64().unwrap();
    std::thread::sleep(Duration::from_millis(1_000));
    let later = wait_for(addr, &id, |_| true);
    assert_eq!(later["done"].as_u64().unwrap(), done, "parts kept running after the cancel: {later}");
    assert!(done < 400, "{later}");
    // Its results read page by page: those it had, then the proteins it never reached.
    let page = wait_for(addr, &id, |r| r["results"].is_array());
    let results = page["results"].as_array().unwrap();
    assert_eq!(results.len(), 100);
    assert!(results[0]["sequences"].is_array(), "{}", results[0]);
    assert_eq!(page["next_offset"], 100);
    let (_, text) = call(addr, "GET", &format!("/v1/jobs/{id}?offset=300"), None);
    let tail = json(&text);
    assert!(tail["results"][99]["error"].as_str().unwrap().contains("not predicted"), "{tail}");
    // A finished job is deleted, and then unknown.
    let (status, _) = call(addr, "DELETE", &format!("/v1/jobs/{id}"), None);
    assert_eq!(status, 204);
    assert_eq!(call(addr, "GET", &format!("/v1/jobs/{id}"), None).0, 404);
    assert_eq!(call(addr, "DELETE", &format!("/v1/jobs/{id}"), None).0, 404);
    server.stop().unwrap();
}

#[test]
fn a_failed_jobs_results_are_pageable() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("jobs.sqlite3");
    let server = start(slow_jobs(Some(&db)));
    let id = submit(server.addr, &proteins(200));
    wait_for(server.addr, &id, |r| r["done"].as_u64().unwrap() >= 8);
    server.stop().unwrap();
    // Restarted with a residue limit its proteins break: the job fails at its next part.
    let server = start(ServeConfig { max_residues: 20, ..slow_jobs(Some(&db)) });
    let failed = wait_for(server.addr, &id, |r| r["status"] != "running");
    assert_eq!(failed["status"], "failed", "{failed}");
    assert!(failed["error"].as_str().unwrap().contains("limits"), "{failed}");
    let results = failed["results"].as_array().unwrap_or_else(|| panic!("no results: {failed}"));
    assert_eq!(results.len(), 100);
    assert!(results[0]["sequences"].is_array(), "the saved results are kept: {}", results[0]);
    assert!(results[99]["error"].as_str().unwrap().contains("not predicted"), "{}", results[99]);
    server.stop().unwrap();
}

/// A protein whose organism is unknown is answered with its error without the model: names are
/// matched off the model's worker, so a request of unknown names costs the model nothing.
#[test]
fn unknown_organisms_are_answered_without_the_model() {
    let server = start(ServeConfig::default());
    let addr = server.addr;
    let name = "q".repeat(100);
    let item = format!(r#"{{"protein": "MKVLAW", "organism": "{name}"}}"#);
    let body = format!(r#"{{"proteins": [{}]}}"#, vec![item; 50].join(","));
    let (status, text) = call(addr, "POST", "/v1/predict", Some(&body));
    assert_eq!(status, 200, "{text}");
    let answer = json(&text);
    assert!(answer["results"][49]["error"].as_str().unwrap().contains("Invalid organism name"), "{answer}");
    let (_, metrics) = call(addr, "GET", "/metrics", None);
    assert!(metrics.contains("codon_gathered_batches_total 0\n"), "the model's worker was asked: {metrics}");
    // Known and unknown together: the known ones are predicted, in their places.
    let body = format!(
        r#"{{"proteins": [{{"protein": "MKV", "organism": 51}}, {{"protein": "MKV", "organism": "{name}"}}, {{"protein": "MWC", "organism": "Escherichia coli general"}}]}}"#
    );
    let (status, text) = call(addr, "POST", "/v1/predict", Some(&body));
    assert_eq!(status, 200, "{text}");
    let results = json(&text)["results"].as_array().unwrap().clone();
    assert_eq!(results[0]["sequences"][0]["dna"].as_str().unwrap().len(), 12, "{text}");
    assert!(results[1]["error"].is_string(), "{text}");
    assert_eq!(results[2]["sequences"][0]["dna"].as_str().unwrap().len(), 12, "{text}");
    server.stop().unwrap();
}
