//! The [`Linear`] op: on the CPU the product with an element-wise epilogue (gelu_new or a
//! dropout mask) and a backward pass that reads the weight and the input in place, summing the
//! bias gradient in the same step; on an Ascend part one `aclnnAddmm` forward, and backward two
//! batched matmuls and one `aclnnReduceSum` (or the input gradient added into its accumulator,
//! [`super::grad_accumulate`]).
use std::sync::Mutex;

use candle_core::{CpuStorage, CustomOp3, Layout, Shape, Tensor};
use rayon::prelude::*;

use super::grad_accumulate::MatmulAdd;
use super::EPILOGUE_CHUNK;
use crate::cpu_gemm::{matmul_into, Mat};
use crate::f32_views::{cow_f32, store_like, tensor_from_f32, with_f32};
use crate::fast_math;
use crate::selection::Body;
#[cfg(feature = "ascend")]
use candle_ascend::fused;
#[cfg(feature = "ascend")]
use candle_core::custom_backend::{BoxStorage, DynBackendStorage};

/// What [`Linear`] applies to `z = x·Wᵀ + b`.
pub enum Epilogue {
    /// y = z.
    Identity,
    /// y = gelu_new(z).
    GeluNew,
    /// y = z ⊙ mask, the mask holding 0 or 1/(1 − p) per output element.
    Dropout(Vec<f32>),
}

/// `epilogue(x·Wᵀ + b)` with x (…, in), W (out, in), b (out); its backward pass gives
/// dx = dz·W, dW = dzᵀ·x and db = Σ dz. The CPU body computes in f32 for any float dtype and
/// takes every epilogue; the Ascend body takes the identity.
pub struct Linear {
    epilogue: Epilogue,
    /// z, kept for gelu_new's derivative (the saved tensor of a framework's autograd).
    pre_activation: Mutex<Vec<f32>>,
}

impl Linear {
    /// A linear layer followed by `epilogue`.
    pub fn new(epilogue: Epilogue) -> Self {
        Self { epilogue, pre_activation: Mutex::new(Vec::new()) }
    }
}

/// (rows, in, out) of a linear layer's operands, checked.
fn linear_dims(x: &[usize], w: &[usize], b: &[usize]) -> candle_core::Result<(usize, usize, usize)> {
    let (&in_f, lead) = x.split_last().unwrap_or((&0, &[]));
    match (w, b) {
        ([out_f, w_in], [b_out]) if *w_in == in_f && b_out == out_f && in_f > 0 => {
            Ok((lead.iter().product(), in_f, *out_f))
        }
        _ => candle_core::bail!("linear: input {x:?}, weight {w:?} and bias {b:?} do not fit"),
    }
}

