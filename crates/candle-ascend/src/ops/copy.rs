//! Copies, casts and fills.
use crate::soc::AclnnOp;
use std::sync::Arc;

use super::{launch, phase1, scalar, View};
use crate::error::Result;
use crate::ffi::types::*;
use crate::runtime::device::DeviceInner;

type T = AclTensorPtr;

/// `out = cast(a)` (`aclnnCast`); `out` has the target dtype.
pub fn cast(dev: &Arc<DeviceInner>, a: &View, out: &View) -> Result<()> {
    let (ta, to) = (a.acl(dev)?, out.acl(dev)?);
    let target = out.acl_dtype;
    launch(dev, AclnnOp::Cast, &[a, out], |addr, ws, ex| {
        phase1!(addr, ws, ex, fn(T, i32, T), ta.ptr(), target, to.ptr())
    })
}

/// `dst[...] = src` for strided views on either side (`aclnnInplaceCopy`).
pub fn copy_into(dev: &Arc<DeviceInner>, dst: &View, src: &View) -> Result<()> {
    let (td, ts) = (dst.acl(dev)?, src.acl(dev)?);
    launch(dev, AclnnOp::InplaceCopy, &[dst, src], |addr, ws, ex| phase1!(addr, ws, ex, fn(T, T), td.ptr(), ts.ptr()))
}

/// `dst[...] = value` (`aclnnInplaceFillScalar`).
pub fn fill(dev: &Arc<DeviceInner>, dst: &View, value: f64) -> Result<()> {
    let (td, tv) = (dst.acl(dev)?, scalar(dev, value, dst.acl_dtype)?);
    launch(dev, AclnnOp::InplaceFillScalar, &[dst], |addr, ws, ex| {
        phase1!(addr, ws, ex, fn(T, AclScalarPtr), td.ptr(), tv.ptr())
    })
}

/// `dst[...] = 0` (`aclnnInplaceZero`).
pub fn zero(dev: &Arc<DeviceInner>, dst: &View) -> Result<()> {
    let td = dst.acl(dev)?;
    launch(dev, AclnnOp::InplaceZero, &[dst], |addr, ws, ex| phase1!(addr, ws, ex, fn(T), td.ptr()))
}

/// The fused bodies built on these launches, for op types outside this crate (re-exported as
/// `candle_ascend::fused`).
pub mod fused {
    use crate::fused::prelude::*;

    /// A contiguous copy of `t` (any layout) in a fresh storage: the output of an op whose value
    /// was computed by tensor ops before the op took it over (one `aclnnInplaceCopy`).
    pub fn materialize(t: &Tensor) -> candle_core::Result<(BoxStorage, Shape)> {
        with_storage(t, |ascend, layout| {
            let (out, ov) = output_like(ascend, layout.shape())?;
            crate::ops::copy::copy_into(ascend.dev(), &ov, &ascend.view(layout)?)?;
            Ok((Box::new(out) as BoxStorage, layout.shape().clone()))
        })
    }

    /// `dst ← src` in dst's dtype, straight into dst's storage: one `aclnnCast` (or
    /// `aclnnInplaceCopy` for equal dtypes), where `Var::set` of a cast value costs a cast and a copy.
    /// Both tensors live on one Ascend device and have one shape.
    pub fn assign(dst: &Tensor, src: &Tensor) -> candle_core::Result<()> {
        if dst.shape() != src.shape() {
            candle_core::bail!("assign: shapes {:?} and {:?} differ", dst.shape(), src.shape())
        }
        let ((dev, d), (_, s)) = (tensor_view(dst)?, tensor_view(src)?);
        if dst.dtype() == src.dtype() {
            Ok(crate::ops::copy::copy_into(&dev, &d, &s)?)
        } else {
            Ok(crate::ops::copy::cast(&dev, &s, &d)?)
        }
    }
}
