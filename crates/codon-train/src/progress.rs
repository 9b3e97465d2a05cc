//! What a run reports: per-step metrics, device statistics, the progress bar or log lines, the
//! metrics JSONL file and warnings. The library prints nothing elsewhere.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Result, TrainError};

/// One line of the metrics log.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StepMetrics {
    /// Optimizer step, from 1.
    pub step: usize,
    /// Epoch, from 0.
    pub epoch: usize,
    /// Mean loss over the step's micro-batches.
    pub loss: f64,
    /// Learning rate this step used.
    pub lr: f64,
    /// Global gradient norm before clipping.
    pub grad_norm: f64,
    /// Tokens per second over the step.
    pub tokens_per_s: f64,
    /// Wall time of the step.
    pub step_seconds: f64,
    /// Whether the update was skipped (non-finite values).
    pub skipped: bool,
    /// The f16 loss scale, when used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loss_scale: Option<f64>,
    /// In a data-parallel run, the gradient buckets whose all-reduce started while the backward
    /// pass was still running (the rest started after it).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub overlapped_buckets: Option<usize>,
    /// What the device did during the step, when a [`DeviceProbe`] watches it.
    #[serde(flatten, skip_serializing_if = "Option::is_none", default)]
    pub device: Option<DeviceStepStats>,
    /// What each device's management interface reported after the step (`npu-smi`'s figures),
    /// one entry per device of the run in rank order, when a [`DeviceProbe`] monitors them.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub npu: Vec<DeviceSample>,
}

/// One device's figures from its management interface (DCMI on Ascend), as `npu-smi info`
/// shows them.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DeviceSample {
    /// The device (`npu:0`).
    pub device: String,
    /// AI Core utilisation, percent.
    pub npu_util: f64,
    /// HBM in use on the device (by every process), MiB.
    pub hbm_used_mb: u64,
    /// Chip temperature, °C.
    pub temp_c: f64,
    /// Power, W.
    pub power_w: f64,
}

/// What the device did during one optimizer step.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct DeviceStepStats {
    /// Kernel launches.
    pub device_launches: u64,
    /// Of those, the launches that run on the NPU's AI CPU, which is orders of magnitude slower
    /// than its AI Core (a dtype no AI Core kernel takes); 0 on devices without one.
    #[serde(default)]
    pub aicpu_launches: u64,
    /// Driver allocations.
    pub device_allocs: u64,
    /// Host waits on the device.
    pub host_syncs: u64,
    /// Device-to-host reads.
    pub device_reads: u64,
    /// Peak device memory held from the driver (cache included) since the first step began, in
    /// MiB: the most the run has needed so far.
    pub device_peak_mb: f64,
    /// Collectives (all-reduce, broadcast, barrier) this device issued; 0 on one device.
    #[serde(default)]
    pub collectives: u64,
    /// Bytes those collectives moved from this device, in MiB.
    #[serde(default)]
    pub collective_mb: f64,
    /// The step's modelled time on the part, host waits included, in ms: modelled from the vendor's
    /// platform files, not measured (docs/ascend.md); absent where the device has no model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modelled_step_ms: Option<f64>,
    /// The modelled device busy time, in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modelled_device_ms: Option<f64>,
    /// The modelled host time spent issuing launches, in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modelled_host_ms: Option<f64>,
    /// The modelled cube (matrix unit) compute time, in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modelled_cube_ms: Option<f64>,
    /// Model FLOPs of the step over the modelled step time times the part's cube peak.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modelled_mfu: Option<f64>,
}

/// Watches a device across optimizer steps (see [`crate::TrainerConfigBuilder::device_probe`]).
pub trait DeviceProbe: Send {
    /// Called before each optimizer step.
    fn begin_step(&mut self);
    /// Called after it, with the tokens this rank's device processed in the step: what the
    /// device did since [`DeviceProbe::begin_step`].
    fn end_step(&mut self, tokens: usize) -> DeviceStepStats;
    /// The monitored devices' figures after a step ([`StepMetrics::npu`]); none by default.
    fn sample(&mut self) -> Vec<DeviceSample> {
        Vec::new()
    }
    /// Before each optimizer step (and so before the first): a description of the fault of a
    /// device that must stop the run, naming the device and the vendor's error codes.
    fn check_health(&mut self) -> std::result::Result<(), String> {
        Ok(())
    }
    /// What the probe has to warn of once (monitoring unavailable, a minor alarm), taken.
    fn take_warnings(&mut self) -> Vec<String> {
        Vec::new()
    }
}

/// What a run did.
#[derive(Debug, Clone, Default)]
pub struct TrainReport {
    /// Metrics of every optimizer step run.
    pub steps: Vec<StepMetrics>,
    /// Checkpoint folders written and still present (see [`crate::TrainerConfigBuilder::keep_last`]).
    pub checkpoints: Vec<PathBuf>,
    /// Total optimizer steps of the schedule.
    pub total_steps: usize,
    /// What the run warned of (skipped updates, interrupted saves it cleaned up), in order;
    /// also printed on stderr (by rank 0 of a data-parallel run), `quiet` or not.
    pub warnings: Vec<String>,
}

/// A progress bar of `total` items drawn with indicatif's `template`, when stderr is a
/// terminal; `None` elsewhere (logs, CI), where callers print plain lines instead.
pub fn terminal_bar(total: usize, template: &str) -> Option<indicatif::ProgressBar> {
    std::io::IsTerminal::is_terminal(&std::io::stderr()).then(|| {
        let style = indicatif::ProgressStyle::with_template(template)
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
        indicatif::ProgressBar::new(total as u64).with_style(style)
    })
}

