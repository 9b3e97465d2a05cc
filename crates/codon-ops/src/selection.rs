//! How the body of a fused op is chosen: each op declares its [`Row`] (what it has on the CPU,
//! on a CUDA GPU, and the aclnn operators of its Ascend body) beside its bodies, and asks
//! [`Row::select`] which one runs; [`decide`] is the one place that decides. The table of every
//! row is the `support` module.
#[cfg(feature = "ascend")]
use candle_ascend::soc::AclnnOp;
use candle_core::{DType, Device};

/// A fused op, as the table names it (forward and backward together, unless the name says
/// otherwise).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FusedOp {
    /// Softmax over the last dimension and its gradient.
    Softmax,
    /// Softmax's gradient alone, given the softmax output.
    SoftmaxGrad,
    /// GELU (tanh form) and its gradient.
    Gelu,
    /// LayerNorm and its gradient.
    LayerNorm,
    /// The residual add fused with the LayerNorm that follows it.
    AddLayerNorm,
    /// The linear layer and its gradients, with the bias epilogues that follow its product.
    Linear,
    /// A linear layer's input gradient added into an accumulator in the product's own launch.
    LinearGradAccumulate,
    /// Log-softmax with NLL loss, and their gradients.
    CrossEntropy,
    /// The embedding lookup and its gradient.
    Embedding,
    /// Dropout by generated mask, and its gradient.
    Dropout,
    /// Attention in one body (flash attention: scores never in memory).
    Attention,
    /// BigBird's gather of key and value blocks by the block table, and its scatter back.
    BlockGather,
    /// The AdamW update in place.
    AdamW,
    /// Σ g² of a gradient, behind the global gradient norm.
    SumOfSquares,
    /// Whether every value of a tensor is finite.
    AllFinite,
    /// A cast written straight into a destination buffer.
    Cast,
}

impl FusedOp {
    /// Every op, in declaration order.
    pub const ALL: [FusedOp; 16] = [
        Self::Softmax,
        Self::SoftmaxGrad,
        Self::Gelu,
        Self::LayerNorm,
        Self::AddLayerNorm,
        Self::Linear,
        Self::LinearGradAccumulate,
        Self::CrossEntropy,
        Self::Embedding,
        Self::Dropout,
        Self::Attention,
        Self::BlockGather,
        Self::AdamW,
        Self::SumOfSquares,
        Self::AllFinite,
        Self::Cast,
    ];

    /// The op's name in tables and reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Softmax => "softmax",
            Self::SoftmaxGrad => "softmax_grad",
            Self::Gelu => "gelu",
            Self::LayerNorm => "layer_norm",
            Self::AddLayerNorm => "add_layer_norm",
            Self::Linear => "linear",
            Self::LinearGradAccumulate => "linear_grad_accumulate",
            Self::CrossEntropy => "cross_entropy",
            Self::Embedding => "embedding",
            Self::Dropout => "dropout",
            Self::Attention => "attention",
            Self::BlockGather => "block_gather",
            Self::AdamW => "adamw",
            Self::SumOfSquares => "sum_of_squares",
            Self::AllFinite => "all_finite",
            Self::Cast => "cast",
        }
    }
}

/// One op's row: what it has on each kind of device.
pub(crate) struct Row {
    /// The op.
    pub op: FusedOp,
    /// The CPU column.
    pub cpu: OnCpu,
    /// The CUDA column.
    pub cuda: OnCuda,
    /// The aclnn operators the Ascend body launches (none: no Ascend body); the part must run
    /// each of them in the op's dtype.
    #[cfg(feature = "ascend")]
    pub ascend: &'static [AclnnOp],
}

/// An op's CPU column.
pub(crate) enum OnCpu {
    /// The op's CPU kernel, in every dtype (it computes in f32).
    Kernel,
    /// No CPU body.
    Composed,
}

