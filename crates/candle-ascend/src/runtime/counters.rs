//! What a device did, counted by the backend itself so that the figures exist on any toolkit,
//! real or emulated: kernel launches per op (and those that run on the AI CPU), driver allocations (`aclrtMalloc`), host
//! synchronisations, device-to-host reads, and the device memory the driver has handed out
//! (the cache included), with its peak.
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use super::time_model::{LaunchCost, TimeModel, Timeline, Work};

/// The live counters of one device.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    launches: Mutex<BTreeMap<&'static str, u64>>,
    aicpu_launches: Mutex<BTreeMap<&'static str, u64>>,
    allocations: AtomicU64,
    synchronizations: AtomicU64,
    reads: AtomicU64,
    uploads: AtomicU64,
    collectives: AtomicU64,
    collective_bytes: AtomicU64,
    driver_bytes: AtomicU64,
    peak_bytes: AtomicU64,
    /// The part's time model; `None` for a part without a platform file in the table.
    model: Option<TimeModel>,
    timeline: Mutex<Timeline>,
}

impl Counters {
    /// Counters for a device of the part `soc`.
    pub(crate) fn new(soc: &str) -> Self {
        Self { model: TimeModel::for_soc(soc), ..Self::default() }
    }

    /// A launch of `op`, of `work`, counted and placed on the modelled timeline; its modelled
    /// device time in µs, where the part has a model.
    pub(crate) fn launched_work(&self, op: &'static str, work: Work) -> Option<f64> {
        self.launched(op, matches!(work, Work::AiCpu { .. }));
        let cost = self.model.as_ref()?.launch(work);
        self.timeline().launch(op, cost);
        Some(cost.device_us)
    }

    fn timeline(&self) -> std::sync::MutexGuard<'_, Timeline> {
        self.timeline.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn launched(&self, op: &'static str, on_ai_cpu: bool) {
        *self.launches.lock().unwrap_or_else(|p| p.into_inner()).entry(op).or_default() += 1;
        if on_ai_cpu {
            *self.aicpu_launches.lock().unwrap_or_else(|p| p.into_inner()).entry(op).or_default() += 1;
        }
    }

    pub(crate) fn allocated(&self, bytes: usize) {
        self.allocations.fetch_add(1, Ordering::Relaxed);
        let now = self.driver_bytes.fetch_add(bytes as u64, Ordering::Relaxed) + bytes as u64;
        self.peak_bytes.fetch_max(now, Ordering::Relaxed);
    }

    pub(crate) fn freed(&self, bytes: usize) {
        self.driver_bytes.fetch_sub(bytes as u64, Ordering::Relaxed);
    }

    pub(crate) fn synchronized(&self) {
        self.synchronizations.fetch_add(1, Ordering::Relaxed);
        self.timeline().wait();
    }

    pub(crate) fn read(&self) {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.timeline().wait();
    }

    /// The HCCL `call` over `bytes` per rank and `ranks` ranks, placed on the device's own
    /// timeline (a collective on a stream of its own is not modelled as overlapping).
    pub(crate) fn collective(&self, call: &'static str, bytes: u64, ranks: usize) {
        self.collectives.fetch_add(1, Ordering::Relaxed);
        self.collective_bytes.fetch_add(bytes, Ordering::Relaxed);
        if let Some(model) = &self.model {
            let us = model.collective_us(call, bytes, ranks);
            self.timeline().launch(call, LaunchCost { host_us: 0.0, device_us: us, cube_us: 0.0 });
        }
    }

    pub(crate) fn uploaded(&self) {
        self.uploads.fetch_add(1, Ordering::Relaxed);
    }

    /// Start a new peak from the memory held now.
    pub(crate) fn reset_peak(&self) {
        self.peak_bytes.store(self.driver_bytes.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> DeviceCounters {
        let per_op = |map: &Mutex<BTreeMap<&'static str, u64>>| {
            map.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|(op, n)| (op.to_string(), *n)).collect()
        };
        DeviceCounters {
            launches: per_op(&self.launches),
            aicpu_launches: per_op(&self.aicpu_launches),
            modelled: self.model.map(|_| self.timeline().clone()),
            allocations: self.allocations.load(Ordering::Relaxed),
            synchronizations: self.synchronizations.load(Ordering::Relaxed),
            reads: self.reads.load(Ordering::Relaxed),
            uploads: self.uploads.load(Ordering::Relaxed),
            collectives: self.collectives.load(Ordering::Relaxed),
            collective_bytes: self.collective_bytes.load(Ordering::Relaxed),
            memory_bytes: self.driver_bytes.load(Ordering::Relaxed),
            peak_memory_bytes: self.peak_bytes.load(Ordering::Relaxed),
        }
    }
}

/// A snapshot of what a device has done since it was opened.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceCounters {
    /// Kernel launches per aclnn op.
    pub launches: BTreeMap<String, u64>,
    /// Of those, the launches that run on the AI CPU per the vendor's kernel tables
    /// ([`crate::soc::Engine::AiCpu`]), per op.
    pub aicpu_launches: BTreeMap<String, u64>,
    /// The modelled time (`runtime::time_model`); `None` for a part the model has no figures for.
    pub modelled: Option<Timeline>,
    /// `aclrtMalloc` calls.
    pub allocations: u64,
    /// Host waits on the stream (`aclrtSynchronizeStream`).
    pub synchronizations: u64,
    /// Device-to-host reads.
    pub reads: u64,
    /// Host-to-device copies.
    pub uploads: u64,
    /// HCCL collectives issued (all-reduce, broadcast, barrier).
    pub collectives: u64,
    /// Bytes those collectives moved from this rank (each rank's buffer once).
    pub collective_bytes: u64,
    /// Device memory held from the driver now, cache included, in bytes.
    pub memory_bytes: u64,
    /// The most held at once since the device opened or the last [`crate::AscendDevice::reset_peak_memory`].
    pub peak_memory_bytes: u64,
}

impl DeviceCounters {
    /// Total kernel launches.
    pub fn total_launches(&self) -> u64 {
        self.launches.values().sum()
    }

    /// Total launches on the AI CPU.
    pub fn total_aicpu_launches(&self) -> u64 {
        self.aicpu_launches.values().sum()
    }

    /// What happened between `earlier` and this snapshot (memory figures are this snapshot's).
    pub fn since(&self, earlier: &DeviceCounters) -> DeviceCounters {
        let per_op = |now: &BTreeMap<String, u64>, then: &BTreeMap<String, u64>| {
            now.iter()
                .map(|(op, n)| (op.clone(), n - then.get(op).copied().unwrap_or(0)))
                .filter(|(_, n)| *n > 0)
                .collect()
        };
        DeviceCounters {
            launches: per_op(&self.launches, &earlier.launches),
            aicpu_launches: per_op(&self.aicpu_launches, &earlier.aicpu_launches),
            modelled: match (&self.modelled, &earlier.modelled) {
                (Some(now), Some(then)) => Some(now.since(then)),
                _ => None,
            },
            allocations: self.allocations - earlier.allocations,
            synchronizations: self.synchronizations - earlier.synchronizations,
            reads: self.reads - earlier.reads,
            uploads: self.uploads - earlier.uploads,
            collectives: self.collectives - earlier.collectives,
            collective_bytes: self.collective_bytes - earlier.collective_bytes,
            memory_bytes: self.memory_bytes,
            peak_memory_bytes: self.peak_memory_bytes,
        }
    }
}
