//! Fused activations and their gradients: `aclnnSoftmax`, `aclnnSoftmaxBackward` and
//! `aclnnGeluBackwardV2` (ops-nn `activation/softmax_v2`, `softmax_grad`, `gelu_grad_v2`).
use crate::soc::AclnnOp;
use std::sync::Arc;

use super::{launch, phase1, View};
use crate::error::Result;
use crate::ffi::types::*;
use crate::runtime::device::DeviceInner;

type T = AclTensorPtr;

/// `out = softmax(x)` along `dim` (negative counts from the end).
pub fn softmax(dev: &Arc<DeviceInner>, x: &View, dim: i64, out: &View) -> Result<()> {
    let (tx, to) = (x.acl(dev)?, out.acl(dev)?);
    launch(dev, AclnnOp::Softmax, &[x, out], |addr, ws, ex| {
        phase1!(addr, ws, ex, fn(T, i64, T), tx.ptr(), dim, to.ptr())
    })
}

/// `out = y·(g − Σ g·y)` along `dim`, from the softmax output `y` and its incoming gradient `g`.
pub fn softmax_backward(dev: &Arc<DeviceInner>, g: &View, y: &View, dim: i64, out: &View) -> Result<()> {
    let (tg, ty, to) = (g.acl(dev)?, y.acl(dev)?, out.acl(dev)?);
    launch(dev, AclnnOp::SoftmaxBackward, &[g, y, out], |addr, ws, ex| {
        phase1!(addr, ws, ex, fn(T, T, i64, T), tg.ptr(), ty.ptr(), dim, to.ptr())
    })
}

/// `out = g·gelu'(x)` for the tanh approximation (`approximate = "tanh"`, a C string as torch_npu
/// passes it).
pub fn gelu_tanh_backward(dev: &Arc<DeviceInner>, g: &View, x: &View, out: &View) -> Result<()> {
    let (tg, tx, to) = (g.acl(dev)?, x.acl(dev)?, out.acl(dev)?);
    let approximate = c"tanh";
    launch(dev, AclnnOp::GeluBackwardV2, &[g, x, out], |addr, ws, ex| {
        phase1!(addr, ws, ex, fn(T, T, *const std::ffi::c_char, T), tg.ptr(), tx.ptr(), approximate.as_ptr(), to.ptr())
    })
}
