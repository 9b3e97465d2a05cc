//! The activations as ops with a fused backward pass: `gelu_new` and the last-dimension softmax.
//! Composed from tensor ops, their backward passes take a dozen element-wise passes over the
//! largest activations of a training step; fused, one. CPU bodies are parallel kernels; CUDA
//! bodies are this crate's kernels (`kernels/codon_ops.cu`); Ascend bodies are
//! `aclnnGeluV2`/`aclnnGeluBackwardV2` and `aclnnSoftmax`/`aclnnSoftmaxBackward`.
use crate::selection::{FusedOp, OnCpu, OnCuda, Row};
#[cfg(feature = "ascend")]
use candle_ascend::fused;
#[cfg(feature = "ascend")]
use candle_ascend::soc::AclnnOp;
#[cfg(feature = "ascend")]
use candle_core::custom_backend::{BoxStorage, DynBackendStorage};
use candle_core::{CpuStorage, CustomOp1, CustomOp2, DType, Layout, Shape, Tensor, D};
use rayon::prelude::*;

use crate::f32_views::{contiguous, pair_f32, store_like};
use crate::fast_math;

/// Softmax over the last dimension, computed in f32; the result is f32. The CPU, CUDA GPUs and
/// parts with aclnnSoftmax and its backward run [`Softmax`]; other devices the composed
/// [`softmax_reference`].
pub fn softmax_last_dim_f32(x: &Tensor) -> candle_core::Result<Tensor> {
    let x = x.to_dtype(DType::F32)?;
    if SOFTMAX_ROW.select(x.device(), DType::F32)?.is_native() {
        return x.contiguous()?.apply_op1(Softmax);
    }
    softmax_reference(&x)
}

/// Softmax's row of the support table: [`Softmax`] on the CPU and CUDA GPUs takes f32 (callers
/// widen), on an Ascend part the dtypes its `aclnnSoftmax` takes, half ones included.
pub(crate) const SOFTMAX_ROW: Row = Row {
    op: FusedOp::Softmax,
    cpu: OnCpu::Kernel,
    cuda: OnCuda::Kernels,
    #[cfg(feature = "ascend")]
    ascend: &[AclnnOp::Softmax, AclnnOp::SoftmaxBackward],
};

/// The softmax gradient's row of the support table.
pub(crate) const SOFTMAX_GRAD_ROW: Row = Row {
    op: FusedOp::SoftmaxGrad,
    cpu: OnCpu::Kernel,
    cuda: OnCuda::Kernels,
    #[cfg(feature = "ascend")]
    ascend: &[AclnnOp::SoftmaxBackward],
};

/// GELU's row of the support table.
pub(crate) const GELU_ROW: Row = Row {
    op: FusedOp::Gelu,
    cpu: OnCpu::Kernel,
    cuda: OnCuda::Kernels,
    #[cfg(feature = "ascend")]
    ascend: &[AclnnOp::GeluV2, AclnnOp::GeluBackwardV2],
};

/// The composed softmax over the last dimension.
pub fn softmax_reference(x: &Tensor) -> candle_core::Result<Tensor> {
    let max = x.max_keepdim(D::Minus1)?.detach();
    let exp = x.broadcast_sub(&max)?.exp()?;
    exp.broadcast_div(&exp.sum_keepdim(D::Minus1)?)
}

/// The softmax gradient `y ⊙ (g − Σ g⊙y)` over the last dimension, from softmax output `y`
/// (f32 on the CPU; on devices f32, or the half dtype where softmax's body takes it) and incoming gradient `g`, for ops that write their own backward pass: one pass on
/// the CPU and CUDA GPUs, `aclnnSoftmaxBackward` on parts that have it, composed elsewhere.
pub fn softmax_last_dim_grad(y: &Tensor, g: &Tensor) -> candle_core::Result<Tensor> {
    let dtype = if y.device().is_cpu() { DType::F32 } else { y.dtype() };
    let g = g.to_dtype(dtype)?.contiguous()?;
    if SOFTMAX_GRAD_ROW.select(y.device(), dtype)?.is_native() {
        return y.contiguous()?.apply_op2_no_bwd(&g, &SoftmaxGrad { scale: 1.0 });
    }
    y.mul(&g.broadcast_sub(&(&g * y)?.sum_keepdim(D::Minus1)?)?)
}

