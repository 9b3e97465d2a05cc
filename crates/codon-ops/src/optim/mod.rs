//! The optimizer's maths, with a body per device: [`AdamWStep::apply`], the AdamW update of
//! one flat f32 group (torch's arithmetic), and [`sum_of_squares`], behind the global gradient
//! norm.
//! - CPU: in place, three passes over the group instead of a dozen tensor ops that each
//!   allocate a group-sized temporary; the norm reads the gradients without squaring them
//!   into a copy. A CUDA GPU runs the same three passes as kernels.
//! - Ascend, where the part has it (A2 and later): one `aclnnApplyAdamWV2` in place per group.
//! - Elsewhere (an Atlas training series part): the composed update, a dozen launches.
use std::sync::OnceLock;

use crate::selection::{Body, FusedOp, OnCpu, OnCuda, Row};
#[cfg(feature = "ascend")]
use candle_ascend::fused::{self, AdamWHyper};
#[cfg(feature = "ascend")]
use candle_ascend::soc::AclnnOp;
use candle_core::{CpuStorage, CustomOp1, DType, InplaceOp2, InplaceOp3, Layout, Shape, Tensor};
use rayon::prelude::*;

use crate::f32_views::{f32_slice, f32_slice_mut};

/// AdamW's row of the support table: the three passes as CPU kernels and as f32 CUDA kernels,
/// `aclnnApplyAdamWV2` on the parts that have it.
pub(crate) const ADAMW_ROW: Row = Row {
    op: FusedOp::AdamW,
    cpu: OnCpu::Kernel,
    cuda: OnCuda::F32,
    #[cfg(feature = "ascend")]
    ascend: &[AclnnOp::ApplyAdamWV2],
};

/// [`sum_of_squares`]' row of the support table.
pub(crate) const SUM_OF_SQUARES_ROW: Row = Row {
    op: FusedOp::SumOfSquares,
    cpu: OnCpu::Kernel,
    cuda: OnCuda::Kernels,
    #[cfg(feature = "ascend")]
    ascend: &[],
};

/// [`all_finite`]'s row of the support table.
pub(crate) const ALL_FINITE_ROW: Row = Row {
    op: FusedOp::AllFinite,
    cpu: OnCpu::Kernel,
    cuda: OnCuda::Composed,
    #[cfg(feature = "ascend")]
    ascend: &[],
};

/// [`assign`]'s row of the support table: an Ascend part's cast into the destination.
pub(crate) const CAST_ROW: Row = Row {
    op: FusedOp::Cast,
    cpu: OnCpu::Composed,
    cuda: OnCuda::Composed,
    #[cfg(feature = "ascend")]
    ascend: &[AclnnOp::Cast],
};

/// Whether [`assign`] writes `src` into a buffer of another dtype in one launch here (an Ascend
/// part's cast): the optimizer then writes a group's parameters in one call.
pub fn assigns_in_one_launch(src: &Tensor) -> bool {
    CAST_ROW.choose(src.device(), src.dtype()).body == Body::Ascend
}

/// `dst ← src` in dst's dtype, into dst's own storage (parameters and the optimizer's views of
/// them share it): one cast or copy launch on an Ascend part, a converted copy elsewhere.
/// Both have one shape; dst is contiguous.
pub fn assign(dst: &Tensor, src: &Tensor) -> candle_core::Result<()> {
    #[cfg(feature = "ascend")]
    if assigns_in_one_launch(src) {
        return fused::assign(dst, src);
    }
    if dst.shape() != src.shape() {
        candle_core::bail!("assign: shapes {:?} and {:?} differ", dst.shape(), src.shape())
    }
    dst.slice_set(&src.to_dtype(dst.dtype())?, 0, 0)
}

/// One optimizer step's AdamW constants, shared by its groups.
pub struct AdamWStep {
    lr: f64,
    beta1: f64,
    beta2: f64,
    weight_decay: f64,
    eps: f64,
    /// The step t, from 1.
    t: i32,
    /// t − 1 on the device, for the fused operator: one upload per step, shared.
    device_step: OnceLock<Tensor>,
}

impl AdamWStep {
    /// Step `t` (from 1) with learning rate `lr`, this step's β1, β2, weight decay and eps.
    pub fn new(t: i32, lr: f64, beta1: f64, beta2: f64, weight_decay: f64, eps: f64) -> Self {
        Self { lr, beta1, beta2, weight_decay, eps, t, device_step: OnceLock::new() }
    }

