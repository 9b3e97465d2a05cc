//! Modelled device time: what each launch would cost on the part, from the vendor's platform
//! files (`soc/cann/platforms.tsv`) and the assumptions of `soc/time_model.tsv`, with host and
//! device overlapping as one stream allows. Modelled, not measured: nothing here has run on a
//! real NPU (docs/ascend.md states every assumption).
//!
//! - A cube launch (matmul, flash attention) runs its output tiles (`cube_m × cube_n` each) over
//!   the cube cores, `k / cube_k` cycles per tile at `cube_freq`: a tile that the shape does not
//!   fill costs a full tile, and fewer tiles than cores leave cores idle. Its operands must also
//!   cross HBM; the slower of the two counts.
//! - Any other launch moves its operands' bytes at the HBM rate: `ddr_rate` bytes per cycle per
//!   AI Core, times the AI Cores, times the clock.
//! - Each launch adds a fixed device cost, and the host's two-phase aclnn call before it.
//! - An AI CPU launch runs at the assumed AI CPU speed; a collective at the HCCS link rate.
use std::collections::BTreeMap;

/// A part's figures from its platform file.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PlatformFacts {
    pub(crate) soc: &'static str,
    pub(crate) ai_cores: u64,
    pub(crate) cube_cores: u64,
    pub(crate) ai_cpus: u64,
    pub(crate) cube_freq_mhz: u64,
    pub(crate) cube_mnk: [u64; 3],
    pub(crate) ddr_bytes_per_cycle: u64,
}

/// The figures the platform files lack (`soc/time_model.tsv`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Assumptions {
    pub(crate) launch_host_us: f64,
    pub(crate) launch_device_cube_us: f64,
    pub(crate) launch_device_vector_us: f64,
    pub(crate) collective_fixed_us: f64,
    pub(crate) hccs_link_gbps_910: f64,
    pub(crate) hccs_link_gbps_910b: f64,
    pub(crate) aicpu_launch_us: f64,
    pub(crate) aicpu_gbps_per_core: f64,
}

include!(concat!(env!("OUT_DIR"), "/time_model_facts.rs"));

/// The matrix products of one cube launch: `count` products of `batch` (m × k)·(k × n) each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CubeWork {
    /// Independent products (batch × heads).
    pub batch: u64,
    /// Rows of the output.
    pub m: u64,
    /// Columns of the output.
    pub n: u64,
    /// The reduced dimension.
    pub k: u64,
    /// How many such products the launch makes (2 for flash attention's forward: q·kᵀ and p·v).
    pub count: u64,
}

/// Where a launch runs and what it moves.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Work {
    /// AI Core vector work over `bytes` of operands.
    Vector {
        /// Bytes read and written.
        bytes: u64,
    },
    /// Cube work, plus the bytes of its operands.
    Cube {
        /// The products.
        cube: CubeWork,
        /// Bytes read and written.
        bytes: u64,
    },
    /// An AI CPU kernel over `bytes` of operands.
    AiCpu {
        /// Bytes read and written.
        bytes: u64,
    },
}

/// The model of one part.
#[derive(Debug, Clone, Copy)]
pub struct TimeModel {
    facts: PlatformFacts,
    assumptions: Assumptions,
    link_gbps: f64,
}

/// What one launch costs.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LaunchCost {
    /// Host time of the two-phase call, µs.
    pub host_us: f64,
    /// Device time, fixed cost included, µs.
    pub device_us: f64,
    /// Of which the cube's compute time, µs (0 for other launches).
    pub cube_us: f64,
}

impl TimeModel {
    /// The model of the part `soc` (`aclrtGetSocName`), if its platform file is in the table.
    /// `CANDLE_ASCEND_MODEL_HOST_US` overrides the host cost of a launch.
    pub fn for_soc(soc: &str) -> Option<Self> {
        let host_us = std::env::var("CANDLE_ASCEND_MODEL_HOST_US").ok().and_then(|v| v.parse::<f64>().ok());
        Self::with_host_us(soc, host_us)
    }

