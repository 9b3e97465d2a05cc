//! Time batch prediction of a protein file with the model loaded once: the first call (which
//! also pays the device's one-time costs: kernel modules, cuBLAS's first use) and the median of
//! the calls after it, as a server or a second run sees them. Used by `benches/gpu_compare.sh`
//! beside PyTorch's per-protein loop, which is timed after a warm-up protein.
//!
//! ```text
//! codon predict-timing --model DIR --input proteins.csv --repeats 3
//! ```
use std::time::Instant;

use crate::cli::{BatchTokensArg, InputArg, ModelRunArgs};
use crate::outln;
use clap::Parser;
use codon_model::PredictOptions;

/// Batch-prediction timing.
#[derive(Parser)]
pub struct Args {
    #[command(flatten)]
    run: ModelRunArgs,
    #[command(flatten)]
    input: InputArg,
    #[command(flatten)]
    repeats: super::Repeats<3>,
    #[command(flatten)]
    batch_tokens: BatchTokensArg,
    #[command(flatten)]
    max_padding: super::MaxPadding,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let device = args.run.device.open()?;
    codon_ops::malloc_tuning::retain_freed_memory();
    let table = crate::commands::common::csv_table::CsvTable::read(&args.input.path)?;
    let items = table.protein_inputs()?;
    let predictor = crate::predictor::open_predictor(args.run.model.as_deref(), None, &device, args.run.dtype.into())?;
    let options = PredictOptions {
        max_batch_tokens: args.batch_tokens.value,
        max_padding_fraction: args.max_padding.on(&device),
        ..Default::default()
    };
    let mut seconds = Vec::with_capacity(args.repeats.count + 1);
    for _ in 0..=args.repeats.count {
        let start = Instant::now();
        for result in predictor.predict_batch_with_progress(&items, &options, &mut |_| {})? {
            result?;
        }
        seconds.push(start.elapsed().as_secs_f64());
    }
    let first = seconds.remove(0);
    seconds.sort_by(f64::total_cmp);
    let median = seconds.get(seconds.len() / 2).copied().unwrap_or(first);
    outln!(
        "{{\"side\": \"ours\", \"what\": \"predict_batch\", \"device\": \"{}\", \"dtype\": \"{}\", \"proteins\": {}, \"batch_tokens\": {}, \"max_padding\": {}, \"first_s\": {first:.4}, \"median_s\": {median:.4}}}",
        args.run.device,
        args.run.dtype,
        items.len(),
        options.max_batch_tokens,
        options.max_padding_fraction
    );
    Ok(())
}
