//! The trainer's view of an Ascend device: per-step counters from the backend.
use std::sync::{Arc, Mutex};

use candle_ascend::{AscendDevice, DeviceCounters};
use codon_train::{DeviceProbe, DeviceStepStats};

/// Watches an Ascend device (real or emulated) for [`codon_train::TrainerConfigBuilder::device_probe`].
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
