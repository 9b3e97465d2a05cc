//! DCMI, the driver's device management interface (`libdcmi.so`, what `npu-smi` is built on),
//! loaded at run time. Declarations follow the driver's `dcmi_interface_api.h` (CANN 8.1.RC1
//! mirror, `Ascend/driver/include`); `tests/vendor_facts.rs` compares them with
//! `soc/cann/runtime_prototypes.tsv`, which `tools/cann_facts.py` reads from that header.
use std::ffi::c_int;
use std::path::{Path, PathBuf};

use crate::error::{AscendError, Result};

/// `DCMI_OK`.
pub const DCMI_OK: c_int = 0;
/// `DCMI_UTILIZATION_RATE_AICORE`: AI Core utilisation, what `npu-smi info` shows as AICore(%).
pub const DCMI_UTILIZATION_RATE_AICORE: c_int = 2;

/// `struct dcmi_hbm_info`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct DcmiHbmInfo {
    /// Total HBM, MB.
    pub memory_size: u64,
    /// HBM clock.
    pub freq: u32,
    /// HBM in use, MB.
    pub memory_usage: u64,
    /// HBM temperature.
    pub temp: i32,
    /// HBM bandwidth utilisation.
    pub bandwith_util_rate: u32,
}

/// `MAX_CHIP_NAME_LEN`.
pub const MAX_CHIP_NAME_LEN: usize = 32;

/// `struct dcmi_chip_info`: the part, as `npu-smi` names it (`Ascend` and `910B3`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DcmiChipInfo {
    /// `Ascend`.
    pub chip_type: [u8; MAX_CHIP_NAME_LEN],
    /// `910B3`.
    pub chip_name: [u8; MAX_CHIP_NAME_LEN],
    /// The chip revision.
    pub chip_ver: [u8; MAX_CHIP_NAME_LEN],
    /// AI Cores.
    pub aicore_cnt: u32,
}

impl Default for DcmiChipInfo {
    fn default() -> Self {
        Self {
            chip_type: [0; MAX_CHIP_NAME_LEN],
            chip_name: [0; MAX_CHIP_NAME_LEN],
            chip_ver: [0; MAX_CHIP_NAME_LEN],
            aicore_cnt: 0,
        }
    }
}

/// `struct dcmi_proc_mem_info`: a process using a device, and its device memory in bytes.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct DcmiProcMemInfo {
    /// Process id.
    pub proc_id: c_int,
    /// Device memory the process holds, bytes.
    pub proc_mem_usage: std::ffi::c_ulong,
}

macro_rules! dcmi_api {
    ($($entry:tt)*) => {
        super::library::library_api! {
            /// The DCMI entry points we call, resolved when the library loads.
            DcmiApi { $($entry)* }
        }
    };
}

dcmi_api! {
    dcmi_init: fn() -> c_int;
    dcmi_get_card_num_list: fn(*mut c_int, *mut c_int, c_int) -> c_int;
    dcmi_get_card_id_device_id_from_logicid: fn(*mut c_int, *mut c_int, u32) -> c_int;
    dcmi_get_device_chip_info: fn(c_int, c_int, *mut DcmiChipInfo) -> c_int;
    dcmi_get_device_utilization_rate: fn(c_int, c_int, c_int, *mut u32) -> c_int;
    dcmi_get_device_hbm_info: fn(c_int, c_int, *mut DcmiHbmInfo) -> c_int;
    dcmi_get_device_temperature: fn(c_int, c_int, *mut c_int) -> c_int;
    dcmi_get_device_power_info: fn(c_int, c_int, *mut c_int) -> c_int;
    dcmi_get_device_health: fn(c_int, c_int, *mut u32) -> c_int;
    dcmi_get_device_errorcode_v2: fn(c_int, c_int, *mut c_int, *mut u32, u32) -> c_int;
    dcmi_get_device_resource_info: fn(c_int, c_int, *mut DcmiProcMemInfo, *mut c_int) -> c_int;
}

impl DcmiApi {
    /// Load `path`, resolve every entry point and initialise DCMI (`dcmi_init`).
    pub fn open(path: &Path) -> Result<Self> {
        let api = Self::load(path)?;
        // SAFETY: `int dcmi_init(void)`.
        let code = unsafe { (api.dcmi_init)() };
        if code != DCMI_OK {
            return Err(AscendError::Dcmi { call: "dcmi_init", code, device: None });
        }
        Ok(api)
    }
}

/// Where a real driver's `libdcmi.so` may be: `CANDLE_ASCEND_DCMI_LIB`, the DCMI package's
/// folder, then the driver's library folders (the toolkit tries the loader's own search path
/// after them).
pub fn driver_candidates() -> Vec<PathBuf> {
    let mut found = Vec::new();
    if let Some(p) = std::env::var_os("CANDLE_ASCEND_DCMI_LIB") {
        found.push(PathBuf::from(p));
    }
    for p in [
        "/usr/local/dcmi/libdcmi.so",
        "/usr/local/Ascend/driver/lib64/driver/libdcmi.so",
        "/usr/local/Ascend/driver/lib64/libdcmi.so",
    ] {
        found.push(PathBuf::from(p));
    }
    found
}
