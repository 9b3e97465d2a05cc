//! A caching allocator. Freed blocks go back to a per-size free list instead of `aclrtFree`, so
//! steady-state training makes no `aclrtMalloc`/`aclrtFree` calls. A request takes the smallest
//! cached block that is at most [`MAX_SLACK`] larger, so tensors of nearby sizes share blocks
//! instead of each size keeping blocks of its own in the cache. Reuse is safe without
//! synchronisation because each device has a single stream: work that used a block is
//! ordered before any work that reuses it.
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use super::device::DeviceInner;
use crate::error::{AscendError, Result};
use crate::ffi::types::*;

/// Block sizes are rounded up to this granularity (bytes).
const GRANULE: usize = 512;

/// A cached block serves a request up to its size / (1 + 1/MAX_SLACK): at most 1/8 wasted.
const MAX_SLACK: usize = 8;

/// Free blocks by size.
#[derive(Debug, Default)]
pub struct BlockCache {
    free: BTreeMap<usize, Vec<usize>>,
    cached_bytes: usize,
}

fn rounded(bytes: usize) -> usize {
    bytes.max(1).div_ceil(GRANULE) * GRANULE
}

/// Device memory owned by a storage; returned to the cache when dropped.
#[derive(Debug)]
pub struct DeviceBuffer {
    ptr: usize,
    size: usize,
    device: Arc<DeviceInner>,
}

impl DeviceBuffer {
    /// Allocate at least `bytes` bytes on `device`, from the cache when possible.
    pub(crate) fn new(device: &Arc<DeviceInner>, bytes: usize) -> Result<Self> {
        let size = rounded(bytes);
        let cached = {
            let mut cache = device.cache.lock().unwrap_or_else(|p| p.into_inner());
            let fit = cache.free.range_mut(size..=size + size / MAX_SLACK).find(|(_, v)| !v.is_empty());
            let hit = fit.and_then(|(&block, v)| Some((block, v.pop()?)));
            if let Some((block, _)) = hit {
                cache.cached_bytes -= block;
            }
            hit
        };
        if let Some((block, ptr)) = cached {
            return Ok(Self { ptr, size: block, device: device.clone() });
        }
        let ptr = match device.malloc(size) {
            Ok(p) => p,
            // Out of memory: give the cached blocks back to the driver and try once more.
            Err(AscendError::OutOfMemory { .. }) => {
                device.release_cache();
                device.malloc(size)?
            }
            Err(e) => return Err(e),
        };
        Ok(Self { ptr, size, device: device.clone() })
    }

    /// The device address.
    pub fn ptr(&self) -> *mut c_void {
        self.ptr as *mut c_void
    }

    /// Capacity in bytes.
    pub fn size(&self) -> usize {
        self.size
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        let mut cache = self.device.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache.free.entry(self.size).or_default().push(self.ptr);
        cache.cached_bytes += self.size;
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

    /// Free every cached block (after synchronising, since `aclrtFree` does not wait).
    pub(crate) fn release_cache(&self) {
        let _ = self.synchronize();
        let blocks: Vec<(usize, usize)> = {
            let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            cache.cached_bytes = 0;
            std::mem::take(&mut cache.free)
                .into_iter()
                .flat_map(|(size, v)| v.into_iter().map(move |ptr| (size, ptr)))
                .collect()
        };
        for (size, ptr) in blocks {
            // SAFETY: every cached pointer came from aclrtMalloc and is no longer referenced.
            unsafe { (self.toolkit.api.aclrtFree)(ptr as *mut c_void) };
            self.counters.freed(size);
        }
    }
}

/// The cache of a device.
pub(crate) type SharedCache = Mutex<BlockCache>;

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
