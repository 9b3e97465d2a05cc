//! The linear layer's CUDA body: cuBLAS's product, then the bias (and a residual, or gelu_new)
//! added in one pass by this crate's kernels (`kernels/codon_ops.cu`), and the bias gradient as
//! one deterministic column sum. Each op's CPU body computes the same in f32, for tests.
use candle_core::{CpuStorage, CustomOp1, CustomOp2, CustomOp3, Layout, Shape, Tensor};
use rayon::prelude::*;

use super::op::column_sums;
use super::{bias_grad, product, EPILOGUE_CHUNK};
use crate::f32_views::store_like;
use crate::fast_math;

/// A CUDA GPU's linear layer: cuBLAS's `x·Wᵀ`, then the bias (and a residual) added in one
/// pass by [`AddBias`] or [`AddBiasResidual`].
pub(super) fn cuda_linear(
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    residual: Option<&Tensor>,
) -> candle_core::Result<Tensor> {
    let y = product(x, weight)?;
    match (bias, residual) {
        (Some(b), Some(r)) => y.apply_op3(&b.to_dtype(y.dtype())?, &r.contiguous()?, AddBiasResidual),
        (Some(b), None) => y.apply_op2(&b.to_dtype(y.dtype())?, AddBias),
        (None, Some(r)) => y + r,
        (None, None) => Ok(y),
    }
}

/// `gelu_new(x + bias)`, the bias along the last dimension: a linear layer's bias and its
/// activation in one pass each way on a CUDA GPU (the bias's gradient is the column sums of the
/// activation's). CUDA body only: other devices add, then apply [`GeluNew`].
pub struct BiasGeluNew;

impl CustomOp2 for BiasGeluNew {
    fn name(&self) -> &'static str {
        "bias_gelu_new"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        // The CPU's linear layers fuse the bias into the GEMM; this body serves CPU operands
        // given to the op directly.
        let mut y = with_bias(s1, l1, s2, l2, None, "bias_gelu_new")?;
        y.par_chunks_mut(EPILOGUE_CHUNK).for_each(fast_math::gelu_new_in_place);
        Ok((store_like(s1, y), l1.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        Ok((crate::activation::cuda_launch::gelu_new(s1, l1, Some((s2, l2)))?, l1.shape().clone()))
    }

    fn bwd(
        &self,
        x: &Tensor,
        bias: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let d = x.apply_op3_no_bwd(bias, &grad.contiguous()?, &BiasGeluNewGrad)?;
        let db = bias_grad(&d)?.to_dtype(bias.dtype())?;
        Ok((Some(d), Some(db)))
    }
}

/// `grad · gelu_new'(x + bias)` in one pass.
struct BiasGeluNewGrad;

impl CustomOp3 for BiasGeluNewGrad {
    fn name(&self) -> &'static str {
        "bias_gelu_new_grad"
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
        let z = with_bias(s1, l1, s2, l2, None, "bias_gelu_new_grad")?;
        let mut g = crate::f32_views::f32_vec(s3, l3, "bias_gelu_new_grad")?;
        if g.len() != z.len() {
            candle_core::bail!("bias_gelu_new_grad: {} gradients for {} inputs", g.len(), z.len())
        }
        g.par_chunks_mut(EPILOGUE_CHUNK)
            .zip(z.par_chunks(EPILOGUE_CHUNK))
            .for_each(|(g, z)| fast_math::gelu_new_grad(z, g));
        Ok((store_like(s3, g), l1.shape().clone()))
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
        Ok((crate::activation::cuda_launch::gelu_new_grad(s1, l1, Some((s2, l2)), s3, l3)?, l1.shape().clone()))
    }
}

/// [`bias_grad`]'s CUDA body.
pub(super) struct ColumnSums;

impl CustomOp1 for ColumnSums {
    fn name(&self) -> &'static str {
        "column_sums"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let cols = l.dims().last().copied().unwrap_or(1).max(1);
        let v = crate::f32_views::f32_vec(s, l, "column_sums")?;
        Ok((CpuStorage::F32(column_sums(&v, cols)), Shape::from(cols)))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s: &candle_core::CudaStorage,
        l: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let cols = l.dims().last().copied().unwrap_or(1);
        Ok((cuda_launch::sum_rows(s, l)?, Shape::from(cols)))
    }
}

/// `x + bias` along the last dimension in one pass (CUDA body); the bias's gradient is the
/// column sums of the output's.
pub(super) struct AddBias;

impl CustomOp2 for AddBias {
    fn name(&self) -> &'static str {
        "add_bias"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        Ok((store_like(s1, with_bias(s1, l1, s2, l2, None, "add_bias")?), l1.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        Ok((cuda_launch::add_bias(s1, l1, (s2, l2), None)?, l1.shape().clone()))
    }

    fn bwd(
        &self,
        _x: &Tensor,
        b: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        Ok((Some(grad.clone()), Some(bias_grad(grad)?.to_dtype(b.dtype())?)))
    }
}

/// `x + bias + residual` in one pass (CUDA body).
pub(super) struct AddBiasResidual;

impl CustomOp3 for AddBiasResidual {
    fn name(&self) -> &'static str {
        "add_bias_residual"
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
        let y = with_bias(s1, l1, s2, l2, Some((s3, l3)), "add_bias_residual")?;
        Ok((store_like(s1, y), l1.shape().clone()))
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
        Ok((cuda_launch::add_bias(s1, l1, (s2, l2), Some((s3, l3)))?, l1.shape().clone()))
    }

