//! Devices: `npu:N` on a real CANN toolkit, `npu-sim:N` on the emulated one. Each device has one
//! stream; work is enqueued on it and the host waits only to read results back or on an
//! explicit `synchronize`.
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::block_cache::BlockCache;
use super::counters::{Counters, DeviceCounters};
use super::preflight::Preflight;
use super::staging::Staging;
use crate::error::{AscendError, Result};
use crate::ffi::loader::ToolkitKind;
use crate::ffi::types::*;
use crate::ffi::Toolkit;
use crate::soc::Soc;

// SAFETY: the only field that is not Send/Sync by itself is `stream`, an opaque ACL handle the
// host never dereferences. Every call that uses it first binds the calling thread to this device
// (`bind_thread`, aclrtSetDevice), which is what ACL asks of a thread before it touches a stream
// created on that device; the rest of the state is behind atomics and mutexes.
unsafe impl Send for DeviceInner {}
unsafe impl Sync for DeviceInner {}

/// State shared by every handle to one device.
#[derive(Debug)]
pub struct DeviceInner {
    pub(crate) id: usize,
    pub(crate) toolkit: Arc<Toolkit>,
    stream: AclrtStream,
    pub(crate) cache: Mutex<BlockCache>,
    /// The part, from `aclrtGetSocName`.
    pub(crate) soc: Soc,
    /// Whether FP32 matmuls may use HF32 on parts that have it (`CANDLE_ASCEND_ALLOW_HF32=1`).
    pub(crate) allow_hf32: AtomicBool,
    /// Pinned host buffers of uploads still on the stream.
    pub(crate) staging: Mutex<Staging>,
    /// Set while a preflight records the ops a run would launch.
    pub(crate) preflight: Mutex<Option<Preflight>>,
    /// What the device has done.
    pub(crate) counters: Counters,
    seed: AtomicU64,
    /// Advances with every random op, so each draws fresh numbers (as torch_npu's offset).
    random_offset: AtomicU64,
    /// The emulator's `aclsimAddBusyUs`, which feeds its DCMI the modelled busy time; `None` on
    /// a real toolkit.
    pub(crate) sim_busy: Option<unsafe extern "C" fn(f64)>,
}

thread_local! {
    /// The (toolkit, device) this thread last bound with aclrtSetDevice: ACL binds per thread.
    static BOUND: Cell<Option<(ToolkitKind, usize)>> = const { Cell::new(None) };
}

impl DeviceInner {
    /// `npu:N` or `npu-sim:N`.
    pub(crate) fn name(&self) -> String {
        format!("{}:{}", self.location_name(), self.id)
    }

