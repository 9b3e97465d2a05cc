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

/// The fused bodies built on these launches, for op types outside this crate (re-exported as
/// `candle_ascend::fused`).
pub mod fused {
    use crate::fused::prelude::*;

    /// The row statistics of a LayerNorm forward pass (mean and 1/σ, f32, one per row), kept for
    /// its backward pass so that it need not run the forward again.
    #[derive(Clone)]
    pub struct LayerNormStats(Arc<(AscendStorage, AscendStorage)>);

    /// The Ascend body of a LayerNorm op over the last dimension of `x` (`aclnnLayerNorm`), with
    /// weight and bias of that size: the result in x's dtype and shape, and, when asked, the row
    /// statistics for [`layer_norm_grads`].
    #[allow(clippy::too_many_arguments)]
    pub fn layer_norm(
        x: &dyn DynBackendStorage,
        xl: &Layout,
        w: &dyn DynBackendStorage,
        wl: &Layout,
        b: &dyn DynBackendStorage,
        bl: &Layout,
        eps: f64,
        keep_stats: bool,
    ) -> candle_core::Result<(BoxStorage, Shape, Option<LayerNormStats>)> {
        let xs = ascend_storage(x)?;
        let (ws, bs) = (ascend_storage(w)?, ascend_storage(b)?);
        let hidden = hidden_of(xl);
        let out = AscendStorage::empty(&xs.device, xl.shape().elem_count(), xs.dtype)?;
        let (xv, wv, bv, ov) = (xs.view(xl)?, ws.view(wl)?, bs.view(bl)?, out.contiguous(xl.shape())?);
        let normalized = [hidden as i64];
        if !keep_stats {
            crate::ops::norm::layer_norm(xs.dev(), &xv, &normalized, &wv, &bv, eps, &ov, None)?;
            return Ok((Box::new(out), xl.shape().clone(), None));
        }
        let rows = xl.shape().elem_count() / hidden;
        let rows_shape = Shape::from_dims(&[rows, 1]);
        let (mean, rstd) =
            (AscendStorage::empty(&xs.device, rows, DType::F32)?, AscendStorage::empty(&xs.device, rows, DType::F32)?);
        let (mv, rv) = (mean.contiguous(&rows_shape)?, rstd.contiguous(&rows_shape)?);
        crate::ops::norm::layer_norm(xs.dev(), &xv, &normalized, &wv, &bv, eps, &ov, Some((&mv, &rv)))?;
        Ok((Box::new(out), xl.shape().clone(), Some(LayerNormStats(Arc::new((mean, rstd))))))
    }

    /// The normalized output of an Ascend [`add_layer_norm`], waiting for the LayerNorm op that
    /// takes the sum as its input, with the row statistics for its backward pass.
    pub struct AddLayerNormOut {
        out: AscendStorage,
        stats: LayerNormStats,
    }

    impl AddLayerNormOut {
        /// The normalized output as an op's result, and the statistics.
        pub fn into_parts(self) -> (BoxStorage, LayerNormStats) {
            (Box::new(self.out), self.stats)
        }
    }

    /// The Ascend body of `LayerNorm(x1 + x2)` over the last dimension (`aclnnAddLayerNorm`): the
    /// sum x1 + x2 as the result, and the normalized output with its statistics for the LayerNorm
    /// op applied to that sum. x1 and x2 share a shape; w and b are (hidden,).
    pub fn add_layer_norm(
        x1: &dyn DynBackendStorage,
        l1: &Layout,
        x2: &dyn DynBackendStorage,
        l2: &Layout,
        w: &Tensor,
        b: &Tensor,
        eps: f64,
    ) -> candle_core::Result<(BoxStorage, AddLayerNormOut)> {
        let (s1, s2) = (ascend_storage(x1)?, ascend_storage(x2)?);
        let ((_, wv), (_, bv)) = (tensor_view(w)?, tensor_view(b)?);
        let dev = &s1.device;
        let shape = l1.shape();
        let rows = shape.elem_count() / hidden_of(l1);
        let mut stat_dims = l1.dims().to_vec();
        if let Some(last) = stat_dims.last_mut() {
            *last = 1;
        }
        let stat_shape = Shape::from(stat_dims);
        let (mean, rstd) = (AscendStorage::empty(dev, rows, DType::F32)?, AscendStorage::empty(dev, rows, DType::F32)?);
        let (mv, rv) = (mean.contiguous(&stat_shape)?, rstd.contiguous(&stat_shape)?);
        let ((sum, sv), (out, ov)) = (output_like(s1, shape)?, output_like(s1, shape)?);
        crate::ops::norm::add_layer_norm(s1.dev(), &s1.view(l1)?, &s2.view(l2)?, &wv, &bv, eps, &ov, (&mv, &rv), &sv)?;
        let stats = LayerNormStats(Arc::new((mean, rstd)));
        Ok((Box::new(sum), AddLayerNormOut { out, stats }))
    }

    /// The Ascend body of LayerNorm's backward: `[dx | dw | db]` as one buffer of
    /// `numel(x) + 2·hidden` elements in x's dtype, which w must share (aclnnLayerNormBackward.md:
    /// gradInputOut has the input's dtype, gradWeightOut and gradBiasOut the weight's), from the
    /// forward pass's statistics, in one `aclnnLayerNormBackward` launch.
    pub fn layer_norm_grads(
        x: &dyn DynBackendStorage,
        xl: &Layout,
        w: &dyn DynBackendStorage,
        wl: &Layout,
        grad: &dyn DynBackendStorage,
        gl: &Layout,
        stats: &LayerNormStats,
    ) -> candle_core::Result<(BoxStorage, Shape)> {
        let (xs, ws, gs) = (ascend_storage(x)?, ascend_storage(w)?, ascend_storage(grad)?);
        if ws.dtype != xs.dtype {
            candle_core::bail!(
                "layer_norm_grads: a {:?} weight for a {:?} input (they share one buffer)",
                ws.dtype,
                xs.dtype
            )
        }
        let (n, hidden) = (xl.shape().elem_count(), hidden_of(xl));
        let rows_shape = Shape::from_dims(&[n / hidden, 1]);
        let (mean, rstd) = &*stats.0;
        let (mv, rv) = (mean.contiguous(&rows_shape)?, rstd.contiguous(&rows_shape)?);
        let packed = AscendStorage::empty(&xs.device, n + 2 * hidden, xs.dtype)?;
        let piece = |offset: usize, shape: &Shape| -> crate::error::Result<View> {
            let mut v = packed.contiguous(shape)?;
            v.offset = offset as i64;
            Ok(v)
        };
        let (dx, dw, db) = (
            piece(0, xl.shape())?,
            piece(n, &Shape::from_dims(&[hidden]))?,
            piece(n + hidden, &Shape::from_dims(&[hidden]))?,
        );
        let normalized = [hidden as i64];
        let (xv, wv) = (xs.view(xl)?, ws.view(wl)?);
        crate::ops::norm::layer_norm_backward(xs.dev(), &gs.view(gl)?, &xv, &normalized, &mv, &rv, &wv, &dx, &dw, &db)?;
        Ok((Box::new(packed), Shape::from_dims(&[n + 2 * hidden])))
    }
}
