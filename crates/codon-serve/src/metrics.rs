//! The Prometheus text of `GET /metrics`, and the device memory it reports ([`DeviceMemory`]:
//! the caller that opened the device reads it; this crate knows no device's driver).
use std::sync::atomic::Ordering;

use crate::batcher::Counters;
use crate::histogram::Histogram;

/// A device's memory as its driver reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryReading {
    /// The device's name (the metrics' `device` label).
    pub device: String,
    /// Bytes free.
    pub free: u64,
    /// Bytes in all.
    pub total: u64,
}

/// Reads the model's device memory for `/metrics` (an NPU's `aclrtGetMemInfo`: what the driver
/// has handed out, the allocator's cache included, and the total). Given to
/// [`crate::RunningServer::start_with`] by whoever opened the device.
pub trait DeviceMemory: Send + Sync {
    /// The memory now; `None` where there is nothing to report (or it cannot be read): then
    /// `/metrics` carries no memory gauges.
    fn read(&self) -> Option<MemoryReading>;
}

/// What `/metrics` reports.
pub(crate) struct Readings<'a> {
    /// The batcher's counters.
    pub(crate) counters: &'a Counters,
    /// Proteins the model predicted.
    pub(crate) predicted: u64,
    /// Seconds from a predict request's arrival to its answer.
    pub(crate) latency: &'a Histogram,
    /// The device's memory, where it is read.
    pub(crate) memory: Option<&'a dyn DeviceMemory>,
}

/// The Prometheus text (version 0.0.4) of `readings`.
pub(crate) fn text(readings: &Readings<'_>) -> String {
    let c = readings.counters;
    let text = format!(
        "# HELP codon_predict_requests_total Predict requests answered with results (refusals and batch jobs' parts not included).\n\
         # TYPE codon_predict_requests_total counter\n\
         codon_predict_requests_total {}\n\
         # HELP codon_gathered_batches_total Batches of requests the model's worker gathered.\n\
         # TYPE codon_gathered_batches_total counter\n\
         codon_gathered_batches_total {}\n\
         # HELP codon_forward_passes_total Forward passes run (a gathered batch runs one per length bucket).\n\
         # TYPE codon_forward_passes_total counter\n\
         codon_forward_passes_total {}\n\
         # HELP codon_proteins_total Proteins the model predicted, batch jobs' included (not those refused, such as an unknown organism).\n# TYPE codon_proteins_total counter\n\
         codon_proteins_total {}\n\
         # HELP codon_queue_depth Predict requests waiting.\n# TYPE codon_queue_depth gauge\n\
         codon_queue_depth {}\n\
         # HELP codon_expired_total Requests dropped unrun after their caller gave up.\n# TYPE codon_expired_total counter\n\
         codon_expired_total {}\n\
         # HELP codon_jobs_total Batch jobs accepted.\n# TYPE codon_jobs_total counter\n\
         codon_jobs_total {}\n\
         # HELP codon_job_part_proteins_max The most batch-job proteins one gathered batch carried (at most one part).\n# TYPE codon_job_part_proteins_max gauge\n\
         codon_job_part_proteins_max {}\n\
         # HELP codon_job_part_residues_max The most batch-job residues one gathered batch carried.\n# TYPE codon_job_part_residues_max gauge\n\
         codon_job_part_residues_max {}\n\
         # HELP codon_job_part_proteins_beside_predict_max The most batch-job proteins a gathered batch carried beside a predict request.\n# TYPE codon_job_part_proteins_beside_predict_max gauge\n\
         codon_job_part_proteins_beside_predict_max {}\n\
         # HELP codon_job_results_saved_total Batch-job results this server saved.\n# TYPE codon_job_results_saved_total counter\n\
         codon_job_results_saved_total {}\n\
         # HELP codon_job_results_repeated_total Batch-job results this server computed that a run elsewhere had saved first (a part run twice).\n# TYPE codon_job_results_repeated_total counter\n\
         codon_job_results_repeated_total {}\n{}",
        c.requests.load(Ordering::Relaxed),
        c.batches.load(Ordering::Relaxed),
        c.pass_proteins.count(),
        readings.predicted,
        c.queued.load(Ordering::Relaxed),
        c.expired.load(Ordering::Relaxed),
        c.jobs.load(Ordering::Relaxed),
        c.most_job_proteins.load(Ordering::Relaxed),
        c.most_job_residues.load(Ordering::Relaxed),
        c.most_job_proteins_beside_interactive.load(Ordering::Relaxed),
        c.job_results_saved.load(Ordering::Relaxed),
        c.job_results_repeated.load(Ordering::Relaxed),
        readings.latency.prometheus("codon_predict_seconds", "Seconds from a predict request's arrival to its answer.")
            + &c.pass_proteins.prometheus("codon_forward_pass_proteins", "Proteins per forward pass (the batch sizes)."),
    );
    text + &readings.memory.and_then(|m| m.read()).map_or_else(String::new, |m| device_memory(&m))
}

/// A device's memory as Prometheus gauges: in use (the allocator's cache included) and in all.
fn device_memory(memory: &MemoryReading) -> String {
    let MemoryReading { device: name, free, total } = memory;
    format!(
        "# HELP codon_device_memory_used_bytes Device memory in use (the allocator's cache included).\n\
         # TYPE codon_device_memory_used_bytes gauge\n\
         codon_device_memory_used_bytes{{device=\"{name}\"}} {}\n\
         # HELP codon_device_memory_total_bytes Device memory in all.\n# TYPE codon_device_memory_total_bytes gauge\n\
         codon_device_memory_total_bytes{{device=\"{name}\"}} {total}\n",
        total.saturating_sub(*free)
    )
}
