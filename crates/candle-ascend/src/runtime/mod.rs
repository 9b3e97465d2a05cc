//! The runtime layer: devices with one stream each, and the caching allocator.
pub mod allocator;
pub mod device;

pub use allocator::DeviceBuffer;
pub use device::{AscendDevice, SimCounters};
