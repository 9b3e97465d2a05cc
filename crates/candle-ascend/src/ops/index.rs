//! Indexing: index_select, index_add, gather and scatter_add, and the embedding lookup with its
//! backward. Indices are INT32 or INT64.
use crate::soc::AclnnOp;
use std::sync::Arc;

use super::{launch, phase1, scalar, View};
use crate::error::Result;
use crate::ffi::types::*;
use crate::runtime::device::DeviceInner;

type T = AclTensorPtr;

/// `out = a.index_select(dim, idx)` (`aclnnIndexSelect`).
pub fn index_select(dev: &Arc<DeviceInner>, a: &View, dim: i64, idx: &View, out: &View) -> Result<()> {
    let (ta, ti, to) = (a.acl(dev)?, idx.acl(dev)?, out.acl(dev)?);
    launch(dev, AclnnOp::IndexSelect, &[a, idx, out], |addr, ws, ex| {
        phase1!(addr, ws, ex, fn(T, i64, T, T), ta.ptr(), dim, ti.ptr(), to.ptr())
    })
}

/// `out = a` with `src` rows added at `idx` along `dim` (`aclnnIndexAdd`, alpha 1).
pub fn index_add(dev: &Arc<DeviceInner>, a: &View, dim: i64, idx: &View, src: &View, out: &View) -> Result<()> {
    let (ta, ti, ts, to, alpha) =
        (a.acl(dev)?, idx.acl(dev)?, src.acl(dev)?, out.acl(dev)?, scalar(dev, 1.0, out.acl_dtype)?);
    launch(dev, AclnnOp::IndexAdd, &[a, idx, src, out], |addr, ws, ex| {
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
    launch(dev, AclnnOp::Gather, &[a, idx, out], |addr, ws, ex| {
        phase1!(addr, ws, ex, fn(T, i64, T, T), ta.ptr(), dim, ti.ptr(), to.ptr())
    })
}

/// `out = a.scatter_add(dim, idx, src)` (`aclnnScatterAdd`); `out` may be `a` itself.
pub fn scatter_add(dev: &Arc<DeviceInner>, a: &View, dim: i64, idx: &View, src: &View, out: &View) -> Result<()> {
    let (ta, ti, ts, to) = (a.acl(dev)?, idx.acl(dev)?, src.acl(dev)?, out.acl(dev)?);
    launch(dev, AclnnOp::ScatterAdd, &[a, idx, src, out], |addr, ws, ex| {
        phase1!(addr, ws, ex, fn(T, i64, T, T, T), ta.ptr(), dim, ti.ptr(), ts.ptr(), to.ptr())
    })
}

/// `out = weight[indices]`: the rows of a 2-D table at the indices (`aclnnEmbedding`).
pub fn embedding(dev: &Arc<DeviceInner>, weight: &View, indices: &View, out: &View) -> Result<()> {
    let (tw, ti, to) = (weight.acl(dev)?, indices.acl(dev)?, out.acl(dev)?);
    launch(dev, AclnnOp::Embedding, &[weight, indices, out], |addr, ws, ex| {
        phase1!(addr, ws, ex, fn(T, T, T), tw.ptr(), ti.ptr(), to.ptr())
    })
}

/// `paddingIdx` for "no padding row": the doc's negative value (−1) in the uint64 parameter
/// (ops-nn `index/embedding_dense_grad_v2/docs/aclnnEmbeddingDenseBackward.md`).
pub const NO_PADDING: u64 = u64::MAX;

/// The table's gradient (`num_weights`, dim) from the rows' gradient `grad` (…, dim): each row
/// added into its index's row, except the rows whose index is `padding_idx`
/// (`aclnnEmbeddingDenseBackward`, without frequency scaling).
pub fn embedding_dense_backward(
    dev: &Arc<DeviceInner>,
    grad: &View,
    indices: &View,
    num_weights: u64,
    padding_idx: u64,
    out: &View,
) -> Result<()> {
    let (tg, ti, to) = (grad.acl(dev)?, indices.acl(dev)?, out.acl(dev)?);
    launch(dev, AclnnOp::EmbeddingDenseBackward, &[grad, indices, out], |addr, ws, ex| {
        phase1!(
            addr,
            ws,
            ex,
            fn(T, T, u64, u64, bool, T),
            tg.ptr(),
            ti.ptr(),
            num_weights,
            padding_idx,
            false,
            to.ptr()
        )
    })
}

/// The fused bodies built on these launches, for op types outside this crate (re-exported as
/// `candle_ascend::fused`).
pub mod fused {
    use crate::fused::prelude::*;

    /// The Ascend body of an embedding lookup: the rows of the table `w` (vocab, dim) at the 1-D
    /// integer ids, (ids, dim) in the table's dtype (`aclnnEmbedding`).
    pub fn embedding(
        w: &dyn DynBackendStorage,
        wl: &Layout,
        ids: &dyn DynBackendStorage,
        il: &Layout,
    ) -> candle_core::Result<BoxStorage> {
        let (ws, is) = (ascend_storage(w)?, ascend_storage(ids)?);
        let (iv, _cast) = is.index_view(il)?;
        let (out, ov) = output_like(ws, &Shape::from_dims(&[il.shape().elem_count(), hidden_of(wl)]))?;
        crate::ops::index::embedding(ws.dev(), &ws.view(wl)?, &iv, &ov)?;
        Ok(Box::new(out))
    }

    /// The Ascend body of the embedding's backward: the table's gradient (`vocab`, dim) in the
    /// dtype of `grad` (ids, dim), with no gradient for the row `padding_idx`
    /// (`aclnnEmbeddingDenseBackward`).
    pub fn embedding_grad(
        grad: &dyn DynBackendStorage,
        gl: &Layout,
        ids: &dyn DynBackendStorage,
        il: &Layout,
        vocab: usize,
        padding_idx: Option<usize>,
    ) -> candle_core::Result<BoxStorage> {
        let (gs, is) = (ascend_storage(grad)?, ascend_storage(ids)?);
        let (iv, _cast) = is.index_view(il)?;
        let (out, ov) = output_like(gs, &Shape::from_dims(&[vocab, hidden_of(gl)]))?;
        let padding = padding_idx.map_or(crate::ops::index::NO_PADDING, |p| p as u64);
        crate::ops::index::embedding_dense_backward(gs.dev(), &gs.view(gl)?, &iv, vocab as u64, padding, &ov)?;
        Ok(Box::new(out))
    }
}
