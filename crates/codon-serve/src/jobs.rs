//! Batch jobs: a file's proteins as one job, predicted a few at a time through the same queue as
//! predict requests (so interactive requests are not held behind a large file), with progress.
//! A finished job's results stay for [`KEEP_FINISHED`].
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::api::ProteinResult;

/// Proteins per part of a job.
pub const PART: usize = 8;

/// How long a finished job's results are kept.
pub const KEEP_FINISHED: Duration = Duration::from_secs(3600);

/// Most jobs held at once: past it the oldest finished job goes, and when every job held is
/// running a new one is refused with 503.
pub const MAX_JOBS: usize = 256;

/// Where a job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobStatus {
    /// Parts are still being predicted.
    Running,
    /// Every protein has its result (or its own error).
    Done,
    /// The job stopped (the server is stopping).
    Failed,
}

/// `GET /v1/jobs/{id}`: progress, and the results once done.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobReport {
    /// The job's id.
    pub id: String,
    /// Where it stands.
    pub status: JobStatus,
    /// Proteins predicted so far.
    pub done: usize,
    /// Proteins in the job.
    pub total: usize,
    /// Each protein's result, in order, once the job is done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub results: Option<Vec<ProteinResult>>,
    /// Why the job failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

struct Entry {
    report: JobReport,
    results: Vec<ProteinResult>,
    finished: Option<Instant>,
}

/// The server's jobs.
#[derive(Default)]
pub struct JobStore {
    jobs: Mutex<HashMap<String, Entry>>,
}

impl JobStore {
    /// A new running job of `total` proteins, with an unguessable id; `None` when [`MAX_JOBS`]
    /// are running. Finished jobs past [`KEEP_FINISHED`] are dropped first, then the oldest
    /// finished job if the store is full.
    pub fn create(&self, total: usize) -> Option<String> {
        let mut jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        jobs.retain(|_, e| e.finished.is_none_or(|t| t.elapsed() < KEEP_FINISHED));
        if jobs.len() >= MAX_JOBS {
            let oldest = jobs.iter().filter_map(|(id, e)| Some((e.finished?, id.clone()))).min();
            jobs.remove(&oldest?.1);
        }
        let id = loop {
            let state = std::collections::hash_map::RandomState::new();
            let (mut a, mut b) = (state.build_hasher(), state.build_hasher());
            a.write_u64(total as u64);
            b.write_u128(Instant::now().elapsed().as_nanos());
            let id = format!("{:016x}{:016x}", a.finish(), b.finish());
            if !jobs.contains_key(&id) {
                break id;
            }
        };
        let report =
            JobReport { id: id.clone(), status: JobStatus::Running, done: 0, total, results: None, error: None };
        jobs.insert(id.clone(), Entry { report, results: Vec::with_capacity(total), finished: None });
        Some(id)
    }

    /// Add a part's results to job `id`; it is done when every protein has one.
    pub fn add(&self, id: &str, results: Vec<ProteinResult>) {
        let mut jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = jobs.get_mut(id) {
            e.results.extend(results);
            e.report.done = e.results.len();
            if e.report.done >= e.report.total {
                e.report.status = JobStatus::Done;
                e.finished = Some(Instant::now());
            }
        }
    }

    /// Job `id` stopped with `error`.
    pub fn fail(&self, id: &str, error: String) {
        let mut jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = jobs.get_mut(id) {
            e.report.status = JobStatus::Failed;
            e.report.error = Some(error);
            e.finished = Some(Instant::now());
        }
    }

    /// Job `id`'s report, with its results once it is done.
    pub fn report(&self, id: &str) -> Option<JobReport> {
        let jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        let e = jobs.get(id)?;
        let mut report = e.report.clone();
        if report.status == JobStatus::Done {
            report.results = Some(e.results.clone());
        }
        Some(report)
    }
}

/// A shared store.
pub type Jobs = Arc<JobStore>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_is_done_when_every_protein_has_its_result() {
        let store = JobStore::default();
        let id = store.create(3).unwrap();
        assert_ne!(store.create(3).unwrap(), id, "ids differ");
        let result = || ProteinResult { sequences: Vec::new(), error: Some("x".into()) };
        store.add(&id, vec![result(), result()]);
        let r = store.report(&id).unwrap();
        assert_eq!((r.status, r.done, r.total, r.results.is_none()), (JobStatus::Running, 2, 3, true));
        store.add(&id, vec![result()]);
        let r = store.report(&id).unwrap();
        assert_eq!((r.status, r.done), (JobStatus::Done, 3));
        assert_eq!(r.results.unwrap().len(), 3);
        assert!(store.report("nope").is_none());
    }

    #[test]
    fn a_full_store_drops_its_oldest_finished_job_and_refuses_only_when_all_run() {
        let store = JobStore::default();
        let first = store.create(1).unwrap();
        store.add(&first, vec![ProteinResult { sequences: Vec::new(), error: None }]);
        let running: Vec<String> = (1..MAX_JOBS).map(|_| store.create(1).unwrap()).collect();
        assert!(store.create(1).is_some(), "the finished job makes room");
        assert!(store.report(&first).is_none());
        assert!(store.create(1).is_none(), "every job held is running");
        assert!(running.iter().all(|id| store.report(id).is_some()));
    }
}
