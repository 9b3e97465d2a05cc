//! The model's hot operations, behind one seam: layer norm, softmax, gelu_new, linear
//! layers, dropout and the masked-softmax attention product.
//!
//! Model code calls only these functions. Each picks an implementation: when no operand
//! needs a gradient (inference) it uses candle's fused kernels; otherwise it composes
//! ops that have a backward pass (candle-nn 0.11.1's fused `layer_norm` and
//! `softmax_last_dim` record none). A device backend supplies its own fused kernels by
//! adding a branch here, without touching the model. Normalisation and softmax always
//! run in f32, so bf16 and f16 models accumulate them in f32.

use candle_core::{DType, Tensor, D};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::Result;

fn needs_grad(tensors: &[&Tensor]) -> bool {
    tensors.iter().any(|t| t.track_op())
}

/// LayerNorm over the last dimension: (x − mean)/√(var + eps)·w + b.
pub fn layer_norm(x: &Tensor, weight: &Tensor, bias: &Tensor, eps: f64) -> Result<Tensor> {
    let dtype = x.dtype();
    if !needs_grad(&[x, weight, bias]) && x.is_contiguous() {
        return Ok(candle_nn::ops::layer_norm(x, weight, bias, eps as f32)?);
    }
    let x32 = x.to_dtype(DType::F32)?;
    let mean = x32.mean_keepdim(D::Minus1)?;
    let centered = x32.broadcast_sub(&mean)?;
    let var = centered.sqr()?.mean_keepdim(D::Minus1)?;
    let normed = centered.broadcast_div(&(var + eps)?.sqrt()?)?;
    let out = normed.broadcast_mul(&weight.to_dtype(DType::F32)?)?.broadcast_add(&bias.to_dtype(DType::F32)?)?;
    Ok(out.to_dtype(dtype)?)
}

/// Softmax over the last dimension, computed in f32; the result is f32.
pub fn softmax_f32(x: &Tensor) -> Result<Tensor> {
    let x = x.to_dtype(DType::F32)?;
    if !x.track_op() {
        return Ok(candle_nn::ops::softmax_last_dim(&x.contiguous()?)?);
    }
    let max = x.max_keepdim(D::Minus1)?.detach();
    let exp = x.broadcast_sub(&max)?.exp()?;
    Ok(exp.broadcast_div(&exp.sum_keepdim(D::Minus1)?)?)
}

/// `gelu_new`: the tanh approximation of GELU.
pub fn gelu_new(x: &Tensor) -> Result<Tensor> {
    Ok(x.gelu()?)
}

/// `x·Wᵀ + b` for x of shape (…, in) and W of shape (out, in).
pub fn linear(x: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    let dims = x.dims().to_vec();
    let (rows, inner) = (dims[..dims.len() - 1].iter().product::<usize>(), dims[dims.len() - 1]);
    let y = x.reshape((rows, inner))?.matmul(&weight.t()?)?;
    let y = match bias {
        Some(b) => y.broadcast_add(b)?,
        None => y,
    };
    let mut out_dims = dims;
    let last = out_dims.len() - 1;
    out_dims[last] = weight.dim(0)?;
    Ok(y.reshape(out_dims)?)
}

/// Attention product: softmax(q·kᵀ·scale + bias)·v with the softmax in f32.
/// `bias` broadcasts against the scores and holds the (finite) mask penalties.
pub fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    bias: Option<&Tensor>,
    dropout: Option<(&mut Dropout, f64)>,
) -> Result<Tensor> {
    let scores = (q.matmul(&k.t()?)? * scale)?.to_dtype(DType::F32)?;
    let scores = match bias {
        Some(b) => scores.broadcast_add(b)?,
        None => scores,
    };
    let mut probs = softmax_f32(&scores)?.to_dtype(v.dtype())?;
    if let Some((rng, p)) = dropout {
        probs = rng.apply(&probs, p)?;
    }
    Ok(probs.matmul(v)?)
}

/// Dropout with masks from a seeded generator, so training is reproducible on any
/// device (candle's CPU generator cannot be seeded).
pub struct Dropout {
    rng: ChaCha8Rng,
}

impl Dropout {
    /// A generator for one forward pass.
    pub fn new(seed: u64) -> Self {
        Self { rng: ChaCha8Rng::seed_from_u64(seed) }
    }

    /// Zero each element with probability `p` and scale the rest by 1/(1 − p).
    pub fn apply(&mut self, x: &Tensor, p: f64) -> Result<Tensor> {
        if p <= 0.0 {
            return Ok(x.clone());
        }
        let keep = 1.0 - p;
        let scale = (1.0 / keep) as f32;
        let threshold = (keep * 4_294_967_296.0) as u64;
        let mask: Vec<f32> =
            (0..x.elem_count()).map(|_| if u64::from(self.rng.next_u32()) < threshold { scale } else { 0.0 }).collect();
        let mask = Tensor::from_vec(mask, x.shape(), x.device())?.to_dtype(x.dtype())?;
        Ok((x * mask)?)
    }
}
