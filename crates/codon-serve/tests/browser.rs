//! The page in a real browser: Debian's headless Chromium, driven over WebDriver by its
//! chromedriver (`.ci/run` installs both when they are missing; a missing browser fails this
//! test, it never skips). The page loads without script errors, a protein typed in and
//! submitted gives DNA that translates back to it, a bad letter shows an inline error, and a
//! constraint shows its edits, and the batch tab runs a CSV as a job. A screenshot is saved in the
//! test's temporary directory.
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use candle_core::{DType, Device};
use codon_model::bigbird::load_model;
use codon_model::Predictor;
use codon_serve::{RunningServer, ServeConfig};
use serde_json::{json, Value};

/// WebDriver's key for an element reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// chromedriver, killed when dropped.
struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Driver {
    fn start() -> Self {
        let port = free_port();
        let child = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("chromedriver (Debian's chromium-driver package) does not start: {e}"));
        let driver = Self { child, url: format!("http://127.0.0.1:{port}") };
        let started = Instant::now();
        while ureq::get(&format!("{}/status", driver.url)).call().is_err() {
            assert!(started.elapsed() < Duration::from_secs(30), "chromedriver did not answer in 30 s");
            std::thread::sleep(Duration::from_millis(100));
        }
        driver
    }

    fn send(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let request = ureq::request(method, &format!("{}{path}", self.url)).timeout(Duration::from_secs(60));
        let response = match body {
            Some(b) => request.set("Content-Type", "application/json").send_string(&b.to_string()),
            None => request.call(),
        };
        let text = match response {
            Ok(r) => r.into_string().unwrap(),
            Err(ureq::Error::Status(code, r)) => panic!("{method} {path}: {code} {}", r.into_string().unwrap()),
            Err(e) => panic!("{method} {path}: {e}"),
        };
        serde_json::from_str::<Value>(&text).unwrap()["value"].take()
    }

    fn session(&self) -> Session<'_> {
        let binary = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .expect("Debian's chromium package: /usr/bin/chromium");
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": binary,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1200,1600"]},
            "goog:loggingPrefs": {"browser": "ALL"}
        }}});
        let created = self.send("POST", "/session", Some(capabilities));
        Session { driver: self, id: created["sessionId"].as_str().unwrap().to_string() }
    }
}

struct Session<'a> {
    driver: &'a Driver,
    id: String,
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        let _ = ureq::delete(&format!("{}/session/{}", self.driver.url, self.id)).call();
    }
}

