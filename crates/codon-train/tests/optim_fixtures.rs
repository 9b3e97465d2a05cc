//! OneCycleLR and AdamW against torch traces (`tests/fixtures/schedule`).

use std::collections::HashMap;
use std::path::PathBuf;

use candle_core::{Device, Tensor, Var};
use codon_train::{clip_by_norm, global_norm, AdamW, AdamWConfig, OneCycleLr, Scheduler};
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/schedule").join(name)
}

fn rel(a: f64, b: f64) -> f64 {
    if a == b {
        0.0
    } else {
        (a - b).abs() / b.abs().max(1e-300)
    }
}

#[test]
fn one_cycle_matches_torch() {
    let data: Value = serde_json::from_str(&std::fs::read_to_string(fixture("onecycle.json")).unwrap()).unwrap();
    let mut checked = 0;
    for c in data["configs"].as_array().unwrap() {
        let (max_lr, total, pct) = (
            c["max_lr"].as_f64().unwrap(),
            c["total_steps"].as_u64().unwrap() as usize,
            c["pct_start"].as_f64().unwrap(),
        );
        let s = OneCycleLr::new(max_lr, total, pct).unwrap();
        for (step, (lr, beta1)) in c["lr"].as_array().unwrap().iter().zip(c["beta1"].as_array().unwrap()).enumerate() {
            assert!(
                rel(s.lr(step), lr.as_f64().unwrap()) <= 1e-6,
                "{max_lr}/{total}/{pct} step {step}: lr {}",
                s.lr(step)
            );
            let b = s.beta1(step).unwrap();
            assert!(rel(b, beta1.as_f64().unwrap()) <= 1e-6, "{max_lr}/{total}/{pct} step {step}: beta1 {b}");
            checked += 1;
        }
    }
    assert_eq!(checked, 100 + 37 + 10 + 8);
    for c in data["error_configs"].as_array().unwrap() {
        let (max_lr, total, pct) = (
            c["max_lr"].as_f64().unwrap(),
            c["total_steps"].as_u64().unwrap() as usize,
            c["pct_start"].as_f64().unwrap(),
        );
        assert!(OneCycleLr::new(max_lr, total, pct).is_err(), "{c}");
    }
}

#[test]
fn adamw_matches_torch_with_and_without_clipping() {
    let meta: Value = serde_json::from_str(&std::fs::read_to_string(fixture("adamw.json")).unwrap()).unwrap();
    let t: HashMap<String, Tensor> =
        candle_core::safetensors::load(fixture("adamw.safetensors"), &Device::Cpu).unwrap();
    let order: Vec<String> =
        meta["param_order"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
    let max_rel = |a: &Tensor, b: &Tensor| -> f64 {
        let a: Vec<f32> = a.flatten_all().unwrap().to_vec1().unwrap();
        let b: Vec<f32> = b.flatten_all().unwrap().to_vec1().unwrap();
        let scale = b.iter().fold(0f32, |m, x| m.max(x.abs())) as f64;
        a.iter().zip(&b).map(|(x, y)| (x - y).abs() as f64 / scale.max(1e-30)).fold(0.0, f64::max)
    };
    let schedule = OneCycleLr::new(0.05, 5, 0.3).unwrap();
    for case in ["noclip", "clip"] {
        let vars: Vec<(String, Var)> =
            order.iter().map(|p| (p.clone(), Var::from_tensor(&t[&format!("init.{p}")]).unwrap())).collect();
        let mut opt = AdamW::new(vars.clone(), AdamWConfig::default()).unwrap();
        let mut worst = 0f64;
        for step in 1..=5 {
            let mut grads: Vec<Tensor> = order.iter().map(|p| t[&format!("grad.step{step}.{p}")].clone()).collect();
            let lr = schedule.lr(step - 1);
            assert!(rel(lr, meta["cases"][case]["lr"][step - 1].as_f64().unwrap()) <= 1e-6);
            if case == "clip" {
                let norm = global_norm(&grads).unwrap();
                let want = meta["cases"]["clip"]["total_norm_before_clipping"][step - 1].as_f64().unwrap();
                assert!(rel(norm.to_scalar::<f32>().unwrap() as f64, want) <= 1e-6, "norm at step {step}");
                clip_by_norm(&mut grads, &norm, 1.0).unwrap();
                for (p, g) in order.iter().zip(&grads) {
                    worst = worst.max(max_rel(g, &t[&format!("clip.grad_clipped.step{step}.{p}")]));
                }
            }
            opt.step(&grads, lr, schedule.beta1(step - 1)).unwrap();
            let state = opt.state().unwrap();
            for (p, v) in &vars {
                worst = worst.max(max_rel(v.as_tensor(), &t[&format!("{case}.param.step{step}.{p}")]));
                worst =
                    worst.max(max_rel(&state[&format!("exp_avg.{p}")], &t[&format!("{case}.exp_avg.step{step}.{p}")]));
                worst = worst
                    .max(max_rel(&state[&format!("exp_avg_sq.{p}")], &t[&format!("{case}.exp_avg_sq.step{step}.{p}")]));
            }
        }
        eprintln!("{case}: worst relative difference {worst:.2e}");
        assert!(worst <= 1e-6, "{case}: {worst:e}");
    }
}
