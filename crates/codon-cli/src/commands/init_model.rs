//! Write a randomly initialised BigBirdForMaskedLM in the transformers layout
//! (transformers' init scheme), so users and benchmarks can run without downloaded weights.
//!
//! ```text
//! codon init-model --output model-random [--config config.json] [--seed 0] [--overwrite]
//! ```
//! The output folder must be new or empty: a folder with files in it (a trained checkpoint, say)
//! is refused unless `--overwrite`, which replaces the whole folder once the new model is written.

use crate::cli::{ConfigArg, OutputArg, SeedArg};

use crate::outln;
use candle_core::{DType, Device};
use clap::Parser;
use codon_model::bigbird::{init_weights, save_model, BigBirdConfig, BigBirdForMaskedLM};

/// Initialise a model.
#[derive(Parser)]
pub struct Args {
    #[command(flatten)]
    output: OutputArg,
    #[command(flatten)]
    config: ConfigArg,
    #[command(flatten)]
    seed: SeedArg<0>,
    #[command(flatten)]
    overwrite: crate::cli::OverwriteArg,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let config = match &args.config.path {
        Some(path) => BigBirdConfig::from_file(path)?,
        None => BigBirdConfig::default(),
    };
    let replacing = refuse_a_used_folder(&args)?;
    let weights = init_weights(&config, args.seed.value, &Device::Cpu, DType::F32)?;
    let model = BigBirdForMaskedLM::from_named(config, weights)?;
    if replacing {
        // Written beside the old folder, then swapped in: a failure leaves the old one whole.
        let parent = codon_files::parent_dir(&args.output.path);
        let fresh = codon_files::temp_dir_in(parent, ".init_model.")?;
        save_model(&model, fresh.path())?;
        let aside = codon_files::temp_dir_in(parent, ".init_model.replaced.")?;
        std::fs::rename(&args.output.path, aside.path().join("old"))?;
        std::fs::rename(fresh.keep(), &args.output.path)?;
        drop(aside);
    } else {
        save_model(&model, &args.output.path)?;
    }
    outln!("wrote {} ({} parameters)", args.output.path.display(), model.num_parameters());
    Ok(())
}

/// Refuse an output that is a file, or a folder with files unless `--overwrite`; true when a
/// non-empty folder is to be replaced.
fn refuse_a_used_folder(args: &Args) -> anyhow::Result<bool> {
    let out = &args.output.path;
    if out.exists() && !out.is_dir() {
        anyhow::bail!("--output {}: a file is there; give a folder", out.display());
    }
    let Ok(entries) = std::fs::read_dir(out) else { return Ok(false) };
    let names: Vec<String> = entries.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    if names.is_empty() {
        return Ok(false);
    }
    if !args.overwrite.allowed {
        anyhow::bail!(
            "--output {} is not empty (it holds {}): give a new or empty folder, or --overwrite to replace the whole folder",
            out.display(),
            names.iter().take(4).cloned().collect::<Vec<_>>().join(", ") + if names.len() > 4 { ", …" } else { "" }
        );
    }
    if let Some(config) = &args.config.path {
        if codon_files::clash(out, config).is_some() {
            anyhow::bail!("--overwrite would delete --config {}: copy it out of the folder first", config.display());
        }
    }
    Ok(true)
}
