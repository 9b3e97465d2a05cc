//! The command-line vocabulary the programs share: typed values for `--device`, `--dtype`,
//! `--precision` and `--attention`. clap parses them when it reads the command line, so `--help`
//! lists the choices and a typo is refused there with a suggestion; a device is opened (and a
//! precision resolved against it) afterwards, where a failure is an ordinary error.

use candle_core::{DType, Device};
use codon_model::bigbird::AttentionType;
use codon_train::Precision;

/// Parse `args` (the program's name first) into `A`. `--help` and `--version` print as usual and
/// give `Err(0)`; a usage error is one line on stderr (clap's message and suggestions, without the
/// usage block) and `Err(2)`: the exit status to end with.
pub fn parse_args_from<A: clap::Parser>(args: impl IntoIterator<Item = std::ffi::OsString>) -> Result<A, i32> {
    match A::try_parse_from(args) {
        Ok(args) => Ok(args),
        Err(e) if !e.use_stderr() => {
            // Help or version on stdout; a closed pipe there is no error.
            let _ = e.print();
            Err(0)
        }
        Err(e) => {
            crate::errln!("{}", one_line(&e.render().to_string()));
            Err(2)
        }
    }
}

/// clap's multi-line error as one line: its lines joined, the usage block and the `--help` hint left out.
fn one_line(rendered: &str) -> String {
    let lines: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .collect();
    format!("{} (see --help)", lines.join(" "))
}

/// A `--device` value: `cpu`, `npu:N`, `npu-sim:N` or `cuda:N`.
pub use crate::device::DeviceSpec;

/// `--device`, as every command that runs a model reads it (`#[command(flatten)]`), by default
/// `cpu`. The commands that only inspect Ascend NPUs flatten an [`NpuDeviceArg`] instead. It
/// reads as the [`DeviceSpec`] it holds.
#[derive(clap::Args, Debug)]
pub struct DeviceArg<const NPU: bool = false, const EMULATED: bool = false> {
    #[arg(id = "device", long = "device", value_name = "DEVICE", help = device_help(NPU),
          default_value = default_device(NPU, EMULATED))]
    pub spec: DeviceSpec,
    /// Let f32 matrix products on an NVIDIA GPU run on TF32 tensor cores (inputs rounded to a
    /// 10-bit mantissa, sums in f32), as PyTorch's `allow_tf32`; off by default (docs/cuda.md
    /// gives its accuracy cost).
    #[arg(id = "tf32", long = "tf32", hide = NPU)]
    pub tf32: bool,
}

impl<const NPU: bool, const EMULATED: bool> DeviceArg<NPU, EMULATED> {
    /// Open the device, after [`DeviceArg::apply_tf32`].
    pub fn open(&self) -> Result<Device, crate::device::DeviceError> {
        self.apply_tf32()?;
        self.spec.open()
    }

    /// Apply `--tf32`, for this device and any other the command opens: refused on a device that
    /// is not an NVIDIA GPU, where it would change nothing. Without the flag f32 products stay
    /// f32 (candle's default, like PyTorch's).
    pub fn apply_tf32(&self) -> Result<(), crate::device::DeviceError> {
        if !self.tf32 {
            return Ok(());
        }
        match self.spec {
            DeviceSpec::Cuda { .. } => {
                candle_core::cuda::set_gemm_reduced_precision_f32(true);
                Ok(())
            }
            spec => Err(crate::device::DeviceError::Tf32NotCuda(spec)),
        }
    }
}

/// `--device` of the commands that only inspect Ascend NPUs (`codon npu`, the launch counters):
/// by default `npu:0`, or `npu-sim:0` where `EMULATED`.
pub type NpuDeviceArg<const EMULATED: bool> = DeviceArg<true, EMULATED>;

/// `--device`'s help: the devices a command takes.
const fn device_help(npu: bool) -> &'static str {
    if npu {
        "npu:N or npu-sim:N"
    } else {
        "cpu, npu:N, npu-sim:N or cuda:N (builds with the `cuda` feature)"
    }
}

/// `--device`'s default.
const fn default_device(npu: bool, emulated: bool) -> &'static str {
    match (npu, emulated) {
        (false, _) => "cpu",
        (true, false) => "npu:0",
        (true, true) => "npu-sim:0",
    }
}

impl<const NPU: bool, const EMULATED: bool> std::ops::Deref for DeviceArg<NPU, EMULATED> {
    type Target = DeviceSpec;
    fn deref(&self) -> &DeviceSpec {
        &self.spec
    }
}

