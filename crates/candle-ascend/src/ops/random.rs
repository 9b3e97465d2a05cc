//! Random fills, keyed by (seed, offset) as on the device.
use std::sync::Arc;

use super::{launch, phase1, View};
use crate::error::Result;
use crate::ffi::types::*;
use crate::runtime::device::DeviceInner;

type T = AclTensorPtr;

/// Uniform in [lo, up) (`aclnnInplaceUniform`).
pub fn uniform(dev: &Arc<DeviceInner>, t: &View, lo: f64, up: f64, seed: u64, offset: u64) -> Result<()> {
    let tt = t.acl(dev)?;
    launch(dev, "aclnnInplaceUniform", &[t], |addr, ws, ex| {
        phase1!(addr, ws, ex, fn(T, f64, f64, u64, u64), tt.ptr(), lo, up, seed, offset)
    })
}

/// Normal(mean, std) (`aclnnInplaceNormal`, float parameters).
pub fn normal(dev: &Arc<DeviceInner>, t: &View, mean: f64, std: f64, seed: u64, offset: u64) -> Result<()> {
    let tt = t.acl(dev)?;
    launch(dev, "aclnnInplaceNormal", &[t], |addr, ws, ex| {
        phase1!(addr, ws, ex, fn(T, f32, f32, i64, i64), tt.ptr(), mean as f32, std as f32, seed as i64, offset as i64)
    })
}
