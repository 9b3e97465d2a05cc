//! The runtime layer: devices with one stream each, the caching allocator, pinned staging for
//! uploads, and preflight.
pub mod allocator;
pub mod device;
pub mod preflight;
pub mod staging;

pub use allocator::DeviceBuffer;
pub use device::{AscendDevice, SimCounters};
