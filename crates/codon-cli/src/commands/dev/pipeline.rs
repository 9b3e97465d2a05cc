//! The data pipeline end to end on the bundled demo data: prepare → stream → mask → batch.
//!
//! ```text
//! codon pipeline                     # bundled demo data
//! codon pipeline --input genes.csv --batch-size 8 --epochs 3
//! ```

use crate::cli::{InputArg, LoaderArgs, MaxEpochsArg, SeedArg};
use std::path::PathBuf;
use std::time::Instant;

use crate::outln;
use clap::Parser;
use codon_data::{prepare, DataLoader, JsonlDataset, LoaderConfig, MalformedPolicy, MlmCollator, PrepareOptions};
use codon_model::{vocab, CodonTokenizer};

/// Prepare a dataset and run the masked-LM loader over it.
#[derive(Parser)]
pub struct Args {
    /// CSV or FASTA gene records (default: the bundled demo data).
    #[command(flatten)]
    input: Option<InputArg<false>>,
    /// Folder for the prepared JSONL file.
    #[arg(long, alias = "out_dir", default_value = "demo-output")]
    out_dir: PathBuf,
    #[command(flatten)]
    loader: LoaderArgs<2>,
    #[command(flatten)]
    epochs: MaxEpochsArg,
    #[command(flatten)]
    seed: SeedArg<123>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let epochs = args.epochs.value.unwrap_or(2) as u64;
    std::fs::create_dir_all(&args.out_dir)?;
    let input = match args.input {
        Some(input) => input.path,
        None => crate::write_demo_genes(&args.out_dir)?,
    };
    let train = args.out_dir.join("train.jsonl");

    outln!("preparing {}", input.display());
    let report = prepare(&input, &train, &PrepareOptions::default())?;
    outln!("{report}");

    let dataset = JsonlDataset::open(&train, MalformedPolicy::Error)?;
    let config = LoaderConfig {
        batch_size: args.loader.batch_size,
        num_workers: args.loader.num_workers,
        seed: args.seed.value,
        bucket_batches: Some(4),
        ..Default::default()
    };
    let loader = DataLoader::new(dataset, MlmCollator::new(CodonTokenizer::new()?), config)?;
    outln!(
        "{} records, {} batches per epoch of up to {} records (steps known up front: {})",
        loader.records_per_epoch(),
        loader.batches_per_epoch(),
        args.loader.batch_size,
        loader.batches_per_epoch() as u64 * epochs
    );

    let start = Instant::now();
    let (mut tokens, mut padded, mut masked) = (0usize, 0usize, 0usize);
    for epoch in 0..epochs {
        for (step, batch) in loader.epoch(epoch).enumerate() {
            let batch = batch?;
            tokens += batch.encoding.num_tokens();
            padded += batch.encoding.input_ids.len();
            masked += batch.labels.iter().filter(|&&l| l >= 0).count();
            if epoch == 0 && step == 0 {
                let row: Vec<&str> = batch.encoding.input_ids[..batch.encoding.seq_len.min(12)]
                    .iter()
                    .filter_map(|&id| vocab::token(id))
                    .collect();
                outln!(
                    "first batch: {} x {}; row 0 starts {}",
                    batch.encoding.batch_size,
                    batch.encoding.seq_len,
                    row.join(" ")
                );
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    outln!(
        "{} epochs: {tokens} tokens ({:.1}% padding), {masked} labelled ({:.1}%), {:.0} tokens/s",
        epochs,
        100.0 * (padded - tokens) as f64 / padded.max(1) as f64,
        100.0 * masked as f64 / tokens.max(1) as f64,
        tokens as f64 / secs.max(1e-9)
    );
    outln!("training file: {}", train.display());
    Ok(())
}
