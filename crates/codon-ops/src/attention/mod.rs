//! Attention, with a body per device, behind two entries: [`full_attention`] and
//! [`block_sparse_attention`]. The bodies: [`cpu_training`], the `BlockAttention` op that keeps
//! its probabilities for a fused backward pass (full and block-sparse key sets);
//! [`cpu_inference`], chunked kernels that keep nothing; [`flash`], the Ascend body where the
//! part has `aclnnFlashAttentionScore` (the A2); and the composed ops elsewhere.
//! [`block_sparse`] holds block-sparse attention's own device path. [`reference()`] is the
//! composed computation, for tests.
pub mod block_sparse;
pub mod cpu_inference;
pub mod cpu_training;
pub mod flash;

use candle_ascend::fused;
use candle_ascend::soc::AclnnOp;
use candle_core::{DType, Tensor, D};

pub use block_sparse::{block_sparse_attention, BlockSparseMask, KeyBlocks};
pub use flash::{flash_attention, flash_attention_heads, FlashState};

use crate::dropout::DropoutStream;
use cpu_training::{AttentionPlan, BlockAttention, KeyRange};

/// Query rows per block when full attention trains on the CPU.
const FULL_QUERY_BLOCK: usize = 64;

/// Whether the part of `q`'s device runs [`flash_attention`] for q's dtype.
pub fn fused_attention_runs(q: &Tensor) -> bool {
    [AclnnOp::FlashAttentionScore, AclnnOp::FlashAttentionScoreGrad]
        .into_iter()
        .all(|op| fused::runs_natively(q, op, q.dtype()))
}

/// Full attention over q, k, v of shape (b, n, heads·d), with an additive key mask
/// `key_bias` (b, 1, 1, n) and dropout of the probabilities from `dropout`'s next draw; the
/// result is (b, n, heads·d). Flash attention where the part has it; on the CPU the training
/// op or the inference kernels; the composed ops elsewhere.
pub fn full_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    heads: usize,
    key_bias: &Tensor,
    dropout: Option<(&mut DropoutStream, f64)>,
) -> candle_core::Result<Tensor> {
    if fused_attention_runs(q) {
        return flash_attention(q, k, v, heads, key_bias, dropout);
    }
    let (b, n, hd) = q.dims3()?;
    if heads == 0 || hd % heads != 0 {
        candle_core::bail!("full_attention: hidden size {hd} is not a multiple of {heads} heads")
    }
    let scale = 1.0 / ((hd / heads) as f64).sqrt();
    let on_cpu = [q, k, v].iter().all(|t| t.device().is_cpu());
    if on_cpu && [q, k, v].iter().any(|t| t.track_op()) {
        let mask = match dropout {
            Some((stream, p)) => Some(stream.multipliers(b * heads * n * n, p, q.dtype())?),
            None => None,
        };
        let blocks = n.div_ceil(FULL_QUERY_BLOCK);
        let plan = AttentionPlan {
            batch: b,
            heads,
            seq_len: n,
            query_blocks: (0..n).step_by(FULL_QUERY_BLOCK).map(|s| (s, FULL_QUERY_BLOCK.min(n - s))).collect(),
            keys: vec![vec![KeyRange { start: 0, len: n, penalty: 0.0 }]; heads * blocks],
            key_penalty: key_bias.flatten_all()?.to_dtype(DType::F32)?.to_vec1()?,
            query_mask: None,
            scale: scale as f32,
            dropout: mask,
        };
        let op = BlockAttention::new(plan);
        return q.contiguous()?.apply_op3(&k.contiguous()?, &v.contiguous()?, op);
    }
    let (qh, kh, vh) = (split_heads(q, heads)?, split_heads(k, heads)?, split_heads(v, heads)?);
    merge_heads(&composed(&qh, &kh, &vh, scale, Some(key_bias), dropout)?)
}

/// Split (b, n, h·d) into contiguous (b, h, n, d) heads.
fn split_heads(t: &Tensor, heads: usize) -> candle_core::Result<Tensor> {
    let (b, n, hd) = t.dims3()?;
    t.reshape((b, n, heads, hd / heads))?.transpose(1, 2)?.contiguous()
}

/// Merge (b, h, n, d) heads back into (b, n, h·d).
fn merge_heads(t: &Tensor) -> candle_core::Result<Tensor> {
    let (b, h, n, d) = t.dims4()?;
    t.transpose(1, 2)?.reshape((b, n, h * d))
}

