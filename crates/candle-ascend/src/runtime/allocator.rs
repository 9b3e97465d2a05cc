//! Device memory for storages: blocks from the device's [`BlockCache`], and segments from
//! `aclrtMalloc` when none fits (the cache given back to the driver and the call tried once more
//! when the device is full). Reuse is safe without synchronisation because each device has a
//! single stream: work that used a block is ordered before any work that reuses it.
use std::ffi::c_void;
use std::sync::Arc;

use super::block_cache::{rounded, segment_size};
use super::device::DeviceInner;
use crate::error::{AscendError, Result};
use crate::ffi::types::*;

/// Device memory owned by a storage; returned to the cache when dropped.
#[derive(Debug)]
pub struct DeviceBuffer {
    ptr: *mut c_void,
    size: usize,
    device: Arc<DeviceInner>,
}

// SAFETY: `ptr` is a device address: the host never dereferences it, only hands it to ACL calls
// made on a thread bound to the device, and it goes back to the cache under the cache's mutex.
unsafe impl Send for DeviceBuffer {}
unsafe impl Sync for DeviceBuffer {}

impl DeviceBuffer {
    /// Allocate at least `bytes` bytes on `device`, from the cache when possible.
    pub(crate) fn new(device: &Arc<DeviceInner>, bytes: usize) -> Result<Self> {
        let size = rounded(bytes);
        let cached = device.cache.lock().unwrap_or_else(|p| p.into_inner()).take(size);
        if let Some(ptr) = cached {
            return Ok(Self { ptr: ptr as *mut c_void, size, device: device.clone() });
        }
        let segment = segment_size(size);
        let base = match device.malloc(segment) {
            Ok(p) => p,
            // Out of memory: give the free segments back to the driver and try once more.
            Err(AscendError::OutOfMemory { .. }) => {
                device.release_cache();
                device.malloc(segment)?
            }
            Err(e) => return Err(e),
        };
        device.cache.lock().unwrap_or_else(|p| p.into_inner()).add_segment(base, segment, size);
        Ok(Self { ptr: base as *mut c_void, size, device: device.clone() })
    }

    /// The device address.
    pub fn ptr(&self) -> *mut c_void {
        self.ptr
    }

    /// Capacity in bytes.
    pub fn size(&self) -> usize {
        self.size
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        self.device.cache.lock().unwrap_or_else(|p| p.into_inner()).give_back(self.ptr as usize);
    }
}

impl DeviceInner {
    fn malloc(&self, size: usize) -> Result<usize> {
        self.bind_thread()?;
        let api = &self.toolkit.api;
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: `ptr` is a valid out-pointer and `size` > 0.
        let code = unsafe { (api.aclrtMalloc)(&mut ptr, size, ACL_MEM_MALLOC_HUGE_FIRST) };
        match code {
            ACL_SUCCESS => {
                self.counters.allocated(size);
                Ok(ptr as usize)
            }
            code if is_out_of_memory(code) => Err(AscendError::OutOfMemory {
                bytes: size,
                device: self.name(),
                code,
                message: self.toolkit.recent_message(),
            }),
            code => Err(AscendError::Runtime { call: "aclrtMalloc", code, message: self.toolkit.recent_message() }),
        }
    }

    /// Free every wholly free segment (after synchronising, since `aclrtFree` does not wait).
    pub(crate) fn release_cache(&self) {
        let _ = self.synchronize();
        let segments = self.cache.lock().unwrap_or_else(|p| p.into_inner()).drain_free_segments();
        for (ptr, size) in segments {
            // SAFETY: every segment came from aclrtMalloc and none of its blocks is in use.
            unsafe { (self.toolkit.api.aclrtFree)(ptr as *mut c_void) };
            self.counters.freed(size);
        }
    }
}

/// The `aclrtMalloc` codes that mean the device is out of memory (`rt_error_codes.h`, `acl_base_rt.h`):
/// these release the cache and retry once, then surface as [`AscendError::OutOfMemory`].
fn is_out_of_memory(code: AclError) -> bool {
    matches!(code, ACL_ERROR_RT_MEMORY_ALLOCATION | ACL_ERROR_RT_DEVICE_OOM | ACL_ERROR_BAD_ALLOC)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_oom_is_out_of_memory() {
        // 207018 ACL_ERROR_RT_DEVICE_OOM, 207001 ACL_ERROR_RT_MEMORY_ALLOCATION, 200000 ACL_ERROR_BAD_ALLOC.
        for code in [207_018, 207_001, 200_000] {
            assert!(is_out_of_memory(code), "{code}");
        }
        // 107000 ACL_ERROR_RT_PARAM_INVALID is a caller error, not a full device.
        assert!(!is_out_of_memory(107_000));
    }
}
