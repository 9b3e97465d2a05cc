//! Element-wise ops: binary arithmetic and comparisons with broadcasting (stride-0 views),
//! tensor-scalar ops, unary math, gelu, pow and select.
use crate::soc::AclnnOp;
use std::sync::Arc;

use super::{launch, phase1, scalar, View};
use crate::error::Result;
use crate::ffi::types::*;
use crate::runtime::device::DeviceInner;

type T = AclTensorPtr;
type S = AclScalarPtr;

/// `out = a (op) b` for Add/Sub (alpha 1), Mul, Div, Maximum, Minimum and the
/// Eq/Ne/Lt/Le/Gt/GeTensor comparisons.
pub fn binary(dev: &Arc<DeviceInner>, op: AclnnOp, a: &View, b: &View, out: &View) -> Result<()> {
    let (ta, tb, to) = (a.acl(dev)?, b.acl(dev)?, out.acl(dev)?);
    if matches!(op, AclnnOp::Add | AclnnOp::Sub) {
        let alpha = scalar(dev, 1.0, out.acl_dtype)?;
        return launch(dev, op, &[a, b, out], |addr, ws, ex| {
            phase1!(addr, ws, ex, fn(T, T, S, T), ta.ptr(), tb.ptr(), alpha.ptr(), to.ptr())
        });
    }
    launch(dev, op, &[a, b, out], |addr, ws, ex| phase1!(addr, ws, ex, fn(T, T, T), ta.ptr(), tb.ptr(), to.ptr()))
}

/// `out = a · s` (`aclnnMuls`).
pub fn mul_scalar(dev: &Arc<DeviceInner>, a: &View, s: f64, out: &View) -> Result<()> {
    let (ta, to, ts) = (a.acl(dev)?, out.acl(dev)?, scalar(dev, s, out.acl_dtype)?);
    launch(dev, AclnnOp::Muls, &[a, out], |addr, ws, ex| {
        phase1!(addr, ws, ex, fn(T, S, T), ta.ptr(), ts.ptr(), to.ptr())
    })
}

/// `out = a + s` (`aclnnAdds`, alpha 1).
pub fn add_scalar(dev: &Arc<DeviceInner>, a: &View, s: f64, out: &View) -> Result<()> {
    let (ta, to, ts, alpha) =
        (a.acl(dev)?, out.acl(dev)?, scalar(dev, s, out.acl_dtype)?, scalar(dev, 1.0, out.acl_dtype)?);
    launch(dev, AclnnOp::Adds, &[a, out], |addr, ws, ex| {
        phase1!(addr, ws, ex, fn(T, S, S, T), ta.ptr(), ts.ptr(), alpha.ptr(), to.ptr())
    })
}

/// `out = f(a)` for a unary aclnn op taking `(self, out)`.
pub fn unary(dev: &Arc<DeviceInner>, op: AclnnOp, a: &View, out: &View) -> Result<()> {
    let (ta, to) = (a.acl(dev)?, out.acl(dev)?);
    launch(dev, op, &[a, out], |addr, ws, ex| phase1!(addr, ws, ex, fn(T, T), ta.ptr(), to.ptr()))
}

/// GELU through `aclnnGeluV2` (approximate 0 = erf, 1 = tanh): aclnnGelu's form is disputed.
pub fn gelu(dev: &Arc<DeviceInner>, tanh: bool, a: &View, out: &View) -> Result<()> {
    let (ta, to) = (a.acl(dev)?, out.acl(dev)?);
    let approximate = i64::from(tanh);
    launch(dev, AclnnOp::GeluV2, &[a, out], |addr, ws, ex| {
        phase1!(addr, ws, ex, fn(T, i64, T), ta.ptr(), approximate, to.ptr())
    })
}

/// `out = a^e` (`aclnnPowTensorScalar`).
pub fn pow_scalar(dev: &Arc<DeviceInner>, a: &View, e: f64, out: &View) -> Result<()> {
    let (ta, to, te) = (a.acl(dev)?, out.acl(dev)?, scalar(dev, e, out.acl_dtype)?);
    launch(dev, AclnnOp::PowTensorScalar, &[a, out], |addr, ws, ex| {
        phase1!(addr, ws, ex, fn(T, S, T), ta.ptr(), te.ptr(), to.ptr())
    })
}

/// `out = cond ? a : b` with a BOOL condition (`aclnnSWhere`).
pub fn select(dev: &Arc<DeviceInner>, cond: &View, a: &View, b: &View, out: &View) -> Result<()> {
    let (tc, ta, tb, to) = (cond.acl(dev)?, a.acl(dev)?, b.acl(dev)?, out.acl(dev)?);
    launch(dev, AclnnOp::SWhere, &[cond, a, b, out], |addr, ws, ex| {
        phase1!(addr, ws, ex, fn(T, T, T, T), tc.ptr(), ta.ptr(), tb.ptr(), to.ptr())
    })
}
