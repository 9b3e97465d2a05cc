//! Dynamic batching: predict jobs wait in a bounded queue; the model's worker thread takes the
//! first, gathers whatever else arrives within a short window (up to a protein budget), runs them
//! through shared forward passes, and answers each job with its own results. A job whose caller
//! gave up is dropped before it runs.
//!
//! The queue has two lanes: interactive requests are always taken first, and batch jobs' parts
//! wait in a lane of their own (half the capacity), so jobs never fill the room interactive
//! requests need. A gathered batch holds at most one job part (the parts themselves are bounded
//! in proteins and residues by the server), so an interactive request that arrives while the
//! model runs waits for at most one small part, not for a batch of many.
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use codon_model::{DnaPrediction, PredictOptions, Predictor, ProteinInput};
use tokio::sync::oneshot;

use crate::histogram::{self, Histogram};

/// One request's proteins, each with its options, and where its answer goes.
pub struct Job {
    /// The proteins with their options.
    pub items: Vec<(ProteinInput, PredictOptions)>,
    /// Each protein's predictions or error, in order.
    pub reply: oneshot::Sender<Vec<Result<Vec<DnaPrediction>, String>>>,
    /// After this the caller has given up: the job is dropped unrun.
    pub deadline: Instant,
}

/// Counters for `/metrics`.
pub struct Counters {
    /// Predict requests answered with results (the HTTP handler counts them; refusals are not).
    pub requests: AtomicU64,
    /// Batch jobs accepted.
    pub jobs: AtomicU64,
    /// Batches the worker gathered (each one `predict_each` call), counted as each starts.
    pub batches: AtomicU64,
    /// Jobs in the queue or being gathered.
    pub queued: AtomicU64,
    /// Jobs dropped because their caller had given up.
    pub expired: AtomicU64,
    /// Proteins per forward pass (its count: the passes run, one per length bucket).
    pub pass_proteins: Histogram,
    /// The most job proteins one gathered batch carried.
    pub most_job_proteins: AtomicU64,
    /// The most job residues one gathered batch carried.
    pub most_job_residues: AtomicU64,
    /// The most job proteins a gathered batch carried beside an interactive request.
    pub most_job_proteins_beside_interactive: AtomicU64,
    /// Job results this server saved (each protein's once, whichever server saved it).
    pub job_results_saved: AtomicU64,
    /// Job results this server computed that another run had saved first (a part run twice: a
    /// lapsed claim in a shared store); the jobs' repeated work.
    pub job_results_repeated: AtomicU64,
}

impl Default for Counters {
    fn default() -> Self {
        Self {
            requests: AtomicU64::default(),
            jobs: AtomicU64::default(),
            batches: AtomicU64::default(),
            queued: AtomicU64::default(),
            expired: AtomicU64::default(),
            pass_proteins: Histogram::new(histogram::PROTEINS),
            most_job_proteins: AtomicU64::default(),
            most_job_residues: AtomicU64::default(),
            most_job_proteins_beside_interactive: AtomicU64::default(),
            job_results_saved: AtomicU64::default(),
            job_results_repeated: AtomicU64::default(),
        }
    }
}

/// How the worker gathers jobs.
#[derive(Clone, Copy, Debug)]
pub struct BatchPolicy {
    /// How long the first job of a batch waits for others.
    pub window: Duration,
    /// Most proteins in one batch (interactive requests; a batch also holds at most one job
    /// part).
    pub max_proteins: usize,
}

/// The queue's two lanes: interactive requests, and batch jobs' parts behind them.
#[derive(Default)]
struct Lanes {
    interactive: VecDeque<Job>,
    background: VecDeque<Job>,
    /// Live [`Queue`] handles: the worker stops when none is left and the lanes are empty.
    senders: usize,
    /// The worker has stopped, or the server is stopping: nothing more is taken.
    closed: bool,
}

/// What the queue's handles and its worker share.
struct Shared {
    lanes: Mutex<Lanes>,
    ready: Condvar,
    /// Most interactive requests waiting.
    capacity: usize,
    /// Most job parts waiting: jobs never take the interactive lane's room.
    background_capacity: usize,
}

