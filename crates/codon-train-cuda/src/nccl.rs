//! NCCL, opened at run time: the few calls data-parallel training makes, declared as `nccl.h`
//! (NCCL 2.x) gives them. NCCL ships as `libnccl.so.2` (NVIDIA's `libnccl2` package, PyTorch's
//! `nvidia-nccl` wheel); `libnccl.so` is only the development package's link. cudarc's own
//! NCCL loader asks for `libnccl.so` and numbered names other than `.so.2`, so it finds neither
//! install: this one asks for `libnccl.so.2` first.
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

use candle_core::{Device, Tensor};

/// The bytes of an `ncclUniqueId`.
pub const UNIQUE_ID_BYTES: usize = 128;

/// Why NCCL could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum NcclError {
    /// The library, or one of its calls, could not be loaded.
    #[error("NCCL could not be loaded: {why}; install NCCL 2.x (PyTorch's wheels carry it as nvidia-nccl) and put the folder of libnccl.so.2 on LD_LIBRARY_PATH (docs/cuda.md)")]
    Library {
        /// What the loader said.
        why: String,
    },
    /// A call returned an error.
    #[error("{call} failed: {message} (ncclResult_t {code})")]
    Call {
        /// The NCCL function.
        call: &'static str,
        /// Its `ncclResult_t`.
        code: c_int,
        /// `ncclGetErrorString`'s text.
        message: String,
    },
    /// A tensor or device that NCCL cannot take.
    #[error("NCCL: {0}")]
    Unsupported(String),
}

type RawComm = *mut c_void;
type RawStream = *mut c_void;
type Status = c_int;
const SUCCESS: Status = 0;
const IN_PROGRESS: Status = 7;
/// `ncclSum`.
const SUM: c_int = 0;

/// `ncclDataType_t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum DataType {
    /// `ncclUint8`.
    Uint8 = 1,
    /// `ncclUint32`.
    Uint32 = 3,
    /// `ncclInt64`.
    Int64 = 4,
    /// `ncclFloat16`.
    Float16 = 6,
    /// `ncclFloat32`.
    Float32 = 7,
    /// `ncclFloat64`.
    Float64 = 8,
    /// `ncclBfloat16` (NCCL 2.10 and later).
    Bfloat16 = 9,
}

/// `ncclUniqueId`: what rank 0 hands the others so that they join one communicator.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct UniqueId {
    internal: [c_char; UNIQUE_ID_BYTES],
}

impl UniqueId {
    /// A new id (`ncclGetUniqueId`).
    pub fn new() -> Result<Self, NcclError> {
        let api = api()?;
        let mut id = UniqueId { internal: [0; UNIQUE_ID_BYTES] };
        // SAFETY: NCCL writes exactly one ncclUniqueId into the struct.
        check("ncclGetUniqueId", unsafe { (api.get_unique_id)(&mut id) })?;
        Ok(id)
    }

    /// The id's bytes, to send to the other ranks.
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: c_char and u8 have one size and alignment; the slice covers the array.
        unsafe { std::slice::from_raw_parts(self.internal.as_ptr().cast(), UNIQUE_ID_BYTES) }
    }

    /// The id from rank 0's bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, NcclError> {
        if bytes.len() != UNIQUE_ID_BYTES {
            return Err(NcclError::Unsupported(format!(
                "a unique id is {UNIQUE_ID_BYTES} bytes, rank 0 sent {}",
                bytes.len()
            )));
        }
        let mut id = UniqueId { internal: [0; UNIQUE_ID_BYTES] };
        for (slot, &b) in id.internal.iter_mut().zip(bytes) {
            *slot = b as c_char;
        }
        Ok(id)
    }
}

/// The NCCL calls used here, from one loaded library.
struct Api {
    get_unique_id: unsafe extern "C" fn(*mut UniqueId) -> Status,
    comm_init_rank: unsafe extern "C" fn(*mut RawComm, c_int, UniqueId, c_int) -> Status,
    comm_init_all: unsafe extern "C" fn(*mut RawComm, c_int, *const c_int) -> Status,
    all_reduce: unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, RawComm, RawStream) -> Status,
    broadcast: unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, RawComm, RawStream) -> Status,
    comm_abort: unsafe extern "C" fn(RawComm) -> Status,
    comm_get_async_error: unsafe extern "C" fn(RawComm, *mut Status) -> Status,
    get_error_string: unsafe extern "C" fn(Status) -> *const c_char,
    _library: libloading::Library,
}

/// The library's names, most specific first.
const LIBRARY_NAMES: [&str; 2] = ["libnccl.so.2", "libnccl.so"];

fn api() -> Result<&'static Api, NcclError> {
    static API: OnceLock<Result<Api, String>> = OnceLock::new();
    API.get_or_init(load).as_ref().map_err(|why| NcclError::Library { why: why.clone() })
}

