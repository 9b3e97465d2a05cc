//! Normalisation: `aclnnLayerNorm` and `aclnnLayerNormBackward` over the trailing
//! `normalized` dims (ops-nn `norm/layer_norm_v4`, `norm/layer_norm_grad_v3`).
use crate::soc::AclnnOp;
use std::sync::Arc;

use super::{bool_array, int_array, launch, phase1, View};
use crate::error::Result;
use crate::ffi::types::*;
use crate::runtime::device::DeviceInner;

type T = AclTensorPtr;
type I = AclIntArrayPtr;
type B = AclBoolArrayPtr;

/// `out = (x − mean)·rstd·w + b` per row of the trailing `normalized` dims; `mean` and `rstd`
/// (one element per row, rstd = 1/√(biased var + eps)) are written when given.
#[allow(clippy::too_many_arguments)]
pub fn layer_norm(
    dev: &Arc<DeviceInner>,
    x: &View,
    normalized: &[i64],
    w: &View,
    b: &View,
    eps: f64,
    out: &View,
    stats: Option<(&View, &View)>,
) -> Result<()> {
    let (tx, tw, tb, to) = (x.acl(dev)?, w.acl(dev)?, b.acl(dev)?, out.acl(dev)?);
    let norm = int_array(dev, normalized)?;
    let stats = stats.map(|(m, r)| Ok::<_, crate::error::AscendError>((m.acl(dev)?, r.acl(dev)?))).transpose()?;
    let (tm, tr) = stats.as_ref().map_or((std::ptr::null_mut(), std::ptr::null_mut()), |(m, r)| (m.ptr(), r.ptr()));
    launch(dev, AclnnOp::LayerNorm, &[x, w, b, out], |addr, ws, ex| {
        phase1!(
            addr,
            ws,
            ex,
            fn(T, I, T, T, f64, T, T, T),
            tx.ptr(),
            norm.ptr(),
            tw.ptr(),
            tb.ptr(),
            eps,
            to.ptr(),
            tm,
            tr
        )
    })
}

/// The three gradients of [`layer_norm`] from the saved `mean` and `rstd`: `dx` (x's shape), and
/// `dw`, `db` (the normalized shape), in one launch.
#[allow(clippy::too_many_arguments)]
pub fn layer_norm_backward(
    dev: &Arc<DeviceInner>,
    grad: &View,
    x: &View,
    normalized: &[i64],
    mean: &View,
    rstd: &View,
    w: &View,
    dx: &View,
    dw: &View,
    db: &View,
) -> Result<()> {
    let (tg, tx, tm, tr, tw) = (grad.acl(dev)?, x.acl(dev)?, mean.acl(dev)?, rstd.acl(dev)?, w.acl(dev)?);
    let (tdx, tdw, tdb) = (dx.acl(dev)?, dw.acl(dev)?, db.acl(dev)?);
    let (norm, mask) = (int_array(dev, normalized)?, bool_array(dev, &[true, true, true])?);
    let no_bias: T = std::ptr::null_mut();
    launch(dev, AclnnOp::LayerNormBackward, &[grad, x, mean, rstd, w, dx, dw, db], |addr, ws, ex| {
        phase1!(
            addr,
            ws,
            ex,
            fn(T, T, I, T, T, T, T, B, T, T, T),
            tg.ptr(),
            tx.ptr(),
            norm.ptr(),
            tm.ptr(),
            tr.ptr(),
            tw.ptr(),
            no_bias,
            mask.ptr(),
            tdx.ptr(),
            tdw.ptr(),
            tdb.ptr()
        )
    })
}

/// `x = x1 + x2` and `out = LayerNorm(x)·w + b` over w's dims in one launch, with the row
/// statistics (`aclnnAddLayerNorm`, no extra bias, additionalOutput on).
#[allow(clippy::too_many_arguments)]
pub fn add_layer_norm(
    dev: &Arc<DeviceInner>,
    x1: &View,
    x2: &View,
    w: &View,
    b: &View,
    eps: f64,
    out: &View,
    (mean, rstd): (&View, &View),
    x: &View,
) -> Result<()> {
    let (t1, t2, tw, tb) = (x1.acl(dev)?, x2.acl(dev)?, w.acl(dev)?, b.acl(dev)?);
    let (to, tm, tr, tx) = (out.acl(dev)?, mean.acl(dev)?, rstd.acl(dev)?, x.acl(dev)?);
    let no_bias: T = std::ptr::null_mut();
    launch(dev, AclnnOp::AddLayerNorm, &[x1, x2, w, b, out, mean, rstd, x], |addr, ws, ex| {
        phase1!(
            addr,
            ws,
            ex,
            fn(T, T, T, T, T, f64, bool, T, T, T, T),
            t1.ptr(),
            t2.ptr(),
            tw.ptr(),
            tb.ptr(),
            no_bias,
            eps,
            true,
            to.ptr(),
            tm.ptr(),
            tr.ptr(),
            tx.ptr()
        )
    })
}
