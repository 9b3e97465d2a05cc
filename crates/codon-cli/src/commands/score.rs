//! Run BigBirdForMaskedLM on saved inputs and write logits, loss and (optionally) every
//! parameter gradient — the tool for checking parity with transformers.
//!
//! ```text
//! codon score --model DIR --inputs in.safetensors --output out.safetensors \
//!     [--attention full|block-sparse] [--train] [--grads] [--device cpu|npu:N|npu-sim:N] [--dtype f32|bf16|f16]
//! ```
//! Inputs: `input_ids`, `attention_mask`, `token_type_ids`, `labels`, i64 (batch, length).
//! Output: `logits`, `loss`, and with `--grads` one tensor per parameter under its
//! transformers state-dict name (tied decoder keys excluded). On a device that skips its
//! arithmetic (`CANDLE_ASCEND_SIM_NO_MATH=1`) a warning is printed and the file holds `no_math` = 1.

use crate::cli::{AttentionArg, ModelRunArgs, OutputArg, SeedArg};
use std::collections::HashMap;
use std::path::PathBuf;

use crate::{errln, outln};
use anyhow::Context;
use candle_core::{Tensor, Var};
use clap::Parser;
use codon_model::bigbird::{load_model, masked_lm_loss, AttentionType, ForwardMode, ModelInput};

/// Score inputs with a model.
#[derive(Parser)]
pub struct Args {
    #[command(flatten)]
    run: ModelRunArgs,
    /// Input safetensors file.
    #[arg(long)]
    inputs: PathBuf,
    #[command(flatten)]
    output: OutputArg,
    #[command(flatten)]
    attention: AttentionArg,
    /// Training-mode semantics: random tables, dropout as configured.
    #[arg(long)]
    train: bool,
    /// Also write the gradient of the loss for every parameter.
    #[arg(long)]
    grads: bool,
    #[command(flatten)]
    seed: SeedArg<0>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let model_spec = crate::predictor::model_spec(args.run.model.as_deref());
    codon_files::refuse_overwriting(&[&args.inputs, &model_spec], &[&args.output.path])?;
    codon_files::check_output_location(&args.output.path)?;
    let device = args.run.device.open()?;
    let no_math = crate::skips_math(&device);
    if no_math {
        errln!("{}", crate::NO_MATH_WARNING);
    }
    let dtype = candle_core::DType::from(args.run.dtype);
    let attention = AttentionType::from(args.attention.choice);
    let inputs = candle_core::safetensors::load(&args.inputs, &device)
        .with_context(|| format!("--inputs {}: not a safetensors file of model inputs", args.inputs.display()))?;
    let mut model = load_model(codon_model::hub::resolve_model(&model_spec)?, None, &device, dtype)?;
    let get = |k: &str| -> anyhow::Result<Tensor> {
        inputs.get(k).cloned().ok_or_else(|| anyhow::anyhow!("{}: no tensor {k:?}", args.inputs.display()))
    };
    let input = ModelInput {
        input_ids: get("input_ids")?,
        token_type_ids: get("token_type_ids")?,
        attention_mask: get("attention_mask")?,
    };
    let labels = get("labels")?;
    let vars: Vec<(String, Var)> = if args.grads {
        let vars;
        (model, vars) = model.trainable(model.dtype())?;
        vars
    } else {
        Vec::new()
    };
    let mode = if args.train { ForwardMode::train(attention, args.seed.value) } else { ForwardMode::eval(attention) };
    let (logits, info) = model.forward_with_info(&input, mode)?;
    let loss = masked_lm_loss(&logits, &labels)?;
    let mut out: HashMap<String, Tensor> = HashMap::new();
    if args.grads {
        let grads = loss.backward()?;
        for (name, var) in &vars {
            let g = match grads.get(var) {
                Some(g) => g.clone(),
                None => var.zeros_like()?, // the pooler never reaches the loss
            };
            out.insert(name.clone(), g);
        }
    }
    outln!(
        "loss {:.6} ({:?} attention, encoder length {}){}",
        loss.to_dtype(candle_core::DType::F32)?.to_scalar::<f32>()?,
        info.attention,
        info.encoder_len,
        if no_math { " [no-math mode: meaningless]" } else { "" }
    );
    if no_math {
        // Marks the file itself: a reader of `logits` finds `no_math` = 1 beside it.
        out.insert("no_math".into(), Tensor::new(&[1u8], &candle_core::Device::Cpu)?);
    }
    out.insert("logits".into(), logits);
    out.insert("loss".into(), loss.reshape(1)?);
    let out: HashMap<String, Tensor> = out
        .into_iter()
        .map(|(k, v)| Ok((k, v.to_device(&candle_core::Device::Cpu)?)))
        .collect::<candle_core::Result<_>>()?;
    codon_model::files::write_safetensors(&out, &args.output.path)?;
    crate::reportln!(&args.output.path, "wrote {}", args.output.path.display());
    Ok(())
}
