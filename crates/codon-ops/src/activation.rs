//! The activations as ops with a fused backward pass: `gelu_new` and the last-dimension softmax.
//! Composed from tensor ops, their backward passes take a dozen element-wise passes over the
//! largest activations of a training step; fused, one. CPU bodies are parallel kernels; Ascend
//! bodies are `aclnnGeluV2`/`aclnnGeluBackwardV2` and `aclnnSoftmax`/`aclnnSoftmaxBackward`.
use candle_ascend::fused;
use candle_ascend::soc::AclnnOp;
use candle_core::custom_backend::{BoxStorage, DynBackendStorage};
use candle_core::{CpuStorage, CustomOp1, CustomOp2, DType, Layout, Shape, Tensor, D};
use rayon::prelude::*;

use crate::f32_views::{contiguous, pair_f32, store_like};
use crate::fast_math;

/// Softmax over the last dimension, computed in f32; the result is f32. The CPU and parts with
/// aclnnSoftmax and its backward run [`Softmax`]; a CUDA GPU candle-nn's kernel when nothing
/// needs a gradient; other devices the composed [`softmax_reference`].
pub fn softmax_last_dim_f32(x: &Tensor) -> candle_core::Result<Tensor> {
    let x = x.to_dtype(DType::F32)?;
    if x.device().is_cpu() {
        return x.contiguous()?.apply_op1(Softmax);
    }
    if x.device().is_cuda() && !x.track_op() {
        return candle_nn::ops::softmax_last_dim(&x.contiguous()?);
    }
    if fused::runs_natively(&x, AclnnOp::Softmax, DType::F32)
        && fused::runs_natively(&x, AclnnOp::SoftmaxBackward, DType::F32)
    {
        return x.apply_op1(Softmax);
    }
    softmax_reference(&x)
}

/// Whether `t`'s device runs softmax over the last dimension in `t`'s own half dtype: an NPU
/// part whose `aclnnSoftmax` and `aclnnSoftmaxBackward` take it ([`Softmax`] then runs there in
/// that dtype, accumulating in f32 and rounding once).
pub fn native_half_softmax_runs(t: &Tensor) -> bool {
    let dtype = t.dtype();
    dtype != DType::F32
        && !t.device().is_cpu()
        && !t.device().is_cuda()
        && fused::runs_natively(t, AclnnOp::Softmax, dtype)
        && fused::runs_natively(t, AclnnOp::SoftmaxBackward, dtype)
}

/// The composed softmax over the last dimension.
pub fn softmax_reference(x: &Tensor) -> candle_core::Result<Tensor> {
    let max = x.max_keepdim(D::Minus1)?.detach();
    let exp = x.broadcast_sub(&max)?.exp()?;
    exp.broadcast_div(&exp.sum_keepdim(D::Minus1)?)
}

/// The softmax gradient `y ⊙ (g − Σ g⊙y)` over the last dimension, from softmax output `y`
/// (f32 on the CPU; on devices f32, or the half dtype where [`native_half_softmax_runs`]) and
/// incoming gradient `g`, for ops that write their own backward pass: one pass on the
/// CPU, `aclnnSoftmaxBackward` on parts that have it, composed elsewhere.
pub fn softmax_last_dim_grad(y: &Tensor, g: &Tensor) -> candle_core::Result<Tensor> {
    let dtype = if y.device().is_cpu() { DType::F32 } else { y.dtype() };
    let g = g.to_dtype(dtype)?.contiguous()?;
    if y.device().is_cpu() || fused::runs_natively(y, AclnnOp::SoftmaxBackward, dtype) {
        return y.contiguous()?.apply_op2_no_bwd(&g, &SoftmaxGrad);
    }
    y.mul(&g.broadcast_sub(&(&g * y)?.sum_keepdim(D::Minus1)?)?)
}