/// `gelu_new`, the tanh approximation of GELU. The CPU, CUDA GPUs and parts with aclnnGeluV2
/// and aclnnGeluBackwardV2 for x's dtype run [`GeluNew`]; other devices candle's `gelu` (the
/// same function, with a composed backward).
pub fn gelu_new(x: &Tensor) -> candle_core::Result<Tensor> {
    if GELU_ROW.select(x.device(), x.dtype())?.is_native() {
        return x.contiguous()?.apply_op1(GeluNew);
    }
    x.gelu()
}

/// Elements per parallel task.
const CHUNK: usize = 4096;

/// Apply `f` to f32 values of any float storage, converting bf16/f16 through f32.
fn map_f32(s: &CpuStorage, l: &Layout, op: &str, f: impl Fn(&mut [f32]) + Sync) -> candle_core::Result<CpuStorage> {
    fn via<T: Copy + Send + Sync>(
        v: &[T],
        to: impl Fn(T) -> f32 + Sync + Send,
        from: impl Fn(f32) -> T + Sync + Send,
        f: &(impl Fn(&mut [f32]) + Sync),
    ) -> Vec<T> {
        let mut x: Vec<f32> = v.par_iter().map(|&e| to(e)).collect();
        f(&mut x);
        x.into_par_iter().map(from).collect()
    }
    Ok(match s {
        CpuStorage::F32(v) => {
            let mut out = contiguous(v, l, op)?.to_vec();
            f(&mut out);
            CpuStorage::F32(out)
        }
        CpuStorage::BF16(v) => CpuStorage::BF16(via(contiguous(v, l, op)?, |e| e.to_f32(), half::bf16::from_f32, &f)),
        CpuStorage::F16(v) => CpuStorage::F16(via(contiguous(v, l, op)?, |e| e.to_f32(), half::f16::from_f32, &f)),
        _ => candle_core::bail!("{op}: unsupported dtype (expected f32, f16 or bf16)"),
    })
}

/// `gelu_new(x)` on the CPU; its backward is `GeluNewGrad`.
pub struct GeluNew;

impl CustomOp1 for GeluNew {
    fn name(&self) -> &'static str {
        "gelu_new"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let out = map_f32(s, l, "gelu_new", |x| x.par_chunks_mut(CHUNK).for_each(fast_math::gelu_new_in_place))?;
        Ok((out, l.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s: &candle_core::CudaStorage,
        l: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        Ok((cuda_launch::gelu_new(s, l, None)?, l.shape().clone()))
    }

    #[cfg(feature = "ascend")]
    fn custom_fwd(&self, s: &dyn DynBackendStorage, l: &Layout) -> candle_core::Result<(BoxStorage, Shape)> {
        fused::gelu_tanh(s, l)
    }

    fn bwd(&self, x: &Tensor, _res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(x.apply_op2_no_bwd(&grad.contiguous()?, &GeluNewGrad)?))
    }
}

/// `grad · gelu_new'(x)` in one pass.
struct GeluNewGrad;

