//! `--model owner/name[@revision]` from a Hub, with no network: a small HTTP server on
//! 127.0.0.1 serves the tiny BigBird fixture in the Hub's URL layout
//! (`/api/models/{repo}/revision/{rev}`, `/{repo}/resolve/{rev}/{file}` with the range, etag and
//! `x-repo-commit` headers `hf-hub` reads), reached through `HF_ENDPOINT`.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use sha2::{Digest, Sha256};

const REPO: &str = "codon-test/tiny-bigbird";
const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

/// One file the server holds: its bytes and the etag the Hub would send.
struct HubFile {
    name: &'static str,
    bytes: Vec<u8>,
    etag: String,
}

/// How a hostile mirror lies (issue 42, items 5 to 9).
#[derive(Clone, Debug, PartialEq)]
enum Trick {
    /// Serve honestly.
    None,
    /// `config.json`'s etag is a path out of the cache.
    EtagPath,
    /// `x-repo-commit` is a path out of the cache.
    CommitPath,
    /// The weights redirect to another origin (this port).
    RedirectTo(u16),
    /// `config.json` is cut short: half its bytes, then the connection closes, with no
    /// `content-length` (only `content-range` says how long the file is).
    ShortConfig,
    /// The weights take this long to come (a slow download another process waits for).
    SlowWeights(u64),
}

/// The test Hub: counts requests; with `cut` set, sends half of each file body and hangs up; with
/// `wrong_sha` set, sends an etag that is not the weights' sha256; `trick` lies otherwise.
struct FakeHub {
    port: u16,
    requests: Arc<AtomicUsize>,
    cut: Arc<AtomicBool>,
    wrong_sha: Arc<AtomicBool>,
    trick: Arc<std::sync::Mutex<Trick>>,
}

impl FakeHub {
    fn start() -> Self {
        let weights = std::fs::read(common::bigbird_fixture("model.safetensors")).unwrap();
        let files = Arc::new(vec![
            HubFile {
                name: "config.json",
                bytes: std::fs::read(common::bigbird_fixture("config.json")).unwrap(),
                etag: "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678".into(), // a git object id
            },
            HubFile {
                name: "model.safetensors",
                etag: Sha256::digest(&weights).iter().map(|b| format!("{b:02x}")).collect(),
                bytes: weights,
            },
        ]);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(AtomicUsize::new(0));
        let (cut, wrong_sha) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let trick = Arc::new(std::sync::Mutex::new(Trick::None));
        let (r, c, w, t) = (requests.clone(), cut.clone(), wrong_sha.clone(), trick.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                r.fetch_add(1, Ordering::SeqCst);
                let (files, cut, wrong_sha) = (files.clone(), c.load(Ordering::SeqCst), w.load(Ordering::SeqCst));
                let trick = t.lock().unwrap().clone();
                std::thread::spawn(move || serve(stream, &files, cut, wrong_sha, &trick));
            }
        });
        Self { port, requests, cut, wrong_sha, trick }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

fn respond(stream: &mut TcpStream, status: &str, headers: &[(&str, String)], body: &[u8]) {
    let mut head = format!("HTTP/1.1 {status}\r\nconnection: close\r\ncontent-length: {}\r\n", body.len());
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let _ = stream.write_all(head.as_bytes()).and_then(|_| stream.write_all(body));
}

