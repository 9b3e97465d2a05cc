//! Keep freed memory in the process, for training and batch prediction.
//!
//! glibc returns large freed blocks to the OS (`munmap`, heap trimming), so a training step (or a
//! forward pass) that allocates and frees the same large activations every time pays for fresh
//! pages each time: on the CodonTransformer step the kernel time was as large as the compute.
//! Like torch's caching allocator, such loops keep freed memory for reuse instead.

/// Ask glibc to serve large allocations from the heap and never trim it. Process-wide; a
/// no-op on other C libraries. Returns whether the settings were applied.
pub fn retain_freed_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only changes allocator parameters; both values are valid for it.
        unsafe { libc::mallopt(libc::M_MMAP_MAX, 0) == 1 && libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}