/// Matrix product. The CPU GEMM has no fast bf16 kernel, so bf16 operands are multiplied in
/// f32 (f32 accumulation) and the result rounded back to bf16.
fn matmul(a: &Tensor, b: &Tensor) -> candle_core::Result<Tensor> {
    if a.dtype() == DType::BF16 && a.device().is_cpu() {
        return a.to_dtype(DType::F32)?.matmul(&b.to_dtype(DType::F32)?)?.to_dtype(DType::BF16);
    }
    a.matmul(b)
}

/// softmax(q·kᵀ·scale + bias) in f32; on a CUDA GPU in the scores' dtype, see
/// [`gpu_probabilities`]; on an NPU whose softmax kernels take the half dtype, in it, see
/// [`half_probabilities`]. Callers cast. Each step replaces the last, so one (rows × keys)
/// temporary is alive besides the result.
fn probabilities(q: &Tensor, k: &Tensor, bias: Option<&Tensor>, scale: f64) -> candle_core::Result<Tensor> {
    if q.device().is_cuda() && !q.track_op() && !k.track_op() {
        return gpu_probabilities(q, k, bias, scale);
    }
    if let Some(probs) = half_probabilities(q, k, bias, scale)? {
        return Ok(probs);
    }
    let mut scores = matmul(q, &k.t()?)?;
    scores = (scores * scale)?;
    scores = scores.to_dtype(DType::F32)?;
    if let Some(b) = bias {
        scores = scores.broadcast_add(b)?;
    }
    crate::softmax_last_dim_f32(&scores)
}

/// softmax(q·kᵀ·scale + bias) in q's half dtype where the device's softmax kernels take it
/// (its [`crate::activation::Softmax`] op accumulates in f32 and rounds once).
/// The scores leave the cube in that dtype anyway, so widening them first adds two casts and
/// twice the bytes to each pass over them; the scale goes into q (exact for power-of-two
/// scales; q is 1/keys the size of the scores). `None` elsewhere.
fn half_probabilities(
    q: &Tensor,
    k: &Tensor,
    bias: Option<&Tensor>,
    scale: f64,
) -> candle_core::Result<Option<Tensor>> {
    if !crate::activation::native_half_softmax_runs(q) {
        return Ok(None);
    }
    let mut scores = matmul(&(q * scale)?, &k.t()?)?;
    if let Some(b) = bias {
        scores = scores.broadcast_add(&b.to_dtype(q.dtype())?)?;
    }
    scores.contiguous()?.apply_op1(crate::activation::Softmax).map(Some)
}

/// Width the GEMM's operands are padded to when a key bias rides in them: 16-byte rows, which
/// the tensor-core kernels need.
const GEMM_ALIGN: usize = 8;

/// softmax(q·kᵀ·scale + bias) with the scale and a key bias (…, 1, keys) folded into the
/// one GEMM, `[q·scale, 1, 0…]·[k, biasᵀ, 0…]ᵀ`, and candle-nn's softmax, which accumulates in
/// f32, on the scores in their dtype: on a GPU a pass over the (rows × keys) scores costs as
/// much as the GEMM (H200, 8 × 2048 tokens, f32, per layer: q·kᵀ 1.5 ms, scale 1.5 ms, broadcast
/// bias 8.2 ms; `op_timing`). The scale (1/8 for 64-wide heads) is a power of two, so q·scale is
/// exact. Other bias shapes are added after the GEMM.
fn gpu_probabilities(q: &Tensor, k: &Tensor, bias: Option<&Tensor>, scale: f64) -> candle_core::Result<Tensor> {
    let q = (q * scale)?;
    // The bias as one more column of k, where it is a key bias that broadcasts over k's rows.
    let key_column = bias.filter(|b| b.rank() == k.rank() && b.dim(D::Minus2).ok() == Some(1)).and_then(|b| {
        let mut dims = k.dims().to_vec();
        dims[k.rank() - 1] = 1;
        b.transpose(D::Minus1, D::Minus2).and_then(|c| c.broadcast_as(dims.as_slice())?.contiguous()).ok()
    });
    let scores = match &key_column {
        Some(column) => {
            let tail = GEMM_ALIGN - (q.dim(D::Minus1)? + 1) % GEMM_ALIGN;
            let widen = |t: &Tensor, column: &Tensor| -> candle_core::Result<Tensor> {
                let mut dims = t.dims().to_vec();
                dims[t.rank() - 1] = tail;
                let zeros = Tensor::zeros(dims.as_slice(), t.dtype(), t.device())?;
                Tensor::cat(&[t, &column.to_dtype(t.dtype())?, &zeros], D::Minus1)
            };
            let mut ones = q.dims().to_vec();
            ones[q.rank() - 1] = 1;
            let ones = Tensor::ones(ones.as_slice(), q.dtype(), q.device())?;
            widen(&q, &ones)?.matmul(&widen(k, column)?.t()?)?
        }
        None => match bias {
            Some(b) => q.matmul(&k.t()?)?.broadcast_add(&b.to_dtype(q.dtype())?)?,
            None => q.matmul(&k.t()?)?,
        },
    };
    candle_nn::ops::softmax_last_dim(&scores.contiguous()?)
}