impl Shared {
    fn lanes(&self) -> MutexGuard<'_, Lanes> {
        self.lanes.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The sending side of the queue.
pub struct Queue {
    shared: Arc<Shared>,
    counters: Arc<Counters>,
}

impl Clone for Queue {
    fn clone(&self) -> Self {
        self.shared.lanes().senders += 1;
        Self { shared: self.shared.clone(), counters: self.counters.clone() }
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        self.shared.lanes().senders -= 1;
        self.shared.ready.notify_all();
    }
}

/// Why a job was not queued.
#[derive(Debug)]
pub enum Refused {
    /// The queue is full.
    Full,
    /// The worker has stopped.
    Closed,
}

/// Which lane a job waits in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// A predict request: taken first, with the queue's whole capacity.
    Interactive,
    /// A batch job's part: taken when no interactive request waits, and holding at most half
    /// the queue's capacity of room of its own.
    Background,
}

impl Queue {
    /// Queue an interactive `job`, or say why not at once.
    pub fn submit(&self, job: Job) -> Result<(), Refused> {
        self.submit_to(Lane::Interactive, job)
    }

    /// Queue `job` in `lane`, or say why not at once.
    pub fn submit_to(&self, lane: Lane, job: Job) -> Result<(), Refused> {
        let mut lanes = self.shared.lanes();
        if lanes.closed {
            return Err(Refused::Closed);
        }
        let (queue, capacity) = match lane {
            Lane::Interactive => (&mut lanes.interactive, self.shared.capacity),
            Lane::Background => (&mut lanes.background, self.shared.background_capacity),
        };
        if queue.len() >= capacity {
            return Err(Refused::Full);
        }
        queue.push_back(job);
        self.counters.queued.fetch_add(1, Ordering::Relaxed);
        drop(lanes);
        self.shared.ready.notify_one();
        Ok(())
    }

    /// Most job parts that may wait at once.
    pub fn background_capacity(&self) -> usize {
        self.shared.background_capacity
    }

    /// Stop the worker after the batch it runs: nothing more is queued, and what waits is
    /// dropped (its callers' answers close). The worker then exits even while handles remain.
    pub fn close(&self) {
        let mut lanes = self.shared.lanes();
        lanes.closed = true;
        let dropped = lanes.interactive.len() + lanes.background.len();
        lanes.interactive.clear();
        lanes.background.clear();
        drop(lanes);
        self.counters.queued.fetch_sub(dropped as u64, Ordering::Relaxed);
        self.shared.ready.notify_all();
    }

    /// Drop the job parts still waiting (the server is stopping: they are resumed on the next
    /// start); their callers' answers close. Parts the worker has taken are finished.
    pub fn withdraw_background(&self) -> usize {
        let withdrawn: Vec<Job> = self.shared.lanes().background.drain(..).collect();
        self.counters.queued.fetch_sub(withdrawn.len() as u64, Ordering::Relaxed);
        withdrawn.len()
    }
}

/// Start the worker thread that owns `predictor`, with a queue of `capacity` interactive
/// requests and half as many job parts (at least one).
pub fn start(
    predictor: Predictor,
    forward: PredictOptions,
    policy: BatchPolicy,
    capacity: usize,
    counters: Arc<Counters>,
) -> std::io::Result<(Queue, std::thread::JoinHandle<()>)> {
    let shared = Arc::new(Shared {
        lanes: Mutex::new(Lanes { senders: 1, ..Lanes::default() }),
        ready: Condvar::new(),
        capacity: capacity.max(1),
        background_capacity: (capacity / 2).max(1),
    });
    let worker_shared = shared.clone();
    let worker_counters = counters.clone();
    let handle = std::thread::Builder::new()
        .name("codon-serve model".into())
        .spawn(move || run(&predictor, &forward, policy, &worker_shared, &worker_counters))?;
    Ok((Queue { shared, counters }, handle))
}

/// Marks the queue closed when the worker stops, however it stops, and drops what waits (its
/// callers' answers close rather than wait forever).
struct CloseOnExit<'a>(&'a Shared);

impl Drop for CloseOnExit<'_> {
    fn drop(&mut self) {
        let mut lanes = self.0.lanes();
        lanes.closed = true;
        lanes.interactive.clear();
        lanes.background.clear();
    }
}

