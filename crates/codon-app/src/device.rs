//! A device named by a string (the `codon` program's `--device`, the Python package's `device`):
//! `cpu`, `npu:N` (a CANN toolkit), `npu-sim:N` (the emulator) or `cuda:N` (an NVIDIA GPU, in
//! builds with the `cuda` feature). Parsing checks the spelling only; [`DeviceSpec::open`] opens
//! the device.
use candle_ascend::ToolkitKind;

/// Why a device could not be named or opened.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// Not a device spelling.
    #[error("unknown device {0:?} (expected cpu, npu:N, npu-sim:N or cuda:N)")]
    Unknown(String),
    /// `cuda:N` in a build without the `cuda` feature.
    #[error("cuda:{0}: this build has no CUDA; build with `--features cuda` (docs/cuda.md), or use --device cpu")]
    NoCuda(usize),
    /// `--tf32` on a device without TF32 tensor cores.
    #[error("--tf32 applies to NVIDIA GPUs (cuda:N), not to {0}")]
    Tf32NotCuda(DeviceSpec),
    /// The Ascend toolkit or device failed.
    #[error(transparent)]
    Ascend(#[from] candle_ascend::AscendError),
    /// A CUDA library (driver, cuBLAS, cuRAND, NVRTC) could not be loaded.
    #[error("cuda:{id}: {why} (the NVIDIA driver and CUDA 13 libraries must be on LD_LIBRARY_PATH; docs/cuda.md)")]
    CudaLibraries {
        /// The GPU's ordinal.
        id: usize,
        /// cudarc's message.
        why: String,
    },
    /// candle could not open the GPU.
    #[error("cuda:{id}: {source}")]
    Cuda {
        /// The GPU's ordinal.
        id: usize,
        /// candle's (cudarc's) error.
        source: candle_core::Error,
    },
}

/// A device named on a command line or in a call, before it is opened.
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
    /// NVIDIA GPU `id`, through candle's CUDA backend.
    Cuda {
        /// The GPU's ordinal.
        id: usize,
    },
}

impl DeviceSpec {
    /// Open the device.
    pub fn open(self) -> Result<candle_core::Device, DeviceError> {
        match self {
            DeviceSpec::Cpu => Ok(candle_core::Device::Cpu),
            DeviceSpec::Ascend { kind, id } => {
                Ok(candle_core::Device::new_custom(candle_ascend::AscendDevice::open(kind, id)?))
            }
            DeviceSpec::Cuda { id } if !cfg!(feature = "cuda") => Err(DeviceError::NoCuda(id)),
            DeviceSpec::Cuda { id } => open_cuda(id),
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
            DeviceSpec::Cuda { id } => Some((id..id.checked_add(n)?).map(|id| DeviceSpec::Cuda { id }).collect()),
        }
    }
}

/// Open GPU `id`. cudarc loads the CUDA libraries at first use and panics where one is missing:
/// that becomes an error that names the library search path.
fn open_cuda(id: usize) -> Result<candle_core::Device, DeviceError> {
    let quiet = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let opened = std::panic::catch_unwind(|| candle_core::Device::new_cuda(id));
    std::panic::set_hook(quiet);
    match opened {
        Ok(device) => {
            let device = device.map_err(|source| DeviceError::Cuda { id, source })?;
            keep_freed_memory(&device);
            single_stream(&device);
            Ok(device)
        }
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            // cudarc's message lists every file name it tried: keep the library's name.
            let why = match message.split('"').nth(1) {
                Some(library) if message.starts_with("Unable to dynamically load") => {
                    format!("could not load the CUDA library {library:?}")
                }
                _ if message.is_empty() => "the CUDA libraries could not be loaded".to_string(),
                _ => message,
            };
            Err(DeviceError::CudaLibraries { id, why })
        }
    }
}

