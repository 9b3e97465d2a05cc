//! A device failure in one forward pass fails only that pass's proteins. The emulator's
//! allocation fault is read when the toolkit initialises, so the test finds where the middle
//! pass allocates (here, without a fault), then runs itself again as a child process with the
//! fault aimed at that pass.
use std::path::PathBuf;
use std::process::Command;

use candle_core::{DType, Device};
use codon_model::bigbird::load_model;
use codon_model::{OrganismRef, PredictOptions, Predictor, ProteinInput};

/// Set in the child process, which runs the prediction under the fault.
const CHILD: &str = "CODON_TEST_PREDICTION_FAULT_CHILD";

fn predictor(device: &Device) -> Predictor {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bigbird");
    Predictor::new(load_model(dir, None, device, DType::F32).unwrap()).unwrap()
}

/// Three proteins of three lengths: three passes, the longer ones needing fresh device memory.
fn items() -> Vec<(ProteinInput, PredictOptions)> {
    [8, 1500, 3000]
        .into_iter()
        .map(|residues| {
            let protein: String = "MKVLAAGW".chars().cycle().take(residues).collect();
            let input = ProteinInput { protein, organism: OrganismRef::Id(51), known_dna: None };
            (input, PredictOptions::default())
        })
        .collect()
}

fn allocations(device: &Device) -> u64 {
    candle_ascend::ascend_device(device).unwrap().sim_counters().unwrap().allocations
}

#[test]
fn a_device_failure_in_one_pass_fails_only_that_pass() {
    let device = candle_ascend::parse_device("npu-sim:0").expect("the emulated toolkit loads");
    let items = items();
    let forward = PredictOptions::default();
    if std::env::var_os(CHILD).is_some() {
        let predicted = predictor(&device).predict_each(&items, &forward).unwrap();
        assert_eq!(predicted.pass_sizes, [1, 1, 1]);
        let results = predicted.results;
        let error = results[1].as_ref().unwrap_err().to_string();
        assert!(error.contains("out of device memory") && error.contains("207001"), "{error}");
        for i in [0, 2] {
            let dna = &results[i].as_ref().unwrap()[0].predicted_dna;
            assert_eq!(dna.len(), 3 * (items[i].0.protein.len() + 1), "protein {i}");
        }
        return;
    }
    // The same calls, pass by pass and without a fault: the middle pass's first aclrtMalloc.
    let p = predictor(&device);
    for result in p.predict_each(&items[..1], &forward).unwrap().results {
        result.unwrap();
    }
    let before = allocations(&device);
    for result in p.predict_each(&items[1..2], &forward).unwrap().results {
        result.unwrap();
    }
    assert!(allocations(&device) > before, "the middle pass must allocate device memory for the fault to meet it");
    // That call and the backend's retry after releasing its cache both fail; later calls do not.
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "a_device_failure_in_one_pass_fails_only_that_pass", "--nocapture"])
        .env(CHILD, "1")
        .env("CANDLE_ASCEND_SIM_FAIL_ALLOC", format!("{}-{}", before + 1, before + 2))
        .output()
        .unwrap();
    assert!(
        child.status.success(),
        "{}{}",
        String::from_utf8_lossy(&child.stdout),
        String::from_utf8_lossy(&child.stderr)
    );
}
