//! Predict organism-specific DNA for proteins (`predict_dna_sequence` upstream).
//!
//! ```text
//! cargo run --release --example predict -- --model DIR --protein MALWMRLL... --organism "Escherichia coli general"
//! cargo run --release --example predict -- --model DIR --input proteins.csv --output predictions.csv --match-protein
//! ```
//! Batch files are CSV with columns `protein_sequence` and `organism` (name or id); the
//! output adds `predicted_dna` (with several sequences: one row per sequence).

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use codon_ascend::model::bigbird::{load_model, BigBirdConfig};
use codon_ascend::model::{OrganismRef, PredictOptions, Predictor, ORGANISMS};

/// Predict DNA for a protein and an organism.
#[derive(Parser)]
struct Args {
    /// Model directory (config.json + model.safetensors) or checkpoint (.pt, .ckpt, .safetensors).
    #[arg(long, required_unless_present = "list_organisms")]
    model: Option<PathBuf>,
    /// config.json of a checkpoint file's model, when it is not CodonTransformer's size.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Print the organisms (id and name) the model knows, and exit.
    #[arg(long)]
    list_organisms: bool,
    /// Protein sequence.
    #[arg(long, conflicts_with = "input")]
    protein: Option<String>,
    /// Organism name or id (for --protein).
    #[arg(long)]
    organism: Option<String>,
    /// CSV with protein_sequence and organism columns.
    #[arg(long, requires = "output")]
    input: Option<PathBuf>,
    /// Output CSV (written atomically).
    #[arg(long)]
    output: Option<PathBuf>,
    /// cpu, npu:N or npu-sim:N.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// f32, bf16 or f16.
    #[arg(long, default_value = "f32")]
    dtype: String,
    /// Only codons of each residue's amino acid.
    #[arg(long)]
    match_protein: bool,
    /// Sample with this temperature instead of argmax.
    #[arg(long)]
    temperature: Option<f64>,
    /// Nucleus mass for sampling.
    #[arg(long, default_value_t = 0.95)]
    top_p: f64,
    /// Sequences per protein (sampling).
    #[arg(long, default_value_t = 1)]
    num_sequences: usize,
    /// Sampling seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

fn organism_ref(text: &str) -> OrganismRef {
    match text.trim().parse::<i64>() {
        Ok(id) => OrganismRef::Id(id),
        Err(_) => OrganismRef::Name(text.trim().to_string()),
    }
}

fn run() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.list_organisms {
        for (id, name) in ORGANISMS.iter().enumerate() {
            println!("{id}\t{name}");
        }
        return Ok(());
    }
    let Some(model) = &args.model else { anyhow::bail!("--model is required") };
    if let Some(output) = &args.output {
        let inputs: Vec<&std::path::Path> = args.input.iter().map(|p| p.as_path()).chain([model.as_path()]).collect();
        codon_ascend::data::refuse_overwriting(&inputs, &[output])?;
    }
    if let Some(organism) = &args.organism {
        organism_ref(organism).resolve().context("--organism (predict --list-organisms lists them)")?;
    }
    let device = codon_ascend::parse_device(&args.device).map_err(anyhow::Error::msg)?;
    let dtype = codon_ascend::parse_dtype(&args.dtype).map_err(anyhow::Error::msg)?;
    if let Some(ascend) = codon_ascend::ascend::ascend_device(&device) {
        if dtype == candle_core::DType::BF16 && !ascend.soc().has_bf16() {
            anyhow::bail!(
                "--dtype bf16: {} ({}) has no BF16; use --dtype f16 or f32",
                ascend.soc().name,
                ascend.name()
            );
        }
    }
    let options = PredictOptions {
        deterministic: args.temperature.is_none(),
        temperature: args.temperature.unwrap_or(0.2),
        top_p: args.top_p,
        num_sequences: args.num_sequences,
        match_protein: args.match_protein,
        seed: args.seed,
        ..Default::default()
    };
    options.validate()?;
    let config = args.config.as_deref().map(BigBirdConfig::from_file).transpose()?;
    let predictor = Predictor::new(load_model(model, config, &device, dtype)?)?;
    if let Some(ascend) = codon_ascend::ascend::ascend_device(&device) {
        preflight(ascend, &predictor, &options)?;
    }
    if let Some(protein) = &args.protein {
        let organism = args.organism.as_deref().ok_or_else(|| anyhow::anyhow!("--protein needs --organism"))?;
        for p in predictor.predict(protein, organism_ref(organism), &options)? {
            println!("{}", p.predicted_dna);
        }
        return Ok(());
    }
    let (Some(input), Some(output)) = (&args.input, &args.output) else {
        anyhow::bail!("give --protein and --organism, or --input CSV and --output CSV");
    };
    let mut reader = csv::Reader::from_path(input).map_err(|e| anyhow::anyhow!("{}: {e}", input.display()))?;
    let headers = reader.headers()?.clone();
    let column = |name: &str| {
        headers
            .iter()
            .position(|h| h.trim() == name)
            .ok_or_else(|| anyhow::anyhow!("{}: no {name:?} column", input.display()))
    };
    let (protein_col, organism_col) = (column("protein_sequence")?, column("organism")?);
    let rows: Vec<csv::StringRecord> = reader.records().collect::<Result<_, _>>()?;
    let items: Vec<(String, OrganismRef)> = rows
        .iter()
        .map(|r| (r.get(protein_col).unwrap_or("").to_string(), organism_ref(r.get(organism_col).unwrap_or(""))))
        .collect();
    let results = predictor.predict_batch(&items, &options)?;
    let mut failed = 0;
    let mut writer = csv::Writer::from_writer(Vec::new());
    writer.write_record(headers.iter().chain(["predicted_dna"]))?;
    for (row, result) in rows.iter().zip(results) {
        match result {
            Ok(predictions) => {
                for p in predictions {
                    writer.write_record(row.iter().chain([p.predicted_dna.as_str()]))?;
                }
            }
            Err(e) => {
                failed += 1;
                writer.write_record(row.iter().chain([format!("ERROR: {e}").as_str()]))?;
            }
        }
    }
    let bytes = writer.into_inner().map_err(|e| anyhow::anyhow!("{e}"))?;
    codon_ascend::data::write_atomically(output, |w| w.write_all(&bytes))?;
    println!("predicted {} proteins ({failed} failed); wrote {}", rows.len() - failed, output.display());
    if failed > 0 && failed == rows.len() {
        anyhow::bail!("every one of the {failed} rows failed (their errors are in {})", output.display());
    }
    Ok(())
}

/// A prediction of a short and a long protein with every launch reduced to phase 1: fails before
/// the first real prediction, listing every op the part refuses. The long one reaches the model's
/// block-sparse length where it has one, so the preflight launches what any input can.
fn preflight(
    ascend: &codon_ascend::ascend::AscendDevice,
    predictor: &Predictor,
    options: &PredictOptions,
) -> anyhow::Result<()> {
    let c = predictor.model().config();
    // Residues: [CLS] and [SEP] take two of the probe's tokens.
    let long = c.block_sparse_probe_len().saturating_sub(2).max(1);
    let items: Vec<(String, OrganismRef)> =
        [1, long].iter().map(|&n| ("M".repeat(n), OrganismRef::Name("Escherichia coli general".into()))).collect();
    ascend.preflight(|| {
        predictor.predict_batch(&items, options).map(|_| ()).map_err(|e| candle_core::Error::Msg(e.to_string()))
    })?;
    eprintln!("preflight on {}: every op of a prediction is supported", ascend.soc().name);
    Ok(())
}

fn main() {
    codon_ascend::run_main(run);
}
