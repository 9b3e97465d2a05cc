//! LayerNorm over the last dimension, `(x − μ)/√(σ² + eps)·w + b`, as one op with a body per
//! device: on the CPU a fused forward pass and a backward pass that gives the input gradient in
//! one pass per row and the weight and bias gradients in one reduction; on an Ascend part that
//! has them, `aclnnLayerNorm` (keeping the row statistics) and `aclnnLayerNormBackward`; on a
//! CUDA GPU this crate's kernels, shaped like the CPU body (one pass forward; the input gradient
//! in one pass per row, the weight and bias gradients in one reduction); elsewhere the composed
//! reference. Everything is computed in f32; results take each operand's dtype.
use candle_core::{CpuStorage, CustomOp2, CustomOp3, DType, Layout, Shape, Tensor, D};
use std::sync::Mutex;

use rayon::prelude::*;

use crate::selection::{Body, FusedOp, OnCpu, OnCuda, Row};
#[cfg(feature = "ascend")]
use candle_ascend::fused;
#[cfg(feature = "ascend")]
use candle_ascend::soc::AclnnOp;
#[cfg(feature = "ascend")]
use candle_core::custom_backend::{BoxStorage, DynBackendStorage};

use crate::f32_views::{f32_vec, pair_f32, store_like};
use crate::fast_math;
use crate::launch::LaunchState;

/// LayerNorm's row of the support table.
pub(crate) const ROW: Row = Row {
    op: FusedOp::LayerNorm,
    cpu: OnCpu::Kernel,
    cuda: OnCuda::Kernels,
    #[cfg(feature = "ascend")]
    ascend: &[AclnnOp::LayerNorm, AclnnOp::LayerNormBackward],
};

/// The residual add fused with LayerNorm: an Ascend operator only (elsewhere an add, then
/// [`layer_norm`]).
pub(crate) const ADD_ROW: Row = Row {
    op: FusedOp::AddLayerNorm,
    cpu: OnCpu::Composed,
    cuda: OnCuda::Composed,
    #[cfg(feature = "ascend")]
    ascend: &[AclnnOp::AddLayerNorm],
};

/// LayerNorm of the residual sum `x + residual`. Parts with `aclnnAddLayerNorm` add and
/// normalize in one launch (the sum is kept for LayerNorm's backward pass); elsewhere the sum
/// is an add followed by [`layer_norm`].
pub fn add_layer_norm(
    x: &Tensor,
    residual: &Tensor,
    weight: &Tensor,
    bias: &Tensor,
    eps: f64,
) -> candle_core::Result<Tensor> {
    let dtype = x.dtype();
    let same = residual.dtype() == dtype && x.shape() == residual.shape() && weight.dtype() == bias.dtype();
    let fused_add = same
        && (weight.dtype() == dtype || weight.dtype() == DType::F32)
        && ADD_ROW.select(x.device(), dtype)? == Body::Ascend
        && ROW.select(x.device(), dtype)? == Body::Ascend
        && ascend_operands_fit(x, weight, bias);
    if !fused_add {
        return layer_norm(&(x + residual)?, weight, bias, eps);
    }
    let pending = std::sync::Arc::new(Mutex::new(None));
    let add = ResidualSum { weight: weight.clone(), bias: bias.clone(), eps, normalized: pending.clone() };
    let sum = x.apply_op2(residual, add)?;
    let training = [x, residual, weight, bias].iter().any(|t| t.track_op());
    let op = LayerNormOp { eps: eps as f32, stats: training.then(Mutex::default), normalized: Some(pending) };
    sum.apply_op3(weight, bias, op)
}

/// The normalized output that [`ResidualSum`] computed along with the sum.
type Pending = std::sync::Arc<Mutex<Option<LaunchState>>>;

/// `x + residual` through `aclnnAddLayerNorm`, which also normalizes the sum; the [`LayerNormOp`]
/// op applied next to the sum takes that output instead of launching. Its backward pass hands
/// the sum's gradient to both operands.
struct ResidualSum {
    weight: Tensor,
    bias: Tensor,
    eps: f64,
    normalized: Pending,
}

