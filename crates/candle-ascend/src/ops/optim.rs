//! Optimizer updates: `aclnnApplyAdamWV2`, AdamW in place in one launch.
use crate::soc::AclnnOp;
use std::sync::Arc;

use super::{launch, phase1, View};
use crate::error::Result;
use crate::ffi::types::*;
use crate::runtime::device::DeviceInner;

type T = AclTensorPtr;

/// AdamW's hyper-parameters for one update (torch's `fused_adamw` passes them as float).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamWHyper {
    /// Learning rate.
    pub lr: f32,
    /// β1.
    pub beta1: f32,
    /// β2.
    pub beta2: f32,
    /// Decoupled weight decay.
    pub weight_decay: f32,
    /// ε.
    pub eps: f32,
}

/// `aclnnApplyAdamWV2(var, m, v, maxGradNorm = NULL, grad, step, lr, β1, β2, wd, eps, amsgrad =
/// false, maximize = false)`: var, m and v updated in place. `step` holds t − 1 (FLOAT or
/// INT64, one element): the kernel adds the 1, as torch_npu's `_fused_adamw_` assumes
/// (op-plugin `FusedAdamWKernelNpuOpApi.cpp`).
pub fn apply_adamw_v2(
    dev: &Arc<DeviceInner>,
    var: &View,
    m: &View,
    v: &View,
    grad: &View,
    step: &View,
    h: AdamWHyper,
) -> Result<()> {
    let (tvar, tm, tv, tg, ts) = (var.acl(dev)?, m.acl(dev)?, v.acl(dev)?, grad.acl(dev)?, step.acl(dev)?);
    let none: T = std::ptr::null_mut();
    launch(dev, AclnnOp::ApplyAdamWV2, &[var, m, v, grad, step], |addr, ws, ex| {
        phase1!(
            addr,
            ws,
            ex,
            fn(T, T, T, T, T, T, f32, f32, f32, f32, f32, bool, bool),
            tvar.ptr(),
            tm.ptr(),
            tv.ptr(),
            none,
            tg.ptr(),
            ts.ptr(),
            h.lr,
            h.beta1,
            h.beta2,
            h.weight_decay,
            h.eps,
            false,
            false
        )
    })
}

/// The fused bodies built on these launches, for op types outside this crate (re-exported as
/// `candle_ascend::fused`).
pub mod fused {
    use crate::fused::prelude::*;

    /// AdamW in place through `aclnnApplyAdamWV2`: `var`, `m` and `v` are overwritten. `step` is a
    /// one-element FLOAT tensor holding t − 1. All five tensors live on one Ascend device.
    pub fn apply_adamw(
        var: &Tensor,
        m: &Tensor,
        v: &Tensor,
        grad: &Tensor,
        step: &Tensor,
        hyper: AdamWHyper,
    ) -> candle_core::Result<()> {
        let (dev, var) = tensor_view(var)?;
        let (m, v, grad, step) = (tensor_view(m)?.1, tensor_view(v)?.1, tensor_view(grad)?.1, tensor_view(step)?.1);
        Ok(crate::ops::optim::apply_adamw_v2(&dev, &var, &m, &v, &grad, &step, hyper)?)
    }
}
