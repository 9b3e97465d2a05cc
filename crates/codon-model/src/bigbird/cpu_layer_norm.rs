//! A fused CPU layer norm for training: the forward pass and a backward pass that gives the
//! input gradient in one pass per row and the weight and bias gradients in one reduction,
//! instead of the dozen composed candle ops (and their saved temporaries) per layer norm.
//! Everything is computed in f32; results take each operand's dtype.
use candle_core::{CpuStorage, CustomOp2, CustomOp3, Layout, Shape, Tensor};
use rayon::prelude::*;

use super::cpu_storage::{f32_vec, pair_f32, store_like};

/// Mean and 1/σ of one row.
#[inline]
fn moments(row: &[f32], eps: f32) -> (f32, f32) {
    let n = row.len() as f32;
    let mean = row.iter().sum::<f32>() / n;
    let var = row.iter().map(|x| (x - mean) * (x - mean)).sum::<f32>() / n;
    (mean, 1.0 / (var + eps).sqrt())
}

/// `(x − μ)/√(σ² + eps)·w + b` over the last dimension of x; w and b are (hidden,).
pub struct LayerNorm {
    /// The variance epsilon.
    pub eps: f32,
}

impl CustomOp3 for LayerNorm {
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
        let mut x = f32_vec(s1, l1, "layer_norm")?;
        x.par_chunks_mut(hidden).for_each(|row| {
            let (mean, rstd) = moments(row, self.eps);
            for ((v, w), b) in row.iter_mut().zip(&w).zip(&b) {
                *v = (*v - mean) * rstd * w + b;
            }
        });
        Ok((store_like(s1, x), l1.shape().clone()))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        b: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let grad = grad.contiguous()?;
        let dx = x.apply_op3_no_bwd(w, &grad, &LayerNormInputGrad { eps: self.eps })?;
        let params = x.apply_op2_no_bwd(&grad, &LayerNormParamGrad { eps: self.eps })?;
        let dw = params.get(0)?.to_dtype(w.dtype())?;
        let db = params.get(1)?.to_dtype(b.dtype())?;
        Ok((Some(dx), Some(dw), Some(db)))
    }
}

/// dx = rstd·(ĝ − mean(ĝ) − x̂·mean(ĝ⊙x̂)) with ĝ = g⊙w, per row.
struct LayerNormInputGrad {
    eps: f32,
}

impl CustomOp3 for LayerNormInputGrad {
    fn name(&self) -> &'static str {
        "layer_norm_input_grad"
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

#[cfg(test)]
mod tests {
    use candle_core::{Device, Tensor, Var, D};

    fn composed(x: &Tensor, w: &Tensor, b: &Tensor, eps: f64) -> Tensor {
        let mean = x.mean_keepdim(D::Minus1).unwrap();
        let c = x.broadcast_sub(&mean).unwrap();
        let var = c.sqr().unwrap().mean_keepdim(D::Minus1).unwrap();
        let n = c.broadcast_div(&(var + eps).unwrap().sqrt().unwrap()).unwrap();
        n.broadcast_mul(w).unwrap().broadcast_add(b).unwrap()
    }

    use super::super::cpu_storage::max_abs_diff as max_diff;

    #[test]
    fn layer_norm_and_all_three_gradients_match_the_composed_ops() {
        let dev = Device::Cpu;
        let (x, w, b) = (
            Var::from_tensor(&Tensor::randn(0.5f32, 2.0, (3, 7, 24), &dev).unwrap()).unwrap(),
            Var::from_tensor(&Tensor::randn(1f32, 0.3, 24, &dev).unwrap()).unwrap(),
            Var::from_tensor(&Tensor::randn(0f32, 0.3, 24, &dev).unwrap()).unwrap(),
        );
        let upstream = Tensor::randn(0f32, 1.0, (3, 7, 24), &dev).unwrap();
        let ours = x.as_tensor().apply_op3(w.as_tensor(), b.as_tensor(), super::LayerNorm { eps: 1e-12 }).unwrap();
        let reference = composed(x.as_tensor(), w.as_tensor(), b.as_tensor(), 1e-12);
        assert!(max_diff(&ours, &reference) < 1e-5);
        let g1 = (ours * &upstream).unwrap().sum_all().unwrap().backward().unwrap();
        let g2 = (reference * &upstream).unwrap().sum_all().unwrap().backward().unwrap();
        for v in [&x, &w, &b] {
            let (a, r) = (g1.get(v).unwrap(), g2.get(v).unwrap());
            assert_eq!(a.dims(), r.dims());
            assert!(max_diff(a, r) < 2e-5, "gradient differs by {}", max_diff(a, r));
        }
    }
}