impl CustomOp2 for ResidualSum {
    fn name(&self) -> &'static str {
        "residual_sum"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        // The sum alone: the CPU's LayerNorm that follows normalizes it itself.
        let (mut x, r) = pair_f32(s1, l1, s2, l2, "residual_sum")?;
        x.iter_mut().zip(&r).for_each(|(x, r)| *x += r);
        Ok((store_like(s1, x), l1.shape().clone()))
    }

    #[cfg(feature = "ascend")]
    fn custom_fwd(
        &self,
        s1: &dyn DynBackendStorage,
        l1: &Layout,
        s2: &dyn DynBackendStorage,
        l2: &Layout,
    ) -> candle_core::Result<(BoxStorage, Shape)> {
        let (sum, normalized) = fused::add_layer_norm(s1, l1, s2, l2, &self.weight, &self.bias, self.eps)?;
        *self.normalized.lock().unwrap_or_else(|p| p.into_inner()) = Some(LaunchState::new(normalized));
        Ok((sum, l1.shape().clone()))
    }

    fn bwd(
        &self,
        _x: &Tensor,
        _residual: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        Ok((Some(grad.clone()), Some(grad.clone())))
    }
}

/// LayerNorm of `x` over its last dimension with weight and bias of that size. The CPU runs the
/// fused [`LayerNormOp`] op; a CUDA GPU runs
/// [`LayerNormOp`] (weight and bias in x's dtype); parts with the operators their Ascend body;
/// other devices the composed [`reference()`].
pub fn layer_norm(x: &Tensor, weight: &Tensor, bias: &Tensor, eps: f64) -> candle_core::Result<Tensor> {
    let training = [x, weight, bias].iter().any(|t| t.track_op());
    match ROW.select(x.device(), x.dtype())? {
        Body::Cpu => x.contiguous()?.apply_op3(weight, bias, LayerNormOp::new(eps as f32)),
        Body::Cuda if x.dim(D::Minus1)? <= CUDA_MAX_HIDDEN => {
            let (w, b) = (weight.to_dtype(x.dtype())?, bias.to_dtype(x.dtype())?);
            x.contiguous()?.apply_op3(&w, &b, LayerNormOp::new(eps as f32))
        }
        Body::Ascend if ascend_operands_fit(x, weight, bias) => {
            let op = LayerNormOp { eps: eps as f32, stats: training.then(Mutex::default), normalized: None };
            x.apply_op3(weight, bias, op)
        }
        _ => reference(x, weight, bias, eps),
    }
}

/// The widest rows the CUDA body takes: its weight-gradient kernel keeps two f32 sums per
/// column in 48 KiB of shared memory beside a 128-byte scratch.
const CUDA_MAX_HIDDEN: usize = (48 * 1024 - 128) / 8;

/// Whether these operands fit [`LayerNormOp`]'s Ascend body: a 1-D weight and bias of one
/// dtype, x's or FLOAT (ops-nn `aclnn_layer_norm.cpp` CheckInputDtype).
fn ascend_operands_fit(x: &Tensor, weight: &Tensor, bias: &Tensor) -> bool {
    let dtype = x.dtype();
    weight.dtype() == bias.dtype() && (weight.dtype() == dtype || weight.dtype() == DType::F32) && weight.rank() == 1
}

/// The composed layer norm, in f32 whatever the input dtype; the result takes x's dtype.
pub fn reference(x: &Tensor, weight: &Tensor, bias: &Tensor, eps: f64) -> candle_core::Result<Tensor> {
    let x32 = x.to_dtype(DType::F32)?;
    let mean = x32.mean_keepdim(D::Minus1)?;
    let centered = x32.broadcast_sub(&mean)?;
    let var = centered.sqr()?.mean_keepdim(D::Minus1)?;
    let normed = centered.broadcast_div(&(var + eps)?.sqrt()?)?;
    let out = normed.broadcast_mul(&weight.to_dtype(DType::F32)?)?.broadcast_add(&bias.to_dtype(DType::F32)?)?;
    out.to_dtype(x.dtype())
}

use crate::fast_math::moments;

/// The op: `(x − μ)/√(σ² + eps)·w + b` over the last dimension of x; w and b are (hidden,). (The
/// layer that holds w and b is the model's.)
pub struct LayerNormOp {
    eps: f32,
    /// The Ascend forward pass's row statistics, for the backward pass (`None`: not kept).
    stats: Option<Mutex<Option<LaunchState>>>,
    /// The output already computed by the [`ResidualSum`] that made the input, if any.
    normalized: Option<Pending>,
}

