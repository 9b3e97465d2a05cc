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