    pub(crate) fn location_name(&self) -> &'static str {
        self.toolkit.kind.device_prefix()
    }

    /// Bind this device to the calling thread, once per thread.
    pub(crate) fn bind_thread(&self) -> Result<()> {
        let key = (self.toolkit.kind, self.id);
        if BOUND.with(|b| b.get()) == Some(key) {
            return Ok(());
        }
        // SAFETY: plain runtime call with a validated device id.
        let code = unsafe { (self.toolkit.api.aclrtSetDevice)(self.id as i32) };
        self.check("aclrtSetDevice", code)?;
        BOUND.with(|b| b.set(Some(key)));
        Ok(())
    }

    pub(crate) fn check(&self, call: &'static str, code: AclError) -> Result<()> {
        if code == ACL_SUCCESS {
            Ok(())
        } else {
            Err(AscendError::Runtime { call, code, message: self.toolkit.recent_message() })
        }
    }

    pub(crate) fn stream(&self) -> AclrtStream {
        self.stream
    }

    /// Wait for the stream; the pinned buffers of finished uploads become free again.
    pub(crate) fn synchronize(&self) -> Result<()> {
        self.bind_thread()?;
        let mark = self.staging.lock().unwrap_or_else(|p| p.into_inner()).mark();
        // SAFETY: the stream belongs to this device and lives as long as the process.
        let code = unsafe { (self.toolkit.api.aclrtSynchronizeStream)(self.stream()) };
        self.counters.synchronized();
        self.check("aclrtSynchronizeStream", code)?;
        self.staging.lock().unwrap_or_else(|p| p.into_inner()).recycle(mark);
        Ok(())
    }

    /// Copy host bytes to device address `dst`, ordered on the stream: through pinned memory
    /// (`aclrtMallocHost`) in pieces of at most [`Staging::MAX_STAGED`] bytes, each copied
    /// asynchronously and its buffer kept until a synchronisation shows the copy done. The host
    /// waits only when [`Staging`]'s in-flight budget is spent. Pageable memory never reaches
    /// `aclrtMemcpyAsync`.
    pub(crate) fn upload(&self, dst: *mut c_void, src: &[u8]) -> Result<()> {
        self.bind_thread()?;
        if src.is_empty() {
            return Ok(());
        }
        self.counters.uploaded();
        for (i, piece) in src.chunks(Staging::MAX_STAGED).enumerate() {
            if !self.staging_has_room(piece.len())? {
                self.synchronize()?;
            }
            // SAFETY: `dst` holds `src.len()` bytes, so this piece's offset stays inside it.
            let piece_dst = unsafe { dst.cast::<u8>().add(i * Staging::MAX_STAGED) }.cast::<c_void>();
            self.upload_staged(piece_dst, piece)?;
        }
        Ok(())
    }

    /// One piece of an upload: copied into a pinned buffer, then queued on the stream.
    fn upload_staged(&self, dst: *mut c_void, src: &[u8]) -> Result<()> {
        let mut staging = self.staging.lock().unwrap_or_else(|p| p.into_inner());
        let pinned = staging.take(&self.toolkit.api, src.len()).map_err(|code| AscendError::Runtime {
            call: "aclrtMallocHost",
            code,
            message: self.toolkit.recent_message(),
        })?;
        // SAFETY: the pinned buffer holds at least `src.len()` bytes and no copy uses it now.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), pinned.ptr().cast(), src.len()) };
        // SAFETY: pinned source, device destination of `src.len()` bytes; the buffer stays alive
        // in `staging` until the stream has been synchronised.
        let code = unsafe {
            (self.toolkit.api.aclrtMemcpyAsync)(
                dst,
                src.len(),
                pinned.ptr(),
                src.len(),
                ACL_MEMCPY_HOST_TO_DEVICE,
                self.stream(),
            )
        };
        staging.in_flight(pinned);
        self.check("aclrtMemcpyAsync(host to device)", code)
    }

    fn staging_has_room(&self, bytes: usize) -> Result<bool> {
        Ok(self.staging.lock().unwrap_or_else(|p| p.into_inner()).has_room(bytes))
    }

    /// Copy device bytes at `src` into `dst`: synchronise the stream, then copy synchronously
    /// (torch_npu's blocking copy), so no host read observes an unfinished kernel.
    pub(crate) fn download(&self, dst: &mut [u8], src: *const c_void) -> Result<()> {
        if dst.is_empty() || self.in_preflight() {
            return Ok(());
        }
        self.synchronize()?;
        self.counters.read();
        // SAFETY: `src` holds at least `dst.len()` bytes of device memory; the stream is idle.
        let code = unsafe {
            (self.toolkit.api.aclrtMemcpy)(
                dst.as_mut_ptr().cast(),
                dst.len(),
                src,
                dst.len(),
                ACL_MEMCPY_DEVICE_TO_HOST,
            )
        };
        self.check("aclrtMemcpy(device to host)", code)
    }

    /// Free an executor that phase 1 made and that will not be launched
    /// (`aclDestroyAclOpExecutor`, opbase `acl_meta.h`; leaked on toolkits without it).
    pub(crate) fn destroy_executor(&self, exec: AclExecutorPtr) {
        if let Some(f) = self.toolkit.optional_symbol("aclDestroyAclOpExecutor") {
            // SAFETY: `aclnnStatus aclDestroyAclOpExecutor(aclOpExecutor*)`; the executor is unlaunched.
            let f: unsafe extern "C" fn(AclExecutorPtr) -> AclnnStatus = unsafe { std::mem::transmute(f) };
            unsafe { f(exec) };
        }
    }

    pub(crate) fn in_preflight(&self) -> bool {
        self.preflight.lock().unwrap_or_else(|p| p.into_inner()).is_some()
    }

    /// Record a refusal if a preflight is running; true when it is.
    pub(crate) fn preflight_refuse(&self, what: impl FnOnce() -> String) -> bool {
        match self.preflight.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            Some(p) => {
                p.refused.insert(what());
                true
            }
            None => false,
        }
    }

    /// The seed and a fresh offset for one random op.
    pub(crate) fn next_random(&self, elements: u64) -> (u64, u64) {
        (self.seed.load(Ordering::Relaxed), self.random_offset.fetch_add(elements.max(1), Ordering::Relaxed))
    }
}