impl CustomOp3 for Linear {
    fn name(&self) -> &'static str {
        "linear"
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
        let (rows, in_f, out_f) = linear_dims(l1.dims(), l2.dims(), l3.dims())?;
        let (x, w, b) = (cow_f32(s1, l1, "linear")?, cow_f32(s2, l2, "linear")?, cow_f32(s3, l3, "linear")?);
        let mut z = vec![0f32; rows * out_f];
        z.par_chunks_mut(out_f).for_each(|row| row.copy_from_slice(&b));
        matmul_into(
            &mut z,
            out_f,
            Mat::rows(&x, rows, in_f, in_f),
            Mat::rows(&w, out_f, in_f, in_f).t(),
            1.0,
            true,
            true,
        )?;
        match &self.epilogue {
            Epilogue::Identity => {}
            Epilogue::GeluNew => {
                let mut saved = self.pre_activation.lock().map_err(|_| candle_core::Error::msg("linear: poisoned"))?;
                *saved = z.clone();
                z.par_chunks_mut(EPILOGUE_CHUNK).for_each(fast_math::gelu_new_in_place);
            }
            Epilogue::Dropout(mask) => {
                if mask.len() != z.len() {
                    candle_core::bail!("linear: dropout mask has {} elements, output {}", mask.len(), z.len());
                }
                z.par_chunks_mut(EPILOGUE_CHUNK)
                    .zip(mask.par_chunks(EPILOGUE_CHUNK))
                    .for_each(|(z, m)| z.iter_mut().zip(m).for_each(|(z, m)| *z *= m));
            }
        }
        let mut shape = l1.dims().to_vec();
        if let Some(last) = shape.last_mut() {
            *last = out_f;
        }
        Ok((store_like(s1, z), Shape::from(shape)))
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
        if !matches!(self.epilogue, Epilogue::Identity) {
            candle_core::bail!("linear: the Ascend body has no epilogue; apply the activation or dropout after it")
        }
        fused::linear(s1, l1, s2, l2, s3, l3)
    }

    /// On an Ascend part, dx goes into the gradient x already has in the product's own
    /// launch (aclnnAddmm with it as self): x feeds q, k, v and a residual, so this saves a
    /// pass over (rows × in) per use.
    fn bwd_accumulate(
        &self,
        x: &Tensor,
        w: &Tensor,
        b: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
        acc: &Tensor,
    ) -> candle_core::Result<Option<(Tensor, Option<Tensor>, Option<Tensor>)>> {
        if super::GRAD_ACCUMULATE_ROW.select(x.device(), grad.dtype())? != Body::Ascend
            || acc.dtype() != grad.dtype()
            || w.dtype() != grad.dtype()
        {
            return Ok(None);
        }
        let (rows, in_f, out_f) = linear_dims(x.dims(), w.dims(), b.dims())?;
        // Detached: the gradients must not keep the activations' graph alive.
        let (x2, w, g) = (x.detach().reshape((rows, in_f))?, w.detach(), grad.detach().reshape((rows, out_f))?);
        let acc = acc.detach().reshape((rows, in_f))?.contiguous()?;
        let dx = acc.apply_op3_no_bwd(&g.contiguous()?, &w.contiguous()?, &MatmulAdd)?.reshape(x.shape())?;
        let dw = g.t()?.matmul(&x2)?;
        let db = g.sum(0)?;
        Ok(Some((dx, Some(dw), Some(db))))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        b: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (rows, in_f, out_f) = linear_dims(x.dims(), w.dims(), b.dims())?;
        if super::ROW.select(x.device(), x.dtype())? != Body::Cpu {
            // Detached: the gradients must not keep the activations' graph alive.
            let (x2, w, g) = (x.detach().reshape((rows, in_f))?, w.detach(), grad.detach().reshape((rows, out_f))?);
            let dx = g.matmul(&w)?.reshape(x.shape())?;
            let dw = g.t()?.matmul(&x2)?;
            let db = g.sum(0)?;
            return Ok((Some(dx), Some(dw), Some(db)));
        }
        // dz = dy ⊙ epilogue'(z).
        let mut dz = with_f32(grad, "linear backward", <[f32]>::to_vec)?;
        match &self.epilogue {
            Epilogue::Identity => {}
            Epilogue::GeluNew => {
                let z = self.pre_activation.lock().map_err(|_| candle_core::Error::msg("linear: poisoned"))?;
                if z.len() != dz.len() {
                    candle_core::bail!("linear backward: no saved pre-activation");
                }
                dz.par_chunks_mut(EPILOGUE_CHUNK)
                    .zip(z.par_chunks(EPILOGUE_CHUNK))
                    .for_each(|(g, z)| fast_math::gelu_new_grad(z, g));
            }
            Epilogue::Dropout(mask) => dz
                .par_chunks_mut(EPILOGUE_CHUNK)
                .zip(mask.par_chunks(EPILOGUE_CHUNK))
                .for_each(|(g, m)| g.iter_mut().zip(m).for_each(|(g, m)| *g *= m)),
        }
        let dz_mat = Mat::rows(&dz, rows, out_f, out_f);
        let mut dx = vec![0f32; rows * in_f];
        let mut dw = vec![0f32; out_f * in_f];
        with_f32(w, "linear backward", |w| {
            matmul_into(&mut dx, in_f, dz_mat, Mat::rows(w, out_f, in_f, in_f), 1.0, false, true)
        })??;
        with_f32(x, "linear backward", |x| {
            matmul_into(&mut dw, in_f, dz_mat.t(), Mat::rows(x, rows, in_f, in_f), 1.0, false, true)
        })??;
        let db = column_sums(&dz, out_f);
        Ok((
            Some(tensor_from_f32(dx, x.dims(), x.dtype())?),
            Some(tensor_from_f32(dw, w.dims(), w.dtype())?),
            Some(tensor_from_f32(db, b.dims(), b.dtype())?),
        ))
    }
}

/// Σ over rows of a row-major (rows × width) matrix: partial sums over fixed blocks of rows
/// in parallel, then added in block order, so the result does not depend on the schedule.
pub(super) fn column_sums(m: &[f32], width: usize) -> Vec<f32> {
    let rows_per_task = (EPILOGUE_CHUNK / width).max(1);
    let partial: Vec<Vec<f32>> = m
        .par_chunks(rows_per_task * width)
        .map(|block| {
            let mut acc = vec![0f32; width];
            block.chunks(width).for_each(|row| acc.iter_mut().zip(row).for_each(|(a, v)| *a += v));
            acc
        })
        .collect();
    partial.into_iter().fold(vec![0f32; width], |mut a, b| {
        a.iter_mut().zip(&b).for_each(|(a, b)| *a += b);
        a
    })
}
