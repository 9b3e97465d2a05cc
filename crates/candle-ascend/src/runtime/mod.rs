//! The runtime layer: devices with one stream each, the caching allocator, pinned staging for
//! uploads, preflight, and the counters of what a device did.
pub mod allocator;
pub mod counters;
pub mod device;
pub mod preflight;
pub mod staging;

pub use allocator::DeviceBuffer;
pub use counters::DeviceCounters;
pub use device::{AscendDevice, SimCounters};