impl<const NPU: bool, const EMULATED: bool> std::fmt::Display for DeviceArg<NPU, EMULATED> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.spec.fmt(f)
    }
}

/// `--precision`, the precision a training step runs in, as every command that trains reads it.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct PrecisionArg {
    /// Training precision.
    #[arg(id = "precision", long = "precision", value_enum, default_value_t = PrecisionChoice::Auto)]
    pub choice: PrecisionChoice,
}

impl std::ops::Deref for PrecisionArg {
    type Target = PrecisionChoice;
    fn deref(&self) -> &PrecisionChoice {
        &self.choice
    }
}

/// `--dtype`, the dtype a model is loaded in, as every command that loads one reads it.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct DTypeArg {
    /// The dtype the model runs in.
    #[arg(id = "dtype", long = "dtype", value_name = "DTYPE", value_enum, default_value_t = DTypeChoice::F32)]
    pub choice: DTypeChoice,
}

impl std::fmt::Display for DTypeArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.choice.fmt(f)
    }
}

impl From<DTypeArg> for DType {
    fn from(arg: DTypeArg) -> DType {
        arg.choice.into()
    }
}

/// `--model`, as every command that reads a trained model takes it; it reads as the
/// `Option<PathBuf>` it holds.
#[derive(clap::Args, Debug)]
pub struct ModelArg {
    /// Model folder (config.json + model.safetensors), checkpoint file (.pt, .ckpt, .safetensors),
    /// or Hugging Face Hub id owner/name[@revision] [default: adibvafa/CodonTransformer; finetune:
    /// adibvafa/CodonTransformer-base].
    #[arg(id = "model", long = "model", value_name = "MODEL")]
    pub path: Option<std::path::PathBuf>,
}

impl std::ops::Deref for ModelArg {
    type Target = Option<std::path::PathBuf>;
    fn deref(&self) -> &Option<std::path::PathBuf> {
        &self.path
    }
}

/// `--model`, `--device` and `--dtype`: the model a command runs, where, and in what dtype.
#[derive(clap::Args, Debug)]
pub struct ModelRunArgs {
    /// The model.
    #[command(flatten)]
    pub model: ModelArg,
    /// Where it runs.
    #[command(flatten)]
    pub device: DeviceArg,
    /// In what dtype.
    #[command(flatten)]
    pub dtype: DTypeArg,
}

/// `--config`, a transformers config.json, as every command that builds a model from one reads
/// it; it reads as the `Option<PathBuf>` it holds.
#[derive(clap::Args, Debug)]
pub struct ConfigArg {
    /// A transformers config.json: the model's size for a random initialisation, or a checkpoint
    /// file's model when it is not CodonTransformer's size [default: CodonTransformer's].
    #[arg(id = "config", long = "config", value_name = "PATH")]
    pub path: Option<std::path::PathBuf>,
}

impl std::ops::Deref for ConfigArg {
    type Target = Option<std::path::PathBuf>;
    fn deref(&self) -> &Option<std::path::PathBuf> {
        &self.path
    }
}

/// `--attention`, the attention a model runs, as every command that builds or runs one reads it.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct AttentionArg {
    /// The attention the model runs.
    #[arg(id = "attention", long = "attention", value_enum, default_value_t = AttentionChoice::BlockSparse)]
    pub choice: AttentionChoice,
}

impl From<AttentionArg> for AttentionType {
    fn from(arg: AttentionArg) -> AttentionType {
        arg.choice.into()
    }
}

impl std::fmt::Display for AttentionArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.choice.fmt(f)
    }
}

/// `--seed`, the seed of every random choice a command makes (shuffling, masking, dropout,
/// sampling, initialisation), as every such command reads it. `DEFAULT` is the command's
/// default: 123 where upstream's scripts use it (training, collation), else 0.
///
/// A const-generic default is given as `default_value = N.to_string()`, never
/// `default_value_t = N`: clap's derive caches that string in a `static`, which every
/// instantiation of a generic shares, so each command would get the first one's default.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct SeedArg<const DEFAULT: u64> {
    /// Seed of every random choice the command makes (shuffling, masking, dropout, sampling,
    /// initialisation): the same seed gives the same result.
    #[arg(id = "seed", long = "seed", value_name = "N", default_value = DEFAULT.to_string())]
    pub value: u64,
}

/// `--input`, the file a command reads, as every such command reads it; the command's
/// description says its format. A command whose input is optional flattens an
/// `Option<InputArg<false>>`.
#[derive(clap::Args, Debug)]
pub struct InputArg<const REQUIRED: bool = true> {
    /// The file the command reads (its description says the format).
    #[arg(id = "input", long = "input", value_name = "PATH", required = REQUIRED)]
    pub path: std::path::PathBuf,
}

