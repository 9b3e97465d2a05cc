//! The Ascend body of attention: `aclnnFlashAttentionScore` and its grad (A2 only), one launch
//! each way, with no (S × S) probabilities in memory. [`flash_attention`] runs full attention
//! over the (batch, seq, hidden) projections as they are (the BSH layout: no head split or
//! merge), with the probabilities' dropout; [`flash_attention_heads`] runs (batch, heads,
//! seq, d) heads with any mask for ops that write their own backward pass.
use std::sync::Mutex;

#[cfg(feature = "ascend")]
use candle_ascend::fused;
#[cfg(feature = "ascend")]
use candle_core::custom_backend::{BoxStorage, DynBackendStorage};
use candle_core::{CpuStorage, CustomOp3, Layout, Shape, Tensor};

use crate::dropout::DropoutStream;
use crate::support::LaunchState;

/// How flash attention leaves keys out.
#[derive(Debug, Clone)]
pub enum FlashKeys {
    /// (B, 1, S1, S2) or (B, N, S1, S2) UINT8, 1 where a key is masked; or (1, N, S1, S2) for
    /// every sequence, which takes a launch per sequence.
    Mask(Tensor),
    /// (B, N, 1, S2) or (B, N, S1, S2) in q's dtype, added to q·kᵀ before the scale (a penalty
    /// divided by the scale masks a key).
    Bias(Tensor),
    /// Both: the mask leaves keys out, the bias adds to the others (the bias is added, then
    /// the mask applied).
    MaskAndBias {
        /// As [`FlashKeys::Mask`].
        mask: Tensor,
        /// As [`FlashKeys::Bias`].
        bias: Tensor,
    },
}

impl FlashKeys {
    /// The (mask, bias) operands of the launch.
    #[cfg(feature = "ascend")]
    fn operands(&self) -> (Option<&Tensor>, Option<&Tensor>) {
        match self {
            Self::Mask(m) => (Some(m), None),
            Self::Bias(b) => (None, Some(b)),
            Self::MaskAndBias { mask, bias } => (Some(mask), Some(bias)),
        }
    }
}

/// Full attention over q, k, v of shape (batch, seq, heads·d) with the additive key mask
/// `key_bias` (batch, 1, 1, seq; nonzero where a key is masked) and dropout of the
/// probabilities from `dropout`'s next draw. Runs where [`super::fused_attention_runs`].
pub fn flash_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    heads: usize,
    key_bias: &Tensor,
    dropout: Option<(&mut DropoutStream, f64)>,
) -> candle_core::Result<Tensor> {
    let (b, n, hidden) = q.dims3()?;
    if heads == 0 || hidden % heads != 0 {
        candle_core::bail!("flash_attention: hidden size {hidden} is not a multiple of {heads} heads")
    }
    let scale = 1.0 / ((hidden / heads) as f64).sqrt();
    // aclnnFlashAttentionScore has no (B, 1, 1, S) mask: the key mask is spread over the rows.
    let mask = key_bias.ne(0.0)?.broadcast_as((b, 1, n, n))?.contiguous()?;
    let dropout = match dropout {
        Some((stream, p)) if p > 0.0 => {
            let (seed, offset) = stream.next_draw();
            Some((p, seed, offset))
        }
        _ => None,
    };
    let op = FlashAttention { heads, scale, keys: FlashKeys::Mask(mask), dropout, saved: Mutex::default() };
    q.contiguous()?.apply_op3(&k.contiguous()?, &v.contiguous()?, op)
}

/// Attention over (batch, heads, seq, d) heads outside autograd, for ops with their own
/// backward pass: `softmax((q·kᵀ + bias)·scale, masked)·v` with the keys left out as `keys`
/// says (a mask (batch, 1 or heads, q seq, k seq) UINT8, 1 where masked; or a bias (batch,
/// heads, 1 or q seq, k seq) in q's dtype); the output and what [`FlashState::backward`] needs
/// besides the keys. Runs where [`super::fused_attention_runs`].
pub fn flash_attention_heads(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    keys: &FlashKeys,
    scale: f64,
) -> candle_core::Result<(Tensor, FlashState)> {
    let heads = q.dims4()?.1;
    detached(q, k, v, heads, keys, scale)
}

/// [`flash_attention_heads`] over (batch, seq, heads·d) projections as they are (the BSH
/// layout: no head split or merge); the mask or bias is (batch, heads, …) as there.
pub fn flash_attention_packed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    heads: usize,
    keys: &FlashKeys,
    scale: f64,
) -> candle_core::Result<(Tensor, FlashState)> {
    let hidden = q.dims3()?.2;
    if heads == 0 || hidden % heads != 0 {
        candle_core::bail!("flash_attention_packed: hidden size {hidden} is not a multiple of {heads} heads")
    }
    detached(q, k, v, heads, keys, scale)
}