/// An op's CUDA column.
pub(crate) enum OnCuda {
    /// This crate's kernels (`kernels/codon_ops.cu`), in the dtypes they take (f32, bf16, f16).
    Kernels,
    /// A kernel in every dtype.
    AnyDtype,
    /// A kernel in f32 only.
    F32,
    /// A body that has not yet run on a GPU, taken in the kernels' dtypes only when the
    /// environment variable `var` is `value`.
    OptIn {
        /// The variable.
        var: &'static str,
        /// The value that turns the body on.
        value: &'static str,
        /// Whether it is on in this process (read once).
        on: fn() -> bool,
    },
    /// No CUDA body.
    Composed,
}

/// Which body runs an op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Body {
    /// The op's CPU kernel.
    Cpu,
    /// The op's CUDA body: this crate's kernels (with cuBLAS where the op has a product).
    Cuda,
    /// The op's Ascend body: the aclnn fused operators.
    Ascend,
    /// The op's composed reference, from candle's tensor ops.
    Composed,
    /// Nothing: the device has no such dtype.
    Refused,
}

impl Body {
    /// The answer's name in tables and reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            Self::Cuda => "cuda",
            Self::Ascend => "ascend",
            Self::Composed => "composed",
            Self::Refused => "refused",
        }
    }

    /// Whether this is the op's own body for its device (not the composed reference).
    pub fn is_native(self) -> bool {
        matches!(self, Self::Cpu | Self::Cuda | Self::Ascend)
    }
}

/// Why [`choose`] answered as it did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The op has a CPU kernel.
    CpuKernel,
    /// The op has no body for this kind of device.
    NoBody,
    /// This crate's CUDA kernels take the dtype.
    CudaKernels,
    /// The op's CUDA kernels do not take this dtype.
    CudaDtype(DType),
    /// The CUDA body is turned on by `var`=`value`.
    OptedIn(&'static str, &'static str),
    /// The CUDA body waits behind `var`=`value`, which is not set.
    NotOptedIn(&'static str, &'static str),
    /// The part runs every operator of the Ascend body in the dtype.
    #[cfg(feature = "ascend")]
    PartRuns(&'static [AclnnOp]),
    /// The part lacks this operator in the dtype.
    #[cfg(feature = "ascend")]
    PartLacks(AclnnOp, DType),
    /// The part has no bf16 (the Atlas training series).
    NoBf16,
    /// Built without the `ascend` feature: no Ascend bodies.
    NoAscendFeature,
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::CpuKernel => f.write_str("its CPU kernel (computes in f32)"),
            Self::NoBody => f.write_str("no body of its own here: composed from candle's tensor ops"),
            Self::CudaKernels => f.write_str("this crate's CUDA kernels"),
            Self::CudaDtype(d) => write!(f, "its CUDA kernels do not take {}", d.as_str()),
            Self::OptedIn(var, value) => write!(f, "its CUDA body, turned on by {var}={value}"),
            Self::NotOptedIn(var, value) => {
                write!(f, "its CUDA body has not run on a GPU yet: composed unless {var}={value}")
            }
            #[cfg(feature = "ascend")]
            Self::PartRuns(ops) => {
                let names: Vec<String> = ops.iter().map(ToString::to_string).collect();
                write!(f, "the part runs {}", names.join(", "))
            }
            #[cfg(feature = "ascend")]
            Self::PartLacks(op, d) => write!(f, "the part has no {op} in {}: composed", d.as_str()),
            Self::NoBf16 => f.write_str("the part has no BF16 (the Atlas training series): use f16 or f32"),
            Self::NoAscendFeature => f.write_str("built without the `ascend` feature: composed"),
        }
    }
}

/// [`choose`]'s answer: the body, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Choice {
    /// The body that runs.
    pub body: Body,
    /// Why.
    pub reason: Reason,
}

/// The kinds of device the table has a column for.
#[derive(Clone, Copy)]
pub(crate) enum Target<'a> {
    Cpu,
    Cuda,
    /// An Ascend part (or its emulator), or any other custom device.
    Other(&'a Device),
}

impl<'a> Target<'a> {
    pub(crate) fn of(device: &'a Device) -> Self {
        match device {
            Device::Cpu => Self::Cpu,
            Device::Cuda(_) => Self::Cuda,
            _ => Self::Other(device),
        }
    }
}

