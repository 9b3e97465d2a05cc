//! The AdamW update on the CPU, in place: three passes over each parameter instead of a dozen
//! tensor ops that each allocate a parameter-sized temporary, and a gradient norm that reads
//! the gradients without squaring them into a copy. Same arithmetic as the composed update.
use candle_core::{CpuStorage, CustomOp1, InplaceOp2, InplaceOp3, Layout, Shape};
use rayon::prelude::*;

/// Elements per parallel task; fixed, so sums do not depend on the thread count.
const CHUNK: usize = 64 * 1024;

fn f32_slice<'a>(s: &'a CpuStorage, l: &Layout, op: &str) -> candle_core::Result<&'a [f32]> {
    match (s, l.contiguous_offsets()) {
        (CpuStorage::F32(v), Some((a, b))) => Ok(&v[a..b]),
        _ => candle_core::bail!("{op}: expected a contiguous f32 tensor"),
    }
}

fn f32_slice_mut<'a>(s: &'a mut CpuStorage, l: &Layout, op: &str) -> candle_core::Result<&'a mut [f32]> {
    match (s, l.contiguous_offsets()) {
        (CpuStorage::F32(v), Some((a, b))) => Ok(&mut v[a..b]),
        _ => candle_core::bail!("{op}: expected a contiguous f32 tensor"),
    }
}

/// A moment estimate updated from the gradient as torch does: `m ← m + (1 − β)·(g − m)`
/// (`lerp`) for the first moment, `v ← β·v + (1 − β)·g²` for the second.
pub struct MomentUpdate {
    /// The decay β.
    pub beta: f64,
    /// Average g² instead of g.
    pub squared: bool,
}

impl InplaceOp2 for MomentUpdate {
    fn name(&self) -> &'static str {
        "adamw_moment"
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

/// `θ ← θ·(1 − lr·wd) − step_size · m / (√v / √(1 − β₂ᵗ) + eps)`.
pub struct ParameterUpdate {
    /// 1 − lr·weight_decay.
    pub decay: f64,
    /// lr / (1 − β₁ᵗ).
    pub step_size: f64,
    /// √(1 − β₂ᵗ).
    pub bias2_sqrt: f64,
    /// Adam's epsilon.
    pub eps: f64,
}

impl InplaceOp3 for ParameterUpdate {
    fn name(&self) -> &'static str {
        "adamw_parameter"
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

/// Σ g² of an f32 tensor, as a scalar.
pub struct SumOfSquares;

impl CustomOp1 for SumOfSquares {
    fn name(&self) -> &'static str {
        "sum_of_squares"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let g = f32_slice(s, l, self.name())?;
        let partial: Vec<f32> = g.par_chunks(CHUNK).map(|c| c.iter().map(|x| x * x).sum::<f32>()).collect();
        Ok((CpuStorage::F32(vec![partial.iter().sum()]), Shape::from(())))
    }
}
