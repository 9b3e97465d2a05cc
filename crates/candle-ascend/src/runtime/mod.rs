//! The runtime layer: devices with one stream each, the caching allocator, pinned staging for
//! uploads, preflight, the counters of what a device did, and the modelled
//! time it would have taken.
pub mod allocator;
mod block_cache;
pub mod counters;
pub mod device;
pub mod monitor;
pub mod preflight;
pub mod staging;
pub mod time_model;

pub use allocator::DeviceBuffer;
pub use counters::DeviceCounters;
pub use device::{AscendDevice, DeviceWatch, SimCounters};
pub use monitor::{survey, DeviceProcess, DeviceStatus, Health, SurveyRow};
