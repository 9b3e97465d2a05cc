//! What the service's tests share: the tiny fixture model and a plain HTTP call.
#![allow(dead_code)] // each test file uses its own subset

use std::path::PathBuf;
use std::time::Duration;

use candle_core::{DType, Device};
use codon_model::bigbird::load_model;
use codon_model::Predictor;

/// A predictor over the tiny BigBird fixture (`tests/fixtures/bigbird`), f32 on the CPU.
pub fn predictor() -> Predictor {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/bigbird");
    Predictor::new(load_model(dir, None, &Device::Cpu, DType::F32).unwrap()).unwrap()
}

/// (status, body) of a request to `addr`, with `key` as a bearer token; a connection that fails
/// or an answer slower than 10 minutes (the longest job a test waits on) fails the test.
pub fn call_with_key(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
    key: Option<&str>,
) -> (u16, String) {
    let mut request = ureq::request(method, &format!("http://{addr}{path}")).timeout(Duration::from_secs(600));
    if let Some(key) = key {
        request = request.set("Authorization", &format!("Bearer {key}"));
    }
    let response = match body {
        Some(b) => request.set("Content-Type", "application/json").send_string(b),
        None => request.call(),
    };
    match response {
        Ok(r) => (r.status(), r.into_string().unwrap()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap()),
        Err(e) => panic!("{method} {path}: {e}"),
    }
}

/// (status, body) of a request to `addr` without a key.
pub fn call(addr: std::net::SocketAddr, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    call_with_key(addr, method, path, body, None)
}
