//! Device monitoring through the driver's DCMI, as `npu-smi info` shows it: utilisation, HBM,
//! temperature, power, health and error codes, and the processes using a device. On the
//! emulator the figures come from its own DCMI (docs/ascend.md, "Device monitoring").
use std::ffi::c_int;

use crate::error::{AscendError, Result};
use crate::ffi::dcmi::{DcmiApi, DcmiChipInfo, DcmiHbmInfo, DcmiProcMemInfo, DCMI_OK, DCMI_UTILIZATION_RATE_AICORE};

/// A device's health as DCMI grades it (`dcmi_get_device_health`: 0 normal, 1 minor, 2 major,
/// 3 critical alarm, in the DCMI API reference).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Normal.
    Ok,
    /// A minor alarm: training goes on, with a warning.
    Warning,
    /// A major alarm.
    Alarm,
    /// A critical alarm.
    Critical,
    /// A value the reference does not define.
    Unknown(u32),
}

impl Health {
    fn from_dcmi(value: u32) -> Self {
        match value {
            0 => Self::Ok,
            1 => Self::Warning,
            2 => Self::Alarm,
            3 => Self::Critical,
            v => Self::Unknown(v),
        }
    }

    /// Whether work on the device must stop: a major or critical alarm, or a grade we do not
    /// know.
    pub fn is_fault(self) -> bool {
        !matches!(self, Self::Ok | Self::Warning)
    }
}

impl std::fmt::Display for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Ok => f.write_str("OK"),
            Self::Warning => f.write_str("Warning"),
            Self::Alarm => f.write_str("Alarm"),
            Self::Critical => f.write_str("Critical"),
            Self::Unknown(v) => write!(f, "unknown ({v})"),
        }
    }
}

/// What DCMI reports of one device at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceStatus {
    /// The card and the chip on it (`dcmi_get_card_id_device_id_from_logicid`).
    pub card: i32,
    /// The chip on the card.
    pub chip: i32,
    /// The part (`Ascend910B3`: DCMI's chip type and name).
    pub part: String,
    /// AI Core utilisation, percent.
    pub utilization_pct: u32,
    /// HBM in use, MiB (DCMI's MB).
    pub hbm_used_mb: u64,
    /// HBM in all, MiB.
    pub hbm_total_mb: u64,
    /// Chip temperature, °C.
    pub temperature_c: i32,
    /// Power, W.
    pub power_w: f64,
    /// Health.
    pub health: Health,
    /// The device's current error codes (`dcmi_get_device_errorcode_v2`).
    pub error_codes: Vec<u32>,
}

impl DeviceStatus {
    /// The error codes as the vendor writes them (`0x80E18402`), comma-separated.
    pub fn error_codes_hex(&self) -> String {
        hex_codes(&self.error_codes)
    }
}

/// Error codes as the vendor writes them (`0x80E18402`), comma-separated.
pub fn hex_codes(codes: &[u32]) -> String {
    codes.iter().map(|c| format!("0x{c:08X}")).collect::<Vec<_>>().join(", ")
}

/// A process using a device, with the device memory it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceProcess {
    /// Process id.
    pub pid: i32,
    /// Device memory, bytes.
    pub memory_bytes: u64,
}

/// At most this many processes are asked for per device.
const MAX_PROCESSES: usize = 64;

/// DCMI's view of logical device `logical` (as `aclrtSetDevice` numbers it).
pub struct Monitor<'a> {
    api: &'a DcmiApi,
    logical: u32,
    name: String,
}

impl<'a> Monitor<'a> {
    /// The monitor of logical device `logical`, called `name` in errors.
    pub fn new(api: &'a DcmiApi, logical: u32, name: String) -> Self {
        Self { api, logical, name }
    }

    fn check(&self, call: &'static str, code: c_int) -> Result<()> {
        if code == DCMI_OK {
            return Ok(());
        }
        Err(AscendError::Dcmi { call, code, device: Some(self.name.clone()) })
    }

    /// The card and chip of the device.
    pub fn card_chip(&self) -> Result<(c_int, c_int)> {
        let (mut card, mut chip) = (0, 0);
        // SAFETY: two valid out-pointers.
        let code = unsafe { (self.api.dcmi_get_card_id_device_id_from_logicid)(&mut card, &mut chip, self.logical) };
        self.check("dcmi_get_card_id_device_id_from_logicid", code)?;
        Ok((card, chip))
    }

    /// The device's health and current error codes.
    pub fn health(&self) -> Result<(Health, Vec<u32>)> {
        let (card, chip) = self.card_chip()?;
        self.health_of(card, chip)
    }

    /// Health and error codes of the device at (card, chip).
    fn health_of(&self, card: c_int, chip: c_int) -> Result<(Health, Vec<u32>)> {
        let mut health = 0u32;
        // SAFETY: a valid out-pointer.
        self.check("dcmi_get_device_health", unsafe { (self.api.dcmi_get_device_health)(card, chip, &mut health) })?;
        let mut codes = [0u32; 128];
        let mut count: c_int = 0;
        // SAFETY: `codes` holds `codes.len()` entries.
        let code = unsafe {
            (self.api.dcmi_get_device_errorcode_v2)(card, chip, &mut count, codes.as_mut_ptr(), codes.len() as u32)
        };
        self.check("dcmi_get_device_errorcode_v2", code)?;
        let count = (count.max(0) as usize).min(codes.len());
        Ok((Health::from_dcmi(health), codes[..count].to_vec()))
    }