impl CustomOp2 for GeluNewGrad {
    fn name(&self) -> &'static str {
        "gelu_new_grad"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (x, mut g) = pair_f32(s1, l1, s2, l2, "gelu_new_grad")?;
        g.par_chunks_mut(CHUNK).zip(x.par_chunks(CHUNK)).for_each(|(g, x)| fast_math::gelu_new_grad(x, g));
        Ok((store_like(s2, g), l1.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        Ok((cuda_launch::gelu_new_grad(s1, l1, None, s2, l2)?, l1.shape().clone()))
    }

    #[cfg(feature = "ascend")]
    fn custom_fwd(
        &self,
        s1: &dyn DynBackendStorage,
        l1: &Layout,
        s2: &dyn DynBackendStorage,
        l2: &Layout,
    ) -> candle_core::Result<(BoxStorage, Shape)> {
        fused::gelu_tanh_grad(s1, l1, s2, l2)
    }
}

/// Softmax over the last dimension on the CPU; its backward is `SoftmaxGrad`.
pub struct Softmax;

impl CustomOp1 for Softmax {
    fn name(&self) -> &'static str {
        "softmax_last_dim"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let width = l.dims().last().copied().unwrap_or(1).max(1);
        let zeros = vec![0f32; width];
        let rows_per_task = (CHUNK / width).max(1) * width;
        let out = map_f32(s, l, "softmax_last_dim", |x| {
            x.par_chunks_mut(rows_per_task).for_each(|rows| fast_math::softmax_rows(rows, width, &zeros))
        })?;
        Ok((out, l.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s: &candle_core::CudaStorage,
        l: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        Ok((cuda_launch::softmax(s, l, 1.0, None)?, l.shape().clone()))
    }

    #[cfg(feature = "ascend")]
    fn custom_fwd(&self, s: &dyn DynBackendStorage, l: &Layout) -> candle_core::Result<(BoxStorage, Shape)> {
        fused::softmax_last_dim(s, l)
    }

    fn bwd(&self, _x: &Tensor, res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(softmax_last_dim_grad(res, grad)?))
    }
}

/// `scale · y ⊙ (g − Σ g⊙y)` per row, from the softmax output `y` and the incoming gradient `g`
/// (Ascend's body takes no scale: [`ScaledSoftmax`] does not run there).
struct SoftmaxGrad {
    scale: f32,
}

impl CustomOp2 for SoftmaxGrad {
    fn name(&self) -> &'static str {
        "softmax_last_dim_grad"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let width = l1.dims().last().copied().unwrap_or(1).max(1);
        let (y, mut g) = pair_f32(s1, l1, s2, l2, "softmax_last_dim_grad")?;
        let rows_per_task = (CHUNK / width).max(1) * width;
        g.par_chunks_mut(rows_per_task).zip(y.par_chunks(rows_per_task)).for_each(|(g, y)| {
            for (g, y) in g.chunks_mut(width).zip(y.chunks(width)) {
                let dot: f32 = g.iter().zip(y).map(|(a, b)| a * b).sum();
                g.iter_mut().zip(y).for_each(|(g, y)| *g = self.scale * y * (*g - dot));
            }
        });
        Ok((store_like(s2, g), l1.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        Ok((cuda_launch::softmax_grad(s1, l1, s2, l2, self.scale)?, l1.shape().clone()))
    }

    #[cfg(feature = "ascend")]
    fn custom_fwd(
        &self,
        s1: &dyn DynBackendStorage,
        l1: &Layout,
        s2: &dyn DynBackendStorage,
        l2: &Layout,
    ) -> candle_core::Result<(BoxStorage, Shape)> {
        if self.scale != 1.0 {
            candle_core::bail!("softmax_last_dim_grad: the Ascend body takes no scale")
        }
        fused::softmax_last_dim_grad(s1, l1, s2, l2)
    }
}

/// softmax(x·scale + bias) over the last dimension, in x's dtype with f32 accumulation: the
/// attention probabilities in one pass over the scores, and their gradient in one more (the
/// scale folded in). The bias, a key mask kept as a constant (it gets no gradient), is one f32
/// row per group of consecutive score rows; [`ScaledSoftmax::bias_groups`] says whether a bias fits. CPU and CUDA
/// bodies.
pub struct ScaledSoftmax {
    scale: f32,
    /// The bias (contiguous f32, rows × last dimension) and the score rows each of its rows serves.
    bias: Option<(Tensor, usize)>,
}

impl ScaledSoftmax {
    /// softmax(x·scale).
    pub fn new(scale: f64) -> Self {
        Self { scale: scale as f32, bias: None }
    }

