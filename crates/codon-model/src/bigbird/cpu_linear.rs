//! A fused CPU linear layer for inference: y = x·Wᵀ + b (+ residual) with the bias and the
//! residual written into the GEMM's destination first, so the output is produced in one
//! pass instead of a GEMM followed by one or two element-wise passes.

use candle_core::{CpuStorage, DType, Device, Storage, Tensor};
use rayon::prelude::*;

/// Elements per parallel task of the epilogue.
const EPILOGUE_CHUNK: usize = 16 * 1024;

/// Borrow a contiguous f32 CPU tensor's elements and run `f` on them.
fn with_f32<R>(t: &Tensor, f: impl FnOnce(&[f32]) -> R) -> Option<R> {
    if !t.is_contiguous() {
        return None;
    }
    let (storage, layout) = t.storage_and_layout();
    let (a, b) = layout.contiguous_offsets()?;
    match &*storage {
        Storage::Cpu(CpuStorage::F32(v)) => Some(f(&v[a..b])),
        _ => None,
    }
}

/// `x·Wᵀ + bias + residual` for contiguous f32 CPU tensors: x (…, in), W (out, in), bias
/// (out), residual shaped like the output; then `epilogue` (an element-wise activation)
/// in place on the result. `None` when the inputs do not fit this kernel.
pub fn fused_linear(
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    residual: Option<&Tensor>,
    epilogue: Option<fn(&mut [f32])>,
) -> Option<Tensor> {
    if !matches!(x.device(), Device::Cpu) || x.dtype() != DType::F32 || weight.dtype() != DType::F32 {
        return None;
    }
    let (out_f, in_f) = weight.dims2().ok()?;
    let dims = x.dims();
    if dims.last() != Some(&in_f) {
        return None;
    }
    let rows: usize = dims[..dims.len() - 1].iter().product();
    let mut out_dims = dims.to_vec();
    *out_dims.last_mut()? = out_f;
    if bias.is_some_and(|b| b.dims() != [out_f]) || residual.is_some_and(|r| r.dims() != out_dims.as_slice()) {
        return None;
    }
    let bias = match bias {
        Some(b) => Some(with_f32(b, <[f32]>::to_vec)?),
        None => None,
    };
    let mut out: Vec<f32> = match residual {
        Some(r) => with_f32(r, <[f32]>::to_vec)?,
        None => vec![0f32; rows * out_f],
    };
    if let Some(bias) = &bias {
        out.par_chunks_mut(out_f).for_each(|row| row.iter_mut().zip(bias).for_each(|(y, b)| *y += b));
    }
    let read_dst = bias.is_some() || residual.is_some();
    let threads = rayon::current_num_threads();
    let parallelism = if threads > 1 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None };
    with_f32(x, |xv| {
        with_f32(weight, |wv| {
            // SAFETY: x is (rows × in) row-major, Wᵀ is W read with row stride 1 and column
            // stride `in`, and `out` is the (rows × out) row-major destination.
            unsafe {
                gemm::gemm(
                    rows,
                    out_f,
                    in_f,
                    out.as_mut_ptr(),
                    1,
                    out_f as isize,
                    read_dst,
                    xv.as_ptr(),
                    1,
                    in_f as isize,
                    wv.as_ptr(),
                    in_f as isize,
                    1,
                    1.0,
                    1.0,
                    false,
                    false,
                    false,
                    parallelism,
                );
            }
        })
    })??;
    if let Some(f) = epilogue {
        out.par_chunks_mut(EPILOGUE_CHUNK).for_each(f);
    }
    Tensor::from_vec(out, out_dims, x.device()).ok()
}
