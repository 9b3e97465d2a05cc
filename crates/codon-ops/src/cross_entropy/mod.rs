//! The masked-LM loss as one op: the mean cross-entropy of the rows whose label is not
//! [`IGNORE_INDEX`] (torch's `cross_entropy(…, ignore_index=-100)`, mean reduction), computed
//! in f32. Composed from tensor ops, it is a dozen launches forward and thirty backward; the
//! op is one pass each way on the CPU, and on an Ascend part `aclnnLogSoftmax` + `aclnnNLLLoss`
//! forward and `aclnnNLLLossBackward` + `aclnnLogSoftmaxBackward` backward.
use std::sync::Mutex;

#[cfg(feature = "ascend")]
use crate::launch::LaunchState;
use crate::selection::{FusedOp, OnCpu, OnCuda, Row};
#[cfg(feature = "ascend")]
use candle_ascend::fused;
#[cfg(feature = "ascend")]
use candle_ascend::soc::AclnnOp;
#[cfg(feature = "ascend")]
use candle_core::custom_backend::{BoxStorage, DynBackendStorage};
use candle_core::{CpuStorage, CustomOp2, DType, Layout, Shape, Tensor, D};
use rayon::prelude::*;

use crate::f32_views::contiguous;

/// Label value that does not count in the loss (torch's default `ignore_index`).
pub const IGNORE_INDEX: i64 = -100;

/// The loss's row of the support table.
pub(crate) const ROW: Row = Row {
    op: FusedOp::CrossEntropy,
    cpu: OnCpu::Kernel,
    cuda: OnCuda::Composed,
    #[cfg(feature = "ascend")]
    ascend: &[AclnnOp::LogSoftmax, AclnnOp::NLLLoss, AclnnOp::NLLLossBackward, AclnnOp::LogSoftmaxBackward],
};

/// Mean cross-entropy of `logits` (rows, classes) against `labels` (rows), over the rows whose
/// label is not [`IGNORE_INDEX`]; an f32 scalar, NaN when no row is labelled (as torch).
pub fn cross_entropy(logits: &Tensor, labels: &Tensor) -> candle_core::Result<Tensor> {
    let logits = logits.to_dtype(DType::F32)?;
    let labels = labels.to_dtype(DType::I64)?;
    if ROW.select(logits.device(), DType::F32)?.is_native() {
        return logits.contiguous()?.apply_op2(&labels.contiguous()?, CrossEntropy::default());
    }
    reference(&logits, &labels)
}

/// The composed loss: log-softmax, the labelled rows' log-probabilities, their mean.
pub fn reference(logits: &Tensor, labels: &Tensor) -> candle_core::Result<Tensor> {
    let logits = logits.to_dtype(DType::F32)?;
    let labels = labels.to_dtype(DType::I64)?;
    let labelled = labels.ne(IGNORE_INDEX as f64)?;
    let safe = labelled.where_cond(&labels, &labels.zeros_like()?)?;
    let max = logits.max_keepdim(D::Minus1)?.detach();
    let shifted = logits.broadcast_sub(&max)?;
    let log_probs = shifted.broadcast_sub(&shifted.exp()?.sum_keepdim(D::Minus1)?.log()?)?;
    let picked = log_probs.gather(&safe.unsqueeze(1)?, 1)?.squeeze(1)?;
    let weights = labelled.to_dtype(DType::F32)?;
    (picked * &weights)?.sum_all()?.neg()? / weights.sum_all()?
}

/// What the forward pass keeps for the backward pass.
enum Saved {
    /// CPU: the log of each row's softmax denominator, with the row maximum folded in.
    LogSumExp(Vec<f32>),
    /// Ascend: the log-probabilities and the labelled-row count (NLLLoss's totalWeight).
    #[cfg(feature = "ascend")]
    Device(LaunchState),
}

/// The loss op over f32 logits (rows, classes) and i64 labels (rows); see the module.
#[derive(Default)]
pub struct CrossEntropy {
    saved: Mutex<Option<Saved>>,
}

impl CrossEntropy {
    fn keep(&self, saved: Saved) {
        *self.saved.lock().unwrap_or_else(|p| p.into_inner()) = Some(saved);
    }

