//! The Ascend body of attention: `aclnnFlashAttentionScore` and its grad (A2 only), one launch
//! each way, with no (S × S) probabilities in memory. [`flash_attention`] runs full attention
//! over the (batch, seq, hidden) projections as they are (the BSH layout: no head split or
//! merge), with the probabilities' dropout; [`flash_attention_heads`] runs (batch, heads,
//! seq, d) heads with any mask for ops that write their own backward pass. Elsewhere the op
//! runs its composed reference ([`composed`]) both ways: the callers take it only where the part
//! has the operators, so that is the tests' path.
use std::sync::Mutex;

#[cfg(feature = "ascend")]
use candle_ascend::fused;
#[cfg(feature = "ascend")]
use candle_core::custom_backend::{BoxStorage, DynBackendStorage};
use candle_core::{CpuStorage, CustomOp3, DType, Device, Layout, Shape, Tensor, Var, D};

use crate::dropout::DropoutStream;
use crate::launch::LaunchState;

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
    let scale = 1.0 / (super::head_dim("flash_attention", hidden, heads)? as f64).sqrt();
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
    super::head_dim("flash_attention_packed", q.dims3()?.2, heads)?;
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
    Ok((out, op.state()))
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
    /// What the forward pass left for the backward pass (once): the Ascend launch's state, or
    /// nothing where the op ran its composed reference.
    fn state(&self) -> FlashState {
        let saved = self.saved.lock().unwrap_or_else(|p| p.into_inner()).take();
        FlashState { saved, heads: self.heads, scale: self.scale, dropout: self.dropout }
    }
}

impl CustomOp3 for FlashAttention {
    fn name(&self) -> &'static str {
        "flash_attention"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let host = |s: &CpuStorage, l: &Layout| {
            Tensor::from_vec(crate::f32_views::f32_vec(s, l, "flash_attention")?, l.shape(), &Device::Cpu)
        };
        let out =
            composed(&host(s1, l1)?, &host(s2, l2)?, &host(s3, l3)?, self.heads, &self.keys, self.scale, self.dropout)?;
        Ok((crate::f32_views::store_like(s1, out.flatten_all()?.to_vec1()?), l1.shape().clone()))
    }

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
        let (dq, dk, dv) = self.state().backward(q, k, v, &self.keys, res, grad)?;
        Ok((Some(dq), Some(dk), Some(dv)))
    }
}

/// What flash attention's backward pass needs from its forward pass, besides the mask.
pub struct FlashState {
    /// The Ascend launch's statistics; none where the forward ran the composed reference.
    saved: Option<LaunchState>,
    heads: usize,
    scale: f64,
    /// (p, seed, offset) of the probabilities' dropout.
    dropout: Option<(f64, u64, u64)>,
}

impl FlashState {
    /// (dq, dk, dv) from the forward's operands `q`, `k`, `v` and `keys`, its output `out` and
    /// the output's gradient: one `aclnnFlashAttentionScoreGrad` on an Ascend part, else the
    /// composed reference's gradients.
    #[cfg_attr(not(feature = "ascend"), allow(unused_variables))]
    pub fn backward(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        keys: &FlashKeys,
        out: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
        #[cfg(feature = "ascend")]
        if let Some(saved) = &self.saved {
            // [dq | dk | dv] in one aclnnFlashAttentionScoreGrad.
            let (dy, keep) = (grad.contiguous()?, self.dropout.map_or(1.0, |(p, _, _)| 1.0 - p));
            let packed =
                crate::launch::ascend_launch("flash_attention_grad", [q, k, v], |[(s1, l1), (s2, l2), (s3, l3)]| {
                    let saved = saved.get::<fused::FlashSaved>("flash_attention_grad")?;
                    fused::flash_attention_grad(
                        s1,
                        l1,
                        s2,
                        l2,
                        s3,
                        l3,
                        &dy,
                        out,
                        keys.operands(),
                        saved,
                        self.scale,
                        keep,
                    )
                })?;
            let (nq, nk) = (q.elem_count(), k.elem_count());
            let piece = |start: usize, like: &Tensor| packed.narrow(0, start, like.elem_count())?.reshape(like.shape());
            return Ok((piece(0, q)?, piece(nq, k)?, piece(nq + nk, v)?));
        }
        let [q32, k32, v32] = [q, k, v].map(|t| t.to_dtype(DType::F32).and_then(|t| Var::from_tensor(&t)));
        let (q32, k32, v32) = (q32?, k32?, v32?);
        let y = composed(&q32, &k32, &v32, self.heads, keys, self.scale, self.dropout)?;
        let grads = (y * grad.to_dtype(DType::F32)?.detach())?.sum_all()?.backward()?;
        let of = |var: &Var, like: &Tensor| match grads.get(var) {
            Some(g) => g.to_dtype(like.dtype()),
            None => like.zeros_like(),
        };
        Ok((of(&q32, q)?, of(&k32, k)?, of(&v32, v)?))
    }
}