/// Longest time between two log lines when stderr is not a terminal.
pub(crate) const LOG_INTERVAL: std::time::Duration = std::time::Duration::from_secs(30);

/// A run's output as it goes: the progress bar on a terminal or plain log lines otherwise
/// (about 20 per run, and one at least every [`LOG_INTERVAL`], so a log hours apart at real
/// sizes never looks like a hang), the metrics JSONL file, and warnings printed above the bar.
pub(crate) struct Progress {
    bar: indicatif::ProgressBar,
    /// Warnings are printed (by one rank of a data-parallel run).
    print_warnings: bool,
    log_lines: bool,
    log_every: usize,
    log_interval: std::time::Duration,
    last_log: std::time::Instant,
    total_steps: usize,
    metrics: Option<(PathBuf, std::io::BufWriter<std::fs::File>)>,
    warnings: Vec<String>,
}

impl Progress {
    /// Output for a run of `total_steps`: `quiet` hides the bar and the log lines; warnings
    /// are printed when `print_warnings` (and always kept for the report).
    pub(crate) fn new(quiet: bool, print_warnings: bool, total_steps: usize) -> Self {
        let template = "{bar:30} step {pos}/{len} {msg} [{elapsed_precise} < {eta_precise}]";
        let terminal = if quiet { None } else { terminal_bar(total_steps, template) };
        let log_lines = !quiet && terminal.is_none();
        let bar = terminal.unwrap_or_else(indicatif::ProgressBar::hidden);
        let log_every = (total_steps / 20).max(1);
        Self {
            bar,
            print_warnings,
            log_lines,
            log_every,
            log_interval: LOG_INTERVAL,
            last_log: std::time::Instant::now(),
            total_steps,
            metrics: None,
            warnings: Vec::new(),
        }
    }

    /// Whether step `step` gets a log line: every `log_every` steps, the last one, and any step
    /// that ends `log_interval` or more after the previous line.
    fn log_due(&mut self, step: usize) -> bool {
        let due = step.is_multiple_of(self.log_every)
            || step == self.total_steps
            || self.last_log.elapsed() >= self.log_interval;
        if due {
            self.last_log = std::time::Instant::now();
        }
        due
    }

    /// A resumed run starts after `step`.
    pub(crate) fn start_at(&self, step: usize) {
        self.bar.set_position(step as u64);
    }

    /// Write each step's metrics as a JSON line to `path`, appending when `append` (a resumed run).
    pub(crate) fn open_metrics(&mut self, path: &Path, append: bool) -> Result<()> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(append)
            .write(true)
            .truncate(!append)
            .open(path)
            .map_err(|e| TrainError::io(path, e))?;
        self.metrics = Some((path.to_path_buf(), std::io::BufWriter::new(file)));
        Ok(())
    }

    /// Report a finished step: the metrics line (flushed, so a crash keeps it), the bar or a log line.
    pub(crate) fn step(&mut self, metric: &StepMetrics) -> Result<()> {
        self.bar.set_position(metric.step as u64);
        let mut memory = metric.device.map(|d| format!(" {:.0} MiB device", d.device_peak_mb)).unwrap_or_default();
        for s in &metric.npu {
            memory.push_str(&format!(" | {} {:.0}% {} MiB HBM", s.device, s.npu_util, s.hbm_used_mb));
        }
        self.bar.set_message(format!(
            "loss {:.4} lr {:.2e} {:.0} tok/s{memory}",
            metric.loss, metric.lr, metric.tokens_per_s
        ));
        if self.log_lines && self.log_due(metric.step) {
            // Best-effort: a closed stderr never stops a run.
            let _ = writeln!(
                std::io::stderr(),
                "step {}/{} epoch {} loss {:.4} lr {:.2e} {:.0} tokens/s",
                metric.step,
                self.total_steps,
                metric.epoch,
                metric.loss,
                metric.lr,
                metric.tokens_per_s
            );
        }
        if let Some((path, w)) = self.metrics.as_mut() {
            let line = serde_json::to_string(metric).map_err(|source| TrainError::Metrics {
                path: path.clone(),
                step: metric.step,
                source,
            })?;
            writeln!(w, "{line}").and_then(|_| w.flush()).map_err(|e| TrainError::io(path.clone(), e))?;
        }
        Ok(())
    }

    /// A warning: kept for the report and printed above the bar.
    pub(crate) fn warn(&mut self, message: String) {
        if self.print_warnings {
            self.bar.suspend(|| {
                let _ = writeln!(std::io::stderr(), "warning: {message}");
            });
        }
        self.warnings.push(message);
    }

    /// Clear the bar; the warnings given so far.
    pub(crate) fn finish(&mut self) -> Vec<String> {
        self.bar.finish_and_clear();
        std::mem::take(&mut self.warnings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_lines_come_by_step_count_and_by_time() {
        let mut progress = Progress::new(false, false, 1000);
        let due: Vec<usize> = (1..=120).filter(|&s| progress.log_due(s)).collect();
        assert_eq!(due, [50, 100], "every total/20 steps while the steps are quick");
        // Steps slower than the interval: every one is logged.
        progress.log_interval = std::time::Duration::ZERO;
        assert!((121..=125).all(|s| progress.log_due(s)));
    }
}