    fn take(&self) -> candle_core::Result<Saved> {
        let saved = self.saved.lock().unwrap_or_else(|p| p.into_inner()).take();
        saved.ok_or_else(|| candle_core::Error::msg("cross_entropy: backward pass without its forward"))
    }
}

/// (rows, classes) of the operands, checked.
fn dims(logits: &[usize], labels: &[usize]) -> candle_core::Result<(usize, usize)> {
    match (logits, labels) {
        ([rows, classes], [n]) if rows == n && *classes > 0 => Ok((*rows, *classes)),
        _ => {
            candle_core::bail!("cross_entropy: logits {logits:?} must be (rows, classes) and labels {labels:?} (rows)")
        }
    }
}

impl CustomOp2 for CrossEntropy {
    fn name(&self) -> &'static str {
        "cross_entropy"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (rows, classes) = dims(l1.dims(), l2.dims())?;
        let (CpuStorage::F32(x), CpuStorage::I64(y)) = (s1, s2) else {
            candle_core::bail!("cross_entropy: expected f32 logits and i64 labels")
        };
        let (x, y) = (contiguous(x, l1, "cross_entropy")?, contiguous(y, l2, "cross_entropy")?);
        let check = |&label: &i64| label == IGNORE_INDEX || (0..classes as i64).contains(&label);
        if let Some(bad) = y.iter().find(|l| !check(l)) {
            candle_core::bail!("cross_entropy: label {bad} is outside 0..{classes} and is not {IGNORE_INDEX}");
        }
        let lse: Vec<f32> = x
            .par_chunks(classes)
            .map(|row| {
                let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                max + row.iter().map(|v| (v - max).exp()).sum::<f32>().ln()
            })
            .collect();
        let (mut total, mut count) = (0f64, 0usize);
        for (i, &label) in y.iter().enumerate().take(rows) {
            if label != IGNORE_INDEX {
                total += f64::from(lse[i] - x[i * classes + label as usize]);
                count += 1;
            }
        }
        self.keep(Saved::LogSumExp(lse));
        Ok((CpuStorage::F32(vec![(total / count as f64) as f32]), Shape::from(())))
    }

    #[cfg(feature = "ascend")]
    fn custom_fwd(
        &self,
        s1: &dyn DynBackendStorage,
        l1: &Layout,
        s2: &dyn DynBackendStorage,
        l2: &Layout,
    ) -> candle_core::Result<(BoxStorage, Shape)> {
        dims(l1.dims(), l2.dims())?;
        let (loss, saved) = fused::cross_entropy(s1, l1, s2, l2, IGNORE_INDEX)?;
        self.keep(Saved::Device(LaunchState::new(saved)));
        Ok((loss, Shape::from(())))
    }

    fn bwd(
        &self,
        logits: &Tensor,
        labels: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let (rows, classes) = dims(logits.dims(), labels.dims())?;
        match self.take()? {
            #[cfg(feature = "ascend")]
            Saved::Device(saved) => {
                // d loss/d logits from the saved log-probabilities, in one launch.
                let dx = crate::launch::ascend_launch("cross_entropy_grad", [labels, grad], |[(s1, l1), (s2, l2)]| {
                    let out =
                        fused::cross_entropy_grad(s1, l1, s2, l2, saved.get("cross_entropy_grad")?, IGNORE_INDEX)?;
                    Ok((out, Shape::from_dims(&[rows, classes])))
                })?;
                Ok((Some(dx), None))
            }
            Saved::LogSumExp(lse) => {
                let g = grad.to_dtype(DType::F32)?.to_scalar::<f32>()?;
                let x = logits.flatten_all()?.to_vec1::<f32>()?;
                let y = labels.to_vec1::<i64>()?;
                let count = y.iter().filter(|&&l| l != IGNORE_INDEX).count();
                let scale = g / count as f32;
                let mut dx = vec![0f32; rows * classes];
                dx.par_chunks_mut(classes).enumerate().for_each(|(i, d)| {
                    if y[i] == IGNORE_INDEX {
                        return;
                    }
                    let row = &x[i * classes..(i + 1) * classes];
                    d.iter_mut().zip(row).for_each(|(d, v)| *d = (v - lse[i]).exp() * scale);
                    d[y[i] as usize] -= scale;
                });
                Ok((Some(Tensor::from_vec(dx, (rows, classes), logits.device())?), None))
            }
        }
    }
}

#[cfg(test)]
mod tests;
