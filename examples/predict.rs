//! Predict a coding sequence with the library's `Predictor`: a model folder, a protein, an
//! organism.
//!
//! ```text
//! cargo run --release --example predict -- [MODEL_DIR] [PROTEIN] [ORGANISM]
//! ```
//! Without arguments it uses the tiny test model in `tests/fixtures` (random weights: the DNA
//! encodes the protein, but its codon choice means nothing).
use candle_core::{DType, Device};
use codon_model::bigbird::load_model;
use codon_model::{PredictOptions, Predictor};

fn main() -> anyhow::Result<()> {
    if std::env::args().skip(1).any(|a| a == "-h" || a == "--help") {
        codon_cli::outln!("usage: predict [MODEL_DIR] [PROTEIN] [ORGANISM]");
        return Ok(());
    }
    let mut args = std::env::args().skip(1);
    let model_dir = args.next().unwrap_or_else(|| format!("{}/tests/fixtures/bigbird", env!("CARGO_MANIFEST_DIR")));
    let protein = args.next().unwrap_or_else(|| "MALWMRLLPLLALLALWGPDPAAA".into());
    let organism = args.next().unwrap_or_else(|| "Escherichia coli general".into());

    let model = load_model(&model_dir, None, &Device::Cpu, DType::F32)?;
    let predictor = Predictor::new(model)?;
    // Upstream's defaults (argmax), with each residue's codon kept synonymous.
    let options = PredictOptions { match_protein: true, ..Default::default() };
    let predictions = predictor.predict(&protein, organism.as_str(), &options)?;
    let dna = &predictions[0].predicted_dna;
    codon_cli::outln!("{dna}");
    anyhow::ensure!(dna.len() == 3 * (protein.len() + 1), "one codon per residue and a stop codon");
    Ok(())
}