/// `--organism`, the organism (name or id) of the inputs that name none, as every command that
/// reads organism-tagged records takes it.
#[derive(clap::Args, Debug)]
pub struct OrganismArg {
    /// Organism name or id of the inputs that name none: --protein, a FASTA entry without an
    /// [organism=NAME] tag, a record without an organism.
    #[arg(id = "organism", long = "organism", value_name = "ORGANISM")]
    pub name: Option<String>,
}

/// `--allow-failures`, as every command that goes on past a failed row reads it: the failed
/// rows are written with their errors either way, and this decides the exit status.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct AllowFailuresArg {
    /// Exit 0 even when some rows fail (their errors are in the output).
    #[arg(id = "allow_failures", long = "allow-failures", alias = "allow_failures")]
    pub allowed: bool,
}

/// `--overwrite`, as every command that writes into an output folder reads it: without it, a
/// folder that holds another run's files is refused.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct OverwriteArg {
    /// Replace what another run left in the output folder (the command's description says
    /// what); never one of this run's inputs. Without it such a folder is refused.
    #[arg(id = "overwrite", long = "overwrite")]
    pub allowed: bool,
}

/// `--batch_size` and `--num_workers`, upstream's data-loader flags, as every command that
/// batches records reads them; `WORKERS` is the command's default worker count.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct LoaderArgs<const WORKERS: usize> {
    /// Records per batch.
    #[arg(id = "batch_size", long = "batch_size", alias = "batch-size", value_name = "N", default_value_t = 6,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub batch_size: usize,
    /// Data-loader worker threads (the batches do not depend on it).
    #[arg(id = "num_workers", long = "num_workers", alias = "num-workers", alias = "workers", value_name = "N",
          default_value = WORKERS.to_string())]
    pub num_workers: usize,
}

/// `--max_epochs`, as every command that trains reads it; the command's description gives its
/// default.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct MaxEpochsArg {
    /// Epochs to train (the command's description gives the default).
    #[arg(id = "max_epochs", long = "max_epochs", alias = "max-epochs", alias = "epochs", value_name = "N")]
    pub value: Option<usize>,
}

/// `--gradient_checkpointing`, as every command that trains reads it.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct GradientCheckpointingArg {
    /// Recompute each encoder layer's activations in the backward pass (transformers' gradient
    /// checkpointing): a fraction of the device memory for about a third more compute.
    #[arg(id = "gradient_checkpointing", long = "gradient_checkpointing", alias = "gradient-checkpointing")]
    pub enabled: bool,
}

/// `--batch-tokens`, the most tokens a prediction's forward pass holds, as every command that
/// predicts in batches reads it.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct BatchTokensArg {
    /// Most tokens per forward pass of a batch (rows × padded length); proteins of similar
    /// length share a pass. Larger batches need more memory.
    #[arg(id = "batch_tokens", long = "batch-tokens", alias = "batch_tokens", value_name = "N",
          default_value_t = codon_model::PredictOptions::default().max_batch_tokens,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub value: usize,
}

/// `--input` and `--output` of a command that turns one file into another.
#[derive(clap::Args, Debug)]
pub struct FileArgs {
    /// The file read.
    #[command(flatten)]
    pub input: InputArg,
    /// The file written.
    #[command(flatten)]
    pub output: OutputArg,
}

/// `--output`, the file or folder a command writes, as every such command reads it; the
/// command's description says what it holds. A command whose output is optional flattens an
/// `Option<OutputArg<false>>`.
#[derive(clap::Args, Debug)]
pub struct OutputArg<const REQUIRED: bool = true> {
    /// Where the command writes its result (its description says the format), written
    /// atomically; `-` is standard output where the format is text.
    #[arg(id = "output", long = "output", value_name = "PATH", required = REQUIRED)]
    pub path: std::path::PathBuf,
}

impl<const REQUIRED: bool> std::ops::Deref for OutputArg<REQUIRED> {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.path
    }
}

/// A `--dtype` value: the dtype a model is loaded in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DTypeChoice {
    /// 32-bit float.
    #[value(alias = "float32")]
    F32,
    /// bfloat16 (not on an Ascend 910A).
    #[value(alias = "bfloat16")]
    Bf16,
    /// IEEE half.
    #[value(alias = "float16")]
    F16,
}

impl From<DTypeChoice> for DType {
    fn from(choice: DTypeChoice) -> DType {
        match choice {
            DTypeChoice::F32 => DType::F32,
            DTypeChoice::Bf16 => DType::BF16,
            DTypeChoice::F16 => DType::F16,
        }
    }
}