/// Every opened device, by toolkit and ordinal.
type DeviceRegistry = HashMap<(ToolkitKind, usize), Arc<DeviceInner>>;

/// A handle to an Ascend device (cheap to clone).
#[derive(Debug, Clone)]
pub struct AscendDevice {
    pub(crate) inner: Arc<DeviceInner>,
}

/// What the emulated toolkit has counted since the last reset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimCounters {
    /// `aclrtMalloc` calls.
    pub allocations: u64,
    /// `aclrtFree` calls.
    pub frees: u64,
    /// Host-to-device copies and their bytes.
    pub host_to_device: (u64, u64),
    /// Device-to-host copies and their bytes.
    pub device_to_host: (u64, u64),
    /// Device-to-device copies.
    pub device_to_device: u64,
    /// Explicit stream synchronisations.
    pub synchronizations: u64,
    /// Device memory in use now, and its peak, in bytes (driver view, cache included).
    pub memory: (u64, u64),
    /// HCCL collectives that ran (counted once per rank), and the bytes of the ranks' buffers.
    pub collectives: (u64, u64),
    /// Kernel launches per aclnn op.
    pub launches: BTreeMap<String, u64>,
    /// Of those, the launches the emulator marked as AI CPU, per op.
    pub aicpu_launches: BTreeMap<String, u64>,
}

impl SimCounters {
    /// Total kernel launches.
    pub fn total_launches(&self) -> u64 {
        self.launches.values().sum()
    }
}

impl AscendDevice {
    /// Device `id` of a real CANN toolkit (`npu:id`).
    pub fn npu(id: usize) -> Result<Self> {
        Self::open(ToolkitKind::Cann, id)
    }

    /// Device `id` of the emulated toolkit (`npu-sim:id`).
    pub fn sim(id: usize) -> Result<Self> {
        Self::open(ToolkitKind::Emulated, id)
    }