/// Let the GPU's memory pool keep what is freed, as PyTorch's caching allocator does. cudarc
/// allocates stream-ordered from the device's default pool, whose release threshold of 0 hands
/// freed memory back to the driver at every synchronisation (each loss read of a training
/// step), so the next step maps its gigabytes of activations again.
#[cfg(feature = "cuda")]
fn keep_freed_memory(device: &candle_core::Device) {
    use candle_core::cuda::cudarc::driver::sys;
    let candle_core::Device::Cuda(gpu) = device else { return };
    let stream = gpu.cuda_stream();
    let context = stream.context();
    if !context.has_async_alloc() {
        return;
    }
    let mut pool = std::mem::MaybeUninit::uninit();
    let mut threshold = u64::MAX;
    // SAFETY: the pool handle is written by the driver before it is read, and the attribute's
    // value is a u64 that outlives the call. A failure leaves the pool as it was: slower, correct.
    unsafe {
        if sys::cuDeviceGetDefaultMemPool(pool.as_mut_ptr(), context.cu_device()) == sys::CUresult::CUDA_SUCCESS {
            sys::cuMemPoolSetAttribute(
                pool.assume_init(),
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                (&mut threshold as *mut u64).cast(),
            );
        }
    }
}

#[cfg(not(feature = "cuda"))]
fn keep_freed_memory(_: &candle_core::Device) {}

/// Turn off cudarc's per-buffer event tracking. candle opens each device on a stream of its own,
/// which puts cudarc in multi-stream mode: every kernel argument then records a CUDA event and
/// waits on the last one, host work that a launch-bound step pays thousands of times over. One
/// stream orders everything a device does here, so the events order nothing.
#[cfg(feature = "cuda")]
fn single_stream(device: &candle_core::Device) {
    let candle_core::Device::Cuda(gpu) = device else { return };
    // SAFETY: every tensor of this device is created, used and freed on its one stream (candle
    // launches all its work there), which is the condition cudarc states; nothing was allocated
    // on the device yet.
    unsafe { gpu.disable_event_tracking() };
}

#[cfg(not(feature = "cuda"))]
fn single_stream(_: &candle_core::Device) {}

impl std::str::FromStr for DeviceSpec {
    type Err = DeviceError;
    fn from_str(text: &str) -> Result<Self, DeviceError> {
        let text = text.trim();
        let unknown = || DeviceError::Unknown(text.to_string());
        if text == "cpu" {
            return Ok(DeviceSpec::Cpu);
        }
        if let Some(id) = text.strip_prefix("cuda:") {
            return Ok(DeviceSpec::Cuda { id: id.parse().map_err(|_| unknown())? });
        }
        let (kind, id) = candle_ascend::parse_ascend_name(text).map_err(|_| unknown())?;
        Ok(DeviceSpec::Ascend { kind, id })
    }
}

impl std::fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceSpec::Cpu => write!(f, "cpu"),
            DeviceSpec::Ascend { kind, id } => write!(f, "{}:{id}", kind.device_prefix()),
            DeviceSpec::Cuda { id } => write!(f, "cuda:{id}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_round_trips_and_others_are_refused() {
        for text in ["cpu", "npu:0", "npu-sim:3", "cuda:1"] {
            assert_eq!(text.parse::<DeviceSpec>().unwrap().to_string(), text);
        }
        for text in ["gpu:0", "cuda", "cuda:x", "cuda:-1", "npu"] {
            let err = text.parse::<DeviceSpec>().unwrap_err().to_string();
            assert!(err.contains("cuda:N") && err.contains(text), "{err}");
        }
        assert_eq!(
            DeviceSpec::Cuda { id: 2 }.and_next(2),
            Some(vec![DeviceSpec::Cuda { id: 2 }, DeviceSpec::Cuda { id: 3 }])
        );
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn a_build_without_cuda_says_how_to_get_it() {
        let err = DeviceSpec::Cuda { id: 0 }.open().unwrap_err().to_string();
        assert!(err.contains("--features cuda") && err.contains("cuda:0"), "{err}");
    }
}