    /// The model of `soc` with the table's assumptions, the host cost of a launch replaced by
    /// `host_us` where given.
    fn with_host_us(soc: &str, host_us: Option<f64>) -> Option<Self> {
        let facts = *PLATFORMS.iter().find(|p| p.soc == soc)?;
        let mut assumptions = ASSUMPTIONS;
        if let Some(us) = host_us {
            assumptions.launch_host_us = us.max(0.0);
        }
        let link_gbps = if soc.starts_with("Ascend910B") {
            assumptions.hccs_link_gbps_910b
        } else {
            assumptions.hccs_link_gbps_910
        };
        Some(Self { facts, assumptions, link_gbps })
    }

    /// The cube's peak, in FLOP/s (two per multiply-add).
    pub fn peak_flops(&self) -> f64 {
        let [m, n, k] = self.facts.cube_mnk;
        2.0 * (self.facts.cube_cores * m * n * k) as f64 * self.facts.cube_freq_mhz as f64 * 1e6
    }

    /// Model FLOPs `flops` done in `step_us` as a share of the cube's peak (the MFU).
    pub fn mfu(&self, flops: f64, step_us: f64) -> f64 {
        flops / (step_us * 1e-6 * self.peak_flops())
    }

    /// HBM bytes per µs: `ddr_rate` × AI Cores × clock (MHz).
    pub fn hbm_bytes_per_us(&self) -> f64 {
        (self.facts.ddr_bytes_per_cycle * self.facts.ai_cores * self.facts.cube_freq_mhz) as f64
    }

    /// The cube's compute time for `work`, µs: whole tiles over the cube cores.
    pub fn cube_us(&self, work: CubeWork) -> f64 {
        let [tm, tn, tk] = self.facts.cube_mnk;
        let tiles = work.batch * work.m.div_ceil(tm) * work.n.div_ceil(tn);
        let waves = tiles.div_ceil(self.facts.cube_cores);
        let cycles = waves * work.k.div_ceil(tk) * work.count;
        cycles as f64 / self.facts.cube_freq_mhz as f64
    }

    /// What a launch of `work` costs.
    pub fn launch(&self, work: Work) -> LaunchCost {
        let a = &self.assumptions;
        let memory = |bytes: u64| bytes as f64 / self.hbm_bytes_per_us();
        let (device_us, cube_us) = match work {
            Work::Vector { bytes } => (a.launch_device_vector_us + memory(bytes), 0.0),
            Work::Cube { cube, bytes } => {
                let compute = self.cube_us(cube);
                (a.launch_device_cube_us + compute.max(memory(bytes)), compute)
            }
            Work::AiCpu { bytes } => {
                let bytes_per_us = a.aicpu_gbps_per_core * 1e3 * self.facts.ai_cpus as f64;
                (a.aicpu_launch_us + bytes as f64 / bytes_per_us, 0.0)
            }
        };
        LaunchCost { host_us: a.launch_host_us, device_us, cube_us }
    }

    /// The HCCL `call` over `bytes` per rank and `ranks` ranks, µs, plus the fixed cost: a ring
    /// all-reduce moves 2(r−1)/r of the bytes over one HCCS link, a broadcast the bytes once, a
    /// barrier nothing.
    pub fn collective_us(&self, call: &str, bytes: u64, ranks: usize) -> f64 {
        let moved = match call {
            _ if ranks < 2 => 0.0,
            "HcclBroadcast" => bytes as f64,
            "HcclBarrier" => 0.0,
            _ => 2.0 * (ranks - 1) as f64 / ranks as f64 * bytes as f64,
        };
        self.assumptions.collective_fixed_us + moved / (self.link_gbps * 1e3)
    }
}

/// Host and device clocks of one stream: the host issues launches one after another; the device
/// starts each when both it and the launch are ready; a host wait brings the host to the device.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timeline {
    /// The host's clock, µs.
    pub host_us: f64,
    /// When the device is next free, µs.
    pub device_free_us: f64,
    /// Device busy time, µs.
    pub device_us: f64,
    /// Host time spent issuing launches, µs.
    pub host_busy_us: f64,
    /// Cube compute time, µs.
    pub cube_us: f64,
    /// Device time per op, µs.
    pub per_op_us: BTreeMap<String, f64>,
}

impl Timeline {
    /// A launch of `op` costing `cost`.
    pub fn launch(&mut self, op: &str, cost: LaunchCost) {
        self.host_us += cost.host_us;
        self.host_busy_us += cost.host_us;
        self.device_free_us = self.device_free_us.max(self.host_us) + cost.device_us;
        self.device_us += cost.device_us;
        self.cube_us += cost.cube_us;
        *self.per_op_us.entry(op.to_string()).or_default() += cost.device_us;
    }