/// softmax(q·kᵀ·scale + bias)·v over heads (the softmax as [`probabilities`] runs it), with the probabilities'
/// dropout: the CPU inference kernel when nothing needs a gradient, composed ops otherwise.
/// `bias` broadcasts against the scores and holds the (finite) mask penalties.
fn composed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    bias: Option<&Tensor>,
    dropout: Option<(&mut DropoutStream, f64)>,
) -> candle_core::Result<Tensor> {
    if let (None, Some(bias)) = (&dropout, bias) {
        if ![q, k, v].iter().any(|t| t.track_op()) {
            // The kernel computes in f32: other float dtypes are widened for it (q, k and v are
            // small beside the scores the composed ops would build) and the result rounded back.
            let dtype = q.dtype();
            let widen = |t: &Tensor| if q.device().is_cpu() { t.to_dtype(DType::F32) } else { Ok(t.clone()) };
            let (qf, kf, vf, bf) = (widen(q)?, widen(k)?, widen(v)?, widen(bias)?);
            if let Some(out) = cpu_inference::fused_attention(&qf, &kf, &vf, scale, &bf)? {
                return out.to_dtype(dtype);
            }
        }
    }
    let mut probs = probabilities(q, k, bias, scale)?.to_dtype(v.dtype())?;
    if let Some((stream, p)) = dropout {
        probs = crate::dropout(&probs, p, stream)?;
    }
    matmul(&probs, v)
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

/// The dropout multipliers (batch, heads, seq, seq) of a draw, for [`reference()`] in tests.
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

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar().unwrap()
    }

    /// The GPU body's folding (scale into q, the key bias into the GEMM as one more column)
    /// gives the probabilities of the f32 path; run here on the CPU, where candle-nn's softmax
    /// also runs.
    #[test]
    fn folding_the_scale_and_key_bias_into_the_gemm_keeps_the_probabilities() {
        let dev = &Device::Cpu;
        for d in [64, 12] {
            let (b, h, n) = (2, 3, 40);
            let q = Tensor::randn(0f32, 1.0, (b, h, n, d), dev).unwrap();
            let k = Tensor::randn(0f32, 1.0, (b, h, n, d), dev).unwrap();
            let scale = 1.0 / (d as f64).sqrt();
            // Sequence 1 masks its last 9 keys.
            let penalty: Vec<f32> = (0..b * n).map(|i| if i >= n + 31 { -10000.0 } else { 0.0 }).collect();
            let key_bias = Tensor::from_vec(penalty, (b, 1, 1, n), dev).unwrap();
            let want = probabilities(&q, &k, Some(&key_bias), scale).unwrap();
            let got = gpu_probabilities(&q, &k, Some(&key_bias), scale).unwrap();
            assert!(max_diff(&got, &want) < 1e-6, "d = {d}: {}", max_diff(&got, &want));
            let masked = got.narrow(0, 1, 1).unwrap().narrow(3, 31, 9).unwrap();
            assert_eq!(masked.abs().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap(), 0.0);
            // A bias per query row is added after the GEMM.
            let row_bias = Tensor::randn(0f32, 1.0, (b, 1, n, n), dev).unwrap();
            let want = probabilities(&q, &k, Some(&row_bias), scale).unwrap();
            let got = gpu_probabilities(&q, &k, Some(&row_bias), scale).unwrap();
            assert!(max_diff(&got, &want) < 1e-6, "d = {d}, row bias: {}", max_diff(&got, &want));
        }
    }
}
