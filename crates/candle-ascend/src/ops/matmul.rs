//! Batched matrix products; transposed operands are expressed through strides.
use crate::soc::AclnnOp;
use std::sync::Arc;

use super::{cube_work, launch_cube, phase1, scalar, View};
use crate::error::Result;
use crate::ffi::types::*;
use crate::runtime::device::DeviceInner;

type T = AclTensorPtr;
type S = AclScalarPtr;

/// `out (b, m, n) = a (b, m, k) · b (b, k, n)` (`aclnnBatchMatMul`), with the SoC's cubeMathType.
pub fn batch_matmul(dev: &Arc<DeviceInner>, a: &View, b: &View, out: &View) -> Result<()> {
    let (ta, tb, to) = (a.acl(dev)?, b.acl(dev)?, out.acl(dev)?);
    let cube = dev.soc.cube_math_type(dev.allow_hf32.load(std::sync::atomic::Ordering::Relaxed));
    let work = cube_work(out, a.dims.last().copied().unwrap_or(1), 1);
    launch_cube(dev, AclnnOp::BatchMatMul, &[a, b, out], work, |addr, ws, ex| {
        phase1!(addr, ws, ex, fn(T, T, T, i8), ta.ptr(), tb.ptr(), to.ptr(), cube)
    })
}

/// `out (m, n) = beta·c + alpha·a (m, k) · b (k, n)` (`aclnnAddmm`), with `c` broadcast to
/// (m, n) (a bias row) and the SoC's cubeMathType.
pub fn addmm(dev: &Arc<DeviceInner>, c: &View, a: &View, b: &View, beta: f64, alpha: f64, out: &View) -> Result<()> {
    let (tc, ta, tb, to) = (c.acl(dev)?, a.acl(dev)?, b.acl(dev)?, out.acl(dev)?);
    let (sbeta, salpha) = (scalar(dev, beta, out.acl_dtype)?, scalar(dev, alpha, out.acl_dtype)?);
    let cube = dev.soc.cube_math_type(dev.allow_hf32.load(std::sync::atomic::Ordering::Relaxed));
    let work = cube_work(out, a.dims.last().copied().unwrap_or(1), 1);
    launch_cube(dev, AclnnOp::Addmm, &[c, a, b, out], work, |addr, ws, ex| {
        phase1!(
            addr,
            ws,
            ex,
            fn(T, T, T, S, S, T, i8),
            tc.ptr(),
            ta.ptr(),
            tb.ptr(),
            sbeta.ptr(),
            salpha.ptr(),
            to.ptr(),
            cube
        )
    })
}
