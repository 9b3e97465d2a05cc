//! Reductions. Outputs keep the reduced dims (size 1), as candle's `reduce_op` expects.
use crate::soc::AclnnOp;
use std::sync::Arc;

use super::{int_array, launch, phase1, View};
use crate::error::Result;
use crate::ffi::types::*;
use crate::runtime::device::DeviceInner;

type T = AclTensorPtr;
type A = AclIntArrayPtr;

/// Sum over `dims` (`aclnnReduceSum`, keepDims).
pub fn sum(dev: &Arc<DeviceInner>, a: &View, dims: &[i64], out: &View) -> Result<()> {
    let (ta, to, td) = (a.acl(dev)?, out.acl(dev)?, int_array(dev, dims)?);
    let dtype = out.acl_dtype;
    launch(dev, AclnnOp::ReduceSum, &[a, out], |addr, ws, ex| {
        phase1!(addr, ws, ex, fn(T, A, bool, i32, T), ta.ptr(), td.ptr(), true, dtype, to.ptr())
    })
}

/// Max (`aclnnAmax`) or min (`aclnnAmin`) over `dims`, keepDims.
pub fn extremum(dev: &Arc<DeviceInner>, op: AclnnOp, a: &View, dims: &[i64], out: &View) -> Result<()> {
    let (ta, to, td) = (a.acl(dev)?, out.acl(dev)?, int_array(dev, dims)?);
    launch(dev, op, &[a, out], |addr, ws, ex| {
        phase1!(addr, ws, ex, fn(T, A, bool, T), ta.ptr(), td.ptr(), true, to.ptr())
    })
}

/// Index of the max (`aclnnArgMax`) or min (`aclnnArgMin`) along `dim` into an INT64 `out`.
pub fn arg_extremum(dev: &Arc<DeviceInner>, op: AclnnOp, a: &View, dim: i64, out: &View) -> Result<()> {
    let (ta, to) = (a.acl(dev)?, out.acl(dev)?);
    launch(dev, op, &[a, out], |addr, ws, ex| phase1!(addr, ws, ex, fn(T, i64, bool, T), ta.ptr(), dim, true, to.ptr()))
}
