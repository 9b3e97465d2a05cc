//! The API over 127.0.0.1 with the tiny fixture model: every endpoint, the limits, the API key,
//! and concurrent requests sharing forward passes with the one-by-one answers.
mod common;
use common::predictor;

use std::path::PathBuf;
use std::time::Duration;

use candle_core::DType;
use codon_model::bigbird::load_model;
use codon_model::{PredictOptions, Predictor};
use codon_serve::api::{ErrorBody, EvaluateResponse, Organism, PredictResponse, Sequence};
use codon_serve::batcher::BatchPolicy;
use codon_serve::{RunningServer, ServeConfig};

fn start(config: ServeConfig) -> RunningServer {
    RunningServer::start(predictor(), ServeConfig { port: 0, ..config }).unwrap()
}

/// (status, body) of a request; `key` as a bearer token.
fn call(server: &RunningServer, method: &str, path: &str, body: Option<&str>, key: Option<&str>) -> (u16, String) {
    common::call_with_key(server.addr, method, path, body, key)
}

/// The protein a DNA codes for, a stop as '*'.
fn translate(dna: &str) -> String {
    dna.as_bytes().chunks(3).map(|c| codon_model::vocab::translate_codon(c).unwrap_or('?')).collect()
}

fn error_of(body: &str) -> String {
    serde_json::from_str::<ErrorBody>(body).unwrap_or_else(|e| panic!("{body}: {e}")).error
}

#[test]
fn health_organisms_and_metrics_answer() {
    let server = start(ServeConfig::default());
    let (status, body) = call(&server, "GET", "/health", None, None);
    assert_eq!(status, 200, "{body}");
    let organisms: Vec<Organism> = serde_json::from_str(&call(&server, "GET", "/v1/organisms", None, None).1).unwrap();
    assert_eq!(organisms.len(), codon_model::NUM_ORGANISMS);
    assert_eq!(organisms[51].name, "Escherichia coli general");
    let (status, text) = call(&server, "GET", "/metrics", None, None);
    assert_eq!(status, 200);
    assert!(text.contains("codon_gathered_batches_total 0"), "{text}");
    assert!(text.contains("codon_forward_passes_total 0"), "{text}");
    server.stop().unwrap();
}

#[test]
fn a_prediction_is_the_predictors_and_translates_back() {
    let server = start(ServeConfig::default());
    let body = r#"{"proteins": [{"protein": "MALWMRLLPLLALL", "organism": "Homo sapiens"},
                                {"protein": "MKV*", "organism": 51}],
                   "options": {"match_protein": true}}"#;
    let (status, text) = call(&server, "POST", "/v1/predict", Some(body), None);
    assert_eq!(status, 200, "{text}");
    let response: PredictResponse = serde_json::from_str(&text).unwrap();
    let p = predictor();
    let options = PredictOptions { match_protein: true, ..Default::default() };
    for (result, (protein, organism)) in
        response.results.iter().zip([("MALWMRLLPLLALL", "Homo sapiens"), ("MKV*", "51")])
    {
        let want: Vec<Sequence> = p
            .predict(protein, codon_model::OrganismRef::parse(organism), &options)
            .unwrap()
            .iter()
            .map(Sequence::from)
            .collect();
        assert_eq!(result.sequences.len(), want.len());
        for (got, want) in result.sequences.iter().zip(&want) {
            assert_eq!((&got.dna, got.log_likelihood), (&want.dna, want.log_likelihood), "{protein}");
            // Each codon's probability comes along; the 64 scores only when asked for.
            assert_eq!(got.codon_probs.len(), got.dna.len() / 3);
            assert!(got.codon_probs.iter().all(|p| (0.0..=1.0).contains(p) && *p > 0.0), "{:?}", got.codon_probs);
            let ln: f64 = got.codon_probs.iter().map(|p| f64::from(*p).ln()).sum();
            assert!((ln - got.log_likelihood).abs() < 1e-3, "{ln} vs {}", got.log_likelihood);
            assert!(got.codon_log_probs.is_none());
        }
    }
    assert_eq!(response.results[1].sequences[0].dna.len(), 12, "three residues and the stop");
}

