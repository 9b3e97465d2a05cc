//! The CPU attention bodies for inference, which keep no probabilities: for each
//! (batch × head) slice, scores, masked softmax and the product with the values are computed
//! chunk by chunk in a small per-thread buffer, so the (n × n) score matrix is never
//! materialised and no large temporary is allocated. Training uses [`super::block_attention`],
//! which keeps the probabilities for its backward pass.

use candle_core::{DType, Device, Tensor};
use rayon::prelude::*;

use crate::cpu_gemm::{matmul_into, Mat};
use crate::f32_views::f32_values;
use crate::fast_math;

/// Query rows per chunk: the chunk's scores stay in cache.
const CHUNK_ROWS: usize = 128;

/// softmax(q·kᵀ·scale + bias)·v for f32 CPU tensors q (…, m, d), k and v (…, s, d) with the
/// same leading dims, and bias (…, 1, s) whose leading dims are a prefix of q's followed by
/// ones (so each bias row serves a contiguous run of slices). `Ok(None)` when the inputs do
/// not fit this kernel (the caller then composes the operation).
pub fn fused_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    bias: &Tensor,
) -> candle_core::Result<Option<Tensor>> {
    match fits_attention(q, k, v, bias) {
        Some(()) => full_attention_body(q, k, v, scale, bias),
        None => Ok(None),
    }
}

/// Whether q, k, v and bias fit [`fused_attention`]'s kernel.
fn fits_attention(q: &Tensor, k: &Tensor, v: &Tensor, bias: &Tensor) -> Option<()> {
    if !matches!(q.device(), Device::Cpu) || [q, k, v].iter().any(|t| t.dtype() != DType::F32) {
        return None;
    }
    let qd = q.dims();
    let rank = qd.len();
    if rank < 3 || k.dims().len() != rank || v.dims() != k.dims() || bias.dims().len() != rank {
        return None;
    }
    let d = qd[rank - 1];
    let (s, kd) = (k.dims()[rank - 2], k.dims()[rank - 1]);
    let lead = &qd[..rank - 2];
    if kd != d || k.dims()[..rank - 2] != *lead {
        return None;
    }
    let bd = bias.dims();
    if bd[rank - 2] != 1 || bd[rank - 1] != s {
        return None;
    }
    // Bias leading dims: a prefix of q's, then ones.
    let prefix = bd[..rank - 2].iter().zip(lead).take_while(|(a, b)| a == b).count();
    if bd[prefix..rank - 2].iter().any(|&x| x != 1) {
        return None;
    }
    let batches: usize = lead.iter().product();
    (batches > 0).then_some(())
}

fn full_attention_body(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    bias: &Tensor,
) -> candle_core::Result<Option<Tensor>> {
    let qd = q.dims();
    let rank = qd.len();
    let (m, d, s) = (qd[rank - 2], qd[rank - 1], k.dims()[rank - 2]);
    let batches: usize = qd[..rank - 2].iter().product();
    let bias_rows: usize = bias.dims()[..rank - 2].iter().product();
    let repeat = batches / bias_rows.max(1);
    let (Some(qv), Some(kv), Some(vv), Some(bv)) = (f32_values(q), f32_values(k), f32_values(v), f32_values(bias))
    else {
        return Ok(None);
    };
    let mut out = vec![0f32; batches * m * d];
    let scale = scale as f32;
    out.par_chunks_mut(m * d).enumerate().try_for_each(|(batch, out)| {
        let q = &qv[batch * m * d..(batch + 1) * m * d];
        let k = Mat::rows(&kv[batch * s * d..(batch + 1) * s * d], s, d, d);
        let v = Mat::rows(&vv[batch * s * d..(batch + 1) * s * d], s, d, d);
        let bias = &bv[(batch / repeat) * s..(batch / repeat + 1) * s];
        let mut scores = vec![0f32; CHUNK_ROWS * s];
        for start in (0..m).step_by(CHUNK_ROWS) {
            let rows = CHUNK_ROWS.min(m - start);
            let sc = &mut scores[..rows * s];
            matmul_into(sc, s, Mat::rows(&q[start * d..], rows, d, d), k.t(), scale, false, false)?;
            fast_math::softmax_rows(sc, s, bias);
            matmul_into(&mut out[start * d..], d, Mat::rows(sc, rows, s, s), v, 1.0, false, false)?;
        }
        Ok::<_, candle_core::Error>(())
    })?;
    Ok(Some(Tensor::from_vec(out, qd, q.device())?))
}