    /// softmax(x·scale + bias) for scores shaped `scores`; `None` when the bias does not fit
    /// ([`Self::bias_groups`]).
    pub fn with_key_bias(scale: f64, bias: &Tensor, scores: &[usize]) -> candle_core::Result<Option<Self>> {
        let Some(rows) = Self::bias_groups(bias.dims(), scores) else { return Ok(None) };
        Ok(Some(Self { scale: scale as f32, bias: Some((bias.to_dtype(DType::F32)?.contiguous()?, rows)) }))
    }

    /// The score rows that share one bias row, when `bias` broadcasts against `scores` that way:
    /// the same leading dimensions, then ones, then the same last dimension ((b, 1, 1, keys)
    /// against (b, heads, rows, keys) gives heads·rows).
    pub fn bias_groups(bias: &[usize], scores: &[usize]) -> Option<usize> {
        let rank = scores.len();
        if rank == 0 || bias.len() != rank || bias[rank - 1] != scores[rank - 1] {
            return None;
        }
        let lead = bias[..rank - 1].iter().rposition(|&d| d != 1).map_or(0, |i| i + 1);
        (bias[..lead] == scores[..lead]).then(|| scores[lead..rank - 1].iter().product())
    }

    /// The bias row of score row `row`, from the host copy of the bias.
    fn bias_row<'a>(&self, bias: &'a [f32], row: usize, width: usize) -> Option<&'a [f32]> {
        let (_, rows) = self.bias.as_ref()?;
        let start = row / rows * width;
        bias.get(start..start + width)
    }
}

impl CustomOp1 for ScaledSoftmax {
    fn name(&self) -> &'static str {
        "scaled_softmax"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let width = l.dims().last().copied().unwrap_or(1).max(1);
        let bias = match &self.bias {
            Some((b, _)) => b.flatten_all()?.to_vec1::<f32>()?,
            None => Vec::new(),
        };
        let zeros = vec![0f32; width];
        let out = map_f32(s, l, "scaled_softmax", |x| {
            x.par_chunks_mut(width).enumerate().for_each(|(row, values)| {
                let bias = self.bias_row(&bias, row, width).unwrap_or(&zeros);
                values.iter_mut().for_each(|v| *v *= self.scale);
                fast_math::softmax_rows(values, width, bias);
            })
        })?;
        Ok((out, l.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s: &candle_core::CudaStorage,
        l: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let out = match &self.bias {
            Some((bias, rows_per_bias)) => {
                let (storage, layout) = bias.storage_and_layout();
                let candle_core::Storage::Cuda(storage) = &*storage else {
                    candle_core::bail!("scaled_softmax: the bias is not on the GPU")
                };
                let bias = cuda_launch::RowBias { storage, layout, rows_per_bias: *rows_per_bias };
                cuda_launch::softmax(s, l, self.scale, Some(bias))?
            }
            None => cuda_launch::softmax(s, l, self.scale, None)?,
        };
        Ok((out, l.shape().clone()))
    }

    fn bwd(&self, _x: &Tensor, res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let grad = grad.to_dtype(res.dtype())?.contiguous()?;
        Ok(Some(res.contiguous()?.apply_op2_no_bwd(&grad, &SoftmaxGrad { scale: self.scale })?))
    }
}

/// The CUDA launches of GELU and softmax (kernels in `kernels/codon_ops.cu`); the linear layer's
/// GELU epilogue launches the same kernels with its bias.
#[cfg(feature = "cuda")]
pub(crate) mod cuda_launch;

#[cfg(test)]
mod tests;
