//! Prepare a JSONL training file from a CSV (dna, optional protein, organism) or FASTA file.
//!
//! ```text
//! codon prepare-data --input crates/codon-cli/demo/genes.csv --output train.jsonl
//! codon prepare-data --input genes.fasta --output train.jsonl --organism "Homo sapiens"
//! ```

use crate::cli::FileArgs;

use crate::outln;
use anyhow::Context;
use clap::Parser;
use codon_data::{prepare, PrepareOptions};

/// Turn gene records into CodonTransformer training records ({"idx", "codons", "organism"}).
#[derive(Parser)]
pub struct Args {
    #[command(flatten)]
    files: FileArgs,
    #[command(flatten)]
    organism: crate::cli::OrganismArg,
    /// Keep records that fail the is_correct_seq CDS checks.
    #[arg(long, alias = "keep_incorrect")]
    keep_incorrect: bool,
    /// Keep records whose protein column is not the DNA's translation (their tokens train as [UNK]).
    #[arg(long, alias = "keep_mismatched")]
    keep_mismatched: bool,
    /// Shuffle the output with this seed.
    #[arg(long, alias = "shuffle_seed")]
    shuffle_seed: Option<u64>,
    #[command(flatten)]
    protein: super::common::protein_args::ProteinArgs,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if let Some(organism) = &args.organism.name {
        codon_model::parse_organism(organism).context("--organism")?;
    }
    let options = PrepareOptions {
        organism: args.organism.name,
        keep_incorrect: args.keep_incorrect,
        keep_mismatched: args.keep_mismatched,
        shuffle_seed: args.shuffle_seed,
        protein_config: args.protein.config(),
        seed: args.protein.seed.value,
    };
    // Its errors name the file at fault: the input, or the output.
    let report = prepare(&args.files.input.path, &args.files.output.path, &options)?;
    outln!("{report}");
    crate::reportln!(&args.files.output.path, "wrote {}", args.files.output.path.display());
    if report.written == 0 {
        anyhow::bail!(
            "no records written: all {} records of {} were dropped (reasons above)",
            report.read,
            args.files.input.path.display()
        );
    }
    Ok(())
}