    fn bwd(
        &self,
        _x: &Tensor,
        b: &Tensor,
        _r: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        Ok((Some(grad.clone()), Some(bias_grad(grad)?.to_dtype(b.dtype())?), Some(grad.clone())))
    }
}

/// `x + bias (+ residual)` in f32 on the CPU, the bias along x's last dimension and the
/// residual of x's shape: the CPU body of the CUDA-shaped bias ops.
fn with_bias(
    x: &CpuStorage,
    xl: &Layout,
    bias: &CpuStorage,
    bl: &Layout,
    residual: Option<(&CpuStorage, &Layout)>,
    op: &str,
) -> candle_core::Result<Vec<f32>> {
    let mut y = crate::f32_views::f32_vec(x, xl, op)?;
    let b = crate::f32_views::f32_vec(bias, bl, op)?;
    let cols = xl.dims().last().copied().unwrap_or(1);
    if b.len() != cols {
        candle_core::bail!("{op}: a bias of {} for rows of {cols}", b.len())
    }
    if cols > 0 {
        y.par_chunks_mut(cols).for_each(|row| row.iter_mut().zip(&b).for_each(|(v, b)| *v += b));
    }
    if let Some((r, rl)) = residual {
        let r = crate::f32_views::f32_vec(r, rl, op)?;
        if r.len() != y.len() {
            candle_core::bail!("{op}: a residual of {} elements for {}", r.len(), y.len())
        }
        y.par_iter_mut().zip(&r).for_each(|(v, r)| *v += r);
    }
    Ok(y)
}

/// The CUDA launches of the bias epilogues and the bias gradient (kernels in
/// `kernels/codon_ops.cu`).
#[cfg(feature = "cuda")]
pub(crate) mod cuda_launch {
    use crate::cuda::prelude::*;

    /// `x + bias (+ residual)`, the bias along the last dimension, rounded once.
    pub(crate) fn add_bias(
        x: &CudaStorage,
        xl: &Layout,
        bias: (&CudaStorage, &Layout),
        residual: Bias,
    ) -> Result<CudaStorage> {
        let dev = &x.device;
        let n = xl.shape().elem_count();
        if n == 0 {
            return x.try_clone(xl);
        }
        let cols = xl.dims().last().copied().unwrap_or(1).max(1);
        let func = function!(dev, "add_bias", x.dtype());
        let (n64, cols32) = (n as u64, u32::try_from(cols).w_msg("add_bias")?);
        with_float_type!(x.dtype(), "add_bias", T => {
            let xv = view::<T>(x, xl, "add_bias")?;
            let bv = bias_view::<T>(x, Some(bias), cols, "add_bias")?;
            let rv = match residual {
                Some((r, rl)) => {
                    same_dtype(x, r, "add_bias")?;
                    if rl.shape() != xl.shape() {
                        candle_core::bail!("add_bias: a residual of {:?} for {:?}", rl.shape(), xl.shape())
                    }
                    Some(view::<T>(r, rl, "add_bias")?)
                }
                None => None,
            };
            // SAFETY: the arguments match the kernel's signature (a null residual is allowed), and
            // it writes every element.
            Ok(unsafe { launch_into_fresh!(dev, func, elementwise_config(n), T, n; &n64, &xv, opt(bv), &cols32, opt(rv), out) })
        })
    }

    /// The sums over all rows of x's last dimension, f32 (cols,): deterministic (fixed shares,
    /// fixed order).
    pub(crate) fn sum_rows(x: &CudaStorage, xl: &Layout) -> Result<CudaStorage> {
        let dev = &x.device;
        let n = xl.shape().elem_count();
        let cols = xl.dims().last().copied().unwrap_or(1).max(1);
        let rows = n / cols;
        let parts = rows.clamp(1, REDUCE_BLOCKS);
        let func = function!(dev, "sum_rows_partial", x.dtype());
        let (rows32, cols32) = (u32::try_from(rows).w_msg("sum_rows")?, u32::try_from(cols).w_msg("sum_rows")?);
        let partial = dev.alloc_zeros::<f32>(parts * cols)?;
        with_float_type!(x.dtype(), "sum_rows", T => {
            let xv = view::<T>(x, xl, "sum_rows")?;
            let mut b = func.builder();
            b.arg(&rows32).arg(&cols32).arg(&xv).arg(&partial);
            let cfg = LaunchConfig { grid_dim: (parts as u32, 1, 1), block_dim: (ROW_THREADS, 1, 1), shared_mem_bytes: 0 };
            // SAFETY: the arguments match the kernel's signature.
            unsafe { b.launch(cfg) }.w()?;
        });
        sum_partials(dev, &partial, parts, cols)
    }
}
