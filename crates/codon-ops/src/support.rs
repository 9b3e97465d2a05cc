//! Which body runs each fused op, on each device, in each dtype: one table. [`body`] answers
//! native (the op's own body for that device: a CPU kernel, this crate's CUDA kernel, the
//! Ascend fused operators), composed (the op's reference, from candle's tensor ops) or refused
//! (the device has no such dtype). Every op asks here before taking a native body; what remains
//! in the op is whether its operands fit that body (shapes, the dtypes of its other operands).
//!
//! The Ascend answers come from the part's support table (`candle_ascend::soc`, every operator a
//! body launches must run in the dtype); without the `ascend` feature no device has an Ascend
//! body, and the ops take their composed references there.
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
    /// The linear layer and its gradients.
    Linear,
    /// A linear layer's input gradient added into an accumulator in the product's own launch.
    LinearGradAccumulate,
    /// Log-softmax with NLL loss, and their gradients.
    CrossEntropy,
    /// The embedding lookup and its gradient.
    Embedding,
    /// Dropout by generated mask, and its gradient.
    Dropout,
    /// Attention in one body (on Ascend parts flash attention: scores never in memory).
    Attention,
    /// The AdamW update in place.
    AdamW,
    /// A cast written straight into a destination buffer.
    Cast,
}

impl FusedOp {
    /// Every op, in declaration order.
    pub const ALL: [FusedOp; 13] = [
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
        Self::AdamW,
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
            Self::AdamW => "adamw",
            Self::Cast => "cast",
        }
    }
}

/// Which body runs an op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Body {
    /// The op's own body for the device.
    Native,
    /// The op's composed reference, from candle's tensor ops.
    Composed,
    /// Nothing: the device has no such dtype.
    Refused,
}

impl Body {
    /// The answer's name in tables and reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Native => "native",
            Self::Composed => "composed",
            Self::Refused => "refused",
        }
    }
}

/// Which body runs `op` on `device` in `dtype`.
pub fn body(op: FusedOp, device: &Device, dtype: DType) -> Body {
    match device {
        Device::Cpu => cpu_body(op),
        Device::Cuda(_) => cuda_body(op, dtype),
        _ => ascend_body(op, device, dtype),
    }
}

/// Whether `op` runs its own body (not the composed reference) on `device` in `dtype`.
pub fn runs_natively(op: FusedOp, device: &Device, dtype: DType) -> bool {
    body(op, device, dtype) == Body::Native
}

/// The CPU: the ops' kernels, whatever the dtype (they compute in f32); the rest composed.
fn cpu_body(op: FusedOp) -> Body {
    use FusedOp as F;
    match op {
        F::Softmax
        | F::SoftmaxGrad
        | F::Gelu
        | F::LayerNorm
        | F::Linear
        | F::CrossEntropy
        | F::Embedding
        | F::Attention
        | F::AdamW => Body::Native,
        F::AddLayerNorm | F::LinearGradAccumulate | F::Dropout | F::Cast => Body::Composed,
    }
}

/// Whether this crate's CUDA kernels (`kernels/codon_ops.cu`) take `dtype`.
pub fn cuda_kernels_take(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::BF16 | DType::F16)
}

/// A CUDA GPU: this crate's kernels in the dtypes they take, the embedding's in every dtype,
/// AdamW's in f32; the rest composed (attention: cuBLAS products around the fused softmax; the
/// flash body, not yet run on a GPU, only under `CODON_CUDA_ATTENTION=fused`).
fn cuda_body(op: FusedOp, dtype: DType) -> Body {
    use FusedOp as F;
    let kernels_take = cuda_kernels_take(dtype);
    let native = match op {
        F::Embedding => true,
        F::AdamW => dtype == DType::F32,
        F::Softmax | F::SoftmaxGrad | F::Gelu | F::LayerNorm | F::Linear | F::Dropout => kernels_take,
        F::AddLayerNorm | F::LinearGradAccumulate | F::CrossEntropy | F::Attention | F::Cast => false,
    };
    if native {
        Body::Native
    } else {
        Body::Composed
    }
}

