//! Time optimizer steps of the CodonTransformer-size model (forward, backward, AdamW) on one
//! synthetic batch, and report the median steady-state step (steps 2..N) and this process's peak
//! RSS. Used by `benches/compare_train_step.py` (CPU) and `benches/gpu_compare.sh` (CUDA).
//!
//! ```text
//! codon train-step-timing --steps 3 --precision f32 --attention block-sparse
//! ```
use crate::cli::DeviceArg;
use std::path::Path;

use crate::outln;
use candle_core::DType;
use clap::Parser;
use codon_model::bigbird::{init_weights, AttentionType, BigBirdConfig, BigBirdForMaskedLM};
use codon_model::training::MaskedLmModel;
use codon_train::{Trainer, TrainerConfig};

/// Train-step timing.
#[derive(Parser)]
pub struct Args {
    #[command(flatten)]
    step: super::StepWorkload<1024>,
    #[command(flatten)]
    device: DeviceArg,
}

fn peak_rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: f64 = status.lines().find(|l| l.starts_with("VmHWM:"))?.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let device = args.device.open()?;
    let precision = args.step.precision.resolve(&device);
    let attention = AttentionType::from(args.step.attention.choice);
    let config = BigBirdConfig::default();
    let model = BigBirdForMaskedLM::from_named(config.clone(), init_weights(&config, 0, &device, DType::F32)?)?;
    let model = MaskedLmModel::new(model, precision, attention)?;
    let data = codon_train::SameBatch(codon_data::synthetic_mlm_batch(args.step.shape.batch, args.step.shape.length));
    let steps = args.step.steps.max(2);
    let trainer = Trainer::new(
        TrainerConfig::builder()
            .max_steps(Some(steps))
            .max_epochs(steps)
            .precision(precision)
            .retain_freed_memory(true)
            .quiet(true)
            .build()?,
    );
    let report = trainer.fit(&model, &data, None::<&Path>)?;
    let mut later: Vec<f64> = report.steps.iter().skip(1).map(|s| s.step_seconds).collect();
    later.sort_by(f64::total_cmp);
    outln!(
        "{{\"first_s\": {:.3}, \"median_s\": {:.3}, \"loss\": {:.4}, \"peak_rss_mb\": {:.0}}}",
        report.steps[0].step_seconds,
        later[later.len() / 2],
        report.steps.last().map_or(f64::NAN, |s| s.loss),
        peak_rss_mb().unwrap_or(f64::NAN)
    );
    Ok(())
}