/// Full attention over bf16 q, k, v of shape (b, n, heads·d) as the projections leave them,
/// with the key mask's penalties `key_bias` (b, 1, 1, n), for inference:
/// [`super::cpu_bf16::attention`] (products on AVX512-BF16, softmax in f32), written straight
/// into (b, n, heads·d). `Ok(None)` when the operands or the CPU do not fit it.
pub fn bf16_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    heads: usize,
    key_bias: &Tensor,
) -> candle_core::Result<Option<Tensor>> {
    let (b, n, hd) = q.dims3()?;
    let fits = [q, k, v].iter().all(|t| t.dtype() == DType::BF16 && t.device().is_cpu() && t.dims() == [b, n, hd]);
    let d = super::head_dim("bf16_attention", hd, heads)?;
    if !fits || key_bias.elem_count() != b * n {
        return Ok(None);
    }
    let bias = key_bias.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()?;
    let scale = 1.0 / (d as f32).sqrt();
    let mut out = vec![half::bf16::ZERO; b * n * hd];
    let (q, k, v) = (q.contiguous()?, k.contiguous()?, v.contiguous()?);
    let ran = with_bf16(&q, |q| {
        with_bf16(&k, |k| {
            with_bf16(&v, |v| super::cpu_bf16::attention(q, k, v, (b, n, heads, d), scale, &bias, &mut out))
        })
    })????;
    if !ran {
        return Ok(None);
    }
    Tensor::from_vec(out, (b, n, hd), q.device()).map(Some)
}

/// Run `f` on a bf16 CPU tensor's elements ([`crate::f32_views::with_values`]).
fn with_bf16<R>(t: &Tensor, f: impl FnOnce(&[half::bf16]) -> R) -> candle_core::Result<R> {
    crate::f32_views::with_values(t, "bf16 attention", |values| match values {
        crate::cpu_bf16::Values::Bf16(v) => Ok(f(v)),
        crate::cpu_bf16::Values::F32(_) => candle_core::bail!("bf16 attention: expected a bf16 CPU tensor"),
    })?
}

/// The middle query blocks of block-sparse attention, fused, for f32 CPU inference.
///
/// `q`, `k`, `v` are (b, h, n, d); `key_mask` is (b, n) with 1/0; `blocks` lists, per head
/// and middle query block, its `slots` key blocks; `absent[row·slots + slot]` is the
/// penalty of a slot that is not part of the key set. Returns the context of query blocks
/// 1..nb−2 as (b, h, n − 2·block, d), gathering key blocks in place instead of copying them;
/// `Ok(None)` when the inputs do not fit.
#[allow(clippy::too_many_arguments)]
pub fn fused_block_sparse_middle(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    key_mask: &Tensor,
    block: usize,
    blocks: &[u32],
    slots: usize,
    absent: &[f32],
    penalty: f32,
) -> candle_core::Result<Option<Tensor>> {
    if !matches!(q.device(), Device::Cpu) || [q, k, v].iter().any(|t| t.dtype() != DType::F32) {
        return Ok(None);
    }
    let Ok((b, h, n, d)) = q.dims4() else { return Ok(None) };
    if k.dims() != q.dims()
        || v.dims() != q.dims()
        || key_mask.dims() != [b, n]
        || block == 0
        || n % block != 0
        || n < 2 * block
    {
        return Ok(None);
    }
    let nb = n / block;
    let rows = nb - 2;
    if blocks.len() != h * rows * slots || absent.len() != rows * slots || blocks.iter().any(|&kb| kb as usize >= nb) {
        return Ok(None);
    }
    let mask = f32_values(&key_mask.to_dtype(DType::F32)?);
    let (Some(qv), Some(kv), Some(vv), Some(mask)) = (f32_values(q), f32_values(k), f32_values(v), mask) else {
        return Ok(None);
    };
    let width = slots * block;
    let mut out = vec![0f32; b * h * rows * block * d];
    let scale = 1.0 / (d as f32).sqrt();
    out.par_chunks_mut(block * d).enumerate().try_for_each(|(task, out)| {
        let (bh, row) = (task / rows, task % rows);
        let (batch, head) = (bh / h, bh % h);
        let base = bh * n * d;
        let q_block = Mat::rows(&qv[base + (row + 1) * block * d..base + (row + 2) * block * d], block, d, d);
        let key_blocks = &blocks[(head * rows + row) * slots..(head * rows + row + 1) * slots];
        let mut scores = vec![0f32; block * width];
        let mut bias = vec![0f32; width];
        for (slot, &kb) in key_blocks.iter().enumerate() {
            let kb = kb as usize;
            // One key block's scores fill a (block × block) column window of the score rows.
            matmul_into(
                &mut scores[slot * block..],
                width,
                q_block,
                block_of(&kv, base, kb, block, d).t(),
                scale,
                false,
                false,
            )?;
            let m = &mask[batch * n + kb * block..batch * n + (kb + 1) * block];
            for (bias, &m) in bias[slot * block..(slot + 1) * block].iter_mut().zip(m) {
                *bias = (1.0 - m) * penalty + absent[row * slots + slot];
            }
        }
        fast_math::softmax_rows(&mut scores, width, &bias);
        for (slot, &kb) in key_blocks.iter().enumerate() {
            let probs = Mat::rows(&scores[slot * block..], block, block, width);
            matmul_into(out, d, probs, block_of(&vv, base, kb as usize, block, d), 1.0, slot > 0, false)?;
        }
        Ok::<_, candle_core::Error>(())
    })?;
    Ok(Some(Tensor::from_vec(out, (b, h, rows * block, d), q.device())?))
}

/// Key or value block `kb` (block × d) of the (sequence, head) slice at `base`.
fn block_of(data: &[f32], base: usize, kb: usize, block: usize, d: usize) -> Mat<'_> {
    let start = base + kb * block * d;
    Mat::rows(&data[start..start + block * d], block, d, d)
}
