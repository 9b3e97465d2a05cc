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

/// The fused bodies built on these launches, for op types outside this crate (re-exported as
/// `candle_ascend::fused`).
pub mod fused {
    use crate::fused::prelude::*;

    /// The Ascend body of a softmax over the last dimension (`aclnnSoftmax`).
    pub fn softmax_last_dim(x: &dyn DynBackendStorage, xl: &Layout) -> candle_core::Result<(BoxStorage, Shape)> {
        unary_body(x, xl, |dev, x, out| crate::ops::activation::softmax(dev, x, -1, out))
    }

    /// The Ascend body of the softmax gradient from its output `y` and the incoming gradient `g`
    /// (`aclnnSoftmaxBackward`), in g's dtype.
    pub fn softmax_last_dim_grad(
        y: &dyn DynBackendStorage,
        yl: &Layout,
        g: &dyn DynBackendStorage,
        gl: &Layout,
    ) -> candle_core::Result<(BoxStorage, Shape)> {
        grad_body(y, yl, g, gl, |dev, g, y, out| crate::ops::activation::softmax_backward(dev, g, y, -1, out))
    }

    /// The Ascend body of GELU's tanh approximation (`aclnnGeluV2`, approximate = 1).
    pub fn gelu_tanh(x: &dyn DynBackendStorage, xl: &Layout) -> candle_core::Result<(BoxStorage, Shape)> {
        unary_body(x, xl, |dev, x, out| crate::ops::elementwise::gelu(dev, true, x, out))
    }

    /// The Ascend body of its gradient from the input `x` and the incoming gradient `g`
    /// (`aclnnGeluBackwardV2`, approximate "tanh"), in g's dtype.
    pub fn gelu_tanh_grad(
        x: &dyn DynBackendStorage,
        xl: &Layout,
        g: &dyn DynBackendStorage,
        gl: &Layout,
    ) -> candle_core::Result<(BoxStorage, Shape)> {
        grad_body(x, xl, g, gl, crate::ops::activation::gelu_tanh_backward)
    }
}