fn serve(mut stream: TcpStream, files: &[HubFile], cut: bool, wrong_sha: bool, trick: &Trick) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    let mut range_start = None;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("range") {
                let bytes = value.trim().trim_start_matches("bytes=");
                range_start =
                    bytes.split('-').next().and_then(|s| s.parse::<usize>().ok()).map(|s| (s, bytes.ends_with("-0")));
            }
        }
    }
    let path = request_line.split_whitespace().nth(1).unwrap_or("").to_string();
    let not_found =
        |stream: &mut TcpStream| respond(stream, "404 Not Found", &[], b"{\"error\":\"Repository not found\"}");
    let known_revision = |rev: &str| rev == "main" || rev == COMMIT;
    if let Some(rest) = path.strip_prefix(&format!("/api/models/{REPO}/revision/")) {
        if !known_revision(rest) {
            return not_found(&mut stream);
        }
        let siblings: Vec<String> = files.iter().map(|f| format!("{{\"rfilename\":\"{}\"}}", f.name)).collect();
        let body = format!("{{\"sha\":\"{COMMIT}\",\"siblings\":[{}]}}", siblings.join(","));
        return respond(&mut stream, "200 OK", &[("content-type", "application/json".into())], body.as_bytes());
    }
    let Some(rest) = path.strip_prefix(&format!("/{REPO}/resolve/")) else { return not_found(&mut stream) };
    let Some((rev, name)) = rest.split_once('/') else { return not_found(&mut stream) };
    let Some(file) = files.iter().find(|f| f.name == name).filter(|_| known_revision(rev)) else {
        return not_found(&mut stream);
    };
    let size = file.bytes.len();
    let (start, probe) = range_start.unwrap_or((0, false));
    let end = if probe { 0 } else { size - 1 };
    if let (Trick::SlowWeights(ms), "model.safetensors") = (trick, name) {
        std::thread::sleep(std::time::Duration::from_millis(*ms));
    }
    let mut etag = if wrong_sha && file.etag.len() == 64 { "0".repeat(64) } else { file.etag.clone() };
    let mut commit = COMMIT.to_string();
    match trick {
        Trick::EtagPath if name == "config.json" => etag = "../../../../../../evil-etag/config.json".into(),
        Trick::CommitPath => commit = "../../..".into(),
        Trick::RedirectTo(port) if name == "model.safetensors" => {
            let location = format!("http://127.0.0.1:{port}/blob");
            let headers = [("location", location), ("x-repo-commit", commit), ("x-linked-etag", format!("\"{etag}\""))];
            return respond(&mut stream, "302 Found", &headers, b"");
        }
        _ => {}
    }
    let headers = [
        ("etag", format!("\"{etag}\"")),
        ("x-repo-commit", commit),
        ("content-range", format!("bytes {start}-{end}/{size}")),
    ];
    let body = &file.bytes[start..=end];
    if *trick == Trick::ShortConfig && name == "config.json" && !probe {
        // Close-delimited: the client sees an orderly end of the body after half of it.
        let mut head = String::from("HTTP/1.1 200 OK\r\nconnection: close\r\n");
        for (k, v) in &headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        let _ = stream.write_all(head.as_bytes()).and_then(|_| stream.write_all(&body[..body.len() / 2]));
        return;
    }
    if cut && !probe {
        // Promise the whole body, send half of it, hang up.
        let mut head =
            format!("HTTP/1.1 206 Partial Content\r\nconnection: close\r\ncontent-length: {}\r\n", body.len());
        for (k, v) in &headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        let _ = stream.write_all(head.as_bytes()).and_then(|_| stream.write_all(&body[..body.len() / 2]));
        return;
    }
    respond(&mut stream, "206 Partial Content", &headers, body);
}

/// Run `c` against the Hub at `endpoint` with the cache `cache`, offline or not, no token.
fn with_hub(mut c: Command, endpoint: &str, cache: &Path, offline: bool) -> Output {
    c.env("HF_ENDPOINT", endpoint).env("HF_HUB_CACHE", cache).env_remove("HF_TOKEN").env_remove("HF_HOME");
    if offline {
        c.env("HF_HUB_OFFLINE", "1");
    } else {
        c.env_remove("HF_HUB_OFFLINE");
    }
    c.output().unwrap()
}

