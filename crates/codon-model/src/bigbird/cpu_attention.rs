//! A fused CPU attention kernel for inference: for each (batch × head) slice, scores,
//! masked softmax and the product with the values are computed chunk by chunk in a
//! small per-thread buffer, so the (n × n) score matrix is never materialised and no
//! large temporary is allocated.

use candle_core::{CpuStorage, DType, Device, Storage, Tensor};
use rayon::prelude::*;

use codon_ops::fast_math;

/// Query rows per chunk: the chunk's scores stay in cache.
const CHUNK_ROWS: usize = 128;

fn f32_slice(t: &Tensor) -> Option<Vec<f32>> {
    // Small copies are fine; large tensors are borrowed when contiguous.
    let t = t.contiguous().ok()?;
    let (storage, layout) = t.storage_and_layout();
    let (a, b) = layout.contiguous_offsets()?;
    match &*storage {
        Storage::Cpu(CpuStorage::F32(v)) => Some(v[a..b].to_vec()),
        _ => None,
    }
}

/// softmax(q·kᵀ·scale + bias)·v for f32 CPU tensors q (…, m, d), k and v (…, s, d) with the
/// same leading dims, and bias (…, 1, s) whose leading dims are a prefix of q's followed by
/// ones (so each bias row serves a contiguous run of slices). `None` when the inputs do not
/// fit this kernel (the caller then composes the operation).
pub fn fused_attention(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64, bias: &Tensor) -> Option<Tensor> {
    if !matches!(q.device(), Device::Cpu)
        || q.dtype() != DType::F32
        || k.dtype() != DType::F32
        || v.dtype() != DType::F32
    {
        return None;
    }
    let qd = q.dims();
    let rank = qd.len();
    if rank < 3 || k.dims().len() != rank || v.dims() != k.dims() || bias.dims().len() != rank {
        return None;
    }
    let (m, d) = (qd[rank - 2], qd[rank - 1]);
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
    let bias_rows: usize = bd[..rank - 2].iter().product();
    let repeat = batches / bias_rows.max(1);

    let (qv, kv, vv, bv) = (f32_slice(q)?, f32_slice(k)?, f32_slice(v)?, f32_slice(bias)?);
    let mut out = vec![0f32; batches * m * d];
    let scale = scale as f32;
    out.par_chunks_mut(m * d).enumerate().for_each(|(batch, out)| {
        let q = &qv[batch * m * d..(batch + 1) * m * d];
        let k = &kv[batch * s * d..(batch + 1) * s * d];
        let v = &vv[batch * s * d..(batch + 1) * s * d];
        let bias = &bv[(batch / repeat) * s..(batch / repeat + 1) * s];
        let mut scores = vec![0f32; CHUNK_ROWS * s];
        for start in (0..m).step_by(CHUNK_ROWS) {
            let rows = CHUNK_ROWS.min(m - start);
            let sc = &mut scores[..rows * s];
            // SAFETY: every pointer/stride pair describes a live, in-bounds row-major matrix:
            // q chunk (rows × d), kᵀ viewed from k (s × d), scores (rows × s).
            unsafe {
                gemm::gemm(
                    rows,
                    s,
                    d,
                    sc.as_mut_ptr(),
                    1,
                    s as isize,
                    false,
                    q[start * d..].as_ptr(),
                    1,
                    d as isize,
                    k.as_ptr(),
                    d as isize,
                    1,
                    0.0,
                    scale,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                );
            }
            fast_math::softmax_rows(sc, s, bias);
            // SAFETY: probabilities (rows × s), v (s × d) and the output rows (rows × d) are
            // in-bounds row-major matrices; the output chunk belongs to this task alone.
            unsafe {
                gemm::gemm(
                    rows,
                    d,
                    s,
                    out[start * d..].as_mut_ptr(),
                    1,
                    d as isize,
                    false,
                    sc.as_ptr(),
                    1,
                    s as isize,
                    v.as_ptr(),
                    1,
                    d as isize,
                    0.0,
                    1.0,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                );
            }
        }
    });
    Tensor::from_vec(out, qd, q.device()).ok()
}

/// The middle query blocks of block-sparse attention, fused, for f32 CPU inference.
///
/// `q`, `k`, `v` are (b, h, n, d); `key_mask` is (b, n) with 1/0; `blocks` lists, per head
/// and middle query block, its `slots` key blocks; `absent[row·slots + slot]` is the
/// penalty of a slot that is not part of the key set. Returns the context of query blocks
/// 1..nb−2 as (b, h, n − 2·block, d), gathering key blocks in place instead of copying them.
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
) -> Option<Tensor> {
    if !matches!(q.device(), Device::Cpu) || [q, k, v].iter().any(|t| t.dtype() != DType::F32) {
        return None;
    }
    let (b, h, n, d) = q.dims4().ok()?;
    if k.dims() != q.dims() || v.dims() != q.dims() || key_mask.dims() != [b, n] || n % block != 0 {
        return None;
    }
    let nb = n / block;
    let rows = nb - 2;
    if blocks.len() != h * rows * slots || absent.len() != rows * slots {
        return None;
    }
    let (qv, kv, vv) = (f32_slice(q)?, f32_slice(k)?, f32_slice(v)?);
    let mask = f32_slice(&key_mask.to_dtype(DType::F32).ok()?)?;
    let width = slots * block;
    let mut out = vec![0f32; b * h * rows * block * d];
    out.par_chunks_mut(block * d).enumerate().for_each(|(task, out)| {
        let (bh, row) = (task / rows, task % rows);
        let (batch, head) = (bh / h, bh % h);
        let base = bh * n * d;
        let q_block = &qv[base + (row + 1) * block * d..base + (row + 2) * block * d];
        let key_blocks = &blocks[(head * rows + row) * slots..(head * rows + row + 1) * slots];
        let mut scores = vec![0f32; block * width];
        let mut bias = vec![0f32; width];
        for (slot, &kb) in key_blocks.iter().enumerate() {
            let kb = kb as usize;
            let k_block = &kv[base + kb * block * d..];
            // SAFETY: q block (block × d), kᵀ of one key block, and a (block × block) column
            // window of the (block × width) score buffer are in-bounds row-major matrices.
            unsafe {
                gemm::gemm(
                    block,
                    block,
                    d,
                    scores[slot * block..].as_mut_ptr(),
                    1,
                    width as isize,
                    false,
                    q_block.as_ptr(),
                    1,
                    d as isize,
                    k_block.as_ptr(),
                    d as isize,
                    1,
                    0.0,
                    1.0 / (d as f32).sqrt(),
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                );
            }
            let m = &mask[batch * n + kb * block..batch * n + (kb + 1) * block];
            for (bias, &m) in bias[slot * block..(slot + 1) * block].iter_mut().zip(m) {
                *bias = (1.0 - m) * penalty + absent[row * slots + slot];
            }
        }
        fast_math::softmax_rows(&mut scores, width, &bias);
        for (slot, &kb) in key_blocks.iter().enumerate() {
            let v_block = &vv[base + kb as usize * block * d..];
            // SAFETY: a (block × block) column window of the probabilities, one value block
            // (block × d) and this task's output block (block × d) are in bounds.
            unsafe {
                gemm::gemm(
                    block,
                    d,
                    block,
                    out.as_mut_ptr(),
                    1,
                    d as isize,
                    slot > 0,
                    scores[slot * block..].as_ptr(),
                    1,
                    width as isize,
                    v_block.as_ptr(),
                    1,
                    d as isize,
                    1.0,
                    1.0,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                );
            }
        }
    });
    Tensor::from_vec(out, (b, h, rows * block, d), q.device()).ok()
}