/// One flash attention launch outside autograd, over (batch, seq, heads·d) or (batch, heads,
/// seq, d) operands (the query's rank says which): the output and the backward pass's state.
fn detached(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    heads: usize,
    keys: &FlashKeys,
    scale: f64,
) -> candle_core::Result<(Tensor, FlashState)> {
    let op = FlashAttention { heads, scale, keys: keys.clone(), dropout: None, saved: Mutex::default() };
    let out = q.contiguous()?.apply_op3_no_bwd(&k.contiguous()?, &v.contiguous()?, &op)?;
    let state = op.state()?;
    Ok((out, state))
}

/// The Ascend attention op; it keeps the forward's statistics for its backward pass.
struct FlashAttention {
    /// Heads of (batch, seq, heads·d) operands; (batch, heads, seq, d) operands carry theirs.
    heads: usize,
    scale: f64,
    /// Which keys are left out.
    keys: FlashKeys,
    /// (p, seed, offset) of the probabilities' dropout.
    dropout: Option<(f64, u64, u64)>,
    saved: Mutex<Option<LaunchState>>,
}

impl FlashAttention {
    /// What the forward pass left for the backward pass (once).
    fn state(&self) -> candle_core::Result<FlashState> {
        let saved = self.saved.lock().unwrap_or_else(|p| p.into_inner()).take();
        let saved =
            saved.ok_or_else(|| candle_core::Error::msg("flash_attention: backward pass without its forward"))?;
        let keep = self.dropout.map_or(1.0, |(p, _, _)| 1.0 - p);
        Ok(FlashState { saved, scale: self.scale, keep })
    }
}

impl CustomOp3 for FlashAttention {
    fn name(&self) -> &'static str {
        "flash_attention"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        candle_core::bail!("flash_attention is the accelerator body; the CPU has its own attention kernels")
    }

    #[allow(clippy::too_many_arguments)]
    #[cfg(feature = "ascend")]
    fn custom_fwd(
        &self,
        s1: &dyn DynBackendStorage,
        l1: &Layout,
        s2: &dyn DynBackendStorage,
        l2: &Layout,
        s3: &dyn DynBackendStorage,
        l3: &Layout,
    ) -> candle_core::Result<(BoxStorage, Shape)> {
        let (out, saved) =
            fused::flash_attention(s1, l1, s2, l2, s3, l3, self.keys.operands(), self.heads, self.scale, self.dropout)?;
        *self.saved.lock().unwrap_or_else(|p| p.into_inner()) = Some(LaunchState::new(saved));
        Ok((out, l1.shape().clone()))
    }

    fn bwd(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (dq, dk, dv) = self.state()?.backward(q, k, v, &self.keys, res, grad)?;
        Ok((Some(dq), Some(dk), Some(dv)))
    }
}

/// What flash attention's backward pass needs from its forward pass, besides the mask.
pub struct FlashState {
    saved: LaunchState,
    scale: f64,
    keep: f64,
}

impl FlashState {
    /// (dq, dk, dv) from the forward's operands `q`, `k`, `v` and `keys`, its output `out` and
    /// the output's gradient, in one `aclnnFlashAttentionScoreGrad`.
    pub fn backward(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        keys: &FlashKeys,
        out: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
        let op = FlashAttentionGrad { state: self, keys, dy: grad.contiguous()?, out: out.clone() };
        let packed = q.apply_op3_no_bwd(k, v, &op)?;
        let (nq, nk) = (q.elem_count(), k.elem_count());
        let piece = |start: usize, like: &Tensor| packed.narrow(0, start, like.elem_count())?.reshape(like.shape());
        Ok((piece(0, q)?, piece(nq, k)?, piece(nq + nk, v)?))
    }
}

/// `[dq | dk | dv]` of [`FlashAttention`] (Ascend only).
struct FlashAttentionGrad<'a> {
    state: &'a FlashState,
    keys: &'a FlashKeys,
    dy: Tensor,
    out: Tensor,
}

impl CustomOp3 for FlashAttentionGrad<'_> {
    fn name(&self) -> &'static str {
        "flash_attention_grad"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        candle_core::bail!("flash_attention_grad is the accelerator body")
    }

    #[allow(clippy::too_many_arguments)]
    #[cfg(feature = "ascend")]
    fn custom_fwd(
        &self,
        s1: &dyn DynBackendStorage,
        l1: &Layout,
        s2: &dyn DynBackendStorage,
        l2: &Layout,
        s3: &dyn DynBackendStorage,
        l3: &Layout,
    ) -> candle_core::Result<(BoxStorage, Shape)> {
        let st = self.state;
        let saved = st.saved.get::<fused::FlashSaved>("flash_attention_grad")?;
        fused::flash_attention_grad(
            s1,
            l1,
            s2,
            l2,
            s3,
            l3,
            &self.dy,
            &self.out,
            self.keys.operands(),
            saved,
            st.scale,
            st.keep,
        )
    }
}