    /// The process-wide handle of a device: every handle to it shares one stream and cache.
    pub fn open(kind: ToolkitKind, id: usize) -> Result<Self> {
        static DEVICES: OnceLock<Mutex<DeviceRegistry>> = OnceLock::new();
        let mut devices = DEVICES.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
        if let Some(inner) = devices.get(&(kind, id)) {
            return Ok(Self { inner: inner.clone() });
        }
        let toolkit = Toolkit::get(kind)?;
        let api = &toolkit.api;
        let mut count = 0u32;
        // SAFETY: valid out-pointer.
        let code = unsafe { (api.aclrtGetDeviceCount)(&mut count) };
        if code != ACL_SUCCESS {
            return Err(AscendError::Runtime { call: "aclrtGetDeviceCount", code, message: toolkit.recent_message() });
        }
        if id >= count as usize {
            return Err(AscendError::Runtime {
                call: "aclrtSetDevice",
                code: ACL_ERROR_RT_INVALID_DEVICEID,
                message: Some(format!("device {id} does not exist: this machine has {count} device(s)")),
            });
        }
        // SAFETY: plain runtime calls; the stream out-pointer is valid.
        let code = unsafe { (api.aclrtSetDevice)(id as i32) };
        if code != ACL_SUCCESS {
            return Err(AscendError::Runtime { call: "aclrtSetDevice", code, message: toolkit.recent_message() });
        }
        BOUND.with(|b| b.set(Some((kind, id))));
        let mut stream: AclrtStream = std::ptr::null_mut();
        let code = unsafe { (api.aclrtCreateStream)(&mut stream) };
        if code != ACL_SUCCESS {
            return Err(AscendError::Runtime { call: "aclrtCreateStream", code, message: toolkit.recent_message() });
        }
        // SAFETY: `const char* aclrtGetSocName(void)`: NULL or a static string.
        let soc = unsafe { (api.aclrtGetSocName)() };
        let soc =
            if soc.is_null() { String::new() } else { unsafe { CStr::from_ptr(soc) }.to_string_lossy().into_owned() };
        let allow_hf32 = std::env::var("CANDLE_ASCEND_ALLOW_HF32").is_ok_and(|v| v == "1");
        let sim_busy = toolkit_busy_hook(&toolkit);
        let inner = Arc::new(DeviceInner {
            id,
            toolkit,
            stream,
            cache: Mutex::default(),
            soc: Soc::new(&soc),
            allow_hf32: AtomicBool::new(allow_hf32),
            staging: Mutex::default(),
            preflight: Mutex::default(),
            counters: Counters::new(&soc),
            // A fixed stream until `set_seed`: any constant does (this one is c in m/s).
            seed: AtomicU64::new(299_792_458),
            random_offset: AtomicU64::new(0),
            sim_busy,
        });
        devices.insert((kind, id), inner.clone());
        Ok(Self { inner })
    }

    /// How many devices the toolkit sees (`aclrtGetDeviceCount`).
    pub fn count(&self) -> Result<usize> {
        let mut n = 0u32;
        // SAFETY: valid out-pointer.
        let code = unsafe { (self.inner.toolkit.api.aclrtGetDeviceCount)(&mut n) };
        self.inner.check("aclrtGetDeviceCount", code)?;
        Ok(n as usize)
    }

    /// The device ordinal.
    pub fn id(&self) -> usize {
        self.inner.id
    }

    /// `npu:N` or `npu-sim:N`.
    pub fn name(&self) -> String {
        self.inner.name()
    }

    /// The loaded toolkit.
    pub fn toolkit(&self) -> &Toolkit {
        &self.inner.toolkit
    }

    /// Free and total device memory in bytes (`aclrtGetMemInfo(ACL_HBM_MEM)`).
    pub fn memory_info(&self) -> Result<(usize, usize)> {
        self.inner.bind_thread()?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-pointers; the device is bound to this thread.
        let code = unsafe { (self.inner.toolkit.api.aclrtGetMemInfo)(ACL_HBM_MEM, &mut free, &mut total) };
        self.inner.check("aclrtGetMemInfo", code)?;
        Ok((free, total))
    }

    /// The part's time model (`None` for a part without a platform file in the table).
    pub fn time_model(&self) -> Option<super::time_model::TimeModel> {
        super::time_model::TimeModel::for_soc(&self.inner.soc.name)
    }

    /// The SoC (`aclrtGetSocName`) and its family.
    pub fn soc(&self) -> &Soc {
        &self.inner.soc
    }

    /// Whether FP32 matmuls may run on the HF32 cube (A2 and later; like torch's
    /// `allow_hf32`). Off by default; `CANDLE_ASCEND_ALLOW_HF32=1` turns it on at open.
    pub fn set_allow_hf32(&self, allow: bool) {
        self.inner.allow_hf32.store(allow, Ordering::Relaxed);
    }

