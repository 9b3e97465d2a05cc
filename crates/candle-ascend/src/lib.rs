//! candle on Huawei Ascend NPUs.
//!
//! `candle-ascend` implements candle's `BackendStorage`/`BackendDevice` over the ACL runtime
//! and the aclnn operators, loaded at run time with libloading: nothing links against CANN,
//! so the crate builds and its tests pass on any Linux machine. It ships an emulated CANN
//! toolkit (C sources built with `cc` into `libascendcl.so`, `libnnopbase.so` and
//! `libopapi.so`), reached through the `npu-sim:N` device; `npu:N` uses a real toolkit.
//!
//! Layers: `ffi` (types, loader), `runtime` (device, stream, caching allocator), `ops`
//! (aclnn calls by family), then `storage`/`backend` (the candle traits) and `communicator`
//! (HCCL collectives over tensors).
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
pub mod communicator;
pub mod error;
pub mod ffi;
pub mod fused;
pub mod op_table;
pub mod ops;
pub mod runtime;
pub mod soc;
pub mod storage;
pub mod toolkit_check;

pub use candle_core::DType;
pub use communicator::{Communicator, HcclTimeouts, ReduceOp, RootInfo};
pub use error::{AscendError, Result};
pub use ffi::loader::{emulated_root, ToolkitKind};
pub use runtime::{
    survey, AscendDevice, DeviceCounters, DeviceProcess, DeviceStatus, DeviceWatch, Health, SimCounters, SurveyRow,
};
pub use soc::{Engine, Soc, SocFamily};
pub use storage::AscendStorage;

/// The toolkit and id an Ascend device name spells (`npu:N`, a real CANN toolkit; `npu-sim:N`, the
/// emulator), checking the spelling only. A front end's `--device` (`cpu`, `cuda:N` too) is
/// parsed by its `DeviceSpec`, which asks this for Ascend names.
pub fn parse_ascend_name(text: &str) -> Result<(ToolkitKind, usize)> {
    let text = text.trim();
    let bad = || AscendError::BadDevice(text.to_string());
    let (prefix, id) = text.split_once(':').ok_or_else(bad)?;
    let kind = ToolkitKind::ALL.into_iter().find(|k| k.device_prefix() == prefix).ok_or_else(bad)?;
    Ok((kind, id.parse().map_err(|_| bad())?))
}

/// Parse and open an Ascend device name (`npu:N`, `npu-sim:N`).
pub fn parse_device(text: &str) -> Result<candle_core::Device> {
    let (kind, id) = parse_ascend_name(text)?;
    Ok(candle_core::Device::new_custom(AscendDevice::open(kind, id)?))
}

/// The Ascend device behind a candle device, if it is one.
pub fn ascend_device(device: &candle_core::Device) -> Option<&AscendDevice> {
    device.as_custom_device::<AscendDevice>()
}

#[cfg(test)]
mod tests {
    #[test]
    fn locations_are_named_as_the_command_line_spells_them() {
        use candle_core::DeviceLocation;
        assert_eq!(DeviceLocation::Custom { name: "npu-sim", id: 0 }.to_string(), "npu-sim:0");
        assert_eq!(DeviceLocation::Cpu.to_string(), "cpu");
        assert_eq!(DeviceLocation::Cuda { gpu_id: 1 }.to_string(), "cuda:1");
    }
}