/// `gelu_new`, the tanh approximation of GELU. The CPU and parts with aclnnGeluV2 and
/// aclnnGeluBackwardV2 for x's dtype run [`GeluNew`]; other devices candle's `gelu` (the same
/// function, with a composed backward).
pub fn gelu_new(x: &Tensor) -> candle_core::Result<Tensor> {
    if x.device().is_cpu() {
        return x.contiguous()?.apply_op1(GeluNew);
    }
    if fused::runs_natively(x, AclnnOp::GeluV2, x.dtype())
        && fused::runs_natively(x, AclnnOp::GeluBackwardV2, x.dtype())
    {
        return x.apply_op1(GeluNew);
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

    fn custom_fwd(&self, s: &dyn DynBackendStorage, l: &Layout) -> candle_core::Result<(BoxStorage, Shape)> {
        fused::softmax_last_dim(s, l)
    }

    fn bwd(&self, _x: &Tensor, res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(softmax_last_dim_grad(res, grad)?))
    }
}

/// `y ⊙ (g − Σ g⊙y)` per row, from the softmax output `y` and the incoming gradient `g`.
struct SoftmaxGrad;

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
                g.iter_mut().zip(y).for_each(|(g, y)| *g = y * (*g - dot));
            }
        });
        Ok((store_like(s2, g), l1.shape().clone()))
    }

    fn custom_fwd(
        &self,
        s1: &dyn DynBackendStorage,
        l1: &Layout,
        s2: &dyn DynBackendStorage,
        l2: &Layout,
    ) -> candle_core::Result<(BoxStorage, Shape)> {
        fused::softmax_last_dim_grad(s1, l1, s2, l2)
    }
}

#[cfg(test)]
mod tests {
    use candle_core::{DType, Device, Tensor, Var, D};

    use crate::f32_views::max_abs_diff as max_diff;

    #[test]
    fn softmax_and_its_gradient_match_the_composed_ops() {
        let x = Tensor::randn(0f32, 3.0, (3, 5, 37), &Device::Cpu).unwrap();
        let w = Tensor::randn(0f32, 1.0, (3, 5, 37), &Device::Cpu).unwrap();
        let v = Var::from_tensor(&x).unwrap();
        let ours = v.as_tensor().apply_op1(super::Softmax).unwrap();
        let reference = candle_nn::ops::softmax(v.as_tensor(), D::Minus1).unwrap();
        assert!(max_diff(&ours, &reference) < 1e-6);
        let g_ours = (ours * &w).unwrap().sum_all().unwrap().backward().unwrap();
        let g_ref = (reference * &w).unwrap().sum_all().unwrap().backward().unwrap();
        assert!(max_diff(g_ours.get(&v).unwrap(), g_ref.get(&v).unwrap()) < 1e-6);
        // bf16 storage computes in f32 and rounds once.
        let xb = x.to_dtype(DType::BF16).unwrap();
        let ours = xb.apply_op1(super::Softmax).unwrap();
        let reference = candle_nn::ops::softmax(&xb.to_dtype(DType::F32).unwrap(), D::Minus1).unwrap();
        assert_eq!(ours.dtype(), DType::BF16);
        assert!(max_diff(&ours, &reference) < 4e-3);
    }

    #[test]
    fn gelu_new_matches_the_tanh_form_and_its_gradient() {
        let x = Tensor::arange(-800i64, 800, &Device::Cpu).unwrap().to_dtype(DType::F32).unwrap();
        let x = x.affine(0.01, 0.003).unwrap();
        assert!(max_diff(&crate::gelu_new(&x).unwrap(), &x.gelu().unwrap()) < 2e-6);
        let v = Var::from_tensor(&x).unwrap();
        let g_ours = crate::gelu_new(v.as_tensor()).unwrap().sum_all().unwrap().backward().unwrap();
        let g_ref = v.as_tensor().gelu().unwrap().sum_all().unwrap().backward().unwrap();
        assert!(max_diff(g_ours.get(&v).unwrap(), g_ref.get(&v).unwrap()) < 1e-5);
        // A strided input.
        let m = x.reshape((40, 40)).unwrap().t().unwrap();
        assert!(max_diff(&crate::gelu_new(&m).unwrap(), &m.gelu().unwrap()) < 2e-6);
    }
}
