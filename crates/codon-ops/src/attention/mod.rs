//! Attention, with a body per device, behind two entries: [`full_attention`] and
//! [`block_sparse_attention`]. The bodies: [`block_attention`], the `BlockAttention` op with its
//! own backward pass over full and block-sparse key sets (CPU training; on a CUDA GPU, flash
//! attention where opted in);
//! [`cpu_inference`], chunked kernels that keep nothing; [`flash`], the Ascend body where the
//! part has `aclnnFlashAttentionScore` (the A2); and the composed ops elsewhere.
//! [`block_sparse`] holds block-sparse attention's own device path. [`reference()`] is the
//! composed computation, for tests.
pub mod block_attention;
pub mod block_sparse;
mod block_table;
pub mod cpu_bf16;
pub mod cpu_inference;
pub mod flash;

use crate::selection::{Body, FusedOp, OnCpu, OnCuda, Row};
#[cfg(feature = "ascend")]
use candle_ascend::soc::AclnnOp;
use candle_core::{DType, Tensor, D};

pub use block_sparse::{block_sparse_attention, BlockSparseMask, KeyBlocks};
pub use flash::{flash_attention, flash_attention_heads, flash_attention_packed, FlashKeys, FlashState};

use crate::activation::ScaledSoftmax;
use crate::dropout::DropoutStream;
use block_attention::{AttentionPlan, BlockAttention, KeyRange};

/// Query rows per block when full attention trains on the CPU.
const FULL_QUERY_BLOCK: usize = 64;

/// Attention's row of the support table: the CPU's kernels ([`block_attention`] to train,
/// [`cpu_inference`] otherwise), the CUDA flash body behind its switch, and flash attention on
/// Ascend parts.
pub(crate) const ROW: Row = Row {
    op: FusedOp::Attention,
    cpu: OnCpu::Kernel,
    cuda: OnCuda::OptIn { var: "CODON_CUDA_ATTENTION", value: "fused", on: block_attention::cuda_opted_in },
    #[cfg(feature = "ascend")]
    ascend: &[AclnnOp::FlashAttentionScore, AclnnOp::FlashAttentionScoreGrad],
};

/// The block gather's row of the support table: a CUDA kernel; elsewhere candle's index ops.
pub(crate) const BLOCK_GATHER_ROW: Row = Row {
    op: FusedOp::BlockGather,
    cpu: OnCpu::Composed,
    cuda: OnCuda::Kernels,
    #[cfg(feature = "ascend")]
    ascend: &[],
};

/// Whether `q`'s device runs attention's Ascend body, [`flash_attention`], in q's dtype.
pub fn fused_attention_runs(q: &Tensor) -> bool {
    ROW.choose(q.device(), q.dtype()).body == Body::Ascend
}

/// The features of each of `heads` heads of `hidden`; `op` names the caller in the error.
pub(crate) fn head_dim(op: &str, hidden: usize, heads: usize) -> candle_core::Result<usize> {
    if heads == 0 || !hidden.is_multiple_of(heads) {
        candle_core::bail!("{op}: hidden size {hidden} is not a multiple of {heads} heads")
    }
    Ok(hidden / heads)
}

/// Whether [`BlockAttention`] runs for attention's `body`: the CPU's when training, the CUDA
/// flash body for heads it takes.
fn block_op_runs(body: Body, trains: bool, head_dim: usize) -> bool {
    match body {
        Body::Cpu => trains,
        Body::Cuda => head_dim <= block_attention::CUDA_MAX_HEAD_DIM,
        Body::Ascend | Body::Composed | Body::Refused => false,
    }
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
    let body = ROW.select(q.device(), q.dtype())?;
    if body == Body::Ascend {
        return flash_attention(q, k, v, heads, key_bias, dropout);
    }
    let (b, n, hd) = q.dims3()?;
    let d = head_dim("full_attention", hd, heads)?;
    let scale = 1.0 / (d as f64).sqrt();
    let trains = [q, k, v].iter().any(|t| t.track_op());
    if block_op_runs(body, trains, d) {
        let draw = match dropout {
            Some((stream, p)) => Some(stream.draw(p)?),
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
            dropout: draw,
        };
        let op = BlockAttention::new(plan);
        return q.contiguous()?.apply_op3(&k.contiguous()?, &v.contiguous()?, op);
    }
    if body == Body::Cpu && dropout.is_none() && !trains {
        if let Some(y) = cpu_inference::bf16_attention(q, k, v, heads, key_bias)? {
            return Ok(y);
        }
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
/// [`cuda_probabilities`]; on an NPU whose softmax kernels take the half dtype, in it, see
/// [`half_probabilities`]. Callers cast. Each step replaces the last, so one (rows × keys)
/// temporary is alive besides the result.
fn probabilities(q: &Tensor, k: &Tensor, bias: Option<&Tensor>, scale: f64) -> candle_core::Result<Tensor> {
    match crate::activation::SOFTMAX_ROW.select(q.device(), q.dtype())? {
        Body::Cuda => return cuda_probabilities(q, k, bias, scale),
        Body::Ascend if q.dtype() != DType::F32 => return half_probabilities(q, k, bias, scale),
        _ => {}
    }
    let mut scores = matmul(q, &k.t()?)?;
    scores = (scores * scale)?;
    scores = scores.to_dtype(DType::F32)?;
    if let Some(b) = bias {
        scores = scores.broadcast_add(b)?;
    }
    crate::softmax_last_dim_f32(&scores)
}

/// softmax(q·kᵀ·scale + bias) in q's half dtype, on a part whose softmax body takes it (its
/// [`crate::activation::Softmax`] op accumulates in f32 and rounds once).
/// The scores leave the cube in that dtype anyway, so widening them first adds two casts and
/// twice the bytes to each pass over them; the scale goes into q (exact for power-of-two
/// scales; q is 1/keys the size of the scores).
fn half_probabilities(q: &Tensor, k: &Tensor, bias: Option<&Tensor>, scale: f64) -> candle_core::Result<Tensor> {
    let mut scores = matmul(&(q * scale)?, &k.t()?)?;
    if let Some(b) = bias {
        scores = scores.broadcast_add(&b.to_dtype(q.dtype())?)?;
    }
    scores.contiguous()?.apply_op1(crate::activation::Softmax)
}

/// softmax(q·kᵀ·scale + bias) on a CUDA GPU: the plain GEMM, then [`ScaledSoftmax`], which
/// adds the scale and a key bias in the one pass it makes over the scores, in their dtype with
/// f32 accumulation (on a GPU each pass over the scores costs about as much as the GEMM that
/// made them). A bias of another shape is added to the scaled scores first.
fn cuda_probabilities(q: &Tensor, k: &Tensor, bias: Option<&Tensor>, scale: f64) -> candle_core::Result<Tensor> {
    let scores = q.matmul(&k.t()?)?.contiguous()?;
    let Some(bias) = bias else { return scores.apply_op1(ScaledSoftmax::new(scale)) };
    // The op keeps the bias as a constant: a bias that needs a gradient is added outside it.
    if !bias.track_op() {
        if let Some(op) = ScaledSoftmax::with_key_bias(scale, bias, scores.dims())? {
            return scores.apply_op1(op);
        }
    }
    let scores = (&scores * scale)?.broadcast_add(&bias.to_dtype(scores.dtype())?)?;
    scores.contiguous()?.apply_op1(ScaledSoftmax::new(1.0))
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
    let d = head_dim("attention reference", hidden, heads)?;
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