/// A `--precision` value, with Lightning's spellings as aliases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PrecisionChoice {
    /// bf16 where the device has BF16, f16 on an Ascend 910A, f32 on the CPU.
    Auto,
    /// bf16 compute, f32 master weights.
    #[value(alias = "bf16-mixed")]
    Bf16,
    /// f16 compute with dynamic loss scaling, f32 master weights.
    #[value(alias = "16-mixed", alias = "16", alias = "fp16")]
    F16,
    /// f32 throughout.
    #[value(alias = "32-true", alias = "32", alias = "fp32")]
    F32,
}

impl PrecisionChoice {
    /// The precision this choice means on `device`.
    pub fn resolve(self, device: &Device) -> Precision {
        match self {
            PrecisionChoice::Auto => Precision::auto(device),
            PrecisionChoice::Bf16 => Precision::Bf16,
            PrecisionChoice::F16 => Precision::F16,
            PrecisionChoice::F32 => Precision::F32,
        }
    }
}

/// An `--attention` value, with transformers' names as aliases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AttentionChoice {
    /// BigBird's block-sparse attention (linear in the length).
    #[value(alias = "block_sparse", alias = "sparse")]
    BlockSparse,
    /// Full attention over every key.
    #[value(alias = "original_full")]
    Full,
}

impl From<AttentionChoice> for AttentionType {
    fn from(choice: AttentionChoice) -> AttentionType {
        match choice {
            AttentionChoice::BlockSparse => AttentionType::BlockSparse,
            AttentionChoice::Full => AttentionType::OriginalFull,
        }
    }
}

/// `Display` for clap value enums: each choice prints as it is spelled on the command line
/// (`high-frequency`, not `HighFrequency`).
#[macro_export]
macro_rules! display_as_spelled {
    ($($choice:ty),*) => {$(
        impl ::std::fmt::Display for $choice {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                let value = ::clap::ValueEnum::to_possible_value(self);
                f.write_str(value.as_ref().map_or("?", |v| v.get_name()))
            }
        }
    )*};
}

crate::display_as_spelled!(DTypeChoice, PrecisionChoice, AttentionChoice);

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// The shared flags as a command flattens them.
    #[derive(Debug, Parser)]
    struct Args {
        #[command(flatten)]
        device: DeviceArg,
        #[command(flatten)]
        dtype: DTypeArg,
        #[command(flatten)]
        precision: PrecisionArg,
        #[command(flatten)]
        attention: AttentionArg,
    }

    #[test]
    fn values_parse_with_their_aliases_and_typos_are_refused_with_a_suggestion() {
        let a = Args::try_parse_from(["p", "--device", "npu-sim:3", "--dtype", "bfloat16", "--precision", "16-mixed"])
            .unwrap();
        assert_eq!(a.device.spec, DeviceSpec::Ascend { kind: candle_ascend::ToolkitKind::Emulated, id: 3 });
        assert_eq!(a.device.to_string(), "npu-sim:3");
        assert_eq!(DType::from(a.dtype), DType::BF16);
        assert_eq!(a.precision.resolve(&Device::Cpu), Precision::F16);
        assert_eq!(AttentionType::from(a.attention), AttentionType::BlockSparse);
        let a = Args::try_parse_from(["p", "--attention", "original_full"]).unwrap();
        assert_eq!(AttentionType::from(a.attention), AttentionType::OriginalFull);
        assert_eq!((a.attention.to_string(), a.precision.to_string()), ("full".into(), "auto".into()));
        assert_eq!(a.precision.resolve(&Device::Cpu), Precision::F32, "auto is f32 on the CPU");
        let err = Args::try_parse_from(["p", "--precision", "bf17"]).unwrap_err().to_string();
        assert!(err.contains("possible values: auto, bf16, f16, f32"), "{err}");
        let err = Args::try_parse_from(["p", "--attention", "ful"]).unwrap_err().to_string();
        assert!(err.contains("a similar value exists: 'full'"), "{err}");
        let err = Args::try_parse_from(["p", "--device", "gpu:0"]).unwrap_err().to_string();
        assert!(err.contains("expected cpu, npu:N, npu-sim:N or cuda:N"), "{err}");
        let err = Args::try_parse_from(["p", "--dtype", "f8"]).unwrap_err();
        let line = one_line(&err.render().to_string());
        assert!(!line.contains('\n') && line.starts_with("error: invalid value 'f8' for '--dtype"), "{line}");
        assert!(line.contains("[possible values: f32, bf16, f16]"), "{line}");
    }
}