/// The op's composed reference over f32 `q`, `k`, `v` of (batch, seq, heads·d) or (batch,
/// heads, seq, d) (q's rank says which): `softmax((q·kᵀ + bias)·scale, masked keys)·v`, the
/// probabilities dropped out by draw (seed, offset) as [`crate::dropout`] draws it. A row
/// whose keys are all masked is NaN, as the softmax of no keys is.
fn composed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    heads: usize,
    keys: &FlashKeys,
    scale: f64,
    dropout: Option<(f64, u64, u64)>,
) -> candle_core::Result<Tensor> {
    let packed = q.rank() == 3;
    let split = |t: &Tensor| -> candle_core::Result<Tensor> {
        if !packed {
            return Ok(t.clone());
        }
        let (b, n, hidden) = t.dims3()?;
        t.reshape((b, n, heads, hidden / heads))?.transpose(1, 2)?.contiguous()
    };
    let (qh, kh, vh) = (split(q)?, split(k)?, split(v)?);
    let mut scores = qh.matmul(&kh.t()?.contiguous()?)?;
    let (mask, bias) = match keys {
        FlashKeys::Mask(m) => (Some(m), None),
        FlashKeys::Bias(b) => (None, Some(b)),
        FlashKeys::MaskAndBias { mask, bias } => (Some(mask), Some(bias)),
    };
    if let Some(bias) = bias {
        scores = scores.broadcast_add(&bias.to_dtype(DType::F32)?.to_device(q.device())?)?;
    }
    scores = (scores * scale)?;
    if let Some(mask) = mask {
        let masked = mask.to_device(q.device())?.ne(0u8)?.broadcast_as(scores.shape())?;
        let penalty = Tensor::full(f32::NEG_INFINITY, scores.shape(), q.device())?;
        scores = masked.where_cond(&penalty, &scores)?;
    }
    let max = scores.max_keepdim(D::Minus1)?.detach();
    let exp = scores.broadcast_sub(&max)?.exp()?;
    let mut probs = exp.broadcast_div(&exp.sum_keepdim(D::Minus1)?)?;
    if let Some((p, seed, offset)) = dropout {
        probs = crate::dropout::reference(&probs, p, seed, offset)?;
    }
    let out = probs.matmul(&vh)?;
    if !packed {
        return Ok(out);
    }
    let (b, h, n, d) = out.dims4()?;
    out.transpose(1, 2)?.reshape((b, n, h * d))
}

#[cfg(test)]
mod tests {
    use candle_core::{DType, Device, Tensor, Var};

    use super::{flash_attention, flash_attention_heads, FlashKeys};
    use crate::attention::{reference, reference_dropout};
    use crate::dropout::DropoutStream;
    use crate::f32_views::max_abs_diff;