impl Row {
    /// Which body this row's op runs on `device` in `dtype`, and why.
    pub(crate) fn choose(&self, device: &Device, dtype: DType) -> Choice {
        decide(self, Target::of(device), dtype)
    }

    /// The body this row's op runs on `device` in `dtype` (never [`Body::Refused`]: a refusal is
    /// an error that says why).
    pub(crate) fn select(&self, device: &Device, dtype: DType) -> candle_core::Result<Body> {
        let choice = self.choose(device, dtype);
        if choice.body == Body::Refused {
            candle_core::bail!(
                "{} in {} is refused on {}{}: {}",
                self.op.name(),
                dtype.as_str(),
                device.location(),
                part_name(device).map(|n| format!(" ({n})")).unwrap_or_default(),
                choice.reason
            )
        }
        Ok(choice.body)
    }
}

/// The SoC name of an Ascend device, for messages.
fn part_name(device: &Device) -> Option<String> {
    #[cfg(feature = "ascend")]
    if let Some(part) = candle_ascend::ascend_device(device) {
        return Some(part.soc().name.clone());
    }
    let _ = device;
    None
}

/// The one decision: which body `row`'s op runs on `target` in `dtype`, and why.
pub(crate) fn decide(row: &Row, target: Target, dtype: DType) -> Choice {
    let choice = |body, reason| Choice { body, reason };
    let kernels_take = matches!(dtype, DType::F32 | DType::BF16 | DType::F16);
    match target {
        Target::Cpu => match row.cpu {
            OnCpu::Kernel => choice(Body::Cpu, Reason::CpuKernel),
            OnCpu::Composed => choice(Body::Composed, Reason::NoBody),
        },
        Target::Cuda => match row.cuda {
            OnCuda::Kernels if kernels_take => choice(Body::Cuda, Reason::CudaKernels),
            OnCuda::AnyDtype => choice(Body::Cuda, Reason::CudaKernels),
            OnCuda::F32 if dtype == DType::F32 => choice(Body::Cuda, Reason::CudaKernels),
            OnCuda::Kernels | OnCuda::F32 => choice(Body::Composed, Reason::CudaDtype(dtype)),
            OnCuda::OptIn { var, value, on } => match (on(), kernels_take) {
                (true, true) => choice(Body::Cuda, Reason::OptedIn(var, value)),
                (true, false) => choice(Body::Composed, Reason::CudaDtype(dtype)),
                (false, _) => choice(Body::Composed, Reason::NotOptedIn(var, value)),
            },
            OnCuda::Composed => choice(Body::Composed, Reason::NoBody),
        },
        Target::Other(device) => ascend(row, device, dtype),
    }
}

/// An Ascend part (or its emulator): its body where the part's table runs every operator of it
/// in `dtype`; refused in a dtype the part lacks (BF16 on the Atlas training series); composed
/// elsewhere, and on every other device.
#[cfg(feature = "ascend")]
fn ascend(row: &Row, device: &Device, dtype: DType) -> Choice {
    let Some(part) = candle_ascend::ascend_device(device) else {
        return Choice { body: Body::Composed, reason: Reason::NoBody };
    };
    if dtype == DType::BF16 && !part.soc().has_bf16() {
        return Choice { body: Body::Refused, reason: Reason::NoBf16 };
    }
    if row.ascend.is_empty() {
        return Choice { body: Body::Composed, reason: Reason::NoBody };
    }
    match row.ascend.iter().find(|&&op| !candle_ascend::fused::aclnn_runs(op, device, dtype)) {
        Some(&lacking) => Choice { body: Body::Composed, reason: Reason::PartLacks(lacking, dtype) },
        None => Choice { body: Body::Ascend, reason: Reason::PartRuns(row.ascend) },
    }
}

#[cfg(not(feature = "ascend"))]
fn ascend(_: &Row, _: &Device, _: DType) -> Choice {
    Choice { body: Body::Composed, reason: Reason::NoAscendFeature }
}
