//! Pinned host buffers for uploads. `aclrtMemcpyAsync` may only read host memory from
//! `aclrtMallocHost` (CANN 8.0: pageable memory gives "unpredictable errors" on Atlas training and
//! A2 parts), and only until the copy has run: a buffer stays in flight until the next stream
//! synchronisation, then is reused.
use std::ffi::c_void;

use crate::ffi::loader::RuntimeApi;
use crate::ffi::types::*;

/// A pinned host buffer (`aclrtMallocHost`), kept for the life of the process.
#[derive(Debug)]
pub struct PinnedBuffer {
    ptr: *mut c_void,
    size: usize,
}

// SAFETY: the buffer is host memory owned by the staging pool alone; it is written by the thread
// that took it and read by the device's stream, which the pool's in-flight accounting orders.
unsafe impl Send for PinnedBuffer {}
// SAFETY: a shared `PinnedBuffer` only hands out its address.
unsafe impl Sync for PinnedBuffer {}

impl PinnedBuffer {
    pub(crate) fn ptr(&self) -> *mut c_void {
        self.ptr
    }
}

/// Free and in-flight pinned buffers of one device.
#[derive(Debug, Default)]
pub struct Staging {
    free: Vec<PinnedBuffer>,
    /// In flight, each with the number of the upload that queued it.
    busy: Vec<(u64, PinnedBuffer)>,
    busy_bytes: usize,
    uploads: u64,
}

impl Staging {
    /// Largest piece of an upload staged in one pinned buffer.
    pub const MAX_STAGED: usize = 4 << 20;
    /// Pinned bytes that may wait for a synchronisation before an upload forces one: enough for
    /// a training step's host-made dropout masks, so a step does not wait on its uploads.
    const MAX_IN_FLIGHT: usize = 256 << 20;

    /// Whether `bytes` more fit in flight.
    pub(crate) fn has_room(&self, bytes: usize) -> bool {
        self.busy_bytes + bytes <= Self::MAX_IN_FLIGHT
    }

    /// The smallest free buffer of at least `bytes`, or a new one (power-of-two sizes from 64 KiB).
    pub(crate) fn take(&mut self, api: &RuntimeApi, bytes: usize) -> std::result::Result<PinnedBuffer, AclError> {
        let best = (0..self.free.len()).filter(|&i| self.free[i].size >= bytes).min_by_key(|&i| self.free[i].size);
        if let Some(i) = best {
            return Ok(self.free.swap_remove(i));
        }
        let size = bytes.next_power_of_two().max(64 << 10);
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer, size > 0.
        let code = unsafe { (api.aclrtMallocHost)(&mut ptr, size) };
        if code != ACL_SUCCESS {
            return Err(code);
        }
        Ok(PinnedBuffer { ptr, size })
    }

    /// A buffer whose copy is queued on the stream.
    pub(crate) fn in_flight(&mut self, buffer: PinnedBuffer) {
        self.busy_bytes += buffer.size;
        self.busy.push((self.uploads, buffer));
        self.uploads += 1;
    }

    /// A mark taken before a stream synchronisation: the uploads queued so far.
    pub(crate) fn mark(&self) -> u64 {
        self.uploads
    }

    /// After a synchronisation that began at `mark`: the copies queued before it have run
    /// (another thread may have queued more meanwhile; those stay in flight).
    pub(crate) fn recycle(&mut self, mark: u64) {
        let (done, pending): (Vec<_>, Vec<_>) = self.busy.drain(..).partition(|(n, _)| *n < mark);
        self.busy = pending;
        for (_, b) in done {
            self.busy_bytes -= b.size;
            self.free.push(b);
        }
    }
}
