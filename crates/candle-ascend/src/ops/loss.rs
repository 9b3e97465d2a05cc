//! The cross-entropy pieces: `aclnnLogSoftmax`, `aclnnLogSoftmaxBackward`, `aclnnNLLLoss` and
//! `aclnnNLLLossBackward` (ops-nn `activation/log_softmax_v2`, `log_softmax_grad`,
//! `loss/nll_loss`, `loss/nll_loss_grad`).
use crate::soc::AclnnOp;
use std::sync::Arc;

use super::{launch, phase1, View};
use crate::error::Result;
use crate::ffi::types::*;
use crate::runtime::device::DeviceInner;

type T = AclTensorPtr;

/// NLLLoss's reduction argument: 0 none, 1 mean, 2 sum.
pub const REDUCTION_MEAN: i64 = 1;

/// `out = log_softmax(x)` along `dim` (negative counts from the end).
pub fn log_softmax(dev: &Arc<DeviceInner>, x: &View, dim: i64, out: &View) -> Result<()> {
    let (tx, to) = (x.acl(dev)?, out.acl(dev)?);
    launch(dev, AclnnOp::LogSoftmax, &[x, out], |addr, ws, ex| {
        phase1!(addr, ws, ex, fn(T, i64, T), tx.ptr(), dim, to.ptr())
    })
}

/// `out = g − exp(y)·Σ g` along `dim`, from the log-softmax output `y` and its gradient `g`.
pub fn log_softmax_backward(dev: &Arc<DeviceInner>, g: &View, y: &View, dim: i64, out: &View) -> Result<()> {
    let (tg, ty, to) = (g.acl(dev)?, y.acl(dev)?, out.acl(dev)?);
    launch(dev, AclnnOp::LogSoftmaxBackward, &[g, y, out], |addr, ws, ex| {
        phase1!(addr, ws, ex, fn(T, T, i64, T), tg.ptr(), ty.ptr(), dim, to.ptr())
    })
}

/// The negative log-likelihood of `target` under the log-probabilities `x` (N, C), class
/// weights `weight` (C,), rows labelled `ignore_index` left out; with the mean reduction, `out`
/// holds the loss and `total_weight` the weight of the labelled rows.
#[allow(clippy::too_many_arguments)]
pub fn nll_loss(
    dev: &Arc<DeviceInner>,
    x: &View,
    target: &View,
    weight: &View,
    reduction: i64,
    ignore_index: i64,
    out: &View,
    total_weight: &View,
) -> Result<()> {
    let (tx, tt, tw, to, ttw) =
        (x.acl(dev)?, target.acl(dev)?, weight.acl(dev)?, out.acl(dev)?, total_weight.acl(dev)?);
    launch(dev, AclnnOp::NLLLoss, &[x, target, weight, out, total_weight], |addr, ws, ex| {
        phase1!(
            addr,
            ws,
            ex,
            fn(T, T, T, i64, i64, T, T),
            tx.ptr(),
            tt.ptr(),
            tw.ptr(),
            reduction,
            ignore_index,
            to.ptr(),
            ttw.ptr()
        )
    })
}

/// The gradient of [`nll_loss`] with respect to `x`, from the incoming gradient `g` and the
/// forward pass's `total_weight`.
#[allow(clippy::too_many_arguments)]
pub fn nll_loss_backward(
    dev: &Arc<DeviceInner>,
    g: &View,
    x: &View,
    target: &View,
    weight: &View,
    reduction: i64,
    ignore_index: i64,
    total_weight: &View,
    out: &View,
) -> Result<()> {
    let (tg, tx, tt, tw) = (g.acl(dev)?, x.acl(dev)?, target.acl(dev)?, weight.acl(dev)?);
    let (ttw, to) = (total_weight.acl(dev)?, out.acl(dev)?);
    launch(dev, AclnnOp::NLLLossBackward, &[g, x, target, weight, total_weight, out], |addr, ws, ex| {
        phase1!(
            addr,
            ws,
            ex,
            fn(T, T, T, T, i64, i64, T, T),
            tg.ptr(),
            tx.ptr(),
            tt.ptr(),
            tw.ptr(),
            reduction,
            ignore_index,
            ttw.ptr(),
            to.ptr()
        )
    })
}

