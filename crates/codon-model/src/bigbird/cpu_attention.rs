//! A fused CPU attention kernel for inference: for each (batch × head) slice, scores,
//! masked softmax and the product with the values are computed chunk by chunk in a
//! small per-thread buffer, so the (n × n) score matrix is never materialised and no
//! large temporary is allocated.

use candle_core::{CpuStorage, DType, Device, Storage, Tensor};
use rayon::prelude::*;

use super::fast_math;

/// Query rows per chunk: the chunk's scores stay in cache.
const CHUNK_ROWS: usize = 32;

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
