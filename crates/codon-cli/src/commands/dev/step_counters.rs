//! Count what one steady-state optimizer step does on an Ascend device: kernel launches by op,
//! driver allocations, host synchronisations, device-to-host reads and peak device memory, as
//! the backend counts them (on `npu:N` and `npu-sim:N` alike), and the step's modelled time on
//! the part (modelled from the vendor's platform files, not measured; docs/ascend.md).
//!
//! ```text
//! codon step-counters --device npu-sim:0 --precision bf16 --batch 2 --length 256 [--profile]
//! ```
use crate::cli::NpuDeviceArg;
use std::path::Path;

use crate::outln;
use candle_core::DType;
use clap::Parser;
use codon_model::bigbird::{init_weights, AttentionType, BigBirdConfig, BigBirdForMaskedLM};
use codon_model::training::MaskedLmModel;
use codon_train::{Trainer, TrainerConfig};

/// Per-step device counters.
#[derive(Parser)]
pub struct Args {
    #[command(flatten)]
    device: NpuDeviceArg<true>,
    #[command(flatten)]
    step: super::StepWorkload<256>,
    /// Encoder layers (CodonTransformer: 12).
    #[arg(long, default_value_t = 12)]
    layers: usize,
    #[command(flatten)]
    gradient_checkpointing: crate::cli::GradientCheckpointingArg,
    /// List the ops by modelled device time (launches, µs, share), like msprof's op summary.
    #[arg(long)]
    profile: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let device = args.device.open()?;
    let Some(ascend) = candle_ascend::ascend_device(&device) else {
        anyhow::bail!("--device {}: counters exist on npu:N and npu-sim:N", args.device.spec);
    };
    let precision = args.step.precision.resolve(&device);
    let attention = AttentionType::from(args.step.attention.choice);
    let config = BigBirdConfig { num_hidden_layers: args.layers, ..BigBirdConfig::default() };
    let weights = init_weights(&config, 0, &device, DType::F32)?;
    let parameters: usize = weights.values().map(|t| t.elem_count()).sum();
    let model = BigBirdForMaskedLM::from_named(config.clone(), weights)?;
    let model = MaskedLmModel::new(model, precision, attention)?
        .with_gradient_checkpointing(args.gradient_checkpointing.enabled);
    let data = codon_train::SameBatch(codon_data::synthetic_mlm_batch(args.step.shape.batch, args.step.shape.length));
    let steps = args.step.steps;
    let probe = codon_train_ascend::AscendProbe::new(ascend.clone());
    let last_step = probe.last_step();
    let trainer = Trainer::new(
        TrainerConfig::builder()
            .max_steps(Some(steps))
            .max_epochs(steps)
            .precision(precision)
            .device_probe(Box::new(probe))
            .retain_freed_memory(true)
            .quiet(true)
            .build()?,
    );
    let report = trainer.fit(&model, &data, None::<&Path>)?;
    let last = report.steps.last().and_then(|s| s.device).ok_or_else(|| anyhow::anyhow!("no step ran"))?;
    let steps = report.steps.len();
    outln!(
        "{} ({}{}), {:?}, {:?} attention{}, {} layers, batch {} x {}: step {steps} of {steps}",
        ascend.name(),
        ascend.soc().name,
        if ascend.skips_math() { ", no math" } else { "" },
        precision,
        attention,
        if args.gradient_checkpointing.enabled { ", gradient checkpointing" } else { "" },
        args.layers,
        args.step.shape.batch,
        args.step.shape.length,
    );
    outln!(
        "launches {} (AI CPU {})  allocations {}  syncs {}  reads {}  peak device memory {:.1} MiB",
        last.device_launches,
        last.aicpu_launches,
        last.device_allocs,
        last.host_syncs,
        last.device_reads,
        last.device_peak_mb
    );
    let last_step = last_step.lock().unwrap_or_else(|e| e.into_inner()).clone();
    outln!("uploads {}", last_step.uploads);
    let model_time = candle_ascend::runtime::time_model::TimeModel::for_soc(&ascend.soc().name);
    if let (Some(t), Some(model_time)) = (&last_step.modelled, model_time) {
        let tokens = (args.step.shape.batch * args.step.shape.length) as f64;
        let flops = config.training_flops_per_token(parameters, attention, args.step.shape.length) * tokens;
        let mfu = model_time.mfu(flops, t.host_us);
        outln!(
            "modelled step {:.1} ms (device {:.1} ms, host {:.1} ms, cube {:.1} ms = {:.0} % of the device time), MFU {:.1} % ({:.2} TFLOP of {:.0} TFLOP/s peak; modelled, not measured)",
            t.host_us / 1e3,
            t.device_us / 1e3,
            t.host_busy_us / 1e3,
            t.cube_us / 1e3,
            100.0 * t.cube_us / t.device_us.max(f64::MIN_POSITIVE),
            100.0 * mfu,
            flops / 1e12,
            model_time.peak_flops() / 1e12
        );
        if args.profile {
            let mut ops: Vec<(&String, &f64)> = t.per_op_us.iter().collect();
            ops.sort_by(|a, b| b.1.total_cmp(a.1).then(a.0.cmp(b.0)));
            outln!("  {:<32} {:>8} {:>12} {:>7}", "op (by modelled device time)", "launches", "µs", "share");
            for (op, us) in ops {
                let launches = last_step.launches.get(op).copied().unwrap_or(0);
                outln!("  {op:<32} {launches:>8} {us:>12.1} {:>6.1}%", 100.0 * us / t.device_us.max(f64::MIN_POSITIVE));
            }
            return Ok(());
        }
    }
    let mut ops: Vec<(String, u64)> = last_step.launches.into_iter().collect();
    ops.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    for (op, n) in ops {
        // AI CPU launches are named: the vendor's kernel tables have no AI Core kernel for them.
        match last_step.aicpu_launches.get(&op) {
            Some(cpu) => outln!("  {op:<32} {n:>7}  AI CPU {cpu}"),
            None => outln!("  {op:<32} {n:>7}"),
        }
    }
    Ok(())
}
