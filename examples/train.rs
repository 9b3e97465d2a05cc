//! Train a small BigBird masked LM on the bundled demo genes with `codon_train::Trainer`.
//!
//! ```text
//! cargo run --release --example train
//! ```
use candle_core::{DType, Device};
use codon_data::{prepare, DataLoader, JsonlDataset, LoaderConfig, MalformedPolicy, MlmCollator};
use codon_model::bigbird::{init_weights, AttentionType, BigBirdForMaskedLM};
use codon_model::training::{MaskedLmData, MaskedLmModel};
use codon_model::CodonTokenizer;
use codon_train::{Precision, Trainer, TrainerConfig};

fn main() -> anyhow::Result<()> {
    // CSV genes -> the JSONL training format (upstream's prepare_training_data).
    let dir = tempfile::tempdir()?;
    let train = dir.path().join("train.jsonl");
    let genes = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/codon-cli/demo/genes.csv");
    prepare(&genes, &train, &Default::default())?;

    // Records -> masked-LM batches of 6, shuffled per epoch.
    let dataset = JsonlDataset::open(&train, MalformedPolicy::Error)?;
    let collator = MlmCollator::new(CodonTokenizer::new()?);
    let loader = DataLoader::new(dataset, collator, LoaderConfig { batch_size: 6, ..Default::default() })?;

    // A 2-layer BigBird from a random initialisation, as a trainable masked LM.
    let config = codon_model::bigbird::BigBirdConfig::demo();
    let weights = init_weights(&config, 0, &Device::Cpu, DType::F32)?;
    let model = BigBirdForMaskedLM::from_named(config, weights)?;
    let model = MaskedLmModel::new(model, Precision::F32, AttentionType::BlockSparse)?;

    // AdamW and OneCycleLR (upstream's), three epochs, no checkpoints.
    let config =
        TrainerConfig::builder().learning_rate(1e-3).max_epochs(3).precision(Precision::F32).quiet(true).build()?;
    let report = Trainer::new(config).fit(&model, &MaskedLmData::new(loader), None)?;
    let (first, last) = (&report.steps[0], &report.steps[report.steps.len() - 1]);
    codon_cli::outln!("{} steps: loss {:.3} -> {:.3}", report.steps.len(), first.loss, last.loss);
    anyhow::ensure!(last.loss < first.loss, "the loss did not go down");
    Ok(())
}