/// `predict` of one short protein with `--model model`, under the given Hub environment.
fn predict(model: &str, endpoint: &str, cache: &Path, offline: bool) -> Output {
    let mut c = common::command("predict");
    c.args(["--model", model, "--protein", "MKV", "--organism", "Escherichia coli general"]);
    with_hub(c, endpoint, cache, offline)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn snapshot(cache: &Path) -> std::path::PathBuf {
    cache.join(format!("models--{}", REPO.replace('/', "--"))).join("snapshots").join(COMMIT)
}

#[test]
fn a_hub_model_downloads_once_then_comes_from_the_cache_online_or_offline() {
    let hub = FakeHub::start();
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("hub");

    let first = predict(REPO, &hub.endpoint(), &cache, false);
    assert!(first.status.success(), "{}", stderr(&first));
    let dna = String::from_utf8_lossy(&first.stdout).into_owned();
    assert!(hub.requests() > 0);
    assert!(snapshot(&cache).join("model.safetensors").is_file());

    let before = hub.requests();
    let second = predict(REPO, &hub.endpoint(), &cache, false);
    assert!(second.status.success(), "{}", stderr(&second));
    assert_eq!(hub.requests(), before, "the second run made a request");
    assert_eq!(String::from_utf8_lossy(&second.stdout), dna);

    // Offline, and the endpoint unreachable: the cache serves it, by branch and by commit.
    for model in [REPO.to_string(), format!("{REPO}@{COMMIT}")] {
        let offline = predict(&model, "http://127.0.0.1:9", &cache, true);
        assert!(offline.status.success(), "{model}: {}", stderr(&offline));
        assert_eq!(String::from_utf8_lossy(&offline.stdout), dna);
    }

    // The same model as a local folder predicts the same.
    let local = common::run(
        "predict",
        &["--model", &common::bigbird_fixture(""), "--protein", "MKV", "--organism", "Escherichia coli general"],
    );
    assert_eq!(String::from_utf8_lossy(&local.stdout), dna);
}

#[test]
fn unknown_models_and_revisions_and_offline_misses_say_what_to_do() {
    let hub = FakeHub::start();
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("hub");

    let missing = predict("codon-test/no-such-model", &hub.endpoint(), &cache, false);
    assert_eq!(missing.status.code(), Some(1));
    assert!(stderr(&missing).contains("codon-test/no-such-model@main"), "{}", stderr(&missing));
    assert!(stderr(&missing).contains("no such model or revision (HTTP 404)"), "{}", stderr(&missing));

    let revision = predict(&format!("{REPO}@no-such-branch"), &hub.endpoint(), &cache, false);
    assert_eq!(revision.status.code(), Some(1));
    assert!(stderr(&revision).contains("@no-such-branch"), "{}", stderr(&revision));

    let offline = predict(REPO, &hub.endpoint(), &cache, true);
    assert_eq!(offline.status.code(), Some(1));
    let message = stderr(&offline);
    assert!(message.contains(REPO) && message.contains(&cache.display().to_string()), "{message}");
    assert!(message.contains("--model DIR"), "{message}");

    let unreachable = predict(REPO, "http://127.0.0.1:9", &cache, false);
    assert_eq!(unreachable.status.code(), Some(1));
    assert!(stderr(&unreachable).contains("cannot download"), "{}", stderr(&unreachable));
    assert_eq!(stderr(&unreachable).lines().count(), 1, "{}", stderr(&unreachable));
}

#[test]
fn a_download_cut_mid_file_leaves_nothing_a_later_run_trusts() {
    let hub = FakeHub::start();
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("hub");

    hub.cut.store(true, Ordering::SeqCst);
    let cut = predict(REPO, &hub.endpoint(), &cache, false);
    assert_eq!(cut.status.code(), Some(1), "{}", stderr(&cut));
    eprintln!("the cut download: {}", stderr(&cut).trim());
    assert!(!snapshot(&cache).join("model.safetensors").exists(), "a cut download left a snapshot file");
    let offline = predict(REPO, &hub.endpoint(), &cache, true);
    assert_eq!(offline.status.code(), Some(1), "a cut download is used offline: {}", stderr(&offline));

    hub.cut.store(false, Ordering::SeqCst);
    let again = predict(REPO, &hub.endpoint(), &cache, false);
    assert!(again.status.success(), "{}", stderr(&again));
    let weights = std::fs::read(snapshot(&cache).join("model.safetensors")).unwrap();
    assert_eq!(weights, std::fs::read(common::bigbird_fixture("model.safetensors")).unwrap());
}

#[test]
fn weights_that_do_not_hash_to_their_etag_are_removed_and_refused() {
    let hub = FakeHub::start();
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("hub");

    hub.wrong_sha.store(true, Ordering::SeqCst);
    let bad = predict(REPO, &hub.endpoint(), &cache, false);
    assert_eq!(bad.status.code(), Some(1), "{}", stderr(&bad));
    assert!(stderr(&bad).contains("does not match the sha256"), "{}", stderr(&bad));
    assert!(!snapshot(&cache).join("model.safetensors").exists());
    let blobs = cache.join(format!("models--{}", REPO.replace('/', "--"))).join("blobs");
    assert!(!blobs.join("0".repeat(64)).exists(), "the mismatching blob was kept");
    let offline = predict(REPO, &hub.endpoint(), &cache, true);
    assert_eq!(offline.status.code(), Some(1), "{}", stderr(&offline));
}

#[test]
fn finetune_starts_from_a_hub_model_and_by_default_from_the_published_base() {
    let hub = FakeHub::start();
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("hub");
    let train = dir.path().join("train.jsonl").to_string_lossy().into_owned();
    let o = common::run("prepare-data", &["--input", &common::demo("genes.csv"), "--output", &train]);
    assert!(o.status.success(), "{}", stderr(&o));
    let finetune = |extra: &[&str], offline: bool| {
        let mut c = common::command("finetune");
        c.args(["--dataset_dir", &train, "--precision", "f32", "--num_workers", "1", "--quiet", "--max_steps", "1"])
            .args(extra);
        with_hub(c, &hub.endpoint(), &cache, offline)
    };
    // No --model: upstream's base model, which this offline machine has not cached.
    let o = finetune(&[], true);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("adibvafa/CodonTransformer-base@main"), "{}", stderr(&o));
    // A Hub id downloads, and the run starts from it.
    let o = finetune(&["--model", REPO], false);
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains(&format!("starting from {}", snapshot(&cache).display())), "{stdout}");
    // --from-scratch needs no model.
    let o = finetune(&["--from-scratch", "--config", &common::bigbird_fixture("config.json")], true);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// Run `predict` of `REPO` against `hub` with `HF_TOKEN` set.
