//! Indexing: index_select, index_add, gather and scatter_add. Indices are INT32 or INT64.
use std::sync::Arc;

use super::{launch, phase1, scalar, View};
use crate::error::Result;
use crate::ffi::types::*;
use crate::runtime::device::DeviceInner;

type T = AclTensorPtr;

/// `out = a.index_select(dim, idx)` (`aclnnIndexSelect`).
pub fn index_select(dev: &Arc<DeviceInner>, a: &View, dim: i64, idx: &View, out: &View) -> Result<()> {
    let (ta, ti, to) = (a.acl(dev)?, idx.acl(dev)?, out.acl(dev)?);
    launch(dev, "aclnnIndexSelect", &[a, idx, out], |addr, ws, ex| {
        phase1!(addr, ws, ex, fn(T, i64, T, T), ta.ptr(), dim, ti.ptr(), to.ptr())
    })
}

/// `out = a` with `src` rows added at `idx` along `dim` (`aclnnIndexAdd`, alpha 1).
pub fn index_add(dev: &Arc<DeviceInner>, a: &View, dim: i64, idx: &View, src: &View, out: &View) -> Result<()> {
    let (ta, ti, ts, to, alpha) =
        (a.acl(dev)?, idx.acl(dev)?, src.acl(dev)?, out.acl(dev)?, scalar(dev, 1.0, out.acl_dtype)?);
    launch(dev, "aclnnIndexAdd", &[a, idx, src, out], |addr, ws, ex| {
        phase1!(
            addr,
            ws,
            ex,
            fn(T, i64, T, T, AclScalarPtr, T),
            ta.ptr(),
            dim,
            ti.ptr(),
            ts.ptr(),
            alpha.ptr(),
            to.ptr()
        )
    })
}

/// `out = a.gather(dim, idx)` (`aclnnGather`).
pub fn gather(dev: &Arc<DeviceInner>, a: &View, dim: i64, idx: &View, out: &View) -> Result<()> {
    let (ta, ti, to) = (a.acl(dev)?, idx.acl(dev)?, out.acl(dev)?);
    launch(dev, "aclnnGather", &[a, idx, out], |addr, ws, ex| {
        phase1!(addr, ws, ex, fn(T, i64, T, T), ta.ptr(), dim, ti.ptr(), to.ptr())
    })
}

/// `out = a.scatter_add(dim, idx, src)` (`aclnnScatterAdd`); `out` may be `a` itself.
pub fn scatter_add(dev: &Arc<DeviceInner>, a: &View, dim: i64, idx: &View, src: &View, out: &View) -> Result<()> {
    let (ta, ti, ts, to) = (a.acl(dev)?, idx.acl(dev)?, src.acl(dev)?, out.acl(dev)?);
    launch(dev, "aclnnScatterAdd", &[a, idx, src, out], |addr, ws, ex| {
        phase1!(addr, ws, ex, fn(T, i64, T, T, T), ta.ptr(), dim, ti.ptr(), ts.ptr(), to.ptr())
    })
}
