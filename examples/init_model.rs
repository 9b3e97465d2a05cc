//! Write a randomly initialised BigBirdForMaskedLM in the transformers layout
//! (transformers' init scheme), so users and benchmarks can run without downloaded weights.
//!
//! ```text
//! cargo run --release --example init_model -- --output model-random [--config config.json] [--seed 0]
//! ```

use std::path::PathBuf;

use candle_core::{DType, Device};
use clap::Parser;
use codon_ascend::model::bigbird::{init_weights, save_model, BigBirdConfig, BigBirdForMaskedLM};

/// Initialise a model.
#[derive(Parser)]
struct Args {
    /// Output directory (config.json + model.safetensors).
    #[arg(long)]
    output: PathBuf,
    /// A transformers config.json (default: the CodonTransformer configuration).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Seed of the initialisation.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

fn run() -> anyhow::Result<()> {
    let args: Args = codon_ascend::cli::parse_args();
    let config = match &args.config {
        Some(path) => BigBirdConfig::from_file(path)?,
        None => BigBirdConfig::default(),
    };
    let weights = init_weights(&config, args.seed, &Device::Cpu, DType::F32)?;
    let model = BigBirdForMaskedLM::from_named(config, weights)?;
    save_model(&model, &args.output)?;
    println!("wrote {} ({} parameters)", args.output.display(), model.num_parameters());
    Ok(())
}

fn main() {
    codon_ascend::run_main(run);
}
