//! Collectives over HCCL: a [`Communicator`] is one rank's handle. Ranks on the devices of one
//! process come from [`Communicator::init_all`]; ranks in separate processes share a
//! [`RootInfo`] from rank 0 and call [`Communicator::init_rank`]. Collectives are queued on the
//! rank's device stream, in order with its kernels; their failures (a timeout, ranks that
//! disagree) surface at the stream's next synchronisation. [`Communicator::start_all_reduce`]
//! instead runs on the communicator's own stream, ordered after the device stream's work by an
//! event, so the device goes on computing while the ranks communicate, as torch_npu's
//! ProcessGroupHCCL does with its HCCL streams.
use std::ffi::{c_void, CStr};
use std::sync::{Arc, Mutex};

use candle_core::{DType, Storage, Tensor};

use crate::error::{AscendError, Result};
use crate::ffi::hccl::{data_type, reduce_op, HcclApi, HcclComm, HcclRootInfo, HCCL_ROOT_INFO_BYTES};
use crate::ffi::types::{AclrtEvent, AclrtStream};
use crate::runtime::device::{AscendDevice, DeviceInner};
use crate::soc::{Soc, SocFamily};
use crate::storage::AscendStorage;

/// HCCL's timeouts as the vendor documents them, from `HCCL_CONNECT_TIMEOUT` and
/// `HCCL_EXEC_TIMEOUT` (the hiascend CANN environment-variable reference).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HcclTimeouts {
    /// Seconds a rank waits for the others to join: the setting (default 120, clamped to
    /// [120, 7200]) plus 20.
    pub connect_s: f64,
    /// Seconds a collective waits for the other ranks: the setting (default 1836); on the Atlas
    /// training series rounded down to a multiple of 68.
    pub exec_s: f64,
}

/// `HCCL_CONNECT_TIMEOUT`'s default and range, in seconds, and the setup time HCCL adds to it.
const CONNECT_DEFAULT_S: f64 = 120.0;
const CONNECT_RANGE_S: (f64, f64) = (120.0, 7200.0);
const CONNECT_SETUP_S: f64 = 20.0;
/// `HCCL_EXEC_TIMEOUT`'s default, and the step the Atlas training series rounds it down to.
const EXEC_DEFAULT_S: f64 = 1836.0;
const EXEC_STEP_ATLAS_TRAINING_S: f64 = 68.0;

/// An HCCL timeout variable: its text when set, and the positive number it holds, if any.
fn timeout_var(name: &str) -> (Option<String>, Option<f64>) {
    let text = std::env::var(name).ok();
    let value = text.as_deref().and_then(|v| v.trim().parse::<f64>().ok()).filter(|v| *v > 0.0);
    (text, value)
}

impl HcclTimeouts {
    /// The effective timeouts on `soc` for the current environment.
    pub fn from_env(soc: &Soc) -> Self {
        let connect = timeout_var("HCCL_CONNECT_TIMEOUT").1.unwrap_or(CONNECT_DEFAULT_S);
        let connect_s = connect.clamp(CONNECT_RANGE_S.0, CONNECT_RANGE_S.1) + CONNECT_SETUP_S;
        let mut exec_s = timeout_var("HCCL_EXEC_TIMEOUT").1.unwrap_or(EXEC_DEFAULT_S);
        if soc.family == SocFamily::AtlasTraining {
            exec_s = (exec_s / EXEC_STEP_ATLAS_TRAINING_S).floor().max(1.0) * EXEC_STEP_ATLAS_TRAINING_S;
        }
        Self { connect_s, exec_s }
    }

    /// One line for each timeout variable set that HCCL does not take as written: not a
    /// positive number, outside its range, or rounded. A user who set 5 s learns it is 140 s.
    pub fn notes(soc: &Soc) -> Vec<String> {
        let effective = Self::from_env(soc);
        let mut notes = Vec::new();
        for (name, value_s) in [("HCCL_CONNECT_TIMEOUT", effective.connect_s), ("HCCL_EXEC_TIMEOUT", effective.exec_s)]
        {
            let (Some(text), value) = timeout_var(name) else { continue };
            let as_set = match value {
                None => format!("{name}={text} is not a positive number of seconds, so the default applies"),
                Some(v) if name == "HCCL_CONNECT_TIMEOUT" && v + CONNECT_SETUP_S != value_s => format!(
                    "{name}={text} is outside HCCL's range [{}, {}] s, so it becomes {} s",
                    CONNECT_RANGE_S.0,
                    CONNECT_RANGE_S.1,
                    value_s - CONNECT_SETUP_S
                ),
                Some(v) if name == "HCCL_EXEC_TIMEOUT" && v != value_s => format!(
                    "{name}={text} is rounded down to a multiple of {EXEC_STEP_ATLAS_TRAINING_S} s on {}",
                    soc.name
                ),
                Some(_) => continue,
            };
            notes.push(format!("{as_set}: ranks wait {value_s:.0} s"));
        }
        notes
    }
}

