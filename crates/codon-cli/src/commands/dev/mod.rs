//! `codon dev …`: timing and diagnostic tools for developers of this project (hidden from
//! `codon --help`): the benches' companions, not jobs users run.

pub mod forward_timing;
pub mod gemm_throughput;
pub mod op_timing;
pub mod pipeline;
pub mod predict_timing;
pub mod serve_load;
pub mod step_counters;
pub mod train_step_timing;

/// The training step a timing tool runs: its precision and attention, and a synthetic batch of
/// `--batch` sequences of `--length` tokens (`LENGTH` by default).
#[derive(clap::Args)]
pub struct StepWorkload<const LENGTH: usize> {
    #[command(flatten)]
    precision: crate::cli::PrecisionArg,
    #[command(flatten)]
    attention: crate::cli::AttentionArg,
    /// Sequences per batch.
    #[arg(long, default_value_t = 2)]
    batch: usize,
    /// Tokens per sequence.
    #[arg(long, default_value_t = LENGTH)]
    length: usize,
}

/// The developer tools.
#[derive(clap::Subcommand)]
pub enum DevCommand {
    /// Forward-pass time of a BigBird on random tokens.
    ForwardTiming(forward_timing::Args),
    /// The `gemm` crate's throughput on a train step's shapes.
    GemmThroughput,
    /// Per-op time on a device.
    OpTiming(op_timing::Args),
    /// The data pipeline alone on the demo data.
    Pipeline(pipeline::Args),
    /// Batch prediction time on a CSV file.
    PredictTiming(predict_timing::Args),
    /// The design service's bounded load test on loopback, beside batch prediction.
    ServeLoad(serve_load::Args),
    /// Launches, memory and the modelled time of a train step on the emulator.
    StepCounters(step_counters::Args),
    /// Train-step time.
    TrainStepTiming(train_step_timing::Args),
}

impl DevCommand {
    /// Run the tool.
    pub fn run(self) -> anyhow::Result<()> {
        match self {
            Self::ForwardTiming(args) => forward_timing::run(args),
            Self::GemmThroughput => gemm_throughput::run(),
            Self::OpTiming(args) => op_timing::run(args),
            Self::Pipeline(args) => pipeline::run(args),
            Self::PredictTiming(args) => predict_timing::run(args),
            Self::ServeLoad(args) => serve_load::run(args),
            Self::StepCounters(args) => step_counters::run(args),
            Self::TrainStepTiming(args) => train_step_timing::run(args),
        }
    }
}