#[test]
fn bad_input_gets_400_with_the_clis_words_and_limits_get_413() {
    let server = start(ServeConfig { max_proteins: 2, max_residues: 50, ..ServeConfig::default() });
    let predict = |body: &str| call(&server, "POST", "/v1/predict", Some(body), None);
    let (status, body) = predict(r#"{"proteins": [{"protein": "MK7", "organism": 51}]}"#);
    assert_eq!(status, 400);
    let cli = codon_model::prediction_residues("MK7").unwrap_err().to_string();
    assert_eq!(error_of(&body), format!("proteins[0]: {cli}"));
    let (status, body) = predict(r#"{"proteins": [{"protein": "MKV", "organism": 51, "colour": "red"}]}"#);
    assert_eq!(status, 400);
    assert!(error_of(&body).contains("unknown field `colour`"), "{body}");
    let (status, body) = predict(r#"{"proteins": [{"protein": "MKV", "organism": 51}], "options": {"top_p": 2}}"#);
    assert_eq!(status, 400, "{body}");
    let (status, _) = predict("{not json");
    assert_eq!(status, 400);
    let three = r#"{"proteins": [{"protein": "M", "organism": 1}, {"protein": "M", "organism": 1}, {"protein": "M", "organism": 1}]}"#;
    assert_eq!(predict(three).0, 413);
    let long = format!(r#"{{"proteins": [{{"protein": "{}", "organism": 1}}]}}"#, "M".repeat(51));
    assert_eq!(predict(&long).0, 413);
    // A request may not tie the model up with endless samples.
    let many = r#"{"proteins": [{"protein": "MKV", "organism": 51}], "options": {"temperature": 1.0, "num_sequences": 18446744073709551615}}"#;
    assert_eq!(predict(many).0, 413);
    // Nor ask for more codons (residues × sequences) than its cap: each carries 64 scores.
    let capped = start(ServeConfig { max_codons: 100, ..ServeConfig::default() });
    let body = |n: usize| {
        format!(
            r#"{{"proteins": [{{"protein": "MKVLAMKVLA", "organism": 51}}], "options": {{"temperature": 1.0, "num_sequences": {n}}}}}"#
        )
    };
    assert_eq!(call(&capped, "POST", "/v1/predict", Some(&body(10)), None).0, 200);
    let (status, text) = call(&capped, "POST", "/v1/predict", Some(&body(11)), None);
    assert_eq!(status, 413, "{text}");
    assert!(error_of(&text).contains("at most 100 codons"), "{text}");
    // A job keeps its results: the 64 scores per codon are not offered.
    let job = r#"{"proteins": [{"protein": "MKV", "organism": 51}], "options": {"codon_scores": true}}"#;
    assert_eq!(call(&capped, "POST", "/v1/jobs", Some(job), None).0, 400);
    // An unknown organism is that protein's error, not the request's.
    let (status, body) =
        predict(r#"{"proteins": [{"protein": "MKV", "organism": "Nowhere"}, {"protein": "MKV", "organism": 51}]}"#);
    assert_eq!(status, 200, "{body}");
    let response: PredictResponse = serde_json::from_str(&body).unwrap();
    assert!(response.results[0].error.is_some() && response.results[1].error.is_none());
}

#[test]
fn an_api_key_guards_everything_but_health() {
    let server = start(ServeConfig { api_key: Some("s3cret".into()), ..ServeConfig::default() });
    assert_eq!(call(&server, "GET", "/health", None, None).0, 200);
    assert_eq!(call(&server, "GET", "/v1/organisms", None, None).0, 401);
    assert_eq!(call(&server, "GET", "/v1/organisms", None, Some("wrong")).0, 401);
    assert_eq!(call(&server, "GET", "/v1/organisms", None, Some("s3cret")).0, 200);
    let body = r#"{"proteins": [{"protein": "MKV", "organism": 51}]}"#;
    assert_eq!(call(&server, "POST", "/v1/predict", Some(body), None).0, 401);
    assert_eq!(call(&server, "POST", "/v1/predict", Some(body), Some("s3cret")).0, 200);
    for path in ["/v1/evaluate", "/v1/jobs"] {
        assert_eq!(call(&server, "POST", path, Some(body), None).0, 401, "{path}");
    }
    assert_eq!(call(&server, "GET", "/v1/jobs/0", None, None).0, 401);
    // The key is checked before the body is read: an oversized body without it is 401, and
    // with it a JSON 413.
    // Without the key: the answer comes before the body (only its first bytes are sent).
    let mut stream = std::net::TcpStream::connect(server.addr).unwrap();
    let head = format!(
        "POST /v1/predict HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: 2097152\r\n\r\n{{",
        server.addr
    );
    std::io::Write::write_all(&mut stream, head.as_bytes()).unwrap();
    let mut answer = [0u8; 12];
    std::io::Read::read_exact(&mut stream, &mut answer).unwrap();
    assert_eq!(&answer, b"HTTP/1.1 401");
    let huge = format!(r#"{{"proteins": [{{"protein": "{}", "organism": 51}}]}}"#, "M".repeat((1 << 20) + 100));
    let (status, text) = call(&server, "POST", "/v1/predict", Some(&huge), Some("s3cret"));
    assert_eq!(status, 413, "{text}");
    assert!(error_of(&text).contains("over 1048576 bytes"), "{text}");
}

/// A batch job: accepted at once, followed to the end, each protein's result the one a predict
/// request gets.
#[test]
fn a_batch_job_reports_progress_and_the_predict_answers() {
    let server = start(ServeConfig::default());
    let proteins: Vec<String> =
        (0..20).map(|i| ["MKVLA", "MALWMRLLPLL", "MWCH", "MFWYMFWYKK"][i % 4].repeat(1 + i % 3)).collect();
    let items: Vec<String> = proteins.iter().map(|p| format!(r#"{{"protein": "{p}", "organism": 51}}"#)).collect();
    let body = format!(r#"{{"proteins": [{}], "options": {{"match_protein": true}}}}"#, items.join(","));
    let (status, text) = call(&server, "POST", "/v1/jobs", Some(&body), None);
    assert_eq!(status, 202, "{text}");
    let created: codon_serve::jobs::JobReport = serde_json::from_str(&text).unwrap();
    assert_eq!((created.total, created.done), (20, 0));
    let started = std::time::Instant::now();
    let report = loop {
        let (status, text) = call(&server, "GET", &format!("/v1/jobs/{}", created.id), None, None);
        assert_eq!(status, 200, "{text}");
        let report: codon_serve::jobs::JobReport = serde_json::from_str(&text).unwrap();
        assert!(report.done <= report.total);
        if report.status == codon_serve::jobs::JobStatus::Done {
            break report;
        }
        assert!(started.elapsed() < Duration::from_secs(120), "{text}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let results = report.results.unwrap();
    assert_eq!(results.len(), 20);
    for (protein, result) in proteins.iter().zip(&results) {
        let alone = format!(
            r#"{{"proteins": [{{"protein": "{protein}", "organism": 51}}], "options": {{"match_protein": true}}}}"#
        );
        let alone: PredictResponse =
            serde_json::from_str(&call(&server, "POST", "/v1/predict", Some(&alone), None).1).unwrap();
        assert_eq!(result.sequences[0].dna, alone.results[0].sequences[0].dna, "{protein}");
    }
    assert_eq!(call(&server, "GET", "/v1/jobs/nope", None, None).0, 404);
    // The job's three parts are not predict requests; the 20 calls above are.
    let (_, metrics) = call(&server, "GET", "/metrics", None, None);
    assert!(metrics.contains("\ncodon_predict_requests_total 20\n"), "{metrics}");
    assert!(metrics.contains("\ncodon_jobs_total 1\n"), "{metrics}");
}

#[test]
fn concurrent_requests_share_forward_passes_and_keep_their_own_answers() {
    // A wide window, so that eight requests started together meet in it.
    let batch = BatchPolicy { window: Duration::from_millis(400), max_proteins: 64 };
    let server = start(ServeConfig { batch, ..ServeConfig::default() });
    let requests: Vec<String> = (0..8)
        .map(|i| {
            let protein = ["MKVLA", "MALWMRLLPLL", "MWCH", "MFWYMFWYKK"][i % 4];
            let options = if i % 2 == 0 {
                r#"{}"#.to_string()
            } else {
                format!(r#"{{"temperature": 1.0, "seed": {i}, "num_sequences": 2}}"#)
            };
            format!(r#"{{"proteins": [{{"protein": "{protein}", "organism": 51}}], "options": {options}}}"#)
        })
        .collect();
    let answers: Vec<(u16, String)> = std::thread::scope(|scope| {
        let handles: Vec<_> =
            requests.iter().map(|r| scope.spawn(|| call(&server, "POST", "/v1/predict", Some(r), None))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let (_, metrics) = call(&server, "GET", "/metrics", None, None);
    let passes: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("codon_forward_passes_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap();
    // Four proteins of four lengths: four passes when the eight requests meet.
    assert!(passes < 8, "8 requests ran in {passes} forward passes");
    // The batch sizes: every pass counted, eight proteins in all.
    assert!(metrics.contains(&format!("\ncodon_forward_pass_proteins_count {passes}\n")), "{metrics}");
    assert!(metrics.contains("\ncodon_forward_pass_proteins_sum 8\n"), "{metrics}");
    // Each answer is the one its request gets alone.
    for (request, (status, body)) in requests.iter().zip(&answers) {
        assert_eq!(*status, 200, "{body}");
        let alone = call(&server, "POST", "/v1/predict", Some(request), None).1;
        let (a, b): (PredictResponse, PredictResponse) =
            (serde_json::from_str(body).unwrap(), serde_json::from_str(&alone).unwrap());
        for (x, y) in a.results[0].sequences.iter().zip(&b.results[0].sequences) {
            assert_eq!(x.dna, y.dna, "{request}");
            assert!((x.log_likelihood - y.log_likelihood).abs() <= 1e-5, "{request}");
        }
        assert_eq!(a.results[0].sequences.len(), b.results[0].sequences.len());
    }
}

/// A request slow enough to keep the worker busy for a while: 100 proteins of 2,000 residues
/// (about 2.6 s on 2 cores; the checks below wait on the queue, not on this time).
fn slow_request() -> String {
    let protein: String = (0..2000).map(|i| ['A', 'C', 'D', 'E', 'K', 'L', 'M', 'W'][i * 7 % 8]).collect();
    let item = format!(r#"{{"protein": "M{protein}", "organism": 51}}"#);
    format!(r#"{{"proteins": [{}]}}"#, vec![item; 100].join(", "))
}

/// The server's queue depth, from /metrics.
fn queue_depth(server: &RunningServer) -> u64 {
    let (_, text) = call(server, "GET", "/metrics", None, None);
    text.lines().find_map(|l| l.strip_prefix("codon_queue_depth ")).and_then(|v| v.trim().parse().ok()).unwrap()
}

/// Wait until the worker has started `n` forward batches.
fn wait_for_batches(server: &RunningServer, n: u64) {
    for _ in 0..600 {
        let (_, text) = call(server, "GET", "/metrics", None, None);
        let started: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix("codon_gathered_batches_total "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap();
        if started >= n {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("the worker never started batch {n}");
}

/// Wait until the queue holds `depth` requests.
fn wait_for_queue(server: &RunningServer, depth: u64) {
    for _ in 0..600 {
        if queue_depth(server) == depth {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("the queue never held {depth} requests");
}

#[test]
fn a_full_queue_answers_503_with_retry_after() {
    // One request at a time, and room for one more in the queue.
    let batch = BatchPolicy { window: Duration::ZERO, max_proteins: 1 };
    let server = start(ServeConfig { batch, queue_capacity: 1, ..ServeConfig::default() });
    let small = r#"{"proteins": [{"protein": "MKV", "organism": 51}]}"#;
    let slow = slow_request();
    std::thread::scope(|scope| {
        let busy = scope.spawn(|| call(&server, "POST", "/v1/predict", Some(&slow), None));
        // The worker is running the slow request.
        wait_for_batches(&server, 1);
        let queued = scope.spawn(|| call(&server, "POST", "/v1/predict", Some(small), None));
        wait_for_queue(&server, 1);
        let url = format!("http://{}/v1/predict", server.addr);
        match ureq::post(&url).set("Content-Type", "application/json").send_string(small) {
            Err(ureq::Error::Status(503, response)) => {
                assert_eq!(response.header("Retry-After"), Some("1"));
                assert!(response.into_string().unwrap().contains("queue is full"));
            }
            other => panic!("expected 503, got {other:?}"),
        }
        assert_eq!(busy.join().unwrap().0, 200);
        assert_eq!(queued.join().unwrap().0, 200);
    });
}

#[test]
fn stopping_finishes_the_request_in_flight_then_refuses_connections() {
    let server = start(ServeConfig::default());
    let addr = server.addr;
    let slow = slow_request();
    let (status, body) = std::thread::scope(|scope| {
        let in_flight = scope.spawn(|| {
            let response = ureq::post(&format!("http://{addr}/v1/predict"))
                .timeout(Duration::from_secs(120))
                .set("Content-Type", "application/json")
                .send_string(&slow);
            match response {
                Ok(r) => (r.status(), r.into_string().unwrap()),
                Err(e) => panic!("the request in flight failed: {e}"),
            }
        });
        wait_for_batches(&server, 1);
        server.stop().unwrap();
        in_flight.join().unwrap()
    });
    assert_eq!(status, 200);
    let response: PredictResponse = serde_json::from_str(&body).unwrap();
    assert_eq!(response.results.len(), 100);
    assert!(response.results.iter().all(|r| r.error.is_none() && r.sequences.len() == 1));
    assert!(ureq::get(&format!("http://{addr}/health")).call().is_err(), "the stopped server still answers");
}

/// Constraints are met by synonymous edits, listed with their reasons; one no change can meet
/// is an error for that protein, or with best effort what remains.
#[test]
fn constraints_repair_the_prediction_and_list_their_edits() {
    let server = start(ServeConfig::default());
    let protein = "MGLWEKKKKKKKKFFFFFFPPPPGGGG";
    let ask = |constraints: &str| {
        let body = format!(
            r#"{{"proteins": [{{"protein": "{protein}", "organism": 51}}],
                 "options": {{"match_protein": true, "constraints": {constraints}}}}}"#
        );
        call(&server, "POST", "/v1/predict", Some(&body), None)
    };
    let (status, text) = ask(r#"{"max_homopolymer": 4, "avoid_motifs": ["AAAAA"]}"#);
    assert_eq!(status, 200, "{text}");
    let response: PredictResponse = serde_json::from_str(&text).unwrap();
    let best = &response.results[0].sequences[0];
    assert!(!best.dna.contains("AAAAA") && !best.dna.contains("TTTTT") && !best.dna.contains("CCCCC"), "{}", best.dna);
    assert!(!best.dna.contains("GGGGG"), "{}", best.dna);
    assert_eq!(translate(&best.dna), format!("{protein}_"), "synonymous edits only");
    assert!(!best.edits.is_empty(), "the model's lysines and phenylalanines need edits: {text}");
    assert!(best.edits.iter().all(|e| e.old != e.new && !e.reason.is_empty()), "{text}");
    assert!(best.edit_cost.unwrap() >= 0.0);
    // An unknown enzyme is the request's error; a rule no change meets is the protein's.
    let (status, text) = ask(r#"{"avoid_sites": ["NoSuchI"]}"#);
    assert_eq!(status, 400, "{text}");
    assert!(error_of(&text).starts_with("options.constraints: "), "{text}");
    let (status, text) = ask(r#"{"gc_window": {"window": 30, "min": 90, "max": 100}}"#);
    assert_eq!(status, 200, "{text}");
    let response: PredictResponse = serde_json::from_str(&text).unwrap();
    assert!(response.results[0].error.is_some(), "{text}");
    let (status, text) = ask(r#"{"gc_window": {"window": 30, "min": 90, "max": 100}, "best_effort": true}"#);
    assert_eq!(status, 200, "{text}");
    let response: PredictResponse = serde_json::from_str(&text).unwrap();
    assert!(!response.results[0].sequences[0].remaining.is_empty(), "{text}");
}

/// `/v1/evaluate` gives GC without a reference, and CSI, CFD and %MinMax with one; predictions
/// then carry the same metrics.
#[test]
fn evaluate_and_the_predictions_metrics_come_from_the_reference() {
    let dna = "ATGGCGCTGTGGATGCGCCTGCTGCCGCTGCTGTAA";
    let body = format!(r#"{{"sequences": [{{"dna": "{dna}", "organism": 51}}, {{"dna": "ATGXX"}}]}}"#);
    let server = start(ServeConfig::default());
    let (status, text) = call(&server, "POST", "/v1/evaluate", Some(&body), None);
    assert_eq!(status, 200, "{text}");
    let response: EvaluateResponse = serde_json::from_str(&text).unwrap();
    let m = response.results[0].metrics.as_ref().unwrap();
    let gc = 100.0 * dna.bytes().filter(|b| *b == b'G' || *b == b'C').count() as f64 / dna.len() as f64;
    assert!((m.gc_content - gc).abs() < 1e-9 && m.csi.is_none(), "{text}");
    assert!(response.results[1].error.as_deref().unwrap().contains('X'), "{text}");
    server.stop().unwrap();

    // A Kazusa table in which the sequence's codons are ten times as common as the others.
    let bases = ["U", "C", "A", "G"];
    let usage: String = (0..64)
        .map(|i| format!("{}{}{}", bases[i / 16], bases[i / 4 % 4], bases[i % 4]))
        .map(|codon| {
            let count =
                if dna.replace('T', "U").as_bytes().chunks(3).any(|c| c == codon.as_bytes()) { 100 } else { 10 };
            format!("{codon} 1.0({count})\n")
        })
        .collect();
    let table = codon_eval::parse_codon_usage(&usage).unwrap();
    let reference = codon_eval::OrganismReference::from_counts(&table).unwrap();
    let want = reference.evaluate(&codon_eval::Dna::parse(dna).unwrap(), None, &Default::default()).unwrap();
    let config = ServeConfig {
        reference: Some(std::sync::Arc::new(codon_eval::References::Table(Box::new(reference)))),
        ..ServeConfig::default()
    };
    let server = start(config);
    let (_, text) = call(&server, "POST", "/v1/evaluate", Some(&body), None);
    let response: EvaluateResponse = serde_json::from_str(&text).unwrap();
    let m = response.results[0].metrics.as_ref().unwrap();
    assert_eq!((m.csi, m.cfd, m.minmax_mean), (Some(want.csi), Some(want.cfd), want.minmax_mean), "{text}");
    let predict = r#"{"proteins": [{"protein": "MALWMRLLPLL", "organism": 51}], "options": {"match_protein": true}}"#;
    let response: PredictResponse =
        serde_json::from_str(&call(&server, "POST", "/v1/predict", Some(predict), None).1).unwrap();
    assert!(response.results[0].sequences[0].metrics.as_ref().is_some_and(|m| m.csi.is_some()));
}

/// The page, the enzyme list, the latency histogram, and CORS only where asked for.
#[test]
fn the_page_enzymes_latency_and_cors() {
    let server = start(ServeConfig { cors_origins: vec!["https://lab.example.org".into()], ..ServeConfig::default() });
    let (status, page) = call(&server, "GET", "/", None, None);
    assert_eq!(status, 200);
    assert!(page.contains("<title>CodonTransformer</title>") && page.contains("/v1/predict"));
    let (_, enzymes) = call(&server, "GET", "/v1/enzymes", None, None);
    let enzymes: Vec<serde_json::Value> = serde_json::from_str(&enzymes).unwrap();
    assert!(enzymes.iter().any(|e| e["name"] == "BsaI" && e["site"] == "GGTCTC"), "{enzymes:?}");
    let predict = r#"{"proteins": [{"protein": "MKV", "organism": 51}]}"#;
    assert_eq!(call(&server, "POST", "/v1/predict", Some(predict), None).0, 200);
    let (_, metrics) = call(&server, "GET", "/metrics", None, None);
    assert!(metrics.contains("# TYPE codon_predict_seconds histogram"), "{metrics}");
    assert!(metrics.contains("codon_predict_seconds_bucket{le=\"+Inf\"} 1\n"), "{metrics}");
    assert!(metrics.contains("codon_predict_seconds_count 1\n"), "{metrics}");
    let cors = |server: &RunningServer, origin: &str| {
        ureq::get(&format!("http://{}/health", server.addr))
            .set("Origin", origin)
            .call()
            .unwrap()
            .header("access-control-allow-origin")
            .map(str::to_string)
    };
    assert_eq!(cors(&server, "https://lab.example.org").as_deref(), Some("https://lab.example.org"));
    assert_eq!(cors(&server, "https://elsewhere.example.com"), None);
    server.stop().unwrap();
    let server = start(ServeConfig { cors_origins: vec!["*".into()], ..ServeConfig::default() });
    assert_eq!(cors(&server, "https://elsewhere.example.com").as_deref(), Some("*"), "any origin");
    server.stop().unwrap();
    let server = start(ServeConfig::default());
    assert_eq!(cors(&server, "https://lab.example.org"), None, "CORS is off unless asked for");
}

/// On an NPU `/metrics` carries the device's memory (here the emulator's).
#[test]
fn metrics_carry_an_npus_memory() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/bigbird");
    let device = candle_ascend::parse_device("npu-sim:0").expect("the emulated toolkit loads");
    let predictor = Predictor::new(load_model(dir, None, &device, DType::F32).unwrap()).unwrap();
    // Read as `codon serve` reads it: the server knows no device's driver.
    struct NpuMemory(candle_core::Device);
    impl codon_serve::DeviceMemory for NpuMemory {
        fn read(&self) -> Option<codon_serve::MemoryReading> {
            let npu = candle_ascend::ascend_device(&self.0)?;
            let (free, total) = npu.memory_info().ok()?;
            Some(codon_serve::MemoryReading { device: npu.name(), free: free as u64, total: total as u64 })
        }
    }
    let memory = std::sync::Arc::new(NpuMemory(device.clone()));
    let server =
        RunningServer::start_with(predictor, ServeConfig { port: 0, ..ServeConfig::default() }, Some(memory)).unwrap();
    let (_, text) = call(&server, "GET", "/metrics", None, None);
    let gauge = |name: &str| -> u64 {
        let prefix = format!("{name}{{device=\"npu-sim:0\"}} ");
        text.lines().find_map(|l| l.strip_prefix(prefix.as_str())).unwrap_or_else(|| panic!("{text}")).parse().unwrap()
    };
    let (used, total) = (gauge("codon_device_memory_used_bytes"), gauge("codon_device_memory_total_bytes"));
    assert!(used > 0 && used < total, "the model's weights are on the device: {used} of {total}");
    server.stop().unwrap();
    let (_, cpu) = call(&start(ServeConfig::default()), "GET", "/metrics", None, None);
    assert!(!cpu.contains("codon_device_memory"), "{cpu}");
}

/// With a reference file that keeps the organism's sequences, metrics carry its %MinMax band:
/// here three copies of one sequence, so the band is that sequence's profile.
#[test]
fn the_metrics_carry_the_organisms_minmax_band() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("train.jsonl");
    let dna = "ATGGCGCTGTGGATGCGCCTGCTGCCGCTGCTGGCGCTGCTGGCGCTGTGGGGCCCGGATCCGGCGGCGGCGTAA";
    let tokens: Vec<String> = dna
        .as_bytes()
        .chunks(3)
        .map(|c| format!("{}_{}", translate(std::str::from_utf8(c).unwrap()), std::str::from_utf8(c).unwrap()))
        .collect();
    let line = format!(r#"{{"codons": "{}", "organism": 51}}"#, tokens.join(" "));
    std::fs::write(&path, format!("{line}\n{line}\n{line}\n")).unwrap();
    let set = codon_eval::ReferenceSet::read_jsonl(&path, |_| true).unwrap();
    let config = ServeConfig {
        reference: Some(std::sync::Arc::new(codon_eval::References::Set(set))),
        ..ServeConfig::default()
    };
    let server = start(config);
    let body = format!(r#"{{"sequences": [{{"dna": "{dna}", "organism": 51}}]}}"#);
    let (status, text) = call(&server, "POST", "/v1/evaluate", Some(&body), None);
    assert_eq!(status, 200, "{text}");
    let response: EvaluateResponse = serde_json::from_str(&text).unwrap();
    let m = response.results[0].metrics.as_ref().unwrap();
    assert!(!m.minmax.is_empty() && m.minmax.len() == m.minmax_band.len(), "{text}");
    for (value, band) in m.minmax.iter().zip(&m.minmax_band) {
        match (value, band) {
            (Some(v), Some([lo, hi])) => assert!((lo - v).abs() < 1e-12 && (hi - v).abs() < 1e-12, "{text}"),
            (None, None) => {}
            other => panic!("{other:?}: {text}"),
        }
    }
}
