//! What one predict request may hold: with `codon_scores` each codon carries its 64 scores into
//! the answer's JSON, so such a request has a cap of its own below the codon limit.
mod common;
use common::predictor;

use std::time::Duration;

use codon_serve::{RunningServer, ServeConfig};

fn post(server: &RunningServer, body: &str) -> (u16, String) {
    let url = format!("http://{}/v1/predict", server.addr);
    let request = ureq::post(&url).timeout(Duration::from_secs(120)).set("Content-Type", "application/json");
    match request.send_string(body) {
        Ok(r) => {
            let status = r.status();
            let mut text = String::new();
            std::io::Read::read_to_string(&mut r.into_reader(), &mut text).unwrap();
            (status, text)
        }
        Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap()),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn codon_scores_have_a_cap_of_their_own_below_the_codon_limit() {
    let server = RunningServer::start(predictor(), ServeConfig { port: 0, ..ServeConfig::default() }).unwrap();
    // 5,000 residues × 21 samples: 105,000 codons, within the 1,000,000 codon limit.
    let protein: String = (0..5000).map(|i| ['A', 'C', 'D', 'E', 'K', 'L', 'M', 'W'][i * 7 % 8]).collect();
    let body = |scores: bool| {
        format!(
            r#"{{"proteins": [{{"protein": "{protein}", "organism": 51}}],
                "options": {{"temperature": 1.0, "num_sequences": 21, "codon_scores": {scores}}}}}"#
        )
    };
    let (status, text) = post(&server, &body(true));
    assert_eq!(status, 413, "{}", &text[..text.len().min(200)]);
    assert!(text.contains("codon_scores: at most 100000 codons"), "{text}");
    // Without the scores the same request is answered.
    let (status, text) = post(&server, &body(false));
    assert_eq!(status, 200, "{}", &text[..text.len().min(200)]);
    server.stop().unwrap();
}
