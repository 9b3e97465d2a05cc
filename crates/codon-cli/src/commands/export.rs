//! `codon export`: the model as an ONNX file, for CANN's ATC (an offline `.om` model) and any
//! ONNX runtime (docs/onnx.md).
//!
//! ```text
//! codon export --format onnx --model DIR --output codon.onnx [--dtype f16]
//! ```
//! The graph is BigBirdForMaskedLM with full attention (upstream's `predict_dna_sequence`
//! default): inputs `input_ids`, `attention_mask`, `token_type_ids` (int64, dynamic batch and
//! length up to `max_position_embeddings`), output `logits`, f32 or f16.

use std::io::Write;

use crate::cli::{ConfigArg, DTypeArg, DTypeChoice, ModelArg, OutputArg};
use crate::outln;
use candle_core::{DType, Device};
use clap::Parser;
use codon_model::bigbird::{load_model, BigBirdConfig};
use codon_onnx::Float;

/// A `--format` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    /// ONNX (opset 13), the operators CANN's ATC takes.
    Onnx,
}

/// Export a model.
#[derive(Parser)]
pub struct Args {
    /// The file format.
    #[arg(long, value_enum, default_value_t = Format::Onnx)]
    format: Format,
    #[command(flatten)]
    model: ModelArg,
    #[command(flatten)]
    config: ConfigArg,
    #[command(flatten)]
    dtype: DTypeArg,
    #[command(flatten)]
    output: OutputArg,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let Format::Onnx = args.format;
    let float = match args.dtype.choice {
        DTypeChoice::F32 => Float::F32,
        DTypeChoice::F16 => Float::F16,
        DTypeChoice::Bf16 => anyhow::bail!("--dtype bf16: the ONNX export writes f32 or f16"),
    };
    let spec = crate::predictor::model_spec(args.model.path.as_deref());
    codon_files::refuse_overwriting(&[&spec], &[&args.output.path])?;
    codon_files::check_output_location(&args.output.path)?;
    refuse_terminal(&args.output.path)?;
    let resolved = codon_model::hub::resolve_model(&spec)?;
    let config = args.config.path.as_deref().map(BigBirdConfig::from_file).transpose()?;
    let model = load_model(&resolved, config, &Device::Cpu, DType::F32)?;
    let bytes = codon_onnx::export(&model, float)?;
    codon_files::write_atomically(&args.output.path, |w| w.write_all(&bytes))?;
    let c = model.config();
    outln!(
        "wrote {} ({:.1} MB, {}, opset {}): {} layers, full attention, inputs input_ids/attention_mask/token_type_ids (batch x length, length up to {}), output logits",
        args.output.path.display(),
        bytes.len() as f64 / 1e6,
        args.dtype,
        codon_onnx::OPSET,
        c.num_hidden_layers,
        c.max_position_embeddings
    );
    Ok(())
}

/// An ONNX model is binary: written to a terminal it would scramble the screen and be lost.
fn refuse_terminal(path: &std::path::Path) -> anyhow::Result<()> {
    use codon_files::OutputTarget;
    use std::io::IsTerminal;
    let terminal = match OutputTarget::of(path)? {
        // SAFETY: the descriptor is only asked whether it is a terminal (a closed one is not).
        OutputTarget::Descriptor(fd) => unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }.is_terminal(),
        OutputTarget::Stream(device) => std::fs::File::open(device).is_ok_and(|f| f.is_terminal()),
        OutputTarget::File(_) => false,
    };
    anyhow::ensure!(
        !terminal,
        "--output {}: a terminal; the ONNX model is binary: give a file, or redirect (> codon.onnx)",
        path.display()
    );
    Ok(())
}
