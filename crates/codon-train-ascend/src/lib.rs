//! `codon-train-ascend`: the trainer on Ascend devices: HCCL's communicator as a [`Collective`],
//! the backend's per-step counters as a [`DeviceProbe`], and data-parallel training over HCCL. A
//! crate of its own, beside both, so that codon-train names no device and candle-ascend no
//! trainer.
#![warn(missing_docs)]
use std::path::Path;
use std::sync::{Arc, Mutex};

use std::time::Duration;

use candle_ascend::{AscendDevice, Communicator, DeviceCounters, RootInfo};
use candle_core::{Result, Tensor};
use codon_train::rendezvous::{exchange, RankLayout, Rendezvous, RendezvousError};
use codon_train::{BatchSource, Collective, DeviceProbe, DeviceStepStats, TrainReport, TrainableModel, Trainer};

/// HCCL on Ascend devices (`npu:N`, `npu-sim:N`) as the trainer's [`Collective`].
pub struct Hccl(pub Communicator);

impl Collective for Hccl {
    fn rank(&self) -> usize {
        self.0.rank()
    }
    fn ranks(&self) -> usize {
        self.0.ranks()
    }
    fn broadcast(&self, t: &Tensor, root: usize) -> Result<()> {
        self.0.broadcast(t, root).map_err(candle_core::Error::from)
    }
    fn all_reduce_sum(&self, t: &Tensor) -> Result<()> {
        self.0.all_reduce(t, candle_ascend::ReduceOp::Sum).map_err(candle_core::Error::from)
    }
    fn start_all_reduce_sum(&self, t: &Tensor) -> Result<()> {
        self.0.start_all_reduce(t, candle_ascend::ReduceOp::Sum).map_err(candle_core::Error::from)
    }
    fn finish_started(&self) -> Result<()> {
        self.0.finish_started().map_err(candle_core::Error::from)
    }
    fn synchronize(&self) -> Result<()> {
        self.0.synchronize().map_err(candle_core::Error::from)
    }
}

