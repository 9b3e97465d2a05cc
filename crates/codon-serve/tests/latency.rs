//! A measurement, not a check (`cargo test --release -p codon-serve --test latency -- --ignored
//! --nocapture`): one protein's predict latency with the server idle and while a big batch job
//! runs, with the tiny fixture model on the CPU.
mod common;
use common::{call, predictor};

use std::time::{Duration, Instant};

use codon_serve::jobs::JobReport;
use codon_serve::{RunningServer, ServeConfig};

/// Milliseconds of `n` one-protein predicts, one after another: (median, max).
fn predicts(addr: std::net::SocketAddr, n: usize) -> (f64, f64) {
    let body =
        r#"{"proteins": [{"protein": "MALWMRLLPLLALLALWGPDPAAAFVNQHLCGSHLVEALYLVCGERGFFYTPKT", "organism": 51}]}"#;
    let mut ms: Vec<f64> = (0..n)
        .map(|_| {
            let t = Instant::now();
            let (status, text) = call(addr, "POST", "/v1/predict", Some(body));
            assert_eq!(status, 200, "{text}");
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    (ms[n / 2], ms[n - 1])
}

fn job(proteins: usize, residues: usize) -> String {
    let protein: String = (0..residues - 1).map(|i| ['A', 'C', 'D', 'E', 'K', 'L', 'M', 'W'][i * 7 % 8]).collect();
    let item = format!(r#"{{"protein": "M{protein}", "organism": 51}}"#);
    format!(r#"{{"proteins": [{}]}}"#, vec![item; proteins].join(","))
}

#[test]
#[ignore]
fn predict_latency_during_a_big_job() {
    let server = RunningServer::start(predictor(), ServeConfig { port: 0, ..ServeConfig::default() }).unwrap();
    let addr = server.addr;
    predicts(addr, 3);
    let (p50, max) = predicts(addr, 20);
    println!("idle: one predict p50 {p50:.1} ms, max {max:.1} ms");
    for (n, residues) in [(3_000, 500), (10_000, 2_000)] {
        let (status, text) = call(addr, "POST", "/v1/jobs", Some(&job(n, residues)));
        assert_eq!(status, 202, "{text}");
        let id = serde_json::from_str::<JobReport>(&text).unwrap().id;
        // The job under way.
        std::thread::sleep(Duration::from_secs(2));
        let (p50, max) = predicts(addr, 20);
        let (_, text) = call(addr, "GET", &format!("/v1/jobs/{id}"), None);
        let report: JobReport = serde_json::from_str(&text).unwrap();
        println!(
            "during a {n} x {residues}-residue job ({} of {} done after): one predict p50 {p50:.1} ms, max {max:.1} ms",
            report.done, report.total
        );
        // Not waited for: the server is dropped with the job running.
        let _ = call(addr, "DELETE", &format!("/v1/jobs/{id}"), None);
    }
    drop(server);
}

/// Seconds a job of 3,000 proteins of 500 residues takes alone, with the default parts and with
/// parts of 256 proteins (the size of the batches job parts were gathered into before parts
/// were bounded).
#[test]
#[ignore]
fn job_pace_with_small_and_large_parts() {
    let large = codon_serve::jobs::PartBounds { proteins: 256, residues: usize::MAX };
    for (name, part) in [("default parts", ServeConfig::default().job_part), ("parts of 256", large)] {
        let server =
            RunningServer::start(predictor(), ServeConfig { port: 0, job_part: part, ..ServeConfig::default() })
                .unwrap();
        let addr = server.addr;
        let started = Instant::now();
        let (status, text) = call(addr, "POST", "/v1/jobs", Some(&job(3_000, 500)));
        assert_eq!(status, 202, "{text}");
        let id = serde_json::from_str::<JobReport>(&text).unwrap().id;
        loop {
            let (_, text) = call(addr, "GET", &format!("/v1/jobs/{id}?limit=1"), None);
            let report: JobReport = serde_json::from_str(&text).unwrap();
            if report.done == report.total {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(600));
            std::thread::sleep(Duration::from_millis(50));
        }
        println!("{name}: a 3000 x 500-residue job took {:.1} s", started.elapsed().as_secs_f64());
        server.stop().unwrap();
    }
}

/// Seconds to accept a job of 10,000 proteins whose organism names are 100 letters no organism
/// has (each is matched against the organisms' names for suggestions when it is predicted).
#[test]
#[ignore]
fn a_job_of_unknown_names_is_accepted_quickly() {
    let server = RunningServer::start(predictor(), ServeConfig { port: 0, ..ServeConfig::default() }).unwrap();
    let name = "q".repeat(100);
    let item = format!(r#"{{"protein": "MKVLAW", "organism": "{name}"}}"#);
    let body = format!(r#"{{"proteins": [{}]}}"#, vec![item; 10_000].join(","));
    let started = Instant::now();
    let (status, text) = call(server.addr, "POST", "/v1/jobs", Some(&body));
    assert_eq!(status, 202, "{text}");
    println!("a job of 10,000 unknown 100-letter names accepted in {:.2} s", started.elapsed().as_secs_f64());
    let id = serde_json::from_str::<JobReport>(&text).unwrap().id;
    loop {
        let (_, text) = call(server.addr, "GET", &format!("/v1/jobs/{id}?limit=1"), None);
        let report: JobReport = serde_json::from_str(&text).unwrap();
        if report.done == report.total {
            let error = report.results.unwrap()[0].error.clone().unwrap();
            println!("and done in {:.2} s: {error}", started.elapsed().as_secs_f64());
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(600));
        std::thread::sleep(Duration::from_millis(50));
    }
}