/// An Ascend part (or its emulator): native where the part's table runs every operator of the
/// op's body in `dtype`; refused in a dtype the part lacks (BF16 on the Atlas training series);
/// composed elsewhere, and on every other device.
fn ascend_body(op: FusedOp, device: &Device, dtype: DType) -> Body {
    #[cfg(feature = "ascend")]
    if let Some(part) = candle_ascend::ascend_device(device) {
        if dtype == DType::BF16 && !part.soc().has_bf16() {
            return Body::Refused;
        }
        if ascend::operators(op).iter().all(|&aclnn| candle_ascend::fused::aclnn_runs(aclnn, device, dtype)) {
            return Body::Native;
        }
    }
    let _ = (op, device, dtype);
    Body::Composed
}

/// The aclnn operators behind each op's Ascend body, as `candle_ascend::soc` names them.
#[cfg(feature = "ascend")]
pub mod ascend {
    use super::FusedOp;
    use candle_ascend::soc::AclnnOp;

    /// The operators `op`'s Ascend body launches; the part must run each of them in the op's dtype.
    pub fn operators(op: FusedOp) -> &'static [AclnnOp] {
        use AclnnOp as A;
        match op {
            FusedOp::Softmax => &[A::Softmax, A::SoftmaxBackward],
            FusedOp::SoftmaxGrad => &[A::SoftmaxBackward],
            FusedOp::Gelu => &[A::GeluV2, A::GeluBackwardV2],
            FusedOp::LayerNorm => &[A::LayerNorm, A::LayerNormBackward],
            FusedOp::AddLayerNorm => &[A::AddLayerNorm],
            FusedOp::Linear => &[A::Addmm, A::BatchMatMul, A::ReduceSum],
            FusedOp::LinearGradAccumulate => &[A::Addmm],
            FusedOp::CrossEntropy => &[A::LogSoftmax, A::NLLLoss, A::NLLLossBackward, A::LogSoftmaxBackward],
            FusedOp::Embedding => &[A::Embedding, A::EmbeddingDenseBackward],
            FusedOp::Dropout => &[A::DropoutGenMaskV2, A::DropoutDoMask],
            FusedOp::Attention => &[A::FlashAttentionScore, A::FlashAttentionScoreGrad],
            FusedOp::AdamW => &[A::ApplyAdamWV2],
            FusedOp::Cast => &[A::Cast],
        }
    }
}

/// The table for `devices` (name and device) in `dtypes`: a row per op, a column per device and
/// dtype, for `codon npu env` and the self-test.
pub fn table(devices: &[(&str, &Device)], dtypes: &[DType]) -> String {
    let mut header = vec!["op".to_string()];
    for (name, _) in devices {
        header.extend(dtypes.iter().map(|d| format!("{name} {}", d.as_str())));
    }
    let mut rows = vec![header];
    for op in FusedOp::ALL {
        let mut row = vec![op.name().to_string()];
        for (_, device) in devices {
            row.extend(dtypes.iter().map(|&d| body(op, device, d).name().to_string()));
        }
        rows.push(row);
    }
    let widths: Vec<usize> = (0..rows[0].len()).map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0)).collect();
    rows.iter()
        .map(|r| {
            let cells: Vec<String> = r.iter().zip(&widths).map(|(cell, w)| format!("{cell:<w$}")).collect();
            cells.join("  ").trim_end().to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// What a backend launch keeps for a later launch (row statistics, a dropout mask), opaque to
/// the ops that hold it: only the backend's launches make and read one, so without the
/// `ascend` feature none exists.
#[derive(Clone)]
pub(crate) struct LaunchState(std::sync::Arc<dyn std::any::Any + Send + Sync>);

impl LaunchState {
    /// Keep `state`.
    #[cfg(feature = "ascend")]
    pub(crate) fn new<T: Send + Sync + 'static>(state: T) -> Self {
        Self(std::sync::Arc::new(state))
    }

    /// The kept state as the `T` its launch made; `op` names the op in the error.
    #[cfg(feature = "ascend")]
    pub(crate) fn get<T: 'static>(&self, op: &str) -> candle_core::Result<&T> {
        self.0
            .downcast_ref()
            .ok_or_else(|| candle_core::Error::msg(format!("{op}: the kept state is another launch's")))
    }

    /// The kept state itself, when nothing else holds it.
    #[cfg(feature = "ascend")]
    pub(crate) fn into_inner<T: Send + Sync + 'static>(self, op: &str) -> candle_core::Result<T> {
        let kept = self
            .0
            .downcast::<T>()
            .map_err(|_| candle_core::Error::msg(format!("{op}: the kept state is another launch's")))?;
        std::sync::Arc::try_unwrap(kept).map_err(|_| candle_core::Error::msg(format!("{op}: the kept state is shared")))
    }
}

