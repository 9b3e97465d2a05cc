//! The linear layer's CPU inference body: the bias and a residual written into the GEMM's
//! destination first, so the output takes one pass; f32 operands take the f32 GEMM, a bf16
//! weight the bf16 kernels ([`crate::cpu_bf16`]), packed once per layer where nothing else can
//! change it.
use std::sync::OnceLock;

use candle_core::{CpuStorage, DType, Device, Tensor};
use rayon::prelude::*;

use super::EPILOGUE_CHUNK;

use crate::cpu_bf16::{self, PackedWeight, ValuesMut};
use crate::cpu_gemm::{matmul_into, Mat};
use crate::f32_views::{tensor_from_f32, with_f32, with_optional_values, with_values};

/// `x·Wᵀ + bias + residual` for CPU tensors: x (…, in), W (out, in), bias (out), residual
/// shaped like the output; then `epilogue` (an element-wise activation) in place on the result.
/// f32 operands take the f32 GEMM; a bf16 weight takes the bf16 kernels ([`crate::cpu_bf16`]),
/// which read bf16 activations in place and write the output in x's dtype. `Ok(None)` when the
/// inputs do not fit this kernel (another path computes them); a failure inside the kernel is an
/// error, not a silent fallback.
pub fn fused_linear(
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    residual: Option<&Tensor>,
    epilogue: Option<fn(&mut [f32])>,
) -> candle_core::Result<Option<Tensor>> {
    fused_linear_with(x, weight, None, bias, residual, epilogue)
}

/// A layer's bf16 weight packed for the CPU's kernels, made on first use.
pub(super) type PackCache = OnceLock<PackedWeight>;

pub(super) fn fused_linear_with(
    x: &Tensor,
    weight: &Tensor,
    pack: Option<&PackCache>,
    bias: Option<&Tensor>,
    residual: Option<&Tensor>,
    epilogue: Option<fn(&mut [f32])>,
) -> candle_core::Result<Option<Tensor>> {
    let bf16_weight = weight.dtype() == DType::BF16 && x.dtype().is_float();
    if !matches!(x.device(), Device::Cpu) || !(bf16_weight || (x.dtype() == DType::F32 && weight.dtype() == DType::F32))
    {
        return Ok(None);
    }
    let Ok((out_f, in_f)) = weight.dims2() else { return Ok(None) };
    let dims = x.dims();
    let Some((_, batch)) = dims.split_last().filter(|(&last, _)| last == in_f) else { return Ok(None) };
    let rows: usize = batch.iter().product();
    let out_dims: Vec<usize> = batch.iter().copied().chain([out_f]).collect();
    if bias.is_some_and(|b| b.dims() != [out_f]) || residual.is_some_and(|r| r.dims() != out_dims.as_slice()) {
        return Ok(None);
    }
    let bias = bias.map(|b| with_f32(b, "linear", <[f32]>::to_vec)).transpose()?;
    if bf16_weight {
        // Only a weight that nothing else can change (not a `Var`, its storage shared with no
        // view or detached copy) keeps its packed copy.
        let fresh;
        let packed = match pack.filter(|_| !weight.is_variable() && !weight.shares_storage()) {
            Some(cell) => match cell.get() {
                Some(p) => p,
                None => {
                    let p = packed_now(weight)?;
                    cell.get_or_init(|| p)
                }
            },
            None => {
                fresh = packed_now(weight)?;
                &fresh
            }
        };
        return bf16_linear(x, packed, rows, bias.as_deref(), residual, epilogue, &out_dims).map(Some);
    }
    let mut out: Vec<f32> = match residual {
        Some(r) => with_f32(r, "linear", <[f32]>::to_vec)?,
        None => vec![0f32; rows * out_f],
    };
    if let Some(bias) = &bias {
        out.par_chunks_mut(out_f).for_each(|row| row.iter_mut().zip(bias).for_each(|(y, b)| *y += b));
    }
    let accumulate = bias.is_some() || residual.is_some();
    with_f32(x, "linear", |xv| {
        with_f32(weight, "linear", |wv| {
            let (x, w) = (Mat::rows(xv, rows, in_f, in_f), Mat::rows(wv, out_f, in_f, in_f));
            matmul_into(&mut out, out_f, x, w.t(), 1.0, accumulate, true)
        })
    })???;
    if let Some(f) = epilogue {
        out.par_chunks_mut(EPILOGUE_CHUNK).for_each(f);
    }
    tensor_from_f32(out, &out_dims, x.dtype()).map(Some)
}

/// A bf16 CPU weight (out, in) packed for this machine's bf16 kernel.
fn packed_now(weight: &Tensor) -> candle_core::Result<PackedWeight> {
    let (out_f, in_f) = weight.dims2()?;
    let weight = weight.contiguous()?;
    let (storage, layout) = weight.storage_and_layout();
    match &*storage {
        candle_core::Storage::Cpu(CpuStorage::BF16(v)) => {
            PackedWeight::new(crate::f32_views::contiguous(v, layout, "linear")?, out_f, in_f)
        }
        _ => candle_core::bail!("linear: expected a bf16 weight on the CPU"),
    }
}

/// `epilogue(x·Wᵀ + bias + residual)` on the bf16 kernels, in x's dtype.
fn bf16_linear(
    x: &Tensor,
    packed: &PackedWeight,
    rows: usize,
    bias: Option<&[f32]>,
    residual: Option<&Tensor>,
    activation: Option<fn(&mut [f32])>,
    out_dims: &[usize],
) -> candle_core::Result<Tensor> {
    let n = rows * packed.dims().0;
    with_values(x, "linear", |xv| {
        with_optional_values(residual, "linear", |residual| {
            let epilogue = cpu_bf16::Epilogue { bias, residual, activation };
            if x.dtype() == DType::BF16 {
                let mut out = vec![half::bf16::ZERO; n];
                cpu_bf16::linear(xv, packed, rows, &epilogue, ValuesMut::Bf16(&mut out))?;
                Tensor::from_vec(out, out_dims, &Device::Cpu)
            } else {
                let mut out = vec![0f32; n];
                cpu_bf16::linear(xv, packed, rows, &epilogue, ValuesMut::F32(&mut out))?;
                tensor_from_f32(out, out_dims, x.dtype())
            }
        })?
    })?
}