fn load() -> Result<Api, String> {
    let mut tried = Vec::new();
    let library = LIBRARY_NAMES
        .iter()
        .find_map(|name| {
            // SAFETY: loading NCCL runs its initialisers, which have no preconditions.
            unsafe { libloading::Library::new(name) }.map_err(|e| tried.push(e.to_string())).ok()
        })
        .ok_or_else(|| tried.join("; "))?;
    // SAFETY: each symbol has the signature nccl.h declares for it (NCCL 2.x's stable ABI).
    unsafe {
        macro_rules! symbol {
            ($name:literal) => {
                *library.get($name).map_err(|e| e.to_string())?
            };
        }
        Ok(Api {
            get_unique_id: symbol!(b"ncclGetUniqueId\0"),
            comm_init_rank: symbol!(b"ncclCommInitRank\0"),
            comm_init_all: symbol!(b"ncclCommInitAll\0"),
            all_reduce: symbol!(b"ncclAllReduce\0"),
            broadcast: symbol!(b"ncclBroadcast\0"),
            comm_abort: symbol!(b"ncclCommAbort\0"),
            comm_get_async_error: symbol!(b"ncclCommGetAsyncError\0"),
            get_error_string: symbol!(b"ncclGetErrorString\0"),
            _library: library,
        })
    }
}

fn check(call: &'static str, status: Status) -> Result<(), NcclError> {
    if status == SUCCESS || status == IN_PROGRESS {
        return Ok(());
    }
    let message = match api() {
        // SAFETY: NCCL returns a static C string for every status.
        Ok(api) => unsafe {
            let text = (api.get_error_string)(status);
            if text.is_null() {
                String::new()
            } else {
                CStr::from_ptr(text).to_string_lossy().into_owned()
            }
        },
        Err(_) => String::new(),
    };
    Err(NcclError::Call { call, code: status, message })
}

/// A communicator; aborted (pending work dropped, resources freed) when dropped, so that a
/// rank whose peers failed does not wait for them.
pub struct Comm(RawComm);

// SAFETY: an NCCL communicator may be used from any thread, one call at a time; the trainer's
// rank makes its calls from one thread.
unsafe impl Send for Comm {}
// SAFETY: as above: the trainer never calls one communicator from two threads at once.
unsafe impl Sync for Comm {}

impl Comm {
    /// One communicator per GPU ordinal, in this process (`ncclCommInitAll`).
    pub fn init_all(ordinals: &[c_int]) -> Result<Vec<Comm>, NcclError> {
        let api = api()?;
        let mut raw = vec![std::ptr::null_mut(); ordinals.len()];
        let n = c_int::try_from(ordinals.len()).map_err(|_| NcclError::Unsupported("too many GPUs".into()))?;
        // SAFETY: `raw` has room for one communicator per ordinal.
        check("ncclCommInitAll", unsafe { (api.comm_init_all)(raw.as_mut_ptr(), n, ordinals.as_ptr()) })?;
        Ok(raw.into_iter().map(Comm).collect())
    }

    /// Rank `rank` of `ranks` on the GPU `device` (`ncclCommInitRank`, which takes the calling
    /// thread's current GPU).
    pub fn init_rank(device: &Device, ranks: usize, rank: usize, id: &UniqueId) -> Result<Comm, NcclError> {
        let api = api()?;
        make_current(device)?;
        let count = |n: usize| c_int::try_from(n).map_err(|_| NcclError::Unsupported(format!("{n} ranks")));
        let mut raw = std::ptr::null_mut();
        // SAFETY: NCCL writes one communicator handle; the id is passed by value as declared.
        check("ncclCommInitRank", unsafe { (api.comm_init_rank)(&mut raw, count(ranks)?, *id, count(rank)?) })?;
        Ok(Comm(raw))
    }

    /// Sum `t` over the ranks, in place, queued on its GPU's stream.
    pub fn all_reduce_sum(&self, t: &Tensor) -> Result<(), NcclError> {
        let api = api()?;
        let buffer = buffer(t)?;
        // SAFETY: the buffer is `count` elements of `dtype` on the communicator's GPU, alive while
        // its storage guard is held; in place is allowed (send and receive buffers equal).
        check("ncclAllReduce", unsafe {
            (api.all_reduce)(buffer.ptr, buffer.ptr, buffer.count, buffer.dtype as c_int, SUM, self.0, buffer.stream)
        })
    }