fn predict_with_token(hub: &FakeHub, cache: &Path) -> Output {
    let mut c = common::command("predict");
    c.args(["--model", REPO, "--protein", "MKV", "--organism", "Escherichia coli general"]);
    c.env("HF_ENDPOINT", hub.endpoint()).env("HF_HUB_CACHE", cache).env("HF_TOKEN", "hf_secret").env_remove("HF_HOME");
    c.env_remove("HF_HUB_OFFLINE").output().unwrap()
}

#[test]
fn a_mirror_cannot_write_outside_the_cache_through_etags_or_commits() {
    let hub = FakeHub::start();
    let dir = tempfile::tempdir().unwrap();
    // The cache three folders down, so `../../..` from it stays inside the test's folder.
    let cache = dir.path().join("a").join("b").join("hub");
    for trick in [Trick::EtagPath, Trick::CommitPath] {
        *hub.trick.lock().unwrap() = trick.clone();
        let o = predict(REPO, &hub.endpoint(), &cache, false);
        assert_eq!(o.status.code(), Some(1), "{trick:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("sent an invalid"), "{trick:?}: {}", stderr(&o));
        assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
        let mut outside: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        outside.sort();
        assert_eq!(outside, ["a"], "{trick:?} wrote beside the cache");
        assert!(!dir.path().join("a").join("evil-etag").exists() && !dir.path().join("evil-etag").exists());
        assert_eq!(std::fs::read_dir(dir.path().join("a")).unwrap().count(), 1, "{trick:?} wrote beside the cache");
    }
}

#[test]
fn the_token_goes_only_to_the_endpoint_and_not_along_a_redirect() {
    // The other origin: serves the weights and records whether a token came with the request.
    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    let other_port = other.local_addr().unwrap().port();
    let saw_token = Arc::new(AtomicBool::new(false));
    let seen = saw_token.clone();
    let weights = std::fs::read(common::bigbird_fixture("model.safetensors")).unwrap();
    std::thread::spawn(move || {
        for mut stream in other.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
                    break;
                }
                if line.to_ascii_lowercase().starts_with("authorization:") {
                    seen.store(true, Ordering::SeqCst);
                }
            }
            respond(&mut stream, "200 OK", &[("etag", "\"cdn-etag-1\"".into())], &weights);
        }
    });
    let hub = FakeHub::start();
    *hub.trick.lock().unwrap() = Trick::RedirectTo(other_port);
    let dir = tempfile::tempdir().unwrap();
    let o = predict_with_token(&hub, &dir.path().join("hub"));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!saw_token.load(Ordering::SeqCst), "HF_TOKEN went to another origin");
}

#[test]
fn a_short_config_is_not_kept() {
    let hub = FakeHub::start();
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("hub");
    *hub.trick.lock().unwrap() = Trick::ShortConfig;
    let o = predict(REPO, &hub.endpoint(), &cache, false);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(!snapshot(&cache).join("config.json").exists(), "a short config.json was kept");
    *hub.trick.lock().unwrap() = Trick::None;
    let again = predict(REPO, &hub.endpoint(), &cache, false);
    assert!(again.status.success(), "a later run fails after a short download: {}", stderr(&again));
}

#[test]
fn revisions_that_are_paths_or_change_the_url_are_refused() {
    let hub = FakeHub::start();
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("c").join("hub");
    for revision in ["../../../../hub/revtrav", "main?x=1", "main#frag"] {
        let before = hub.requests();
        let o = predict(&format!("{REPO}@{revision}"), &hub.endpoint(), &cache, false);
        assert_eq!(o.status.code(), Some(1), "{revision}: {}", stderr(&o));
        assert!(stderr(&o).contains("not a Hub repository id"), "{revision}: {}", stderr(&o));
        assert_eq!(hub.requests(), before, "{revision}: a request was made");
    }
    assert!(!dir.path().join("hub").exists() && !cache.exists(), "a revision wrote into or beside the cache");
}

#[test]
fn a_second_download_of_the_same_model_waits_for_the_first() {
    let hub = FakeHub::start();
    // Longer than the 5 s the hf-hub crate waited for its lock before it gave up.
    *hub.trick.lock().unwrap() = Trick::SlowWeights(7000);
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("hub");
    let (endpoint, first_cache) = (hub.endpoint(), cache.clone());
    let first = std::thread::spawn(move || predict(REPO, &endpoint, &first_cache, false));
    std::thread::sleep(std::time::Duration::from_millis(1000));
    let second = predict(REPO, &hub.endpoint(), &cache, false);
    let first = first.join().unwrap();
    assert!(first.status.success(), "{}", stderr(&first));
    assert!(second.status.success(), "the second download failed: {}", stderr(&second));
    assert!(stderr(&second).contains("waiting for another process downloading"), "{}", stderr(&second));
    assert_eq!(first.stdout, second.stdout);
}
