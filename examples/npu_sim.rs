//! The same model on an emulated Ascend NPU (`npu-sim:0`) and on the CPU: the model code never
//! asks which device it is on, and the two agree.
//!
//! ```text
//! cargo run --release --example npu_sim
//! ```
use candle_core::{DType, Device};
use codon_model::bigbird::{init_weights, AttentionType, BigBirdForMaskedLM, ForwardMode, ModelInput};

fn logits(device: &Device) -> anyhow::Result<Vec<f32>> {
    let config = codon_model::bigbird::BigBirdConfig::demo();
    let weights = init_weights(&config, 7, device, DType::F32)?;
    let model = BigBirdForMaskedLM::from_named(config, weights)?;
    // One sequence of 64 tokens: [CLS], codons, [SEP], for upstream's default organism.
    let batch = codon_data::synthetic_mlm_batch(1, 64).encoding;
    let input = ModelInput::from_encoding(&batch, model.config(), device)?;
    let out = model.forward(&input, ForwardMode::eval(AttentionType::OriginalFull))?;
    Ok(out.flatten_all()?.to_dtype(DType::F32)?.to_vec1()?)
}

fn main() -> anyhow::Result<()> {
    let npu = candle_ascend::parse_device("npu-sim:0")?;
    let (on_npu, on_cpu) = (logits(&npu)?, logits(&Device::Cpu)?);
    let largest = on_cpu.iter().fold(0f32, |m, v| m.max(v.abs()));
    let diff = on_npu.iter().zip(&on_cpu).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    let name = candle_ascend::ascend_device(&npu).map_or_else(|| "?".into(), |a| a.name());
    codon_cli::outln!(
        "{} logits on {name}: largest difference from the CPU {diff:.2e} (of {largest:.2})",
        on_npu.len()
    );
    anyhow::ensure!(diff <= 1e-4 * largest.max(1.0), "npu-sim and the CPU disagree");
    Ok(())
}