impl Session<'_> {
    fn send(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        self.driver.send(method, &format!("/session/{}{path}", self.id), body)
    }

    fn script(&self, script: &str) -> Value {
        self.send("POST", "/execute/sync", Some(json!({"script": script, "args": []})))
    }

    fn element(&self, css: &str) -> String {
        let found = self.send("POST", "/element", Some(json!({"using": "css selector", "value": css})));
        found[ELEMENT].as_str().unwrap().to_string()
    }

    fn clear_and_type(&self, css: &str, text: &str) {
        let e = self.element(css);
        self.send("POST", &format!("/element/{e}/clear"), Some(json!({})));
        self.send("POST", &format!("/element/{e}/value"), Some(json!({"text": text})));
    }

    fn click(&self, css: &str) {
        let e = self.element(css);
        self.send("POST", &format!("/element/{e}/click"), Some(json!({})));
    }

    fn text(&self, css: &str) -> String {
        let e = self.element(css);
        self.send("GET", &format!("/element/{e}/text"), None).as_str().unwrap().to_string()
    }

    /// Wait until `script` returns true.
    fn wait_for(&self, what: &str, script: &str) {
        let started = Instant::now();
        while self.script(script) != json!(true) {
            assert!(started.elapsed() < Duration::from_secs(60), "waited 60 s for {what}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The browser console's errors since the last call (reading the log empties it), and what
    /// the page caught.
    fn errors(&self) -> Vec<String> {
        let log = self.send("POST", "/se/log", Some(json!({"type": "browser"})));
        let mut errors: Vec<String> = log
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["level"] == "SEVERE")
            .map(|e| e["message"].as_str().unwrap_or_default().to_string())
            .collect();
        errors.extend(self.script("return window.pageErrors").as_array().unwrap().iter().map(|e| e.to_string()));
        errors
    }
}

fn translate(dna: &str) -> String {
    dna.as_bytes().chunks(3).map(|c| codon_model::vocab::translate_codon(c).unwrap_or('?')).collect()
}

#[test]
fn the_page_designs_a_gene_in_a_real_browser() {
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/bigbird");
    let predictor = Predictor::new(load_model(fixture, None, &Device::Cpu, DType::F32).unwrap()).unwrap();
    let server = RunningServer::start(predictor, ServeConfig { port: 0, ..ServeConfig::default() }).unwrap();
    let driver = Driver::start();
    let browser = driver.session();
    browser.send("POST", "/url", Some(json!({"url": format!("http://{}/", server.addr)})));
    browser.wait_for(
        "the organisms and enzymes",
        "return document.getElementById('organism-list').options.length > 100 \
         && document.getElementById('enzymes').options.length > 5",
    );
    let errors = browser.errors();
    assert!(errors.is_empty(), "the page loads with errors: {errors:?}");

    // A bad letter shows its error beside the box as it is typed.
    browser.clear_and_type("#protein", "MKVXL");
    let error = browser.text("#protein-error");
    assert!(error.contains("Letter X at position 4"), "{error:?}");

    // A protein typed in and submitted: DNA that translates back to it.
    let protein = "MALWMRLLPLLALLALWGPDPAAA";
    browser.clear_and_type("#protein", protein);
    assert_eq!(browser.text("#protein-error"), "");
    browser.clear_and_type("#organism", "Escherichia coli general");
    browser.click("#submit");
    browser.wait_for("the result", "return !document.getElementById('result').hidden");
    let dna = browser.text("#dna").replace(char::is_whitespace, "");
    assert_eq!(translate(&dna), format!("{protein}_"), "{dna}");
    let coloured = browser.script("return [...document.querySelectorAll('#dna span')].every(s => s.style.background)");
    assert_eq!(coloured, json!(true), "each codon is coloured by its probability");

    // A constraint shows its edits.
    let lysines = "MKKKKKKKKFFFFFF";
    browser.clear_and_type("#protein", lysines);
    browser.clear_and_type("#homopolymer", "4");
    browser.script("document.getElementById('result').hidden = true");
    browser.click("#submit");
    browser.wait_for("the repaired result", "return !document.getElementById('result').hidden");
    let edits = browser.text("#edits");
    assert!(edits.contains("codon") && edits.contains("→") && !edits.contains("none"), "{edits:?}");
    let dna = browser.text("#dna").replace(char::is_whitespace, "");
    assert_eq!(translate(&dna), format!("{lysines}_"), "{dna}");
    assert!(!["AAAAA", "CCCCC", "GGGGG", "TTTTT"].iter().any(|run| dna.contains(run)), "{dna}");

    // The batch tab: a CSV of proteins as a job, followed to the end, offered as a download.
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("proteins.csv");
    std::fs::write(&csv, "protein,organism\nMKVLA,51\nMALWMRLLPLL,Escherichia coli general\nMWCH,51\n").unwrap();
    browser.click("#tab-batch");
    let input = browser.element("#batch-file");
    browser.send("POST", &format!("/element/{input}/value"), Some(json!({"text": csv.to_string_lossy()})));
    browser.wait_for("the batch job", "return !document.getElementById('batch-download').hidden");
    assert_eq!(browser.text("#batch-status"), "3 of 3 proteins");
    assert_eq!(browser.text("#batch-error"), "");

    let shot = browser.send("GET", "/screenshot", None);
    let png = base64::engine::general_purpose::STANDARD.decode(shot.as_str().unwrap()).unwrap();
    let path = dir.path().join("page.png");
    std::fs::write(&path, &png).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot at {}", path.display());
    let errors = browser.errors();
    assert!(errors.is_empty(), "errors while designing: {errors:?}");
    drop(browser);
    server.stop().unwrap();
}

/// With an API key the lists load once the key is typed (no reload needed), and a reload keeps
/// the key for the tab and loads them at once.
#[test]
fn the_page_loads_its_lists_once_an_api_key_is_entered_and_keeps_it() {
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/bigbird");
    let predictor = Predictor::new(load_model(fixture, None, &Device::Cpu, DType::F32).unwrap()).unwrap();
    let config = ServeConfig { port: 0, api_key: Some("s3cret".into()), ..ServeConfig::default() };
    let server = RunningServer::start(predictor, config).unwrap();
    let driver = Driver::start();
    let browser = driver.session();
    browser.send("POST", "/url", Some(json!({"url": format!("http://{}/", server.addr)})));
    browser
        .wait_for("the API key hint", "return document.getElementById('form-error').textContent.includes('API key')");
    assert_eq!(browser.script("return document.getElementById('organism-list').options.length"), json!(0));
    // The refused list requests are logged as failed loads; nothing else may be.
    let errors = browser.errors();
    assert!(errors.iter().all(|e| e.contains("401")), "errors before the key: {errors:?}");

    browser.clear_and_type("#api-key", "s3cret");
    browser.wait_for(
        "the organisms and enzymes after the key",
        "return document.getElementById('organism-list').options.length > 100 \
         && document.getElementById('enzymes').options.length > 5",
    );
    assert_eq!(browser.text("#form-error"), "", "the hint goes once the lists load");

    browser.send("POST", "/refresh", Some(json!({})));
    browser.wait_for(
        "the organisms after a reload",
        "return document.getElementById('organism-list').options.length > 100",
    );
    assert_eq!(browser.script("return document.getElementById('api-key').value"), json!("s3cret"));
    let errors = browser.errors();
    assert!(errors.is_empty(), "errors after the key: {errors:?}");
    drop(browser);
    server.stop().unwrap();
}