impl LayerNormOp {
    /// The op with variance epsilon `eps`.
    pub fn new(eps: f32) -> Self {
        Self { eps, stats: None, normalized: None }
    }
}

impl CustomOp3 for LayerNormOp {
    fn name(&self) -> &'static str {
        "layer_norm"
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
        let hidden = l1.dims().last().copied().unwrap_or(1).max(1);
        if l2.shape().elem_count() != hidden || l3.shape().elem_count() != hidden {
            candle_core::bail!("layer_norm: weight and bias must have {hidden} elements");
        }
        let (w, b) = (f32_vec(s2, l2, "layer_norm")?, f32_vec(s3, l3, "layer_norm")?);
        let eps = self.eps;
        if let CpuStorage::BF16(v) = s1 {
            // bf16 rows are widened into a row buffer and rounded once on the way out.
            let x = crate::f32_views::contiguous(v, l1, "layer_norm")?;
            let mut out = vec![half::bf16::ZERO; x.len()];
            out.par_chunks_mut(hidden).zip(x.par_chunks(hidden)).for_each_init(
                || vec![0f32; hidden],
                |row, (dst, src)| {
                    fast_math::widen_bf16(src, row);
                    fast_math::layer_norm_row(row, &w, &b, eps);
                    fast_math::round_to_bf16(row, dst);
                },
            );
            return Ok((CpuStorage::BF16(out), l1.shape().clone()));
        }
        let mut x = f32_vec(s1, l1, "layer_norm")?;
        x.par_chunks_mut(hidden).for_each(|row| fast_math::layer_norm_row(row, &w, &b, eps));
        Ok((store_like(s1, x), l1.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        Ok((cuda_launch::layer_norm(s1, l1, s2, l2, s3, l3, self.eps)?, l1.shape().clone()))
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
        let ready = self.normalized.as_ref().and_then(|n| n.lock().unwrap_or_else(|p| p.into_inner()).take());
        if let Some(ready) = ready {
            let (out, stats) = ready.into_inner::<fused::AddLayerNormOut>("layer_norm")?.into_parts();
            if let Some(slot) = &self.stats {
                *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(LaunchState::new(stats));
            }
            return Ok((out, l1.shape().clone()));
        }
        let (out, shape, stats) = fused::layer_norm(s1, l1, s2, l2, s3, l3, f64::from(self.eps), self.stats.is_some())?;
        if let Some(slot) = &self.stats {
            *slot.lock().unwrap_or_else(|p| p.into_inner()) = stats.map(LaunchState::new);
        }
        Ok((out, shape))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        b: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        #[cfg(feature = "ascend")]
        if ROW.select(x.device(), x.dtype())? == Body::Ascend {
            let stats = self.stats.as_ref().and_then(|s| s.lock().unwrap_or_else(|p| p.into_inner()).clone());
            let Some(stats) = stats else {
                candle_core::bail!("layer_norm: backward pass of a forward without statistics")
            };
            // One buffer [dx | dw | db] in x's dtype from aclnnLayerNormBackward, which writes
            // dx in the input's dtype and dw, db in the weight's: a weight of another dtype (an
            // f32 weight beside half activations) is rounded to x's for it.
            let w_dtype = w.dtype();
            let w = &w.to_dtype(x.dtype())?;
            let packed = layer_norm_grads(x, w, grad, &stats)?;
            let (n, hidden) = (x.elem_count(), w.elem_count());
            let dx = packed.narrow(0, 0, n)?.reshape(x.shape())?;
            let dw = packed.narrow(0, n, hidden)?.reshape(w.shape())?.to_dtype(w_dtype)?;
            let db = packed.narrow(0, n + hidden, hidden)?.reshape(b.shape())?.to_dtype(b.dtype())?;
            return Ok((Some(dx), Some(dw), Some(db)));
        }
        let grad = grad.contiguous()?;
        let dx = x.apply_op3_no_bwd(w, &grad, &LayerNormInputGrad { eps: self.eps })?;
        let params = x.apply_op2_no_bwd(&grad, &LayerNormParamGrad { eps: self.eps })?;
        let dw = params.get(0)?.to_dtype(w.dtype())?;
        let db = params.get(1)?.to_dtype(b.dtype())?;
        Ok((Some(dx), Some(dw), Some(db)))
    }
}

/// LayerNorm's three gradients on an Ascend part from the forward's kept statistics, packed
/// as `[dx | dw | db]` in x's dtype (`aclnnLayerNormBackward`); the CPU and CUDA have
/// [`LayerNormInputGrad`] and [`LayerNormParamGrad`].
#[cfg(feature = "ascend")]
fn layer_norm_grads(x: &Tensor, w: &Tensor, grad: &Tensor, stats: &LaunchState) -> candle_core::Result<Tensor> {
    crate::launch::ascend_launch("layer_norm_grads", [x, w, grad], |[(s1, l1), (s2, l2), (s3, l3)]| {
        fused::layer_norm_grads(s1, l1, s2, l2, s3, l3, stats.get("layer_norm_grads")?)
    })
}

/// dx = rstd·(ĝ − mean(ĝ) − x̂·mean(ĝ⊙x̂)) with ĝ = g⊙w, per row.
struct LayerNormInputGrad {
    eps: f32,
}

impl CustomOp3 for LayerNormInputGrad {
    fn name(&self) -> &'static str {
        "layer_norm_input_grad"
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        Ok((cuda_launch::layer_norm_input_grad(s1, l1, s2, l2, s3, l3, self.eps)?, l1.shape().clone()))
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
        let hidden = l1.dims().last().copied().unwrap_or(1).max(1);
        let w = f32_vec(s2, l2, "layer_norm_input_grad")?;
        let (x, mut g) = pair_f32(s1, l1, s3, l3, "layer_norm_input_grad")?;
        g.par_chunks_mut(hidden).zip(x.par_chunks(hidden)).for_each(|(g, x)| {
            let (mean, rstd) = moments(x, self.eps);
            let n = hidden as f32;
            let (mut sum_g, mut sum_gx) = (0f32, 0f32);
            for ((g, x), w) in g.iter().zip(x).zip(&w) {
                let gh = g * w;
                sum_g += gh;
                sum_gx += gh * (x - mean) * rstd;
            }
            let (mean_g, mean_gx) = (sum_g / n, sum_gx / n);
            for ((g, x), w) in g.iter_mut().zip(x).zip(&w) {
                let xh = (x - mean) * rstd;
                *g = rstd * (*g * w - mean_g - xh * mean_gx);
            }
        });
        Ok((store_like(s1, g), l1.shape().clone()))
    }
}

