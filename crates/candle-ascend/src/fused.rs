//! The launch API for fused ops that live outside this crate (an op type with a CPU body and an
//! Ascend body, in the style of candle-nn's `ops.rs`): each function takes candle tensors on an
//! Ascend device, checks the part's support table, and launches one aclnn fused operator.
use candle_core::{DType, Storage, Tensor};

use crate::ops::{acl_dtype, View};
use crate::storage::AscendStorage;

pub use crate::ops::optim::AdamWHyper;

/// Whether `op` runs natively for `dtype` on the device of `t` (false on other devices).
pub fn runs_natively(t: &Tensor, op: &str, dtype: DType) -> bool {
    match (crate::ascend_device(t.device()), acl_dtype(dtype)) {
        (Some(dev), Ok(acl)) => dev.soc().runs(op, acl),
        _ => false,
    }
}

fn with_view<R>(t: &Tensor, f: impl FnOnce(&AscendStorage, View) -> candle_core::Result<R>) -> candle_core::Result<R> {
    let (storage, layout) = t.storage_and_layout();
    let Storage::Custom(custom) = &*storage else {
        candle_core::bail!("expected a tensor on an Ascend device, found one on {:?}", t.device().location())
    };
    let Some(ascend) = custom.as_any().downcast_ref::<AscendStorage>() else {
        candle_core::bail!("expected a tensor on an Ascend device, found one on {:?}", t.device().location())
    };
    let view = ascend.view(layout).map_err(candle_core::Error::from)?;
    f(ascend, view)
}

/// AdamW in place through `aclnnApplyAdamWV2`: `var`, `m` and `v` are overwritten. `step` is a
/// one-element FLOAT tensor holding t − 1. All five tensors live on one Ascend device.
pub fn apply_adamw(
    var: &Tensor,
    m: &Tensor,
    v: &Tensor,
    grad: &Tensor,
    step: &Tensor,
    hyper: AdamWHyper,
) -> candle_core::Result<()> {
    with_view(var, |storage, var| {
        with_view(m, |_, m| {
            with_view(v, |_, v| {
                with_view(grad, |_, grad| {
                    with_view(step, |_, step| {
                        crate::ops::optim::apply_adamw_v2(storage.dev(), &var, &m, &v, &grad, &step, hyper)
                            .map_err(candle_core::Error::from)
                    })
                })
            })
        })
    })
}
