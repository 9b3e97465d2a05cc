//! Attention, with a body per device. The CPU bodies: [`cpu_training`], the `BlockAttention`
//! op that keeps its probabilities for a fused backward pass (full and block-sparse key sets),
//! and [`cpu_inference`], chunked kernels that keep nothing. The Ascend body, here:
//! full attention as one op where the part has `aclnnFlashAttentionScore` (the A2):
//! `softmax(q·kᵀ/√d + key mask)·v` with the probabilities' dropout, one launch forward (plus
//! the dropout bits) and one backward, over the (batch, seq, hidden) projections as they are
//! (the BSH layout: no head split or merge), with no (S × S) probabilities in memory. Other
//! devices keep the model's attention kernels; [`reference`] is the composed computation.
pub mod cpu_inference;
pub mod cpu_training;

use std::sync::Mutex;

use candle_ascend::fused;
use candle_core::custom_backend::{BoxStorage, DynBackendStorage};
use candle_core::{CpuStorage, CustomOp3, DType, Layout, Shape, Tensor, D};

use crate::dropout::DropoutStream;

/// Whether the part of `q`'s device runs [`flash_attention`] for q's dtype.
pub fn fused_attention_runs(q: &Tensor) -> bool {
    ["aclnnFlashAttentionScore", "aclnnFlashAttentionScoreGrad"].iter().all(|op| fused::runs_natively(q, op, q.dtype()))
}

/// Full attention over q, k, v of shape (batch, seq, heads·d) with the additive key mask
/// `key_bias` (batch, 1, 1, seq; nonzero where a key is masked) and dropout of the
/// probabilities from `dropout`'s next draw. Runs where [`fused_attention_runs`].
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
    let op = FlashAttention { heads, scale, mask, dropout, saved: Mutex::default() };
    q.contiguous()?.apply_op3(&k.contiguous()?, &v.contiguous()?, op)
}

/// The composed attention: heads split, `softmax(q·kᵀ·scale + key_bias)`, times the dropout
/// multipliers (batch, heads, seq, seq) when given, times v, heads merged.
pub fn reference(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    heads: usize,
    key_bias: &Tensor,
    dropout: Option<&Tensor>,
) -> candle_core::Result<Tensor> {
    let (b, n, hidden) = q.dims3()?;
    let d = hidden / heads;
    let split = |t: &Tensor| t.reshape((b, n, heads, d))?.transpose(1, 2)?.contiguous();
    let scores = (split(q)?.matmul(&split(k)?.t()?)? / (d as f64).sqrt())?.broadcast_add(key_bias)?;
    let exp = scores.broadcast_sub(&scores.max_keepdim(D::Minus1)?.detach())?.exp()?;
    let mut probs = exp.broadcast_div(&exp.sum_keepdim(D::Minus1)?)?;
    if let Some(m) = dropout {
        probs = (probs * m)?;
    }
    probs.matmul(&split(v)?)?.transpose(1, 2)?.reshape((b, n, hidden))
}

/// The Ascend attention op; it keeps the forward's statistics for its backward pass.
struct FlashAttention {
    heads: usize,
    scale: f64,
    /// (B, 1, S, S) UINT8, 1 where masked.
    mask: Tensor,
    /// (p, seed, offset) of the probabilities' dropout.
    dropout: Option<(f64, u64, u64)>,
    saved: Mutex<Option<fused::FlashSaved>>,
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
            fused::flash_attention(s1, l1, s2, l2, s3, l3, &self.mask, self.heads, self.scale, self.dropout)?;
        *self.saved.lock().unwrap_or_else(|p| p.into_inner()) = Some(saved);
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
        let saved = self.saved.lock().unwrap_or_else(|p| p.into_inner()).take();
        let saved =
            saved.ok_or_else(|| candle_core::Error::msg("flash_attention: backward pass without its forward"))?;
        let keep = self.dropout.map_or(1.0, |(p, _, _)| 1.0 - p);
        let op = FlashAttentionGrad {
            dy: grad.contiguous()?,
            out: res.clone(),
            mask: self.mask.clone(),
            saved,
            scale: self.scale,
            keep,
        };
        let packed = q.apply_op3_no_bwd(k, v, &op)?;
        let n = q.elem_count();
        let piece = |i: usize, like: &Tensor| packed.narrow(0, i * n, n)?.reshape(like.shape());
        Ok((Some(piece(0, q)?), Some(piece(1, k)?), Some(piece(2, v)?)))
    }
}

/// `[dq | dk | dv]` of [`FlashAttention`] (Ascend only).
struct FlashAttentionGrad {
    dy: Tensor,
    out: Tensor,
    mask: Tensor,
    saved: fused::FlashSaved,
    scale: f64,
    keep: f64,
}

impl CustomOp3 for FlashAttentionGrad {
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
    fn custom_fwd(
        &self,
        s1: &dyn DynBackendStorage,
        l1: &Layout,
        s2: &dyn DynBackendStorage,
        l2: &Layout,
        s3: &dyn DynBackendStorage,
        l3: &Layout,
    ) -> candle_core::Result<(BoxStorage, Shape)> {
        fused::flash_attention_grad(
            s1,
            l1,
            s2,
            l2,
            s3,
            l3,
            &self.dy,
            &self.out,
            &self.mask,
            &self.saved,
            self.scale,
            self.keep,
        )
    }
}

/// The dropout multipliers (batch, heads, seq, seq) of a draw, for [`reference`] in tests.
pub fn reference_dropout(
    stream: &mut DropoutStream,
    dims: (usize, usize, usize),
    p: f64,
    dtype: DType,
) -> candle_core::Result<Tensor> {
    let (b, h, n) = dims;
    Tensor::from_vec(stream.multipliers(b * h * n * n, p, dtype)?, (b, h, n, n), &candle_core::Device::Cpu)?
        .to_dtype(dtype)
}
