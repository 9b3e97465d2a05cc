//! Time forward passes of the CodonTransformer-size model (random weights, eval, CPU) and
//! report the median and this process's peak resident memory. Used by
//! `benches/compare_transformers.py`; one configuration per process so peak RSS is per run.
//!
//! ```text
//! cargo run --release --example forward_timing -- --length 2048 --attention block-sparse --repeats 3
//! ```

use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use clap::Parser;
use codon_ascend::cli::{AttentionChoice, DTypeChoice};
use codon_ascend::model::bigbird::{
    init_weights, AttentionType, BigBirdConfig, BigBirdForMaskedLM, ForwardMode, ModelInput,
};
use codon_ascend::outln;

/// Forward-pass timing.
#[derive(Parser)]
struct Args {
    /// Sequence length (batch 1).
    #[arg(long, default_value_t = 502)]
    length: usize,
    /// Attention.
    #[arg(long, value_enum, default_value_t = AttentionChoice::Full)]
    attention: AttentionChoice,
    /// Timed repetitions after one warm-up pass.
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// The dtype the model runs in.
    #[arg(long, value_enum, default_value_t = DTypeChoice::F32)]
    dtype: DTypeChoice,
}

fn peak_rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

fn run() -> anyhow::Result<()> {
    let args: Args = codon_ascend::cli::parse_args();
    let attention = AttentionType::from(args.attention);
    let dtype = candle_core::DType::from(args.dtype);
    let config = BigBirdConfig::default();
    let model = BigBirdForMaskedLM::from_named(config.clone(), init_weights(&config, 0, &Device::Cpu, dtype)?)?;
    let n = args.length;
    let ids: Vec<u32> = (0..n)
        .map(|i| {
            if i == 0 {
                1
            } else if i == n - 1 {
                2
            } else {
                26 + (i * 7 % 64) as u32
            }
        })
        .collect();
    let input = ModelInput {
        input_ids: Tensor::from_vec(ids, (1, n), &Device::Cpu)?,
        token_type_ids: Tensor::full(
            codon_ascend::model::organism_id(codon_ascend::model::DEFAULT_ORGANISM)?,
            (1, n),
            &Device::Cpu,
        )?,
        attention_mask: Tensor::ones((1, n), DType::U32, &Device::Cpu)?,
    };
    let mode = ForwardMode::eval(attention);
    model.forward(&input, mode)?;
    let mut times = Vec::with_capacity(args.repeats);
    for _ in 0..args.repeats.max(1) {
        let start = Instant::now();
        model.forward(&input, mode)?;
        times.push(start.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    outln!(
        "{{\"length\": {n}, \"attention\": \"{}\", \"median_s\": {:.4}, \"peak_rss_mb\": {:.0}}}",
        args.attention,
        times[times.len() / 2],
        peak_rss_mb().unwrap_or(f64::NAN)
    );
    Ok(())
}

fn main() {
    codon_ascend::run_main(run);
}