    /// The update of the f32 group `theta` from its gradient `g`, with its moments `m` and
    /// `v`, as torch computes it:
    /// `m ← m + (1 − β1)(g − m)`, `v ← β2·v + (1 − β2)·g²`,
    /// `θ ← θ·(1 − lr·wd) − lr/(1 − β1ᵗ) · m / (√v / √(1 − β2ᵗ) + eps)`.
    /// θ and the moments change in place where the body allows (`Ok(None)`); the composed
    /// update stores new moments in `m` and `v` and returns the new θ for the caller to keep.
    pub fn apply(
        &self,
        theta: &Tensor,
        m: &mut Tensor,
        v: &mut Tensor,
        g: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        let (beta1, beta2, eps) = (self.beta1, self.beta2, self.eps);
        let step_size = self.lr / (1.0 - beta1.powi(self.t));
        let bias2_sqrt = (1.0 - beta2.powi(self.t)).sqrt();
        let decay = 1.0 - self.lr * self.weight_decay;
        let body = ADAMW_ROW.select(theta.device(), theta.dtype())?;
        if matches!(body, Body::Cpu | Body::Cuda) {
            let g = g.contiguous()?;
            m.inplace_op2(&g, &MomentUpdate { beta: beta1, squared: false })?;
            v.inplace_op2(&g, &MomentUpdate { beta: beta2, squared: true })?;
            theta.inplace_op3(m, v, &ParameterUpdate { decay, step_size, bias2_sqrt, eps })?;
            return Ok(None);
        }
        #[cfg(feature = "ascend")]
        if body == Body::Ascend {
            let step = match self.device_step.get() {
                Some(s) => s,
                None => {
                    let s = Tensor::new(&[(self.t - 1) as f32], theta.device())?;
                    self.device_step.get_or_init(|| s)
                }
            };
            let hyper = AdamWHyper {
                lr: self.lr as f32,
                beta1: beta1 as f32,
                beta2: beta2 as f32,
                weight_decay: self.weight_decay as f32,
                eps: eps as f32,
            };
            fused::apply_adamw(theta, m, v, g, step, hyper)?;
            return Ok(None);
        }
        let new_m = (&*m + ((g - &*m)? * (1.0 - beta1))?)?;
        let new_v = ((&*v * beta2)? + (g.sqr()? * (1.0 - beta2))?)?;
        let denom = ((new_v.sqrt()? / bias2_sqrt)? + eps)?;
        let updated = ((theta * decay)? - ((&new_m / denom)? * step_size)?)?;
        (*m, *v) = (new_m, new_v);
        Ok(Some(updated))
    }
}

/// Whether every value of `t` is finite. On the CPU one parallel pass over the exponent bits; on
/// other devices `0 * x` is 0 exactly when `x` is finite, so one sum tells.
pub fn all_finite(t: &Tensor) -> candle_core::Result<bool> {
    if ALL_FINITE_ROW.select(t.device(), t.dtype())? == Body::Cpu {
        let t = t.contiguous()?;
        let (storage, layout) = t.storage_and_layout();
        if let candle_core::Storage::Cpu(s) = &*storage {
            let op = "all_finite";
            use crate::f32_views::contiguous;
            // A value is finite when its exponent bits are not all ones: the largest magnitude
            // bit pattern tells, and a max vectorises where a short-circuiting test does not.
            fn below<T: Sync>(v: &[T], bits: impl Fn(&T) -> u32 + Sync, inf: u32) -> bool {
                v.par_chunks(CHUNK).all(|c| c.iter().fold(0, |m, x| m.max(bits(x))) < inf)
            }
            return Ok(match s {
                CpuStorage::F32(v) => below(contiguous(v, layout, op)?, |x| x.to_bits() & 0x7fff_ffff, 0x7f80_0000),
                CpuStorage::BF16(v) => below(contiguous(v, layout, op)?, |x| u32::from(x.to_bits() & 0x7fff), 0x7f80),
                CpuStorage::F16(v) => below(contiguous(v, layout, op)?, |x| u32::from(x.to_bits() & 0x7fff), 0x7c00),
                CpuStorage::F64(v) => contiguous(v, layout, op)?.par_iter().all(|x| x.is_finite()),
                _ => true,
            });
        }
    }
    Ok((t * 0.0)?.sum_all()?.to_dtype(DType::F32)?.to_scalar::<f32>()? == 0.0)
}

/// Σ g² of a gradient, as an f32 scalar on its device: one fused pass on the CPU and on a CUDA
/// GPU (any float dtype, accumulated in f32, in a fixed order), a square and a sum elsewhere.
pub fn sum_of_squares(g: &Tensor) -> candle_core::Result<Tensor> {
    match SUM_OF_SQUARES_ROW.select(g.device(), g.dtype())? {
        Body::Cuda => g.contiguous()?.apply_op1_no_bwd(&SumOfSquares),
        Body::Cpu => g.to_dtype(DType::F32)?.contiguous()?.apply_op1_no_bwd(&SumOfSquares),
        Body::Ascend | Body::Composed | Body::Refused => g.to_dtype(DType::F32)?.sqr()?.sum_all(),
    }
}

/// Elements per parallel task; fixed, so sums do not depend on the thread count.
const CHUNK: usize = 64 * 1024;