/// [Σ g⊙x̂ ; Σ g] over all rows, as an f32 (2, hidden) tensor.
struct LayerNormParamGrad {
    eps: f32,
}

impl CustomOp2 for LayerNormParamGrad {
    fn name(&self) -> &'static str {
        "layer_norm_param_grad"
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let hidden = l1.dims().last().copied().unwrap_or(1).max(1);
        Ok((cuda_launch::layer_norm_param_grad(s1, l1, s2, l2, self.eps)?, Shape::from((2, hidden))))
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let hidden = l1.dims().last().copied().unwrap_or(1).max(1);
        let (x, g) = pair_f32(s1, l1, s2, l2, "layer_norm_param_grad")?;
        let rows = x.len() / hidden;
        let per_task = rows.div_ceil(rayon::current_num_threads().max(1) * 4).max(1);
        let sums = (0..rows.div_ceil(per_task))
            .into_par_iter()
            .map(|task| {
                let mut acc = vec![0f32; 2 * hidden];
                for r in task * per_task..((task + 1) * per_task).min(rows) {
                    let (x, g) = (&x[r * hidden..(r + 1) * hidden], &g[r * hidden..(r + 1) * hidden]);
                    let (mean, rstd) = moments(x, self.eps);
                    let (dw, db) = acc.split_at_mut(hidden);
                    for (((dw, db), x), g) in dw.iter_mut().zip(db.iter_mut()).zip(x).zip(g) {
                        *dw += g * (x - mean) * rstd;
                        *db += g;
                    }
                }
                acc
            })
            .reduce(
                || vec![0f32; 2 * hidden],
                |mut a, b| {
                    a.iter_mut().zip(&b).for_each(|(a, b)| *a += b);
                    a
                },
            );
        Ok((CpuStorage::F32(sums), Shape::from((2, hidden))))
    }
}

/// The CUDA launches of LayerNorm and its gradients (kernels in `kernels/codon_ops.cu`).
#[cfg(feature = "cuda")]
pub(crate) mod cuda_launch;

#[cfg(test)]
mod tests;
