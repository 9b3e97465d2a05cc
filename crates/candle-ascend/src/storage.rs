//! `AscendStorage`: an untyped device buffer, its dtype and element count (the Metal design).
use std::sync::Arc;

use candle_core::{DType, Layout, Shape};

use crate::error::Result;
use crate::ops::View;
use crate::runtime::device::DeviceInner;
use crate::runtime::{AscendDevice, DeviceBuffer};

/// Tensor storage on an Ascend device.
#[derive(Debug)]
pub struct AscendStorage {
    pub(crate) buffer: DeviceBuffer,
    pub(crate) dtype: DType,
    pub(crate) device: AscendDevice,
    pub(crate) len: usize,
}

impl AscendStorage {
    /// Uninitialised storage for `len` elements of `dtype`.
    pub(crate) fn empty(device: &AscendDevice, len: usize, dtype: DType) -> Result<Self> {
        let buffer = DeviceBuffer::new(&device.inner, len * dtype.size_in_bytes())?;
        Ok(Self { buffer, dtype, device: device.clone(), len })
    }

    pub(crate) fn dev(&self) -> &Arc<DeviceInner> {
        &self.device.inner
    }

    /// The view of this storage under `layout`.
    pub(crate) fn view(&self, layout: &Layout) -> Result<View> {
        View::of(&self.buffer, self.dtype, layout)
    }

    /// The contiguous view of `shape` from the start of this storage.
    pub(crate) fn contiguous(&self, shape: &Shape) -> Result<View> {
        View::of(&self.buffer, self.dtype, &Layout::contiguous(shape))
    }

    /// The device address of the buffer (not dereferenceable on the host).
    pub fn device_ptr(&self) -> *mut std::ffi::c_void {
        self.buffer.ptr()
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the storage holds no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}