/// A reduction of [`Communicator::all_reduce`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    /// Σ.
    Sum,
    /// Π.
    Prod,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
}

impl ReduceOp {
    fn hccl(self) -> i32 {
        match self {
            Self::Sum => reduce_op::HCCL_REDUCE_SUM,
            Self::Prod => reduce_op::HCCL_REDUCE_PROD,
            Self::Max => reduce_op::HCCL_REDUCE_MAX,
            Self::Min => reduce_op::HCCL_REDUCE_MIN,
        }
    }
}

/// What rank 0 shares with the other ranks (`HcclRootInfo`, 4,108 bytes).
#[derive(Clone)]
pub struct RootInfo(HcclRootInfo);

impl RootInfo {
    /// The bytes to send to the other ranks.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0.internal
    }

    /// Root info received from rank 0.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let internal: [u8; HCCL_ROOT_INFO_BYTES] = bytes.try_into().map_err(|_| AscendError::Collective {
            call: "HcclCommInitRootInfo",
            detail: format!("root info must be {HCCL_ROOT_INFO_BYTES} bytes, got {}", bytes.len()),
        })?;
        Ok(Self(HcclRootInfo { internal }))
    }
}

impl std::fmt::Debug for RootInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RootInfo({HCCL_ROOT_INFO_BYTES} bytes)")
    }
}

/// One rank of an HCCL communicator.
pub struct Communicator {
    api: Arc<HcclApi>,
    comm: HcclComm,
    rank: usize,
    ranks: usize,
    device: Arc<DeviceInner>,
    side: SideStream,
    /// Tensors of started collectives, kept alive until the device stream has waited for them.
    started: Mutex<Vec<Tensor>>,
}

/// The communicator's own stream, with the two events that order it against the device stream:
/// `ready` (device → side: the buffers are written) and `done` (side → device: reduced).
struct SideStream {
    stream: AclrtStream,
    ready: AclrtEvent,
    done: AclrtEvent,
}

impl SideStream {
    fn new(device: &DeviceInner) -> Result<Self> {
        let api = &device.toolkit.api;
        device.bind_thread()?;
        let mut stream: AclrtStream = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the device is bound to this thread.
        device.check("aclrtCreateStream", unsafe { (api.aclrtCreateStream)(&mut stream) })?;
        let mut events = [std::ptr::null_mut(); 2];
        for (i, e) in events.iter_mut().enumerate() {
            // SAFETY: valid out-pointer.
            let code = unsafe { (api.aclrtCreateEvent)(e) };
            if let Err(err) = device.check("aclrtCreateEvent", code) {
                // SAFETY: created above and never used.
                unsafe {
                    for made in &events[..i] {
                        (api.aclrtDestroyEvent)(*made);
                    }
                    (api.aclrtDestroyStream)(stream);
                }
                return Err(err);
            }
        }
        Ok(Self { stream, ready: events[0], done: events[1] })
    }
}

// SAFETY: an HcclComm may be used from any thread that binds its device (each call here binds
// it first); HCCL serialises a communicator's calls on its stream.
unsafe impl Send for Communicator {}
// SAFETY: as above; `&self` methods only enqueue work on the streams, the side stream's under
// the `started` lock.
unsafe impl Sync for Communicator {}

impl std::fmt::Debug for Communicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Communicator(rank {} of {} on {})", self.rank, self.ranks, self.device.name())
    }
}

fn hccl_dtype(call: &'static str, dtype: DType) -> Result<i32> {
    Ok(match dtype {
        DType::F32 => data_type::HCCL_DATA_TYPE_FP32,
        DType::F16 => data_type::HCCL_DATA_TYPE_FP16,
        DType::BF16 => data_type::HCCL_DATA_TYPE_BFP16,
        DType::I64 => data_type::HCCL_DATA_TYPE_INT64,
        DType::I32 => data_type::HCCL_DATA_TYPE_INT32,
        DType::U32 => data_type::HCCL_DATA_TYPE_UINT32,
        DType::U8 => data_type::HCCL_DATA_TYPE_UINT8,
        DType::F64 => data_type::HCCL_DATA_TYPE_FP64,
        other => {
            return Err(AscendError::Collective { call, detail: format!("{other:?} has no HCCL data type") });
        }
    })
}

