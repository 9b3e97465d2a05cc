//! The trainer on Ascend devices: HCCL's communicator as a [`Collective`], and the backend's
//! per-step counters as a [`DeviceProbe`]. The one module of the trainer that names
//! candle-ascend's types.
use std::sync::{Arc, Mutex};

use candle_ascend::{AscendDevice, DeviceCounters};
use candle_core::{Result, Tensor};

use crate::collective::Collective;
use crate::progress::{DeviceProbe, DeviceStepStats};

/// HCCL on Ascend devices (`npu:N`, `npu-sim:N`).
impl Collective for candle_ascend::Communicator {
    fn rank(&self) -> usize {
        candle_ascend::Communicator::rank(self)
    }
    fn ranks(&self) -> usize {
        candle_ascend::Communicator::ranks(self)
    }
    fn broadcast(&self, t: &Tensor, root: usize) -> Result<()> {
        candle_ascend::Communicator::broadcast(self, t, root).map_err(candle_core::Error::from)
    }
    fn all_reduce_sum(&self, t: &Tensor) -> Result<()> {
        let sum = candle_ascend::ReduceOp::Sum;
        candle_ascend::Communicator::all_reduce(self, t, sum).map_err(candle_core::Error::from)
    }
    fn start_all_reduce_sum(&self, t: &Tensor) -> Result<()> {
        let sum = candle_ascend::ReduceOp::Sum;
        candle_ascend::Communicator::start_all_reduce(self, t, sum).map_err(candle_core::Error::from)
    }
    fn finish_started(&self) -> Result<()> {
        candle_ascend::Communicator::finish_started(self).map_err(candle_core::Error::from)
    }
    fn synchronize(&self) -> Result<()> {
        candle_ascend::Communicator::synchronize(self).map_err(candle_core::Error::from)
    }
}

/// Watches an Ascend device (real or emulated) for [`crate::TrainerConfigBuilder::device_probe`].
pub struct AscendProbe {
    device: AscendDevice,
    start: DeviceCounters,
    last: Arc<Mutex<DeviceCounters>>,
}

impl AscendProbe {
    /// Watch `device`.
    pub fn new(device: AscendDevice) -> Self {
        let start = device.counters();
        Self { device, start, last: Arc::default() }
    }

    /// A handle on the full counters (launches by op included) of the latest step, which stays
    /// readable after the probe has moved into the trainer.
    pub fn last_step(&self) -> Arc<Mutex<DeviceCounters>> {
        self.last.clone()
    }
}

impl DeviceProbe for AscendProbe {
    fn begin_step(&mut self) {
        self.device.reset_peak_memory();
        self.start = self.device.counters();
    }

    fn end_step(&mut self) -> DeviceStepStats {
        let step = self.device.counters().since(&self.start);
        let stats = DeviceStepStats {
            device_launches: step.total_launches(),
            device_allocs: step.allocations,
            host_syncs: step.synchronizations,
            device_reads: step.reads,
            device_peak_mb: step.peak_memory_bytes as f64 / (1024.0 * 1024.0),
            collectives: step.collectives,
            collective_mb: step.collective_bytes as f64 / (1024.0 * 1024.0),
        };
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = step;
        stats
    }
}