    /// Overwrite `t` on every rank with rank `root`'s, in place, queued on its GPU's stream.
    pub fn broadcast(&self, t: &Tensor, root: usize) -> Result<(), NcclError> {
        let api = api()?;
        let buffer = buffer(t)?;
        let root = c_int::try_from(root).map_err(|_| NcclError::Unsupported(format!("root rank {root}")))?;
        // SAFETY: as for all_reduce_sum.
        check("ncclBroadcast", unsafe {
            (api.broadcast)(buffer.ptr, buffer.ptr, buffer.count, buffer.dtype as c_int, root, self.0, buffer.stream)
        })
    }

    /// The error a collective met after it was queued (a peer that failed), if any.
    pub fn async_error(&self) -> Result<(), NcclError> {
        let api = api()?;
        let mut status = SUCCESS;
        // SAFETY: NCCL writes one status.
        check("ncclCommGetAsyncError", unsafe { (api.comm_get_async_error)(self.0, &mut status) })?;
        check("a queued collective", status)
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        if let Ok(api) = api() {
            // SAFETY: the handle came from NCCL and is not used after this.
            unsafe { (api.comm_abort)(self.0) };
        }
    }
}

/// A tensor's device memory as NCCL takes it.
struct Buffer {
    ptr: *mut c_void,
    count: usize,
    dtype: DataType,
    stream: RawStream,
}

/// The GPU ordinal of `device`.
pub fn ordinal(device: &Device) -> Result<c_int, NcclError> {
    match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(gpu) => c_int::try_from(gpu.cuda_stream().context().ordinal())
            .map_err(|_| NcclError::Unsupported("GPU ordinal out of range".into())),
        other => Err(NcclError::Unsupported(format!("{} is not an NVIDIA GPU", other.location()))),
    }
}

/// Make `device` the calling thread's current GPU, as `ncclCommInitRank` needs.
fn make_current(device: &Device) -> Result<(), NcclError> {
    match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(gpu) => gpu
            .cuda_stream()
            .context()
            .bind_to_thread()
            .map_err(|e| NcclError::Unsupported(format!("{}: {e}", device.location()))),
        other => Err(NcclError::Unsupported(format!("{} is not an NVIDIA GPU", other.location()))),
    }
}

#[cfg(feature = "cuda")]
fn buffer(t: &Tensor) -> Result<Buffer, NcclError> {
    use candle_core::cuda::cudarc::driver::DevicePtr;
    use candle_core::Storage;
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cuda(gpu) = &*storage else {
        return Err(NcclError::Unsupported(format!("a tensor on {} is not on an NVIDIA GPU", t.device().location())));
    };
    if !layout.is_contiguous() {
        return Err(NcclError::Unsupported("collectives take contiguous tensors".into()));
    }
    let stream = gpu.device.cuda_stream();
    let bytes = layout.start_offset() * t.dtype().size_in_bytes();
    macro_rules! base {
        ($t:ty) => {{
            let slice = gpu.as_cuda_slice::<$t>().map_err(|e| NcclError::Unsupported(e.to_string()))?;
            let (ptr, _ordered) = slice.device_ptr(&stream);
            ptr
        }};
    }
    let (base, dtype) = match t.dtype() {
        candle_core::DType::F32 => (base!(f32), DataType::Float32),
        candle_core::DType::F16 => (base!(half::f16), DataType::Float16),
        candle_core::DType::BF16 => (base!(half::bf16), DataType::Bfloat16),
        candle_core::DType::F64 => (base!(f64), DataType::Float64),
        candle_core::DType::U8 => (base!(u8), DataType::Uint8),
        candle_core::DType::U32 => (base!(u32), DataType::Uint32),
        candle_core::DType::I64 => (base!(i64), DataType::Int64),
        other => return Err(NcclError::Unsupported(format!("no NCCL type for {other:?}"))),
    };
    // The guard goes, the memory stays: the tensor `t` that the caller holds keeps it alive
    // until the queued collective has run (the stream orders its release after).
    Ok(Buffer {
        ptr: (base + bytes as u64) as *mut c_void,
        count: t.elem_count(),
        dtype,
        stream: stream.cu_stream() as RawStream,
    })
}

#[cfg(not(feature = "cuda"))]
fn buffer(t: &Tensor) -> Result<Buffer, NcclError> {
    Err(NcclError::Unsupported(format!(
        "a tensor on {} is not on an NVIDIA GPU (this build has no CUDA)",
        t.device().location()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The id's bytes survive the trip to another rank, and a short message is refused.
    #[test]
    fn unique_ids_round_trip_through_bytes() {
        let bytes: Vec<u8> = (0..UNIQUE_ID_BYTES).map(|i| (i * 7) as u8).collect();
        assert_eq!(UniqueId::from_bytes(&bytes).unwrap().as_bytes(), &bytes[..]);
        let err = UniqueId::from_bytes(&bytes[..100]).err().unwrap().to_string();
        assert!(err.contains("128 bytes, rank 0 sent 100"), "{err}");
    }
}