/// The next job and its lane, interactive requests first (job parts only with `parts`): `None`
/// at `until`, when the queue is closed, or when every sender is gone and nothing waits.
fn take(shared: &Shared, until: Option<Instant>, parts: bool) -> Option<(Job, Lane)> {
    let mut lanes = shared.lanes();
    loop {
        if lanes.closed {
            return None;
        }
        if let Some(job) = lanes.interactive.pop_front() {
            return Some((job, Lane::Interactive));
        }
        if parts {
            if let Some(job) = lanes.background.pop_front() {
                return Some((job, Lane::Background));
            }
        }
        // Nothing that may be taken waits, and nobody is left to queue more.
        if lanes.senders == 0 {
            return None;
        }
        lanes = match until {
            None => shared.ready.wait(lanes).unwrap_or_else(|p| p.into_inner()),
            Some(until) => {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return None;
                }
                shared.ready.wait_timeout(lanes, left).unwrap_or_else(|p| p.into_inner()).0
            }
        };
    }
}

/// Residues in `job`'s proteins.
fn residues(job: &Job) -> usize {
    job.items.iter().map(|(input, _)| input.protein.len()).sum()
}

/// The worker: until the queue closes or every sender is gone, gather a batch and run it. A
/// batch holds interactive requests up to the policy's protein budget and at most one job part.
fn run(predictor: &Predictor, forward: &PredictOptions, policy: BatchPolicy, shared: &Shared, counters: &Counters) {
    let _close = CloseOnExit(shared);
    while let Some((first, lane)) = take(shared, None, true) {
        let mut part = (lane == Lane::Background).then(|| (first.items.len(), residues(&first)));
        let mut interactive = lane == Lane::Interactive;
        let mut proteins = first.items.len();
        let mut batch = vec![first];
        let until = Instant::now() + policy.window;
        while proteins < policy.max_proteins {
            match take(shared, Some(until), part.is_none()) {
                Some((job, lane)) => {
                    proteins += job.items.len();
                    match lane {
                        Lane::Interactive => interactive = true,
                        // Summed: the counters report all the job work a batch carried.
                        Lane::Background => {
                            let (p, r) = part.unwrap_or((0, 0));
                            part = Some((p + job.items.len(), r + residues(&job)));
                        }
                    }
                    batch.push(job);
                }
                None => break,
            }
        }
        if let Some((part_proteins, part_residues)) = part {
            counters.most_job_proteins.fetch_max(part_proteins as u64, Ordering::Relaxed);
            counters.most_job_residues.fetch_max(part_residues as u64, Ordering::Relaxed);
            if interactive {
                counters.most_job_proteins_beside_interactive.fetch_max(part_proteins as u64, Ordering::Relaxed);
            }
        }
        counters.queued.fetch_sub(batch.len() as u64, Ordering::Relaxed);
        let now = Instant::now();
        let (live, late): (Vec<Job>, Vec<Job>) =
            batch.into_iter().partition(|j| j.deadline > now && !j.reply.is_closed());
        counters.expired.fetch_add(late.len() as u64, Ordering::Relaxed);
        if live.is_empty() {
            continue;
        }
        run_batch(predictor, forward, live, counters);
    }
}

/// One shared prediction for `jobs`, each answered with its share.
fn run_batch(predictor: &Predictor, forward: &PredictOptions, jobs: Vec<Job>, counters: &Counters) {
    let items: Vec<(ProteinInput, PredictOptions)> = jobs.iter().flat_map(|j| j.items.iter().cloned()).collect();
    counters.batches.fetch_add(1, Ordering::Relaxed);
    // A panic in the model must not take the worker, and every later request, with it.
    let predicted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| predictor.predict_each(&items, forward)));
    let mut results: Vec<Result<Vec<DnaPrediction>, String>> = match predicted {
        Ok(Ok(predicted)) => {
            predicted.pass_sizes.iter().for_each(|&n| counters.pass_proteins.observe(n as f64));
            predicted.results.into_iter().map(|r| r.map_err(|e| e.to_string())).collect()
        }
        // Refused before any pass (the forward options): every protein gets it. A pass that
        // fails gives its error to its own proteins only (`predict_each`).
        Ok(Err(e)) => items.iter().map(|_| Err(e.to_string())).collect(),
        Err(_) => items.iter().map(|_| Err("the prediction failed inside the model".to_string())).collect(),
    };
    for job in jobs {
        let rest = results.split_off(job.items.len().min(results.len()));
        let mine = std::mem::replace(&mut results, rest);
        // A caller that gave up meanwhile has nobody to answer.
        let _ = job.reply.send(mine);
    }
}
