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

/// A device named on a command line, before it is opened: `cpu`, `npu:N` (a real CANN
/// toolkit) or `npu-sim:N` (the emulator). Parsing checks the spelling only; [`DeviceSpec::open`]
/// loads the toolkit and opens the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceSpec {
    /// The host CPU.
    Cpu,
    /// Ascend device `id` on a toolkit.
    Ascend {
        /// Which toolkit.
        kind: ToolkitKind,
        /// Device id.
        id: usize,
    },
}

impl DeviceSpec {
    /// Open the device.
    pub fn open(self) -> Result<candle_core::Device> {
        match self {
            DeviceSpec::Cpu => Ok(candle_core::Device::Cpu),
            DeviceSpec::Ascend { kind, id } => Ok(candle_core::Device::new_custom(AscendDevice::open(kind, id)?)),
        }
    }

    /// The `n` devices from this one on (`npu:2` → `npu:2`, `npu:3`, …); `None` where they do not
    /// exist as names (more than one CPU, ids past `usize::MAX`).
    pub fn and_next(self, n: usize) -> Option<Vec<DeviceSpec>> {
        match self {
            DeviceSpec::Cpu => (n <= 1).then(|| vec![DeviceSpec::Cpu; n]),
            DeviceSpec::Ascend { kind, id } => {
                Some((id..id.checked_add(n)?).map(|id| DeviceSpec::Ascend { kind, id }).collect())
            }
        }
    }
}

impl std::str::FromStr for DeviceSpec {
    type Err = AscendError;
    fn from_str(text: &str) -> Result<Self> {
        let text = text.trim();
        if text == "cpu" {
            return Ok(DeviceSpec::Cpu);
        }
        let bad = || AscendError::BadDevice(text.to_string());
        let (prefix, id) = text.split_once(':').ok_or_else(bad)?;
        let kind = ToolkitKind::ALL.into_iter().find(|k| k.device_prefix() == prefix).ok_or_else(bad)?;
        Ok(DeviceSpec::Ascend { kind, id: id.parse().map_err(|_| bad())? })
    }
}

impl std::fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceSpec::Cpu => write!(f, "cpu"),
            DeviceSpec::Ascend { kind, id } => write!(f, "{}:{id}", kind.device_prefix()),
        }
    }
}

/// Parse and open a device string (see [`DeviceSpec`]).
pub fn parse_device(text: &str) -> Result<candle_core::Device> {
    text.parse::<DeviceSpec>()?.open()
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
