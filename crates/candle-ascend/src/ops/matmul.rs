//! Batched matrix products; transposed operands are expressed through strides.
use std::sync::Arc;

use super::{launch, phase1, View};
use crate::error::Result;
use crate::ffi::types::*;
use crate::runtime::device::DeviceInner;

type T = AclTensorPtr;

/// `out (b, m, n) = a (b, m, k) · b (b, k, n)` (`aclnnBatchMatMul`), with the SoC's cubeMathType.
pub fn batch_matmul(dev: &Arc<DeviceInner>, a: &View, b: &View, out: &View) -> Result<()> {
    let (ta, tb, to) = (a.acl(dev)?, b.acl(dev)?, out.acl(dev)?);
    let cube = dev.soc.cube_math_type(dev.allow_hf32.load(std::sync::atomic::Ordering::Relaxed));
    launch(dev, "aclnnBatchMatMul", &[a, b, out], |addr, ws, ex| {
        phase1!(addr, ws, ex, fn(T, T, T, i8), ta.ptr(), tb.ptr(), to.ptr(), cube)
    })
}