    /// Device work with no host launch cost of its own (a collective on the stream).
    pub fn device_only(&mut self, op: &str, device_us: f64) {
        self.launch(op, LaunchCost { host_us: 0.0, device_us, cube_us: 0.0 });
    }

    /// The host waits for the device (a synchronisation or a read).
    pub fn wait(&mut self) {
        self.host_us = self.host_us.max(self.device_free_us);
    }

    /// What happened between `earlier` and this timeline.
    pub fn since(&self, earlier: &Timeline) -> Timeline {
        Timeline {
            host_us: self.host_us - earlier.host_us,
            device_free_us: self.device_free_us - earlier.device_free_us,
            device_us: self.device_us - earlier.device_us,
            host_busy_us: self.host_busy_us - earlier.host_busy_us,
            cube_us: self.cube_us - earlier.cube_us,
            per_op_us: self
                .per_op_us
                .iter()
                .map(|(op, us)| (op.clone(), us - earlier.per_op_us.get(op).copied().unwrap_or(0.0)))
                .filter(|(_, us)| *us > 0.0)
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a2() -> TimeModel {
        TimeModel::with_host_us("Ascend910B3", None).unwrap()
    }

    #[test]
    fn the_platform_figures_give_the_parts_peaks() {
        // 910B3: 20 cube cores × 16³ MACs × 1.8 GHz × 2 = 294.9 TFLOP/s; HBM 32 B × 20 × 1800 MHz.
        assert!((a2().peak_flops() - 294.912e12).abs() < 1e6);
        assert_eq!(a2().hbm_bytes_per_us(), 1_152_000.0);
        // 910A: 32 AI Cores (its file has no cube count) × 16³ × 1.0 GHz × 2 = 262.1 TFLOP/s.
        let a = TimeModel::with_host_us("Ascend910A", None).unwrap();
        assert!((a.peak_flops() - 262.144e12).abs() < 1e6);
        assert_eq!(a.hbm_bytes_per_us(), 1_024_000.0);
    }

    #[test]
    fn one_large_matmul_is_cube_bound_and_pays_for_partial_tiles() {
        // 4096 × 4096 × 4096 on the 910B3: 256 × 256 tiles over 20 cores = 3,277 waves of 256
        // k-steps = 838,912 cycles at 1,800 MHz = 466.06 µs, plus 5 µs fixed.
        let work = CubeWork { batch: 1, m: 4096, n: 4096, k: 4096, count: 1 };
        let bytes = 3 * 4096 * 4096 * 2;
        let cost = a2().launch(Work::Cube { cube: work, bytes });
        assert!((cost.cube_us - 838_912.0 / 1800.0).abs() < 1e-9);
        assert!((cost.device_us - (5.0 + 838_912.0 / 1800.0)).abs() < 1e-9);
        // 17 rows cost two tiles' rows: the same time as 32.
        let ragged = CubeWork { m: 17, ..work };
        assert_eq!(a2().cube_us(ragged), a2().cube_us(CubeWork { m: 32, ..work }));
    }

    #[test]
    fn a_copy_is_memory_bound() {
        // 64 MiB read and 64 MiB written at 1,152,000 B/µs, plus 2 µs fixed.
        let bytes = 2 * 64 * 1024 * 1024;
        let cost = a2().launch(Work::Vector { bytes });
        assert!((cost.device_us - (2.0 + bytes as f64 / 1_152_000.0)).abs() < 1e-9);
        assert_eq!(cost.host_us, 12.0);
    }

    #[test]
    fn a_chain_of_tiny_launches_is_host_bound() {
        // 100 launches of 4 KiB: the device needs ~2 µs each, the host 12 µs each, so the step
        // takes the host's 1,200 µs plus the last launch's device time.
        let model = a2();
        let mut t = Timeline::default();
        for _ in 0..100 {
            t.launch("aclnnAdd", model.launch(Work::Vector { bytes: 4096 }));
        }
        t.wait();
        let last = model.launch(Work::Vector { bytes: 4096 }).device_us;
        assert!((t.host_us - (1200.0 + last)).abs() < 1e-9, "{}", t.host_us);
        assert!(t.device_us < t.host_busy_us / 5.0);
    }
}
