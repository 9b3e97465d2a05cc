//! Which fused ops an Ascend part runs natively: one table from each fused body to the aclnn
//! operators it launches, read against the part's support table (`candle_ascend::soc`). Every
//! op asks here before taking its Ascend body; without the `ascend` feature no device has one,
//! and the ops take their composed references there.
use candle_core::{DType, Device};

/// A fused op's Ascend body, named by what it computes (forward and backward together, unless
/// the name says otherwise).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AscendBody {
    /// Softmax over the last dimension and its gradient.
    Softmax,
    /// Softmax's gradient alone, given the softmax output.
    SoftmaxGrad,
    /// GELU (tanh form) and its gradient.
    Gelu,
    /// LayerNorm, keeping the row statistics, and its gradient.
    LayerNorm,
    /// The residual add fused with the LayerNorm that follows it.
    AddLayerNorm,
    /// The linear layer: one matmul-plus-bias forward, batched matmuls and a sum backward.
    Linear,
    /// A weight gradient added into an accumulator in one matmul launch.
    LinearGradAccumulate,
    /// Log-softmax with NLL loss, and their gradients.
    CrossEntropy,
    /// The embedding lookup and its dense gradient.
    Embedding,
    /// Dropout by generated mask, and the mask applied again backward.
    Dropout,
    /// Fused attention (scores never in memory) and its gradient.
    FlashAttention,
    /// The AdamW update in place.
    AdamW,
    /// A cast written straight into a destination buffer.
    Cast,
}

impl AscendBody {
    /// Every body, in declaration order.
    pub const ALL: [AscendBody; 13] = [
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
        Self::FlashAttention,
        Self::AdamW,
        Self::Cast,
    ];
}

/// Whether `device` is an Ascend part (or its emulator) whose support table has every operator
/// of `body` in `dtype`. False on every other device, and everywhere without the `ascend`
/// feature.
pub fn runs_on_ascend(body: AscendBody, device: &Device, dtype: DType) -> bool {
    #[cfg(feature = "ascend")]
    {
        ascend::operators(body).iter().all(|&op| ascend::runs(device, op, dtype))
    }
    #[cfg(not(feature = "ascend"))]
    {
        let _ = (body, device, dtype);
        false
    }
}

/// The aclnn operators behind each body, as `candle_ascend::soc` names them.
#[cfg(feature = "ascend")]
pub mod ascend {
    use super::AscendBody;
    use candle_ascend::soc::AclnnOp;
    use candle_core::{DType, Device};

    /// The operators `body` launches; the part must run each of them in the op's dtype.
    pub fn operators(body: AscendBody) -> &'static [AclnnOp] {
        use AclnnOp as A;
        match body {
            AscendBody::Softmax => &[A::Softmax, A::SoftmaxBackward],
            AscendBody::SoftmaxGrad => &[A::SoftmaxBackward],
            AscendBody::Gelu => &[A::GeluV2, A::GeluBackwardV2],
            AscendBody::LayerNorm => &[A::LayerNorm, A::LayerNormBackward],
            AscendBody::AddLayerNorm => &[A::AddLayerNorm],
            AscendBody::Linear => &[A::Addmm, A::BatchMatMul, A::ReduceSum],
            AscendBody::LinearGradAccumulate => &[A::Addmm],
            AscendBody::CrossEntropy => &[A::LogSoftmax, A::NLLLoss, A::NLLLossBackward, A::LogSoftmaxBackward],
            AscendBody::Embedding => &[A::Embedding, A::EmbeddingDenseBackward],
            AscendBody::Dropout => &[A::DropoutGenMaskV2, A::DropoutDoMask],
            AscendBody::FlashAttention => &[A::FlashAttentionScore, A::FlashAttentionScoreGrad],
            AscendBody::AdamW => &[A::ApplyAdamWV2],
            AscendBody::Cast => &[A::Cast],
        }
    }

    /// Whether `device` is an Ascend part whose table runs `op` in `dtype`.
    pub fn runs(device: &Device, op: AclnnOp, dtype: DType) -> bool {
        match (candle_ascend::ascend_device(device), candle_ascend::ops::acl_dtype(dtype)) {
            (Some(dev), Ok(acl)) => dev.soc().runs(op, acl),
            _ => false,
        }
    }
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