impl Communicator {
    /// One communicator per device, all in this process (`HcclCommInitAll`); rank i is
    /// `devices[i]`. The devices must be distinct devices of one toolkit.
    pub fn init_all(devices: &[AscendDevice]) -> Result<Vec<Communicator>> {
        let Some(first) = devices.first() else {
            return Err(AscendError::Collective { call: "HcclCommInitAll", detail: "no devices".into() });
        };
        let api = first.inner.toolkit.hccl()?;
        for d in devices {
            if d.inner.toolkit.kind != first.inner.toolkit.kind {
                return Err(AscendError::Collective {
                    call: "HcclCommInitAll",
                    detail: format!("{} and {} are on different toolkits", first.name(), d.name()),
                });
            }
            d.inner.bind_thread()?;
        }
        first.inner.bind_thread()?;
        let mut ids: Vec<i32> = devices.iter().map(|d| d.inner.id as i32).collect();
        let mut comms: Vec<HcclComm> = vec![std::ptr::null_mut(); devices.len()];
        // SAFETY: `ids` and `comms` hold `devices.len()` elements each.
        let code = unsafe { (api.HcclCommInitAll)(devices.len() as u32, ids.as_mut_ptr(), comms.as_mut_ptr()) };
        let ranks = devices.len();
        if code != 0 {
            return Err(hccl_error(&api, &first.inner, "HcclCommInitAll", 0, ranks, code));
        }
        let mut out = Vec::with_capacity(ranks);
        let mut comms = comms.into_iter();
        for (rank, (comm, d)) in comms.by_ref().zip(devices).enumerate() {
            match Communicator::new(api.clone(), comm, rank, ranks, &d.inner) {
                Ok(c) => out.push(c),
                Err(e) => {
                    // SAFETY: the communicators not yet wrapped are live and unused.
                    comms.for_each(|c| unsafe {
                        (api.HcclCommDestroy)(c);
                    });
                    return Err(e);
                }
            }
        }
        Ok(out)
    }

    /// Wraps a live HCCL communicator; destroys it if the side stream cannot be made.
    fn new(api: Arc<HcclApi>, comm: HcclComm, rank: usize, ranks: usize, device: &Arc<DeviceInner>) -> Result<Self> {
        match SideStream::new(device) {
            Ok(side) => {
                Ok(Communicator { api, comm, rank, ranks, device: device.clone(), side, started: Mutex::default() })
            }
            Err(e) => {
                // SAFETY: the communicator is live and unused.
                unsafe { (api.HcclCommDestroy)(comm) };
                Err(e)
            }
        }
    }

    /// New root info, on rank 0's device (`HcclGetRootInfo`), to share with the other ranks.
    pub fn root_info(device: &AscendDevice) -> Result<RootInfo> {
        let api = device.inner.toolkit.hccl()?;
        device.inner.bind_thread()?;
        let mut info = HcclRootInfo { internal: [0; HCCL_ROOT_INFO_BYTES] };
        // SAFETY: `info` is a valid HcclRootInfo to write.
        let code = unsafe { (api.HcclGetRootInfo)(&mut info) };
        if code != 0 {
            return Err(hccl_error(&api, &device.inner, "HcclGetRootInfo", 0, 1, code));
        }
        Ok(RootInfo(info))
    }