/// Why a rank of a multi-process run could not join HCCL.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// The ranks did not find each other.
    #[error(transparent)]
    Rendezvous(#[from] RendezvousError),
    /// HCCL refused the root info or the communicator.
    #[error(transparent)]
    Hccl(#[from] candle_ascend::AscendError),
}

/// This rank's HCCL communicator on `device`, in a run of one process per rank: rank 0 makes
/// the root info and hands it to the others through `how`; every rank then joins
/// (`HcclCommInitRootInfo`). Waits up to `timeout` for the others.
pub fn join(
    layout: &RankLayout,
    device: &AscendDevice,
    how: &Rendezvous,
    timeout: Duration,
) -> std::result::Result<Hccl, JoinError> {
    let own = match layout.rank {
        0 => Some(Communicator::root_info(device)?),
        _ => None,
    };
    let bytes = exchange(layout, how, timeout, own.as_ref().map(RootInfo::as_bytes))?;
    let root = RootInfo::from_bytes(&bytes)?;
    Ok(Hccl(Communicator::init_rank(device, layout.world, layout.rank, &root)?))
}

/// [`Trainer::fit_data_parallel`] over HCCL, one rank per replica: the replicas must live on
/// Ascend devices (one each); their communicators are set up here.
pub fn fit_data_parallel<M, S>(
    trainer: &Trainer,
    replicas: &[M],
    data: &S,
    resume: Option<&Path>,
) -> codon_train::Result<TrainReport>
where
    M: TrainableModel + Sync,
    S: BatchSource<Batch = M::Batch> + Sync,
{
    trainer.fit_data_parallel_over(replicas, data, resume, |devices| {
        let ascend = devices
            .iter()
            .map(|d| {
                candle_ascend::ascend_device(d).cloned().ok_or_else(|| {
                    format!(
                        "data-parallel training runs over HCCL on Ascend devices (npu:N or npu-sim:N); {} trains on one device",
                        d.location()
                    )
                })
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let comms = Communicator::init_all(&ascend).map_err(|e| e.to_string())?;
        Ok(comms.into_iter().map(Hccl).collect::<Vec<_>>())
    })
}

/// Watches an Ascend device (real or emulated) for [`codon_train::TrainerConfigBuilder::device_probe`].
pub struct AscendProbe {
    device: AscendDevice,
    start: DeviceCounters,
    last: Arc<Mutex<DeviceCounters>>,
    flops_per_token: Option<f64>,
    /// Whether a step has begun: the peak is reset once, before the first.
    started: bool,
    /// The devices whose DCMI figures and health the run follows (the data-parallel ranks').
    monitored: Vec<candle_ascend::DeviceWatch>,
    /// Whether monitoring works; `None` until first asked.
    monitoring: Option<bool>,
    /// Devices already warned of (a minor alarm, a failed DCMI call).
    warned: Vec<String>,
    warnings: Vec<String>,
    /// When DCMI was last asked for the figures, and what it said.
    last_sample: Option<(std::time::Instant, Vec<codon_train::DeviceSample>)>,
}

impl AscendProbe {
    /// Watch `device`.
    pub fn new(device: AscendDevice) -> Self {
        let start = device.counters();
        Self {
            monitored: vec![device.watch()],
            device,
            start,
            last: Arc::default(),
            flops_per_token: None,
            started: false,
            monitoring: None,
            warned: Vec::new(),
            warnings: Vec::new(),
            last_sample: None,
        }
    }

    /// Report `modelled_mfu` too, for a model of `flops` training FLOPs per token
    /// ([`training_flops_per_token`]).
    pub fn with_flops_per_token(mut self, flops: f64) -> Self {
        self.flops_per_token = Some(flops);
        self
    }

    /// Follow the DCMI figures and health of `devices` (every rank's device of a data-parallel
    /// run on this machine, in rank order, opened here or not) instead of the probed device's
    /// alone.
    pub fn monitoring(mut self, devices: Vec<candle_ascend::DeviceWatch>) -> Self {
        if !devices.is_empty() {
            self.monitored = devices;
        }
        self
    }

    /// Whether DCMI answers; the first time it does not, one warning says why.
    fn monitoring_works(&mut self) -> bool {
        if let Some(works) = self.monitoring {
            return works;
        }
        let works = match self.device.health() {
            Ok(_) => true,
            Err(e) => {
                self.warnings.push(format!("{e}; training goes on without it"));
                false
            }
        };
        self.monitoring = Some(works);
        works
    }

    /// A handle on the full counters (launches by op included) of the latest step, which stays
    /// readable after the probe has moved into the trainer.
    pub fn last_step(&self) -> Arc<Mutex<DeviceCounters>> {
        self.last.clone()
    }
}

impl DeviceProbe for AscendProbe {
    fn begin_step(&mut self) {
        // One definition of peak memory: the most held at once since the first step began.
        if !std::mem::replace(&mut self.started, true) {
            self.device.reset_peak_memory();
        }
        self.start = self.device.counters();
    }

    fn end_step(&mut self, tokens: usize) -> DeviceStepStats {
        let step = self.device.counters().since(&self.start);
        let stats = DeviceStepStats {
            device_launches: step.total_launches(),
            aicpu_launches: step.total_aicpu_launches(),
            device_allocs: step.allocations,
            host_syncs: step.synchronizations,
            device_reads: step.reads,
            device_peak_mb: step.peak_memory_bytes as f64 / (1024.0 * 1024.0),
            collectives: step.collectives,
            collective_mb: step.collective_bytes as f64 / (1024.0 * 1024.0),
            modelled_step_ms: step.modelled.as_ref().map(|t| t.host_us / 1e3),
            modelled_device_ms: step.modelled.as_ref().map(|t| t.device_us / 1e3),
            modelled_host_ms: step.modelled.as_ref().map(|t| t.host_busy_us / 1e3),
            modelled_cube_ms: step.modelled.as_ref().map(|t| t.cube_us / 1e3),
            modelled_mfu: match (&step.modelled, self.flops_per_token, self.device.time_model()) {
                (Some(t), Some(per_token), Some(model)) if t.host_us > 0.0 => {
                    Some(model.mfu(per_token * tokens as f64, t.host_us))
                }
                _ => None,
            },
        };
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = step;
        stats
    }

    fn sample(&mut self) -> Vec<codon_train::DeviceSample> {
        if !self.monitoring_works() {
            return Vec::new();
        }
        // DCMI is asked at most once a second; steps in between repeat the last figures.
        if let Some((at, last)) = &self.last_sample {
            if at.elapsed() < std::time::Duration::from_secs(1) {
                return last.clone();
            }
        }
        let mut samples = Vec::new();
        for d in &self.monitored {
            match d.status() {
                Ok(s) => samples.push(codon_train::DeviceSample {
                    device: d.name(),
                    npu_util: f64::from(s.utilization_pct),
                    hbm_used_mb: s.hbm_used_mb,
                    temp_c: f64::from(s.temperature_c),
                    power_w: s.power_w,
                }),
                // A device whose DCMI call fails is left out of the row, with one warning.
                Err(e) if !self.warned.contains(&d.name()) => {
                    self.warned.push(d.name());
                    self.warnings.push(format!("{e}; its figures are left out of the metrics"));
                }
                Err(_) => {}
            }
        }
        self.last_sample = Some((std::time::Instant::now(), samples.clone()));
        samples
    }

    fn check_health(&mut self) -> std::result::Result<(), String> {
        if !self.monitoring_works() {
            return Ok(());
        }
        for d in &self.monitored {
            let Ok((health, codes)) = d.health() else { continue };
            let codes = candle_ascend::runtime::monitor::hex_codes(&codes);
            let codes = if codes.is_empty() { "no error code".to_string() } else { format!("error code {codes}") };
            if health.is_fault() {
                return Err(format!("{} reports a fault: health {health}, {codes} (DCMI)", d.name()));
            }
            if health != candle_ascend::Health::Ok && !self.warned.contains(&d.name()) {
                self.warned.push(d.name());
                self.warnings.push(format!("{} reports health {health}, {codes} (DCMI); training goes on", d.name()));
            }
        }
        Ok(())
    }

    fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }
}
