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
