//! Build masked-LM batches from a JSONL training file, as the trainer sees them.
//!
//! ```text
//! codon collate --input train.jsonl --batch-size 6 --seed 123 --output batches.jsonl
//! codon collate --input train.jsonl --batch-size 2 --output inputs.safetensors
//! ```
//! A `.safetensors` output holds the first batch as `score --inputs` reads it: `input_ids`,
//! `attention_mask`, `token_type_ids` and `labels`, i64 (batch, length).

use crate::cli::{FileArgs, SeedArg};
use std::io::Write;

use crate::{errln, outln};
use clap::Parser;
use codon_data::{DataLoader, JsonlDataset, LoaderConfig, MalformedPolicy, MlmBatch, MlmCollator};
use codon_files::write_atomically;
use codon_model::CodonTokenizer;
use serde_json::json;

/// Tokenize, pad and mask training records into batches.
#[derive(Parser)]
pub struct Args {
    #[command(flatten)]
    files: FileArgs,
    #[command(flatten)]
    loader: crate::cli::LoaderArgs<2>,
    #[command(flatten)]
    seed: SeedArg<123>,
    /// Shuffle within a buffer of this many records (0: file order).
    #[arg(long, alias = "shuffle_buffer", default_value_t = 0)]
    shuffle_buffer: usize,
    /// Length bucketing window, in batches.
    #[arg(long, alias = "bucket_batches")]
    bucket_batches: Option<usize>,
    /// Skip malformed lines instead of failing.
    #[arg(long, alias = "skip_malformed")]
    skip_malformed: bool,
}

fn batch_json(b: &MlmBatch) -> serde_json::Value {
    let e = &b.encoding;
    json!({
        "input_ids": e.rows(&e.input_ids),
        "attention_mask": e.rows(&e.attention_mask),
        "token_type_ids": e.rows(&e.token_type_ids),
        "labels": e.rows(&b.labels),
    })
}

/// A batch as `score --inputs` reads it: four i64 (batch, length) tensors.
fn score_inputs(b: &MlmBatch) -> candle_core::Result<std::collections::HashMap<String, candle_core::Tensor>> {
    let e = &b.encoding;
    let shape = (e.batch_size, e.seq_len);
    let tensor = |v: Vec<i64>| candle_core::Tensor::from_vec(v, shape, &candle_core::Device::Cpu);
    let wide = |v: &[u32]| v.iter().map(|&x| i64::from(x)).collect::<Vec<i64>>();
    Ok([
        ("input_ids", tensor(wide(&e.input_ids))?),
        ("attention_mask", tensor(wide(&e.attention_mask))?),
        ("token_type_ids", tensor(wide(&e.token_type_ids))?),
        ("labels", tensor(b.labels.clone())?),
    ]
    .into_iter()
    .map(|(k, t)| (k.to_string(), t))
    .collect())
}

pub fn run(args: Args) -> anyhow::Result<()> {
    codon_files::refuse_overwriting(&[&args.files.input.path], &[&args.files.output.path])?;
    codon_files::check_output_location(&args.files.output.path)?;
    let policy = if args.skip_malformed { MalformedPolicy::Skip } else { MalformedPolicy::Error };
    let dataset = JsonlDataset::open(&args.files.input.path, policy)?;
    if dataset.malformed_lines() > 0 {
        errln!("skipped {} malformed lines", dataset.malformed_lines());
    }
    let config = LoaderConfig {
        batch_size: args.loader.batch_size,
        num_workers: args.loader.num_workers,
        seed: args.seed.value,
        shuffle_buffer: args.shuffle_buffer,
        bucket_batches: args.bucket_batches,
        ..Default::default()
    };
    let loader = DataLoader::new(dataset, MlmCollator::new(CodonTokenizer::new()?), config)?;
    if args.files.output.path.extension().is_some_and(|e| e == "safetensors") {
        let batch = loader
            .epoch(0)
            .next()
            .ok_or_else(|| anyhow::anyhow!("{}: no batch", args.files.input.path.display()))??;
        codon_model::files::write_safetensors(&score_inputs(&batch)?, &args.files.output.path)?;
        outln!(
            "wrote the first batch ({} x {}) to {}",
            batch.encoding.batch_size,
            batch.encoding.seq_len,
            args.files.output.path.display()
        );
        return Ok(());
    }
    let mut batches = 0;
    write_atomically(&args.files.output.path, |out| {
        for batch in loader.epoch(0) {
            let batch = batch.map_err(std::io::Error::other)?;
            writeln!(out, "{}", batch_json(&batch))?;
            batches += 1;
        }
        Ok(())
    })?;
    crate::reportln!(
        &args.files.output.path,
        "wrote {batches} batches of up to {} records to {}",
        args.loader.batch_size,
        args.files.output.path.display()
    );
    Ok(())
}
