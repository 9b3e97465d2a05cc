//! Tokenize proteins (with optional DNA) for CodonTransformer.
//!
//! Input lines: `{"protein": str, "dna": str (optional), "organism": name or id}`.
//! Output lines: `{"merged", "input_ids", "attention_mask", "token_type_ids"}`, or
//! `{"error": str}` for a record that fails; the run continues past failures, and exits
//! non-zero when any record failed unless `--allow-failures`.
//!
//! ```text
//! codon tokenize --input crates/codon-cli/demo/proteins.jsonl --output tokens.jsonl
//! ```

use crate::cli::FileArgs;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use codon_files::write_atomically;
use codon_model::{merged_sequence_with, CodonTokenizer, OrganismRef};
use rand::SeedableRng;
use serde::Deserialize;
use serde_json::json;

/// Turn protein records into model inputs.
#[derive(Parser)]
pub struct Args {
    #[command(flatten)]
    files: FileArgs,
    /// Use this tokenizer.json instead of the built-in tokenizer.
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    #[command(flatten)]
    protein: super::common::protein_args::ProteinArgs,
    #[command(flatten)]
    allow_failures: crate::cli::AllowFailuresArg,
}

#[derive(Deserialize)]
struct Input {
    protein: String,
    #[serde(default)]
    dna: Option<String>,
    organism: OrganismRef,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    codon_files::refuse_overwriting(&[&args.files.input.path], &[&args.files.output.path])?;
    codon_files::check_output_location(&args.files.output.path)?;
    let tokenizer = match &args.tokenizer {
        Some(path) => CodonTokenizer::from_file(path)?,
        None => CodonTokenizer::new()?,
    };
    let config = args.protein.config();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(args.protein.seed.value);
    let file = std::fs::File::open(&args.files.input.path)
        .with_context(|| format!("opening {}", args.files.input.path.display()))?;
    let (mut ok, mut failed) = (0usize, 0usize);
    // A read error belongs to the input, not to the output being written.
    let mut read_error = None;
    let written = write_atomically(&args.files.output.path, |out| {
        for (i, line) in BufReader::new(file).lines().enumerate() {
            let line = match line {
                Ok(line) => line,
                Err(e) => {
                    read_error = Some(anyhow::anyhow!("{}: line {}: {e}", args.files.input.path.display(), i + 1));
                    return Err(std::io::Error::other("the input could not be read"));
                }
            };
            if line.trim().is_empty() {
                continue;
            }
            let result =
                serde_json::from_str::<Input>(&line).map_err(|e| format!("line {}: {e}", i + 1)).and_then(|input| {
                    let organism = input.organism.resolve().map_err(|e| e.to_string())?;
                    let merged = merged_sequence_with(
                        &input.protein,
                        input.dna.as_deref().unwrap_or(""),
                        "_",
                        &config,
                        &mut rng,
                    )
                    .map_err(|e| e.to_string())?;
                    let enc = tokenizer.encode_batch(&[&merged], &[organism]).map_err(|e| e.to_string())?;
                    Ok(json!({
                        "merged": merged,
                        "input_ids": enc.input_ids,
                        "attention_mask": enc.attention_mask,
                        "token_type_ids": enc.token_type_ids,
                    }))
                });
            let value = result.unwrap_or_else(|e| {
                failed += 1;
                json!({ "error": e })
            });
            ok += usize::from(value.get("error").is_none());
            writeln!(out, "{value}")?;
        }
        Ok(())
    });
    if let Some(e) = read_error {
        return Err(e);
    }
    written?;
    crate::reportln!(
        &args.files.output.path,
        "tokenized {ok} records, {failed} failed; wrote {}",
        args.files.output.path.display()
    );
    if failed > 0 && !args.allow_failures.allowed {
        anyhow::bail!(
            "{failed} of {} records failed (their errors are in the error field of {}; --allow-failures exits 0)",
            ok + failed,
            args.files.output.path.display()
        );
    }
    Ok(())
}