/// The CPU body of a moment estimate's update from the gradient, as torch does it: `m ← m + (1 − β)·(g − m)`
/// (`lerp`) for the first moment, `v ← β·v + (1 − β)·g²` for the second.
struct MomentUpdate {
    /// The decay β.
    beta: f64,
    /// Average g² instead of g.
    squared: bool,
}

impl InplaceOp2 for MomentUpdate {
    fn name(&self) -> &'static str {
        "adamw_moment"
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        dst: &mut candle_core::CudaStorage,
        dst_l: &Layout,
        g: &candle_core::CudaStorage,
        gl: &Layout,
    ) -> candle_core::Result<()> {
        cuda_launch::adamw_moment(dst, dst_l, g, gl, [self.beta as f32, (1.0 - self.beta) as f32], self.squared)
    }

    fn cpu_fwd(&self, dst: &mut CpuStorage, dst_l: &Layout, g: &CpuStorage, gl: &Layout) -> candle_core::Result<()> {
        let (m, g) = (f32_slice_mut(dst, dst_l, self.name())?, f32_slice(g, gl, self.name())?);
        if m.len() != g.len() {
            candle_core::bail!("adamw_moment: {} moments for {} gradients", m.len(), g.len());
        }
        let (beta, rest) = (self.beta as f32, (1.0 - self.beta) as f32);
        let squared = self.squared;
        m.par_chunks_mut(CHUNK).zip(g.par_chunks(CHUNK)).for_each(|(m, g)| {
            if squared {
                m.iter_mut().zip(g).for_each(|(m, &g)| *m = *m * beta + g * g * rest);
            } else {
                m.iter_mut().zip(g).for_each(|(m, &g)| *m += (g - *m) * rest);
            }
        });
        Ok(())
    }
}

/// The CPU body of `θ ← θ·(1 − lr·wd) − step_size · m / (√v / √(1 − β₂ᵗ) + eps)`.
struct ParameterUpdate {
    /// 1 − lr·weight_decay.
    decay: f64,
    /// lr / (1 − β₁ᵗ).
    step_size: f64,
    /// √(1 − β₂ᵗ).
    bias2_sqrt: f64,
    /// Adam's epsilon.
    eps: f64,
}

impl InplaceOp3 for ParameterUpdate {
    fn name(&self) -> &'static str {
        "adamw_parameter"
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        dst: &mut candle_core::CudaStorage,
        dst_l: &Layout,
        m: &candle_core::CudaStorage,
        ml: &Layout,
        v: &candle_core::CudaStorage,
        vl: &Layout,
    ) -> candle_core::Result<()> {
        let constants = [self.decay as f32, self.step_size as f32, self.bias2_sqrt as f32, self.eps as f32];
        cuda_launch::adamw_parameter(dst, dst_l, m, ml, v, vl, constants)
    }

    fn cpu_fwd(
        &self,
        dst: &mut CpuStorage,
        dst_l: &Layout,
        m: &CpuStorage,
        ml: &Layout,
        v: &CpuStorage,
        vl: &Layout,
    ) -> candle_core::Result<()> {
        let theta = f32_slice_mut(dst, dst_l, self.name())?;
        let (m, v) = (f32_slice(m, ml, self.name())?, f32_slice(v, vl, self.name())?);
        if m.len() != theta.len() || v.len() != theta.len() {
            candle_core::bail!("adamw_parameter: {} weights, {} and {} moments", theta.len(), m.len(), v.len());
        }
        let (decay, step, b2, eps) =
            (self.decay as f32, self.step_size as f32, self.bias2_sqrt as f32, self.eps as f32);
        theta.par_chunks_mut(CHUNK).zip(m.par_chunks(CHUNK)).zip(v.par_chunks(CHUNK)).for_each(|((t, m), v)| {
            for ((t, &m), &v) in t.iter_mut().zip(m).zip(v) {
                *t = *t * decay - m / (v.sqrt() / b2 + eps) * step;
            }
        });
        Ok(())
    }
}

/// The CPU body of Σ g² of an f32 tensor, as a scalar.
struct SumOfSquares;

impl CustomOp1 for SumOfSquares {
    fn name(&self) -> &'static str {
        "sum_of_squares"
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s: &candle_core::CudaStorage,
        l: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        Ok((cuda_launch::sum_of_squares(s, l)?, Shape::from(())))
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let g = f32_slice(s, l, self.name())?;
        let partial: Vec<f32> = g.par_chunks(CHUNK).map(|c| c.iter().map(|x| x * x).sum::<f32>()).collect();
        Ok((CpuStorage::F32(vec![partial.iter().sum()]), Shape::from(())))
    }
}

/// The CUDA launches of AdamW and the gradient norm (kernels in `kernels/codon_ops.cu`).
#[cfg(feature = "cuda")]
pub(crate) mod cuda_launch;
