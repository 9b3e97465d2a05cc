//! The command-line vocabulary the programs share: typed values for `--device`, `--dtype`,
//! `--precision` and `--attention`. clap parses them when it reads the command line, so `--help`
//! lists the choices and a typo is refused there with a suggestion; a device is opened (and a
//! precision resolved against it) afterwards, where a failure is an ordinary error.

use candle_core::{DType, Device};
use codon_model::bigbird::AttentionType;
use codon_train::Precision;

/// Parse the command line into `A`. `--help` and `--version` print as usual; a usage error is one
/// line on stderr (clap's message and suggestions, without the usage block) and exit status 2.
pub fn parse_args<A: clap::Parser>() -> A {
    match A::try_parse() {
        Ok(args) => args,
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            crate::errln!("{}", one_line(&e.render().to_string()));
            std::process::exit(2);
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

/// `--device`, as every command that runs a model reads it (`#[command(flatten)]`); it reads as
/// the [`DeviceSpec`] it holds.
#[derive(clap::Args, Debug)]
pub struct DeviceArg {
    /// cpu, npu:N, npu-sim:N or cuda:N (builds with the `cuda` feature).
    #[arg(long = "device", default_value = "cpu")]
    pub spec: DeviceSpec,
}

impl std::ops::Deref for DeviceArg {
    type Target = DeviceSpec;
    fn deref(&self) -> &DeviceSpec {
        &self.spec
    }
}

impl std::fmt::Display for DeviceArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.spec.fmt(f)
    }
}

/// `--dtype`, the dtype a model is loaded in, as every command that loads one reads it.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct DTypeArg {
    /// The dtype the model runs in.
    #[arg(long = "dtype", value_enum, default_value_t = DTypeChoice::F32)]
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
    /// or Hugging Face Hub id owner/name[@revision] [default: adibvafa/CodonTransformer].
    #[arg(long = "model")]
    pub path: Option<std::path::PathBuf>,
}

impl std::ops::Deref for ModelArg {
    type Target = Option<std::path::PathBuf>;
    fn deref(&self) -> &Option<std::path::PathBuf> {
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

    #[derive(Debug, Parser)]
    struct Args {
        #[arg(long, default_value = "cpu")]
        device: DeviceSpec,
        #[arg(long, default_value = "f32")]
        dtype: DTypeChoice,
        #[arg(long, default_value = "auto")]
        precision: PrecisionChoice,
        #[arg(long, default_value = "block-sparse")]
        attention: AttentionChoice,
    }

    #[test]
    fn values_parse_with_their_aliases_and_typos_are_refused_with_a_suggestion() {
        let a = Args::try_parse_from(["p", "--device", "npu-sim:3", "--dtype", "bfloat16", "--precision", "16-mixed"])
            .unwrap();
        assert_eq!(a.device, DeviceSpec::Ascend { kind: candle_ascend::ToolkitKind::Emulated, id: 3 });
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