/// A backend launch on the storages of `inputs`, outside the graph: the backward step of an op
/// whose forward launch kept [`LaunchState`] (so no CPU body can exist for it), returned as a
/// tensor that tracks nothing. Every input must live on the Ascend device.
#[cfg(feature = "ascend")]
pub(crate) fn ascend_launch<const N: usize>(
    op: &str,
    inputs: [&candle_core::Tensor; N],
    launch: impl FnOnce(
        [(&dyn candle_core::custom_backend::DynBackendStorage, &candle_core::Layout); N],
    ) -> candle_core::Result<(candle_core::custom_backend::BoxStorage, candle_core::Shape)>,
) -> candle_core::Result<candle_core::Tensor> {
    use candle_core::Storage;
    let held = inputs.map(|t| t.storage_and_layout());
    let mut operands = Vec::with_capacity(N);
    for (storage, layout) in &held {
        let Storage::Custom(storage) = &**storage else {
            candle_core::bail!("{op}: the backward launch takes operands on the Ascend device only")
        };
        operands.push((storage.as_ref(), *layout));
    }
    let operands: [_; N] = operands.try_into().map_err(|_| candle_core::Error::msg(format!("{op}: operands")))?;
    let (out, shape) = launch(operands)?;
    Ok(candle_core::Tensor::from_storage(Storage::Custom(out), shape, candle_core::op::BackpropOp::none(), false))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPU and CUDA columns, written out by hand from the ops' bodies: an op whose body moves
    /// changes a row here.
    #[test]
    fn the_cpu_and_cuda_rows_name_the_bodies_the_ops_have() {
        use FusedOp as F;
        let native = |op| cpu_body(op) == Body::Native;
        let cpu_native: Vec<FusedOp> = FusedOp::ALL.into_iter().filter(|&op| native(op)).collect();
        assert_eq!(
            cpu_native,
            [
                F::Softmax,
                F::SoftmaxGrad,
                F::Gelu,
                F::LayerNorm,
                F::Linear,
                F::CrossEntropy,
                F::Embedding,
                F::Attention,
                F::AdamW
            ]
        );
        let cuda = |dtype| -> Vec<FusedOp> {
            FusedOp::ALL.into_iter().filter(|&op| cuda_body(op, dtype) == Body::Native).collect()
        };
        let kernels = [F::Softmax, F::SoftmaxGrad, F::Gelu, F::LayerNorm, F::Linear, F::Embedding, F::Dropout];
        assert_eq!(cuda(DType::F32), [&kernels[..], &[F::AdamW]].concat());
        assert_eq!(cuda(DType::BF16), kernels);
        assert_eq!(cuda(DType::F16), kernels);
        assert_eq!(cuda(DType::F64), [F::Embedding]);
        assert!(FusedOp::ALL.into_iter().all(|op| body(op, &Device::Cpu, DType::BF16) != Body::Refused));
    }
}
