//! Random fills, keyed by (seed, offset) as on the device.
use crate::soc::AclnnOp;
use std::sync::Arc;

use super::{int_array, launch, phase1, View};
use crate::error::Result;
use crate::ffi::types::*;
use crate::runtime::device::DeviceInner;

type T = AclTensorPtr;

/// Uniform in [lo, up) (`aclnnInplaceUniform`).
pub fn uniform(dev: &Arc<DeviceInner>, t: &View, lo: f64, up: f64, seed: u64, offset: u64) -> Result<()> {
    let tt = t.acl(dev)?;
    launch(dev, AclnnOp::InplaceUniform, &[t], |addr, ws, ex| {
        phase1!(addr, ws, ex, fn(T, f64, f64, u64, u64), tt.ptr(), lo, up, seed, offset)
    })
}

/// Normal(mean, std) (`aclnnInplaceNormal`, float parameters).
pub fn normal(dev: &Arc<DeviceInner>, t: &View, mean: f64, std: f64, seed: u64, offset: u64) -> Result<()> {
    let tt = t.acl(dev)?;
    launch(dev, AclnnOp::InplaceNormal, &[t], |addr, ws, ex| {
        phase1!(addr, ws, ex, fn(T, f32, f32, i64, i64), tt.ptr(), mean as f32, std as f32, seed as i64, offset as i64)
    })
}

/// Bytes of a dropout mask for `n` elements: one bit each, padded to 128 bits (ops-math
/// `aclnn_dropout_gen_mask.cpp` InferDSAOutShapeV2).
pub fn dropout_mask_bytes(n: usize) -> usize {
    n.div_ceil(128) * 128 / 8
}

/// A dropout bit mask for a tensor of `dims`, keyed by (seed, offset): bit i (LSB first) is 1,
/// keep, with probability 1 − `p` (`aclnnDropoutGenMaskV2`, probDataType `prob_dtype`).
pub fn dropout_gen_mask(
    dev: &Arc<DeviceInner>,
    dims: &[usize],
    p: f64,
    seed: u64,
    offset: u64,
    prob_dtype: i32,
    mask: &View,
) -> Result<()> {
    let shape: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
    let (arr, tm) = (int_array(dev, &shape)?, mask.acl(dev)?);
    launch(dev, AclnnOp::DropoutGenMaskV2, &[mask], |addr, ws, ex| {
        phase1!(
            addr,
            ws,
            ex,
            fn(AclIntArrayPtr, f64, i64, i64, i32, T),
            arr.ptr(),
            p,
            seed as i64,
            offset as i64,
            prob_dtype,
            tm.ptr()
        )
    })
}

/// `out = x·1/(1 − p)` where the mask's bit is 1, else 0 (`aclnnDropoutDoMask`).
pub fn dropout_do_mask(dev: &Arc<DeviceInner>, x: &View, mask: &View, p: f64, out: &View) -> Result<()> {
    let (tx, tm, to) = (x.acl(dev)?, mask.acl(dev)?, out.acl(dev)?);
    launch(dev, AclnnOp::DropoutDoMask, &[x, mask, out], |addr, ws, ex| {
        phase1!(addr, ws, ex, fn(T, T, f64, T), tx.ptr(), tm.ptr(), p, to.ptr())
    })
}

/// The fused bodies built on these launches, for op types outside this crate (re-exported as
/// `candle_ascend::fused`).
pub mod fused {
    use crate::fused::prelude::*;

    /// The bit mask of an Ascend dropout forward pass, kept for its backward pass.
    #[derive(Clone)]
    pub struct DropoutMask(Arc<AscendStorage>);

    /// The Ascend body of dropout with drop probability `p`: `aclnnDropoutGenMaskV2` draws the bit
    /// mask keyed by (seed, offset), `aclnnDropoutDoMask` applies it (as torch_npu's `_npu_dropout`).
    /// The result in x's dtype and shape, and the mask for [`dropout_grad`].
    pub fn dropout(
        x: &dyn DynBackendStorage,
        xl: &Layout,
        p: f64,
        seed: u64,
        offset: u64,
    ) -> candle_core::Result<(BoxStorage, DropoutMask)> {
        let xs = ascend_storage(x)?;
        let bytes = crate::ops::random::dropout_mask_bytes(xl.shape().elem_count());
        let mask = AscendStorage::empty(&xs.device, bytes, DType::U8)?;
        let mv = mask.contiguous(&Shape::from_dims(&[bytes]))?;
        crate::ops::random::dropout_gen_mask(xs.dev(), xl.dims(), p, seed, offset, acl_dtype(xs.dtype)?, &mv)?;
        let (out, ov) = output_like(xs, xl.shape())?;
        crate::ops::random::dropout_do_mask(xs.dev(), &xs.view(xl)?, &mv, p, &ov)?;
        Ok((Box::new(out), DropoutMask(Arc::new(mask))))
    }

    /// The Ascend body of dropout's backward: the incoming gradient through the forward pass's mask
    /// (`aclnnDropoutDoMask`, as torch_npu's `npu_dropout_backward`), in g's dtype.
    pub fn dropout_grad(
        g: &dyn DynBackendStorage,
        gl: &Layout,
        mask: &DropoutMask,
        p: f64,
    ) -> candle_core::Result<BoxStorage> {
        let gs = ascend_storage(g)?;
        let mv = mask.0.contiguous(&Shape::from_dims(&[mask.0.len]))?;
        let (out, ov) = output_like(gs, gl.shape())?;
        crate::ops::random::dropout_do_mask(gs.dev(), &gs.view(gl)?, &mv, p, &ov)?;
        Ok(Box::new(out))
    }
}
