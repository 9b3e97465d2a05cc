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
