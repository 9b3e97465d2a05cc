//! A hostile client over 127.0.0.1 (issue #42): cross-site requests, other Host names, slow
//! heads, bodies and idle connections, too many connections, settings that cannot work, the
//! page's security headers and errors in the API's own words. Raw sockets where the request
//! must be malformed or slow; every wait is bounded.
mod common;
use common::predictor;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use codon_serve::api::{ErrorBody, PredictResponse};
use codon_serve::{RunningServer, ServeConfig};

fn start(config: ServeConfig) -> RunningServer {
    RunningServer::start(predictor(), ServeConfig { port: 0, ..config }).unwrap()
}

/// An answer read off a raw socket.
#[derive(Debug)]
struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    /// A header's value (names compared in lower case).
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    /// The JSON error's message; panics when the body is not one.
    fn error(&self) -> String {
        serde_json::from_str::<ErrorBody>(&self.body).unwrap_or_else(|e| panic!("{self:?}: {e}")).error
    }
}

/// Send `request` whole (it should ask for `Connection: close`) and read the answer to the end.
fn send(addr: SocketAddr, request: &str) -> Answer {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    parse(&raw)
}

fn parse(raw: &[u8]) -> Answer {
    let text = String::from_utf8_lossy(raw).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no answer head in {text:?}"));
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("{head}"));
    // Small answers; chunked ones are one chunk.
    let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        body.split("\r\n").nth(1).unwrap_or("").to_string()
    } else {
        body.to_string()
    };
    Answer { status, head: head.to_string(), body }
}

/// A request with the given Host, extra header lines and JSON body (none: a GET).
fn request(method: &str, path: &str, host: &str, extra: &[&str], body: Option<&str>) -> String {
    let mut r = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for line in extra {
        r.push_str(line);
        r.push_str("\r\n");
    }
    if let Some(body) = body {
        r.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    } else {
        r.push_str("\r\n");
    }
    r
}

const JSON: &str = "Content-Type: application/json";
const PREDICT: &str = r#"{"proteins": [{"protein": "MKV", "organism": 51}]}"#;

/// Whether the server closes `stream` within `within` (reading whatever it sends first).
fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    stream.set_read_timeout(Some(within)).unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return false
            }
            // A reset is a close.
            Err(_) => return true,
        }
        if started.elapsed() > within {
            return false;
        }
    }
}

/// Item 11: a page elsewhere cannot call the API through a lab member's browser; the server's
/// own page and its CORS origins can.
#[test]
fn requests_from_other_sites_are_refused() {
    let server = start(ServeConfig { cors_origins: vec!["https://lab.example.org".into()], ..ServeConfig::default() });
    let addr = server.addr;
    let own = addr.to_string();
    // The trial's request: text/plain from another site.
    let evil =
        request("POST", "/v1/jobs", &own, &["Content-Type: text/plain", "Origin: http://evil.example"], Some(PREDICT));
    let answer = send(addr, &evil);
    assert_eq!(answer.status, 403, "{answer:?}");
    assert!(answer.error().contains("http://evil.example"), "{answer:?}");
    // Another site with the right type, and a GET from it, are refused as well.
    let evil_json = request("POST", "/v1/predict", &own, &[JSON, "Origin: http://evil.example"], Some(PREDICT));
    assert_eq!(send(addr, &evil_json).status, 403);
    assert_eq!(send(addr, &request("GET", "/v1/organisms", &own, &["Origin: null"], None)).status, 403);
    // The server's own page and a CORS origin are fine.
    for origin in [format!("Origin: http://{own}"), "Origin: https://lab.example.org".to_string()] {
        let answer = send(addr, &request("POST", "/v1/predict", &own, &[JSON, &origin], Some(PREDICT)));
        assert_eq!(answer.status, 200, "{origin}: {answer:?}");
        serde_json::from_str::<PredictResponse>(&answer.body).unwrap();
    }
    // The health check answers whatever the origin.
    assert_eq!(send(addr, &request("GET", "/health", &own, &["Origin: http://evil.example"], None)).status, 200);
    server.stop().unwrap();
}

