//! candle on Huawei Ascend NPUs.
//!
//! `candle-ascend` implements candle's `BackendStorage`/`BackendDevice` over the ACL runtime
//! and the aclnn operators, loaded at run time with libloading: nothing links against CANN,
//! so the crate builds and its tests pass on any Linux machine. It ships an emulated CANN
//! toolkit (C sources built with `cc` into `libascendcl.so`, `libnnopbase.so` and
//! `libopapi.so`), reached through the `npu-sim:N` device; `npu:N` uses a real toolkit.
//!
//! Layers: `ffi` (types, loader), `runtime` (device, stream, caching allocator), `ops`
//! (aclnn calls by family), then `storage`/`backend` (the candle traits).
//!
//! ```no_run
//! use candle_core::Tensor;
//! let device = candle_ascend::parse_device("npu-sim:0")?;
//! let x = Tensor::arange(0f32, 6.0, &device)?.reshape((2, 3))?;
//! let y = x.matmul(&x.t()?)?;
//! println!("{}", y.to_device(&candle_core::Device::Cpu)?);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
pub mod backend;
pub mod error;
pub mod ffi;
pub mod fused;
pub mod op_table;
pub mod ops;
pub mod runtime;
pub mod soc;
pub mod storage;

pub use candle_core::DType;
pub use error::{AscendError, Result};
pub use ffi::loader::{emulated_root, ToolkitKind};
pub use runtime::{AscendDevice, Communicator, DeviceCounters, HcclTimeouts, ReduceOp, RootInfo, SimCounters};
pub use soc::{Soc, SocFamily};
pub use storage::AscendStorage;

/// Parse a device string: `cpu`, `npu:N` (a real CANN toolkit) or `npu-sim:N` (the emulator).
/// Every example's `--device` flag goes through here.
pub fn parse_device(text: &str) -> Result<candle_core::Device> {
    let text = text.trim();
    if text == "cpu" {
        return Ok(candle_core::Device::Cpu);
    }
    let (kind, id) = match text.split_once(':') {
        Some(("npu", id)) => (ToolkitKind::Cann, id),
        Some(("npu-sim", id)) => (ToolkitKind::Emulated, id),
        _ => return Err(AscendError::BadDevice(text.to_string())),
    };
    let id: usize = id.parse().map_err(|_| AscendError::BadDevice(text.to_string()))?;
    Ok(candle_core::Device::new_custom(AscendDevice::open(kind, id)?))
}

/// The Ascend device behind a candle device, if it is one.
pub fn ascend_device(device: &candle_core::Device) -> Option<&AscendDevice> {
    device.as_custom_device::<AscendDevice>()
}