    /// Off the Ascend part the op runs its composed reference both ways: the attention of
    /// `attention::reference` (bias, not mask, and its own softmax), with the same dropout draw.
    #[test]
    fn the_composed_body_matches_the_reference_both_ways() {
        let dev = &Device::Cpu;
        let (b, n, heads, hidden) = (2, 9, 3, 12);
        let var = |seed: f32| {
            Var::from_tensor(&(Tensor::randn(0f32, 1.0, (b, n, hidden), dev).unwrap() * f64::from(seed)).unwrap())
                .unwrap()
        };
        let (q, k, v) = (var(1.0), var(0.7), var(1.3));
        let mut bias = vec![0f32; b * n];
        bias[n - 2..n].fill(-1e9);
        bias[n + 3] = -1e9;
        let key_bias = Tensor::from_vec(bias, (b, 1, 1, n), dev).unwrap();
        let ours = flash_attention(
            q.as_tensor(),
            k.as_tensor(),
            v.as_tensor(),
            heads,
            &key_bias,
            Some((&mut DropoutStream::new(4), 0.25)),
        )
        .unwrap();
        let mask = reference_dropout(&mut DropoutStream::new(4), (b, heads, n), 0.25, DType::F32).unwrap();
        let want = reference(q.as_tensor(), k.as_tensor(), v.as_tensor(), heads, &key_bias, Some(&mask)).unwrap();
        assert!(max_abs_diff(&ours, &want) < 1e-5, "{}", max_abs_diff(&ours, &want));
        let w = Tensor::randn(0f32, 1.0, (b, n, hidden), dev).unwrap();
        let g_ours = (&ours * &w).unwrap().sum_all().unwrap().backward().unwrap();
        let g_want = (&want * &w).unwrap().sum_all().unwrap().backward().unwrap();
        for x in [&q, &k, &v] {
            let d = max_abs_diff(g_ours.get(x).unwrap(), g_want.get(x).unwrap());
            assert!(d < 1e-4, "gradient differs by {d}");
        }
    }

    /// The detached (batch, heads, seq, d) entry and its kept state: a mask and a bias together.
    #[test]
    fn the_detached_heads_entry_returns_the_reference_gradients() {
        let dev = &Device::Cpu;
        let (b, h, n, d) = (1, 2, 6, 4);
        let randn = |s: f64| (Tensor::randn(0f32, 1.0, (b, h, n, d), dev).unwrap() * s).unwrap();
        let (q, k, v) = (randn(1.0), randn(0.8), randn(1.1));
        let mut m = vec![0u8; b * n * n];
        m[2] = 1;
        m[n + 5] = 1;
        let mask = Tensor::from_vec(m, (b, 1, n, n), dev).unwrap();
        let bias = (Tensor::randn(0f32, 1.0, (b, h, 1, n), dev).unwrap() * 0.5).unwrap();
        let keys = FlashKeys::MaskAndBias { mask: mask.clone(), bias: bias.clone() };
        let scale = 0.5;
        let (out, state) = flash_attention_heads(&q, &k, &v, &keys, scale).unwrap();
        let grad = Tensor::randn(0f32, 1.0, (b, h, n, d), dev).unwrap();
        let (dq, dk, dv) = state.backward(&q, &k, &v, &keys, &out, &grad).unwrap();
        // The same attention written out: (q·kᵀ + bias)·scale, masked keys at −1e9.
        let (qv, kv, vv) =
            (Var::from_tensor(&q).unwrap(), Var::from_tensor(&k).unwrap(), Var::from_tensor(&v).unwrap());
        let penalty = (mask.to_dtype(DType::F32).unwrap() * -1e9).unwrap();
        let scores = qv.as_tensor().matmul(&kv.as_tensor().t().unwrap()).unwrap().broadcast_add(&bias).unwrap();
        let scores = (scores * scale).unwrap().broadcast_add(&penalty).unwrap();
        let want = crate::softmax_last_dim_f32(&scores).unwrap().matmul(vv.as_tensor()).unwrap();
        assert!(max_abs_diff(&out, &want) < 1e-5);
        let g = (&want * &grad).unwrap().sum_all().unwrap().backward().unwrap();
        for (ours, var) in [(&dq, &qv), (&dk, &kv), (&dv, &vv)] {
            let diff = max_abs_diff(ours, g.get(var).unwrap());
            assert!(diff < 1e-4, "gradient differs by {diff}");
        }
    }
}
