//! What the handlers and the jobs' scheduler share: the model's queue, the counters, the
//! settings and the jobs database ([`AppState`]).
use std::sync::Arc;

use codon_model::OrganismTable;

use crate::batcher::{Counters, Queue};
use crate::config::ServeConfig;
use crate::design;
use crate::histogram::Histogram;
use crate::jobs::Jobs;
use crate::metrics::DeviceMemory;

/// What the scheduler of batch jobs hears from the handlers.
pub(crate) enum JobEvent {
    /// A job was accepted: its parts are to run.
    New(String),
    /// A job was cancelled: its parts still to run or running are dropped.
    Cancelled(String),
}

/// What the handlers share.
pub(crate) struct AppState {
    pub(crate) queue: Queue,
    pub(crate) counters: Arc<Counters>,
    pub(crate) organisms: OrganismTable,
    pub(crate) config: ServeConfig,
    /// Seconds from a predict request's arrival to its answer.
    pub(crate) latency: Histogram,
    /// Proteins the model predicted (not those it refused, such as an unknown organism).
    pub(crate) predicted: std::sync::atomic::AtomicU64,
    /// The batch jobs, in their database.
    pub(crate) jobs: Jobs,
    /// New and cancelled jobs for the scheduler (`job_runner::schedule_jobs`).
    pub(crate) job_events: tokio::sync::mpsc::UnboundedSender<JobEvent>,
    /// The model's device memory, for `/metrics` (where the caller reads it).
    pub(crate) memory: Option<Arc<dyn DeviceMemory>>,
    /// Each organism's %MinMax band, computed once when first asked for.
    pub(crate) bands: std::sync::Mutex<std::collections::HashMap<u32, Option<Arc<codon_eval::plot::ProfileBand>>>>,
}

impl AppState {
    /// An organism's %MinMax band from the reference's sequences (cached).
    pub(crate) fn band(&self, organism: Option<u32>) -> Option<Arc<codon_eval::plot::ProfileBand>> {
        let organism = organism?;
        let mut bands = self.bands.lock().unwrap_or_else(|p| p.into_inner());
        bands
            .entry(organism)
            .or_insert_with(|| design::band(self.config.reference.as_deref(), organism).map(Arc::new))
            .clone()
    }
}
