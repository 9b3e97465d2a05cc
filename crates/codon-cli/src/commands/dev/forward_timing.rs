//! Time forward passes of the CodonTransformer-size model (random weights, eval) and report the
//! median and this process's peak resident memory. Used by `benches/compare_transformers.py`
//! (CPU) and `benches/gpu_compare.sh` (CUDA); one configuration per process so peak RSS is per run.
//!
//! ```text
//! codon forward-timing --length 2048 --attention block-sparse --repeats 3
//! ```

use crate::cli::{AttentionArg, DTypeArg, DeviceArg};
use std::time::Instant;

use crate::outln;
use candle_core::{DType, Tensor};
use clap::Parser;
use codon_model::bigbird::{init_weights, AttentionType, BigBirdConfig, BigBirdForMaskedLM, ForwardMode, ModelInput};

/// Forward-pass timing.
#[derive(Parser)]
pub struct Args {
    #[command(flatten)]
    shape: super::BatchShape<1, 502>,
    #[command(flatten)]
    device: DeviceArg,
    #[command(flatten)]
    attention: AttentionArg,
    #[command(flatten)]
    repeats: super::Repeats<3>,
    #[command(flatten)]
    dtype: DTypeArg,
}

fn peak_rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let attention = AttentionType::from(args.attention.choice);
    let dtype = candle_core::DType::from(args.dtype);
    let config = BigBirdConfig::default();
    let device = args.device.open()?;
    let model = BigBirdForMaskedLM::from_named(config.clone(), init_weights(&config, 0, &device, dtype)?)?;
    let (b, n) = (args.shape.batch, args.shape.length);
    let ids: Vec<u32> = (0..b * n)
        .map(|i| match i % n {
            0 => 1,
            p if p == n - 1 => 2,
            p => 26 + (p * 7 % 64) as u32,
        })
        .collect();
    let input = ModelInput {
        input_ids: Tensor::from_vec(ids, (b, n), &device)?,
        token_type_ids: Tensor::full(codon_model::organism_id(codon_model::DEFAULT_ORGANISM)?, (b, n), &device)?,
        attention_mask: Tensor::ones((b, n), DType::U32, &device)?,
    };
    let mode = ForwardMode::eval(attention);
    model.forward(&input, mode)?;
    device.synchronize()?;
    let mut times = Vec::with_capacity(args.repeats.count);
    for _ in 0..args.repeats.count {
        let start = Instant::now();
        model.forward(&input, mode)?;
        // Asynchronous devices (CUDA) have finished the pass only after a synchronisation.
        device.synchronize()?;
        times.push(start.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    outln!(
        "{{\"batch\": {b}, \"length\": {n}, \"device\": \"{}\", \"attention\": \"{}\", \"median_s\": {:.4}, \"peak_rss_mb\": {:.0}}}",
        args.device,
        args.attention.choice,
        times[times.len() / 2],
        peak_rss_mb().unwrap_or(f64::NAN)
    );
    Ok(())
}