/// The fused bodies built on these launches, for op types outside this crate (re-exported as
/// `candle_ascend::fused`).
pub mod fused {
    use crate::fused::prelude::*;

    /// What the Ascend body of the cross-entropy loss keeps for its backward pass: the
    /// log-probabilities, the class weights (ones) and the labelled rows' total weight.
    #[derive(Clone)]
    pub struct CrossEntropySaved(Arc<(AscendStorage, AscendStorage, AscendStorage, Shape)>);

    /// The Ascend body of the mean cross-entropy of f32 `logits` (rows, classes) against integer
    /// `labels` (rows), rows labelled `ignore_index` left out: `aclnnLogSoftmax`, then
    /// `aclnnNLLLoss` (mean) with unit class weights, as torch_npu passes them when the user gives
    /// none. The f32 scalar loss, and what [`cross_entropy_grad`] needs.
    pub fn cross_entropy(
        logits: &dyn DynBackendStorage,
        ll: &Layout,
        labels: &dyn DynBackendStorage,
        tl: &Layout,
        ignore_index: i64,
    ) -> candle_core::Result<(BoxStorage, CrossEntropySaved)> {
        let (xs, ts) = (ascend_storage(logits)?, ascend_storage(labels)?);
        let dev = xs.dev();
        let classes = hidden_of(ll);
        let (log_probs, lv) = output_like(xs, ll.shape())?;
        crate::ops::loss::log_softmax(dev, &xs.view(ll)?, -1, &lv)?;
        let (weight, wv) = output_like(xs, &Shape::from_dims(&[classes]))?;
        crate::ops::copy::fill(dev, &wv, 1.0)?;
        let scalar = Shape::from(());
        let ((loss, ov), (total, twv)) = (output_like(xs, &scalar)?, output_like(xs, &scalar)?);
        let mean = crate::ops::loss::REDUCTION_MEAN;
        crate::ops::loss::nll_loss(dev, &lv, &ts.view(tl)?, &wv, mean, ignore_index, &ov, &twv)?;
        Ok((Box::new(loss), CrossEntropySaved(Arc::new((log_probs, weight, total, ll.shape().clone())))))
    }

    /// The Ascend body of the cross-entropy's gradient with respect to the logits, from the
    /// integer `labels` and the incoming scalar gradient `grad`: `aclnnNLLLossBackward`, then
    /// `aclnnLogSoftmaxBackward`; f32, of the logits' shape.
    pub fn cross_entropy_grad(
        labels: &dyn DynBackendStorage,
        tl: &Layout,
        grad: &dyn DynBackendStorage,
        gl: &Layout,
        saved: &CrossEntropySaved,
        ignore_index: i64,
    ) -> candle_core::Result<BoxStorage> {
        let (ts, gs) = (ascend_storage(labels)?, ascend_storage(grad)?);
        let (log_probs, weight, total, shape) = &*saved.0;
        let dev = log_probs.dev();
        let classes = Shape::from_dims(&[shape.dims().last().copied().unwrap_or(1)]);
        let (lv, wv, twv) =
            (log_probs.contiguous(shape)?, weight.contiguous(&classes)?, total.contiguous(&Shape::from(()))?);
        let (_d_log_probs, dv) = output_like(log_probs, shape)?;
        let mean = crate::ops::loss::REDUCTION_MEAN;
        crate::ops::loss::nll_loss_backward(
            dev,
            &gs.view(gl)?,
            &lv,
            &ts.view(tl)?,
            &wv,
            mean,
            ignore_index,
            &twv,
            &dv,
        )?;
        let (out, ov) = output_like(log_probs, shape)?;
        crate::ops::loss::log_softmax_backward(dev, &dv, &lv, -1, &ov)?;
        Ok(Box::new(out))
    }
}
