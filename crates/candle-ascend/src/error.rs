//! Errors of the Ascend backend. Each carries what a user needs to act on it: the call or op,
//! the CANN status code, CANN's own message, and the operands' shapes and dtypes.
use std::path::PathBuf;

/// An error of the Ascend backend.
#[derive(Debug, thiserror::Error)]
pub enum AscendError {
    /// No CANN toolkit was found.
    #[error(
        "no CANN toolkit found (searched: {}); install CANN and source set_env.sh, set ASCEND_TOOLKIT_HOME, \
         or use --device npu-sim:0 for the emulated toolkit",
        .searched.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    ToolkitNotFound {
        /// Every root that was tried.
        searched: Vec<PathBuf>,
    },
    /// A toolkit library could not be loaded.
    #[error("cannot load {path}: {source}")]
    Library {
        /// The library file.
        path: PathBuf,
        /// The loader's error.
        source: libloading::Error,
    },
    /// A required runtime symbol is missing from the toolkit.
    #[error("{library} has no symbol {symbol}: this CANN toolkit is too old or incomplete")]
    MissingSymbol {
        /// The library searched.
        library: String,
        /// The symbol.
        symbol: String,
    },
    /// An aclnn operator is not in this CANN's op libraries.
    #[error("{op} is unsupported on this CANN (no {symbol} in its op libraries)")]
    OpUnavailable {
        /// The aclnn op.
        op: &'static str,
        /// The missing symbol.
        symbol: String,
    },
    /// An ACL runtime call failed.
    #[error("{call} failed with aclError {code}{}", message_suffix(.message))]
    Runtime {
        /// The runtime function.
        call: &'static str,
        /// The status code.
        code: i32,
        /// `aclGetRecentErrMsg`, if any.
        message: Option<String>,
    },
    /// Device memory is exhausted.
    #[error("out of device memory allocating {bytes} bytes on {device} (aclError {code}){}", message_suffix(.message))]
    OutOfMemory {
        /// The request.
        bytes: usize,
        /// The device, e.g. `npu:0`.
        device: String,
        /// The status code.
        code: i32,
        /// `aclGetRecentErrMsg`, if any.
        message: Option<String>,
    },
    /// An aclnn operator failed.
    #[error("{op} failed with status {code} on {operands}{}", message_suffix(.message))]
    Op {
        /// The aclnn op.
        op: &'static str,
        /// The status code.
        code: i32,
        /// Shapes and dtypes of the operands.
        operands: String,
        /// `aclGetRecentErrMsg`, if any.
        message: Option<String>,
    },
    /// A call site's phase-1 parameter types differ from the vendor's prototype: nothing was called.
    #[error("{op}: {detail}")]
    Abi {
        /// The aclnn op.
        op: &'static str,
        /// What differs.
        detail: String,
    },
    /// A candle operation that this backend does not implement.
    #[error("{op} is not supported by the Ascend backend{}", if .detail.is_empty() { String::new() } else { format!(" ({})", .detail) })]
    Unsupported {
        /// The candle operation.
        op: &'static str,
        /// Why, or what would be needed.
        detail: String,
    },
    /// A preflight found ops the part refuses.
    #[error(
        "{device} ({soc}) cannot run this: the part refuses {} op(s): {}",
        .refused.len(),
        .refused.join("; ")
    )]
    Preflight {
        /// The device, e.g. `npu:0`.
        device: String,
        /// `aclrtGetSocName`.
        soc: String,
        /// Each refused op with its operands and the reason.
        refused: Vec<String>,
    },
    /// A DCMI call failed (device monitoring).
    #[error("{call} failed{} with DCMI code {code}", .device.as_ref().map(|d| format!(" for {d}")).unwrap_or_default())]
    Dcmi {
        /// The DCMI function.
        call: &'static str,
        /// Its return code (`DCMI_ERR_CODE_*`).
        code: i32,
        /// The device asked about, if any.
        device: Option<String>,
    },
    /// Device monitoring is unavailable: DCMI is missing or did not initialise.
    #[error("device monitoring is off: {0}")]
    MonitoringOff(String),
    /// No `libdcmi.so` was found (device monitoring is off).
    #[error("no libdcmi.so (the driver's DCMI) at {}", .searched.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))]
    DcmiNotFound {
        /// The files tried.
        searched: Vec<std::path::PathBuf>,
    },
    /// An HCCL call failed.
    #[error("{call} failed on rank {rank} of {ranks} ({device}) with HcclResult {code} ({text}){}", message_suffix(.message))]
    Hccl {
        /// The HCCL function.
        call: &'static str,
        /// This rank.
        rank: usize,
        /// The communicator's size.
        ranks: usize,
        /// The rank's device, e.g. `npu:3`.
        device: String,
        /// The `HcclResult`.
        code: i32,
        /// `HcclGetErrorString`.
        text: String,
        /// The toolkit's most recent error message, if any.
        message: Option<String>,
    },
    /// A collective's arguments that cannot be right (checked before HCCL is called).
    #[error("{call}: {detail}")]
    Collective {
        /// The collective.
        call: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// A device string that does not parse.
    #[error("unknown device {0:?} (expected npu:N or npu-sim:N)")]
    BadDevice(String),
}

fn message_suffix(message: &Option<String>) -> String {
    match message {
        Some(m) if !m.is_empty() => format!(": {m}"),
        _ => String::new(),
    }
}

impl From<AscendError> for candle_core::Error {
    fn from(e: AscendError) -> Self {
        candle_core::Error::wrap(e)
    }
}

/// Results of this crate.
pub type Result<T> = std::result::Result<T, AscendError>;