/// Item 11: a POST body that is not declared JSON (what a cross-site form or a simple fetch
/// sends) gets 415 in JSON; `application/json` with parameters is fine.
#[test]
fn a_post_that_is_not_json_gets_415() {
    let server = start(ServeConfig::default());
    let addr = server.addr;
    let own = addr.to_string();
    for content_type in ["Content-Type: text/plain", "Content-Type: application/x-www-form-urlencoded"] {
        let answer = send(addr, &request("POST", "/v1/jobs", &own, &[content_type], Some(PREDICT)));
        assert_eq!(answer.status, 415, "{answer:?}");
        assert!(answer.error().contains("application/json"), "{answer:?}");
    }
    let answer = send(addr, &request("POST", "/v1/evaluate", &own, &[], Some(r#"{"sequences": []}"#)));
    assert_eq!(answer.status, 415, "no Content-Type: {answer:?}");
    let typed = ["Content-Type: application/json; charset=utf-8"];
    let answer = send(addr, &request("POST", "/v1/predict", &own, &typed, Some(PREDICT)));
    assert_eq!(answer.status, 200, "{answer:?}");
    server.stop().unwrap();
}

/// Item 11: DNS rebinding. A site whose name resolves to 127.0.0.1 reaches the server with its
/// own name in Host: refused, in JSON; the address, localhost and a configured name are fine,
/// and `/health` stays open.
#[test]
fn other_host_names_are_refused() {
    let server = start(ServeConfig { allowed_hosts: vec!["design.lab.example.org".into()], ..ServeConfig::default() });
    let addr = server.addr;
    let port = addr.port();
    let evil = format!("evil.example:{port}");
    let rebound = send(addr, &request("GET", "/v1/organisms", &evil, &[], None));
    assert!(rebound.status == 421 || rebound.status == 403, "{rebound:?}");
    assert!(rebound.error().contains("evil.example"), "{rebound:?}");
    let rebound_post = send(addr, &request("POST", "/v1/predict", &evil, &[JSON], Some(PREDICT)));
    assert_eq!(rebound_post.status, rebound.status, "{rebound_post:?}");
    for host in [addr.to_string(), format!("localhost:{port}"), "design.lab.example.org".to_string()] {
        let answer = send(addr, &request("GET", "/v1/organisms", &host, &[], None));
        assert_eq!(answer.status, 200, "{host}: {answer:?}");
    }
    assert_eq!(send(addr, &request("GET", "/health", "evil.example", &[], None)).status, 200);
    server.stop().unwrap();
}

/// A server whose header, idle and body timeouts are 1 s.
fn impatient() -> RunningServer {
    start(ServeConfig {
        header_timeout: Duration::from_secs(1),
        body_timeout: Duration::from_secs(1),
        ..ServeConfig::default()
    })
}

/// Item 12: half a request head, then nothing: the connection is closed after the header timeout.
#[test]
fn a_half_sent_head_is_cut_off() {
    let server = impatient();
    let mut slow_head = TcpStream::connect(server.addr).unwrap();
    slow_head.write_all(b"GET /health HTTP/1.1\r\nHo").unwrap();
    let started = Instant::now();
    assert!(closed_within(&mut slow_head, Duration::from_secs(10)), "a half-sent head is held past 10 s");
    assert!(started.elapsed() < Duration::from_secs(5), "closed after {:?}", started.elapsed());
    server.stop().unwrap();
}

/// Item 12: a body that stops halfway gets a JSON 408 after the body timeout.
#[test]
fn a_body_that_stops_gets_408() {
    let server = impatient();
    let addr = server.addr;
    let mut slow_body = TcpStream::connect(addr).unwrap();
    slow_body.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let head = format!("POST /v1/predict HTTP/1.1\r\nHost: {addr}\r\n{JSON}\r\nContent-Length: 100\r\n\r\n{{\"prot");
    slow_body.write_all(head.as_bytes()).unwrap();
    let started = Instant::now();
    let mut raw = Vec::new();
    let read = slow_body.read_to_end(&mut raw);
    assert!(read.is_ok() && !raw.is_empty(), "a half-sent body is held past 10 s: {read:?}");
    let answer = parse(&raw);
    assert_eq!(answer.status, 408, "{answer:?}");
    assert!(answer.error().contains("not received within 1 s"), "{answer:?}");
    assert!(started.elapsed() < Duration::from_secs(5), "answered after {:?}", started.elapsed());
    server.stop().unwrap();
}

/// Item 12: a kept-alive connection, answered once and then left idle, is closed after the
/// idle timeout.
#[test]
fn an_idle_kept_alive_connection_is_closed() {
    let server = impatient();
    let addr = server.addr;
    let mut idle = TcpStream::connect(addr).unwrap();
    idle.write_all(format!("GET /health HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes()).unwrap();
    let mut first = [0u8; 12];
    idle.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    idle.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");
    let started = Instant::now();
    assert!(closed_within(&mut idle, Duration::from_secs(10)), "an idle connection is held past 10 s");
    assert!(started.elapsed() < Duration::from_secs(5), "closed after {:?}", started.elapsed());
    server.stop().unwrap();
}

/// Item 12: past the connection limit a new connection waits, and is served once one closes.
#[test]
fn connections_past_the_limit_wait_for_one_to_close() {
    let server =
        start(ServeConfig { max_connections: 2, header_timeout: Duration::from_secs(30), ..ServeConfig::default() });
    let addr = server.addr;
    let holders: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(b"GET /health HTTP/1.1\r\n").unwrap();
            s
        })
        .collect();
    // The two holders are accepted before the third arrives.
    std::thread::sleep(Duration::from_millis(300));
    let mut third = TcpStream::connect(addr).unwrap();
    third.write_all(format!("GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes()).unwrap();
    third.set_read_timeout(Some(Duration::from_millis(1500))).unwrap();
    let mut first = [0u8; 12];
    let early = third.read(&mut first);
    assert!(
        matches!(&early, Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)),
        "a third connection was served past a limit of two: {early:?} {:?}",
        String::from_utf8_lossy(&first)
    );
    drop(holders);
    third.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    third.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"HTTP/1.1 200", "the waiting connection is served once the others close");
    server.stop().unwrap();
}

/// Item 18: an API key no client can send, or a CORS origin no browser sends, is refused at
/// start with one line saying which and why; `*` stays allowed.
#[test]
fn settings_that_cannot_work_are_refused_at_start() {
    let refused = |config: ServeConfig| match RunningServer::start(predictor(), ServeConfig { port: 0, ..config }) {
        Ok(server) => {
            let addr = server.addr;
            server.stop().unwrap();
            panic!("started on {addr}")
        }
        Err(e) => e.to_string(),
    };
    for key in ["", "two words", "clé", "tab\tkey"] {
        let line = refused(ServeConfig { api_key: Some(key.into()), ..ServeConfig::default() });
        assert!(line.starts_with("the API key: ") && !line.contains('\n'), "{key:?}: {line}");
        assert!(key.is_empty() || !line.contains(key), "the key is not printed: {line}");
    }
    for origin in
        ["http://good.example/", "bad origin", "http://good.example/app", "good.example", "https://good.example:443"]
    {
        let line = refused(ServeConfig { cors_origins: vec![origin.into()], ..ServeConfig::default() });
        assert!(line.contains(&format!("{origin:?}")) && !line.contains('\n'), "{origin}: {line}");
    }
    let line = refused(ServeConfig { allowed_hosts: vec!["lab.example.org:8080".into()], ..ServeConfig::default() });
    assert!(line.contains("lab.example.org:8080"), "{line}");
    // Job parts of nothing, and a jobs database no job fits in.
    let none = codon_serve::jobs::PartBounds { proteins: 0, residues: 4000 };
    let line = refused(ServeConfig { job_part: none, ..ServeConfig::default() });
    assert!(line.starts_with("job part bounds: "), "{line}");
    let line = refused(ServeConfig { jobs_db_max_bytes: 1000, ..ServeConfig::default() });
    assert!(line.contains("at least 1 MiB"), "{line}");
    for origins in [vec!["*".to_string()], vec!["https://lab.example.org".into(), "http://localhost:5173".into()]] {
        let config = ServeConfig { cors_origins: origins, api_key: Some("s3cret".into()), ..ServeConfig::default() };
        start(config).stop().unwrap();
    }
}

/// Item 16: the page forbids framing and inline script that is not its own, and nothing is
/// sniffed.
#[test]
fn the_page_carries_its_security_headers() {
    let server = start(ServeConfig::default());
    let answer = send(server.addr, &request("GET", "/", &server.addr.to_string(), &[], None));
    assert_eq!(answer.status, 200);
    let policy = answer.header("content-security-policy").unwrap_or_else(|| panic!("no CSP: {}", answer.head));
    assert!(policy.contains("default-src 'self'") && policy.contains("frame-ancestors 'none'"), "{policy}");
    assert!(!policy.contains("unsafe-inline") && !policy.contains("unsafe-eval"), "{policy}");
    assert!(policy.contains("script-src 'self' 'sha256-"), "the page's own inline script by its hash: {policy}");
    assert_eq!(answer.header("x-frame-options"), Some("DENY"));
    assert_eq!(answer.header("x-content-type-options"), Some("nosniff"));
    let api = send(server.addr, &request("GET", "/v1/enzymes", &server.addr.to_string(), &[], None));
    assert_eq!(api.header("x-content-type-options"), Some("nosniff"));
    server.stop().unwrap();
}

/// Item 20: errors name the JSON fields, not `predict`'s flags.
#[test]
fn errors_name_the_json_fields_not_the_clis_flags() {
    let server = start(ServeConfig::default());
    let addr = server.addr;
    let own = addr.to_string();
    let ask = |constraints: &str| {
        let body = format!(
            r#"{{"proteins": [{{"protein": "MKKKKKKKKFFFF", "organism": 51}}], "options": {{"constraints": {constraints}}}}}"#
        );
        send(addr, &request("POST", "/v1/predict", &own, &[JSON], Some(&body)))
    };
    for (constraints, field) in [
        (r#"{"avoid_motifs": ["XZ"]}"#, "avoid_motifs"),
        (r#"{"avoid_sites": ["NoSuchI"]}"#, "avoid_sites"),
        (r#"{"max_repeat": 0}"#, "max_repeat"),
    ] {
        let answer = ask(constraints);
        assert_eq!(answer.status, 400, "{answer:?}");
        let e = answer.error();
        assert!(e.contains(field) && !e.contains("--"), "{constraints}: {e}");
    }
    // A rule no synonymous change meets: the protein's error points at the JSON field.
    let answer = ask(r#"{"gc_window": {"window": 30, "min": 90, "max": 100}}"#);
    assert_eq!(answer.status, 200, "{answer:?}");
    let response: PredictResponse = serde_json::from_str(&answer.body).unwrap();
    let e = response.results[0].error.clone().unwrap();
    assert!(e.contains("best_effort") && !e.contains("--"), "{e}");
    server.stop().unwrap();
}

/// Item 20: a body that is not a JSON object is told so in JSON's words, and axum's own
/// refusals (a job id that is not UTF-8, an unknown route, a wrong method) are JSON errors.
#[test]
fn a_body_that_is_not_an_object_and_axums_refusals_get_json_errors() {
    let server = start(ServeConfig::default());
    let addr = server.addr;
    let own = addr.to_string();
    let post = |body: &str| send(addr, &request("POST", "/v1/predict", &own, &[JSON], Some(body)));
    let answer = post("[]");
    assert_eq!(answer.status, 400, "{answer:?}");
    assert!(answer.error().contains("must be a JSON object"), "{answer:?}");
    assert!(!answer.error().contains("struct"), "{answer:?}");
    let answer = post(r#"{"proteins": [{"protein": "MKV", "organism": 51}], "options": []}"#);
    assert_eq!(answer.status, 400, "{answer:?}");
    assert!(!answer.error().contains("struct"), "{answer:?}");
    for (method, path, status) in
        [("GET", "/v1/jobs/%FF%FE", 400), ("GET", "/nowhere", 404), ("GET", "/v1/predict", 405)]
    {
        let answer = send(addr, &request(method, path, &own, &[], None));
        assert_eq!(answer.status, status, "{path}: {answer:?}");
        assert!(!answer.error().is_empty(), "{path}: {answer:?}");
    }
    server.stop().unwrap();
}

/// Item 20: `codon_proteins_total` counts the proteins the model predicted, not one refused
/// for its unknown organism.
#[test]
fn metrics_count_only_the_proteins_predicted() {
    let server = start(ServeConfig::default());
    let addr = server.addr;
    let own = addr.to_string();
    let body = r#"{"proteins": [{"protein": "MKV", "organism": "Nowhere"}, {"protein": "MKV", "organism": 51}]}"#;
    let answer = send(addr, &request("POST", "/v1/predict", &own, &[JSON], Some(body)));
    assert_eq!(answer.status, 200, "{answer:?}");
    let metrics = send(addr, &request("GET", "/metrics", &own, &[], None)).body;
    assert!(metrics.contains("\ncodon_proteins_total 1\n"), "{metrics}");
    server.stop().unwrap();
}