    /// Rank `rank` of `ranks` on `device`, from rank 0's root info (`HcclCommInitRootInfo`).
    /// Returns once every rank has joined, or fails after HCCL_CONNECT_TIMEOUT.
    pub fn init_rank(device: &AscendDevice, ranks: usize, rank: usize, root: &RootInfo) -> Result<Communicator> {
        if rank >= ranks {
            return Err(AscendError::Collective {
                call: "HcclCommInitRootInfo",
                detail: format!("rank {rank} is not below the rank count {ranks}"),
            });
        }
        let api = device.inner.toolkit.hccl()?;
        device.inner.bind_thread()?;
        let mut comm: HcclComm = std::ptr::null_mut();
        // SAFETY: `root.0` is a valid HcclRootInfo and `comm` a valid out-pointer.
        let code = unsafe { (api.HcclCommInitRootInfo)(ranks as u32, &root.0, rank as u32, &mut comm) };
        if code != 0 {
            return Err(hccl_error(&api, &device.inner, "HcclCommInitRootInfo", rank, ranks, code));
        }
        Communicator::new(api, comm, rank, ranks, &device.inner)
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks.
    pub fn ranks(&self) -> usize {
        self.ranks
    }

    /// Reduce `t` over the ranks, in place: afterwards every rank's `t` holds the reduction.
    /// `t` must be contiguous and on this rank's device.
    pub fn all_reduce(&self, t: &Tensor, op: ReduceOp) -> Result<()> {
        let call = "HcclAllReduce";
        let dtype = hccl_dtype(call, t.dtype())?;
        let (ptr, count) = self.buffer(call, t)?;
        let stream = self.device.stream();
        // SAFETY: `ptr` holds `count` elements of `t`'s dtype on this device, kept alive by `t`
        // until the work is done (the caching allocator reuses it only in stream order).
        let code = unsafe { (self.api.HcclAllReduce)(ptr, ptr, count, dtype, op.hccl(), self.comm, stream) };
        self.counted(call, code, t.elem_count() * t.dtype().size_in_bytes())
    }

    /// Start reducing `t` over the ranks, in place, and return at once. The reduction runs on
    /// the communicator's own stream after the work queued so far on the device stream, while
    /// the device stream goes on with later work. Every rank must start the same collectives in
    /// the same order. [`Communicator::finish_started`] makes the device stream wait for them;
    /// until then `t` must not be read or written.
    pub fn start_all_reduce(&self, t: &Tensor, op: ReduceOp) -> Result<()> {
        let call = "HcclAllReduce";
        let dtype = hccl_dtype(call, t.dtype())?;
        let (ptr, count) = self.buffer(call, t)?;
        // Held throughout, so that two threads' record-wait-reduce sequences do not interleave.
        let mut started = self.started.lock().unwrap_or_else(|p| p.into_inner());
        let api = &self.device.toolkit.api;
        // SAFETY: both events and streams are live and belong to this device.
        let code = unsafe { (api.aclrtRecordEvent)(self.side.ready, self.device.stream()) };
        self.device.check("aclrtRecordEvent", code)?;
        // SAFETY: as above.
        let code = unsafe { (api.aclrtStreamWaitEvent)(self.side.stream, self.side.ready) };
        self.device.check("aclrtStreamWaitEvent", code)?;
        // SAFETY: `ptr` holds `count` elements of `t`'s dtype; `t` stays alive in `started`
        // until the device stream has waited for this reduction.
        let code = unsafe { (self.api.HcclAllReduce)(ptr, ptr, count, dtype, op.hccl(), self.comm, self.side.stream) };
        self.counted(call, code, t.elem_count() * t.dtype().size_in_bytes())?;
        started.push(t.clone());
        Ok(())
    }

    /// Make the device stream wait for every collective of [`Communicator::start_all_reduce`]:
    /// work queued after this sees the reductions. The host does not wait; a failure of these
    /// collectives is reported by [`Communicator::synchronize`].
    pub fn finish_started(&self) -> Result<()> {
        let mut started = self.started.lock().unwrap_or_else(|p| p.into_inner());
        if started.is_empty() {
            return Ok(());
        }
        self.device.bind_thread()?;
        let api = &self.device.toolkit.api;
        // SAFETY: both events and streams are live and belong to this device.
        let code = unsafe { (api.aclrtRecordEvent)(self.side.done, self.side.stream) };
        self.device.check("aclrtRecordEvent", code)?;
        // SAFETY: as above.
        let code = unsafe { (api.aclrtStreamWaitEvent)(self.device.stream(), self.side.done) };
        self.device.check("aclrtStreamWaitEvent", code)?;
        // From here the caching allocator reuses their blocks only after the device stream's
        // wait, which follows the reductions.
        started.clear();
        Ok(())
    }

    /// Wait on the host for the collectives of [`Communicator::start_all_reduce`], and report
    /// the first that failed (a rank that never came, ranks that disagree), naming this rank.
    pub fn synchronize(&self) -> Result<()> {
        self.device.bind_thread()?;
        // SAFETY: the side stream is live.
        let code = unsafe { (self.device.toolkit.api.aclrtSynchronizeStream)(self.side.stream) };
        self.device.counters.synchronized();
        if code != 0 {
            let detail = format!(
                "rank {} of {} on {}: {}",
                self.rank,
                self.ranks,
                self.device.name(),
                self.device.toolkit.recent_message().unwrap_or_else(|| format!("ACL error {code}"))
            );
            return Err(AscendError::Collective { call: "HcclAllReduce", detail });
        }
        Ok(())
    }

    /// Copy rank `root`'s `t` into every rank's `t`.
    pub fn broadcast(&self, t: &Tensor, root: usize) -> Result<()> {
        let call = "HcclBroadcast";
        let dtype = hccl_dtype(call, t.dtype())?;
        if root >= self.ranks {
            return Err(AscendError::Collective { call, detail: format!("root {root} of {} ranks", self.ranks) });
        }
        let (ptr, count) = self.buffer(call, t)?;
        // SAFETY: as in `all_reduce`.
        let code = unsafe { (self.api.HcclBroadcast)(ptr, count, dtype, root as u32, self.comm, self.device.stream()) };
        self.counted(call, code, t.elem_count() * t.dtype().size_in_bytes())
    }

    /// Wait, in stream order, until every rank has reached its barrier.
    pub fn barrier(&self) -> Result<()> {
        self.device.bind_thread()?;
        // SAFETY: the communicator is live and the stream is this device's.
        let code = unsafe { (self.api.HcclBarrier)(self.comm, self.device.stream()) };
        self.counted("HcclBarrier", code, 0)
    }

    /// The device address and element count of a contiguous tensor on this rank's device.
    fn buffer(&self, call: &'static str, t: &Tensor) -> Result<(*mut c_void, u64)> {
        self.device.bind_thread()?;
        let (storage, layout) = t.storage_and_layout();
        let Some((start, end)) = layout.contiguous_offsets() else {
            return Err(AscendError::Collective { call, detail: "the tensor must be contiguous".into() });
        };
        let storage: Option<&AscendStorage> = match &*storage {
            Storage::Custom(c) => c.as_any().downcast_ref::<AscendStorage>(),
            _ => None,
        };
        let Some(storage) = storage.filter(|s| Arc::ptr_eq(s.dev(), &self.device)) else {
            return Err(AscendError::Collective {
                call,
                detail: format!(
                    "the tensor is on {}, not on rank {}'s {}",
                    t.device().location(),
                    self.rank,
                    self.device.name()
                ),
            });
        };
        let offset = start * t.dtype().size_in_bytes();
        // SAFETY: the offset lies within the storage's buffer (the layout's contiguous range).
        let ptr = unsafe { storage.device_ptr().cast::<u8>().add(offset) }.cast::<c_void>();
        Ok((ptr, (end - start) as u64))
    }

    fn counted(&self, call: &'static str, code: i32, bytes: usize) -> Result<()> {
        if code != 0 {
            return Err(hccl_error(&self.api, &self.device, call, self.rank, self.ranks, code));
        }
        self.device.counters.collective(call, bytes as u64, self.ranks);
        Ok(())
    }
}

impl Drop for Communicator {
    fn drop(&mut self) {
        let api = &self.device.toolkit.api;
        // Work queued on either stream may still use the communicator; a failure was or will be
        // reported by the call that queued it.
        if self.device.bind_thread().is_ok() {
            let _ = self.device.synchronize();
            // SAFETY: the side stream is live.
            let _ = unsafe { (api.aclrtSynchronizeStream)(self.side.stream) };
        }
        // SAFETY: nothing queued uses the communicator, its stream or its events any more.
        unsafe {
            (self.api.HcclCommDestroy)(self.comm);
            (api.aclrtDestroyEvent)(self.side.ready);
            (api.aclrtDestroyEvent)(self.side.done);
            (api.aclrtDestroyStream)(self.side.stream);
        }
    }
}

fn hccl_error(
    api: &HcclApi,
    device: &DeviceInner,
    call: &'static str,
    rank: usize,
    ranks: usize,
    code: i32,
) -> AscendError {
    // SAFETY: HcclGetErrorString returns a static string or null.
    let text = unsafe { (api.HcclGetErrorString)(code) };
    let text = if text.is_null() {
        String::new()
    } else {
        // SAFETY: non-null, NUL-terminated and static.
        unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned()
    };
    AscendError::Hccl { call, rank, ranks, device: device.name(), code, text, message: device.toolkit.recent_message() }
}