    /// Everything `npu-smi info` shows of the device.
    pub fn status(&self) -> Result<DeviceStatus> {
        let (card, chip) = self.card_chip()?;
        let mut util = 0u32;
        // SAFETY: a valid out-pointer.
        let code =
            unsafe { (self.api.dcmi_get_device_utilization_rate)(card, chip, DCMI_UTILIZATION_RATE_AICORE, &mut util) };
        self.check("dcmi_get_device_utilization_rate", code)?;
        let mut hbm = DcmiHbmInfo::default();
        // SAFETY: a valid out-pointer to a `struct dcmi_hbm_info`.
        self.check("dcmi_get_device_hbm_info", unsafe { (self.api.dcmi_get_device_hbm_info)(card, chip, &mut hbm) })?;
        let (mut temperature, mut power) = (0, 0);
        // SAFETY: valid out-pointers.
        let code = unsafe { (self.api.dcmi_get_device_temperature)(card, chip, &mut temperature) };
        self.check("dcmi_get_device_temperature", code)?;
        // SAFETY: a valid out-pointer.
        let code = unsafe { (self.api.dcmi_get_device_power_info)(card, chip, &mut power) };
        self.check("dcmi_get_device_power_info", code)?;
        let (health, error_codes) = self.health_of(card, chip)?;
        let mut info = DcmiChipInfo::default();
        // SAFETY: a valid out-pointer to a `struct dcmi_chip_info`.
        let code = unsafe { (self.api.dcmi_get_device_chip_info)(card, chip, &mut info) };
        self.check("dcmi_get_device_chip_info", code)?;
        let text = |b: &[u8]| String::from_utf8_lossy(b.split(|&c| c == 0).next().unwrap_or_default()).into_owned();
        Ok(DeviceStatus {
            card,
            chip,
            part: format!("{}{}", text(&info.chip_type), text(&info.chip_name)),
            utilization_pct: util,
            hbm_used_mb: hbm.memory_usage,
            hbm_total_mb: hbm.memory_size,
            temperature_c: temperature,
            // DCMI reports power in units of 0.1 W.
            power_w: f64::from(power) / 10.0,
            health,
            error_codes,
        })
    }

    /// The processes using the device.
    pub fn processes(&self) -> Result<Vec<DeviceProcess>> {
        let (card, chip) = self.card_chip()?;
        let mut procs = [DcmiProcMemInfo::default(); MAX_PROCESSES];
        let mut count: c_int = 0;
        // SAFETY: `procs` holds MAX_PROCESSES entries, more than DCMI reports per device.
        let code = unsafe { (self.api.dcmi_get_device_resource_info)(card, chip, procs.as_mut_ptr(), &mut count) };
        self.check("dcmi_get_device_resource_info", code)?;
        let count = (count.max(0) as usize).min(MAX_PROCESSES);
        Ok(procs[..count]
            .iter()
            .map(|p| DeviceProcess { pid: p.proc_id, memory_bytes: widen(p.proc_mem_usage) })
            .collect())
    }
}

/// The logical devices DCMI knows (cards times chips; one chip per card on the parts we
/// support).
pub fn device_count(api: &DcmiApi) -> Result<usize> {
    let mut cards = [0 as c_int; 64];
    let mut count: c_int = 0;
    // SAFETY: `cards` holds 64 entries.
    let code = unsafe { (api.dcmi_get_card_num_list)(&mut count, cards.as_mut_ptr(), cards.len() as c_int) };
    if code != DCMI_OK {
        return Err(AscendError::Dcmi { call: "dcmi_get_card_num_list", code, device: None });
    }
    Ok(count.max(0) as usize)
}

/// One device of a [`survey`]: its logical id, its status and the processes using it.
#[derive(Debug, Clone)]
pub struct SurveyRow {
    /// The logical device (`npu:N`).
    pub logical: u32,
    /// What DCMI reports, or why it could not (one device's failure leaves the others).
    pub status: std::result::Result<DeviceStatus, String>,
    /// The processes using it (none when DCMI could not say).
    pub processes: Vec<DeviceProcess>,
}

/// Every device DCMI knows, through `kind`'s toolkit, without opening any of them (what
/// `npu-smi info` lists).
pub fn survey(kind: crate::ToolkitKind) -> Result<Vec<SurveyRow>> {
    let toolkit = crate::ffi::Toolkit::get(kind)?;
    let api = toolkit.dcmi().map_err(AscendError::MonitoringOff)?;
    Ok((0..device_count(&api)? as u32)
        .map(|logical| {
            let monitor = Monitor::new(&api, logical, format!("{}:{logical}", kind.device_prefix()));
            let status = monitor.status().map_err(|e| e.to_string());
            let processes = status.as_ref().ok().and_then(|_| monitor.processes().ok()).unwrap_or_default();
            SurveyRow { logical, status, processes }
        })
        .collect())
}

/// `unsigned long` as u64: the same type on 64-bit Linux, narrower elsewhere.
#[allow(clippy::useless_conversion)]
fn widen(bytes: std::ffi::c_ulong) -> u64 {
    u64::from(bytes)
}