    /// Run `step` with every launch reduced to phase 1 (validation only, nothing executes and
    /// host reads return zeros), and fail with one error listing every op the part refuses.
    /// `step` should be one step of the real run: the same model, dtypes and code path.
    pub fn preflight(&self, step: impl FnOnce() -> candle_core::Result<()>) -> Result<()> {
        *self.inner.preflight.lock().unwrap_or_else(|p| p.into_inner()) = Some(Preflight::default());
        let ran = step();
        let found = self.inner.preflight.lock().unwrap_or_else(|p| p.into_inner()).take().unwrap_or_default();
        if !found.refused.is_empty() {
            return Err(AscendError::Preflight {
                device: self.name(),
                soc: self.inner.soc.name.clone(),
                refused: found.refused.into_iter().collect(),
            });
        }
        ran.map_err(|e| AscendError::Unsupported { op: "preflight", detail: e.to_string() })
    }

    /// Wait for all work queued on the device's stream.
    pub fn synchronize(&self) -> Result<()> {
        self.inner.synchronize()
    }

    /// Give cached device memory back to the driver.
    pub fn empty_cache(&self) {
        self.inner.release_cache()
    }

    /// What the device has done since it was opened, counted by the backend (any toolkit).
    pub fn counters(&self) -> DeviceCounters {
        self.inner.counters.snapshot()
    }

    /// Start a new peak of device memory from what is held now (for a per-step peak).
    pub fn reset_peak_memory(&self) {
        self.inner.counters.reset_peak()
    }

    /// Whether the device skips arithmetic (the emulator under `CANDLE_ASCEND_SIM_NO_MATH=1`):
    /// every value read back is then meaningless.
    pub fn skips_math(&self) -> bool {
        let Some(f) = self.inner.toolkit.optional_symbol("aclsimNoMath") else { return false };
        // SAFETY: `int aclsimNoMath(void)` from csrc/ascendcl.c.
        let f: unsafe extern "C" fn() -> i32 = unsafe { std::mem::transmute(f) };
        unsafe { f() != 0 }
    }

    /// What the driver's DCMI reports of this device now, as `npu-smi info` shows it. An error
    /// ([`AscendError::MonitoringOff`]) where the toolkit has no DCMI.
    pub fn status(&self) -> Result<super::monitor::DeviceStatus> {
        self.watch().status()
    }

    /// The device's health and current error codes, from DCMI.
    pub fn health(&self) -> Result<(super::monitor::Health, Vec<u32>)> {
        self.watch().health()
    }

    /// The processes using this device, from DCMI.
    pub fn processes(&self) -> Result<Vec<super::monitor::DeviceProcess>> {
        self.watch().processes()
    }

    /// DCMI's view of this device.
    pub fn watch(&self) -> DeviceWatch {
        self.watch_peer(self.inner.id)
    }

    /// DCMI's view of device `id` of this device's toolkit, which this process need not have
    /// opened: another rank's device on the same machine.
    pub fn watch_peer(&self, id: usize) -> DeviceWatch {
        DeviceWatch { toolkit: self.inner.toolkit.clone(), id }
    }

    /// The emulator's counters; `None` on a real toolkit.
    pub fn sim_counters(&self) -> Option<SimCounters> {
        let tk = &self.inner.toolkit;
        let counters = tk.optional_symbol("aclsimCounters")?;
        let op_counts = tk.optional_symbol("aclsimOpCounts")?;
        // SAFETY: emulator-only prototypes from csrc/ascendcl.c.
        let counters: unsafe extern "C" fn(*mut u64) = unsafe { std::mem::transmute(counters) };
        let op_counts: unsafe extern "C" fn(*mut u8, usize) -> usize = unsafe { std::mem::transmute(op_counts) };
        let mut v = [0u64; 12];
        unsafe { counters(v.as_mut_ptr()) };
        let needed = unsafe { op_counts(std::ptr::null_mut(), 0) };
        let mut buf = vec![0u8; needed + 1];
        unsafe { op_counts(buf.as_mut_ptr(), buf.len()) };
        let text = String::from_utf8_lossy(&buf[..needed]);
        let rows: Vec<(String, u64, u64)> = text
            .lines()
            .filter_map(|l| {
                let mut f = l.split(' ');
                Some((f.next()?.to_string(), f.next()?.parse().ok()?, f.next()?.parse().ok()?))
            })
            .collect();
        let launches = rows.iter().map(|(op, n, _)| (op.clone(), *n)).collect();
        let aicpu_launches = rows.iter().filter(|r| r.2 > 0).map(|(op, _, n)| (op.clone(), *n)).collect();
        Some(SimCounters {
            allocations: v[0],
            frees: v[1],
            host_to_device: (v[2], v[3]),
            device_to_host: (v[4], v[5]),
            device_to_device: v[6],
            synchronizations: v[7],
            memory: (v[8], v[9]),
            collectives: (v[10], v[11]),
            launches,
            aicpu_launches,
        })
    }

