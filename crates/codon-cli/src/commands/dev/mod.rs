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

/// `--batch` and `--length`: the synthetic batch a timing tool runs, `BATCH` sequences of
/// `LENGTH` tokens by default.
#[derive(clap::Args)]
pub struct BatchShape<const BATCH: usize, const LENGTH: usize> {
    /// Sequences per batch.
    #[arg(id = "batch", long = "batch", value_name = "N", default_value = BATCH.to_string(),
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    batch: usize,
    /// Tokens per sequence.
    #[arg(id = "length", long = "length", value_name = "N", default_value = LENGTH.to_string(),
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    length: usize,
}

/// `--repeats`: how many timed runs follow the untimed warm-up (`DEFAULT` by default).
#[derive(clap::Args)]
pub struct Repeats<const DEFAULT: usize> {
    /// Timed runs after one untimed warm-up; the tool reports their median.
    #[arg(id = "repeats", long = "repeats", value_name = "N", default_value = DEFAULT.to_string(),
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=10_000))]
    count: usize,
}

/// `--max-padding`, the most padding a prediction's forward pass may hold.
#[derive(clap::Args)]
pub struct MaxPadding {
    /// Most padding per forward pass, as a fraction of its tokens [default: the device's, as
    /// `predict`].
    #[arg(id = "max_padding", long = "max-padding", alias = "max_padding", value_name = "FRACTION")]
    fraction: Option<f64>,
}

impl MaxPadding {
    /// The fraction given, else `predict`'s for `device`.
    fn on(&self, device: &candle_core::Device) -> f64 {
        self.fraction.unwrap_or_else(|| codon_model::predict::max_padding_fraction_on(device))
    }
}

/// The training steps a timing tool runs: their precision and attention, how many, and a
/// synthetic batch of `--batch` sequences of `--length` tokens (`LENGTH` by default).
#[derive(clap::Args)]
pub struct StepWorkload<const LENGTH: usize> {
    #[command(flatten)]
    precision: crate::cli::PrecisionArg,
    #[command(flatten)]
    attention: crate::cli::AttentionArg,
    #[command(flatten)]
    shape: BatchShape<2, LENGTH>,
    /// Optimizer steps on the one batch. The first runs cold (fresh optimizer state, first-touch
    /// allocations), so the tools report it apart from the later ones.
    #[arg(id = "steps", long = "steps", value_name = "N", default_value_t = 3,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    steps: usize,
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
    /// The data pipeline alone on the demo data (--max_epochs 2 by default).
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
