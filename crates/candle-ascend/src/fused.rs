//! The launch API for fused ops that live outside this crate (an op type with a CPU body and an
//! Ascend body, in the style of candle-nn's `ops.rs`). The op's support table asks [`aclnn_runs`] whether
//! the part has the operator for its dtype (these functions do not check), then calls the function,
//! which takes Ascend storages with their layouts and launches the operator, with the casts,
//! reductions or mask generation its contract needs beside it.
//!
//! Each body sits with its family's aclnn launches (`ops/<family>.rs`, in a `fused` module);
//! this module re-exports them and holds what they share.
pub use crate::ops::activation::fused::*;
pub use crate::ops::attention::fused::*;
pub use crate::ops::copy::fused::*;
pub use crate::ops::index::fused::*;
pub use crate::ops::loss::fused::*;
pub use crate::ops::matmul::fused::*;
pub use crate::ops::norm::fused::*;
pub use crate::ops::optim::fused::*;
pub use crate::ops::optim::AdamWHyper;
pub use crate::ops::random::fused::*;
use crate::ops::{acl_dtype, View};
use crate::runtime::device::DeviceInner;
use crate::soc::AclnnOp;
use crate::storage::AscendStorage;
use candle_core::custom_backend::{BoxStorage, DynBackendStorage};
use candle_core::{DType, Layout, Shape, Storage, Tensor};
use std::sync::Arc;

/// What the bodies in `ops/<family>.rs` import.
pub(crate) mod prelude {
    pub(crate) use super::{ascend_storage, grad_body, hidden_of, output_like, tensor_view, unary_body, with_storage};
    pub(crate) use crate::ops::optim::AdamWHyper;
    pub(crate) use crate::ops::{acl_dtype, View};
    pub(crate) use crate::storage::AscendStorage;
    pub(crate) use candle_core::custom_backend::{BoxStorage, DynBackendStorage};
    pub(crate) use candle_core::{DType, Layout, Shape, Tensor};
    pub(crate) use std::sync::Arc;
}

/// Whether the aclnn operator `op` runs for `dtype` on `device`'s part (false on devices other
/// than Ascend parts). Arguments in the order of codon-ops' `support::choose`.
pub fn aclnn_runs(op: AclnnOp, device: &candle_core::Device, dtype: DType) -> bool {
    match (crate::ascend_device(device), acl_dtype(dtype)) {
        (Some(dev), Ok(acl)) => dev.soc().runs(op, acl),
        _ => false,
    }
}

/// The device and view of a tensor on an Ascend device. The view points into the tensor's
/// buffer, which the caller's tensor keeps alive.
pub(crate) fn tensor_view(t: &Tensor) -> candle_core::Result<(Arc<DeviceInner>, View)> {
    with_storage(t, |ascend, layout| Ok((ascend.dev().clone(), ascend.view(layout)?)))
}

/// `f` of a tensor's Ascend storage and layout, under the storage's read lock.
pub(crate) fn with_storage<R>(
    t: &Tensor,
    f: impl FnOnce(&AscendStorage, &Layout) -> candle_core::Result<R>,
) -> candle_core::Result<R> {
    let (storage, layout) = t.storage_and_layout();
    let Storage::Custom(custom) = &*storage else {
        candle_core::bail!("expected a tensor on an Ascend device, found one on {}", t.device().location())
    };
    f(ascend_storage(custom.as_ref())?, layout)
}

pub(crate) fn ascend_storage(s: &dyn DynBackendStorage) -> candle_core::Result<&AscendStorage> {
    match s.as_any().downcast_ref::<AscendStorage>() {
        Some(a) => Ok(a),
        None => {
            candle_core::bail!("expected a storage on an Ascend device, found one on {}", s.dyn_device().dyn_location())
        }
    }
}

/// The last dimension of a layout (the normalized one), at least 1.
pub(crate) fn hidden_of(l: &Layout) -> usize {
    l.dims().last().copied().unwrap_or(1).max(1)
}

/// A fresh storage like `like` (same device and dtype) for `shape`, with its contiguous view.
pub(crate) fn output_like(like: &AscendStorage, shape: &Shape) -> candle_core::Result<(AscendStorage, View)> {
    let out = AscendStorage::empty(&like.device, shape.elem_count(), like.dtype)?;
    let view = out.contiguous(shape)?;
    Ok((out, view))
}

/// The Ascend body of an element-wise op of one operand: a fresh output shaped and typed as `x`,
/// written by one `launch` (device, x's view, the output's view).
pub(crate) fn unary_body(
    x: &dyn DynBackendStorage,
    xl: &Layout,
    launch: impl FnOnce(&Arc<DeviceInner>, &View, &View) -> crate::error::Result<()>,
) -> candle_core::Result<(BoxStorage, Shape)> {
    let xs = ascend_storage(x)?;
    let (out, ov) = output_like(xs, xl.shape())?;
    launch(xs.dev(), &xs.view(xl)?, &ov)?;
    Ok((Box::new(out), xl.shape().clone()))
}

/// The Ascend body of a gradient from what the forward pass saved (`saved`: its input or its
/// output) and the incoming gradient `g`: a fresh output shaped and typed as `g`, written by one
/// `launch` (device, g's view, saved's view, the output's view).
pub(crate) fn grad_body(
    saved: &dyn DynBackendStorage,
    sl: &Layout,
    g: &dyn DynBackendStorage,
    gl: &Layout,
    launch: impl FnOnce(&Arc<DeviceInner>, &View, &View, &View) -> crate::error::Result<()>,
) -> candle_core::Result<(BoxStorage, Shape)> {
    let (ss, gs) = (ascend_storage(saved)?, ascend_storage(g)?);
    let (out, ov) = output_like(gs, gl.shape())?;
    launch(gs.dev(), &gs.view(gl)?, &ss.view(sl)?, &ov)?;
    Ok((Box::new(out), gl.shape().clone()))
}