    /// Reset the emulator's counters (no-op on a real toolkit).
    pub fn reset_sim_counters(&self) {
        if let Some(f) = self.inner.toolkit.optional_symbol("aclsimResetCounters") {
            // SAFETY: `void aclsimResetCounters(void)` from csrc/ascendcl.c.
            let f: unsafe extern "C" fn() = unsafe { std::mem::transmute(f) };
            unsafe { f() };
        }
    }

    pub(crate) fn set_seed(&self, seed: u64) {
        self.inner.seed.store(seed, Ordering::Relaxed);
        self.inner.random_offset.store(0, Ordering::Relaxed);
    }

    pub(crate) fn seed(&self) -> u64 {
        self.inner.seed.load(Ordering::Relaxed)
    }
}

/// The emulator's hook for the modelled busy time of each launch, if the toolkit has it.
fn toolkit_busy_hook(toolkit: &Toolkit) -> Option<unsafe extern "C" fn(f64)> {
    let f = toolkit.optional_symbol("aclsimAddBusyUs")?;
    // SAFETY: `void aclsimAddBusyUs(double)` from csrc/ascendcl.c.
    Some(unsafe { std::mem::transmute::<usize, unsafe extern "C" fn(f64)>(f) })
}

/// A device as DCMI sees it, by ACL ordinal, without opening it: its figures, health and
/// processes, as `npu-smi` shows them.
#[derive(Clone)]
pub struct DeviceWatch {
    toolkit: Arc<Toolkit>,
    id: usize,
}

impl DeviceWatch {
    /// `npu:N` or `npu-sim:N`.
    pub fn name(&self) -> String {
        format!("{}:{}", self.toolkit.kind.device_prefix(), self.id)
    }

    /// What DCMI reports of the device now. An error ([`AscendError::MonitoringOff`]) where the
    /// toolkit has no DCMI.
    pub fn status(&self) -> Result<super::monitor::DeviceStatus> {
        self.with_monitor(|m| m.status())
    }

    /// The device's health and current error codes.
    pub fn health(&self) -> Result<(super::monitor::Health, Vec<u32>)> {
        self.with_monitor(|m| m.health())
    }

    /// The processes using the device.
    pub fn processes(&self) -> Result<Vec<super::monitor::DeviceProcess>> {
        self.with_monitor(|m| m.processes())
    }

    /// `f` of DCMI's view of the device.
    fn with_monitor<T>(&self, f: impl FnOnce(&super::monitor::Monitor) -> Result<T>) -> Result<T> {
        let api = self.toolkit.dcmi().map_err(AscendError::MonitoringOff)?;
        f(&super::monitor::Monitor::new(&api, self.dcmi_logic_id(), self.name()))
    }

    /// The device's DCMI logic id: ACL numbers the devices that `ASCEND_RT_VISIBLE_DEVICES`
    /// leaves visible from 0, DCMI numbers them all, so `npu:0` under `ASCEND_RT_VISIBLE_DEVICES=4,5`
    /// is DCMI's 4.
    fn dcmi_logic_id(&self) -> u32 {
        let visible = std::env::var("ASCEND_RT_VISIBLE_DEVICES").unwrap_or_default();
        let ids: Vec<u32> = visible.split(',').filter_map(|v| v.trim().parse().ok()).collect();
        ids.get(self.id).copied().unwrap_or(self.id as u32)
    }
}
