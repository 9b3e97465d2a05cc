//! Dynamic batching: predict jobs wait in a bounded queue; the model's worker thread takes the
//! first, gathers whatever else arrives within a short window (up to a protein budget), runs them
//! through shared forward passes, and answers each job with its own results. A job whose caller
//! gave up is dropped before it runs.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
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
    /// Proteins predicted.
    pub proteins: AtomicU64,
    /// Jobs in the queue or being gathered.
    pub queued: AtomicU64,
    /// Jobs dropped because their caller had given up.
    pub expired: AtomicU64,
    /// Proteins per forward pass (its count: the passes run, one per length bucket).
    pub pass_proteins: Histogram,
}

impl Default for Counters {
    fn default() -> Self {
        Self {
            requests: AtomicU64::default(),
            jobs: AtomicU64::default(),
            batches: AtomicU64::default(),
            proteins: AtomicU64::default(),
            queued: AtomicU64::default(),
            expired: AtomicU64::default(),
            pass_proteins: Histogram::new(histogram::PROTEINS),
        }
    }
}

/// How the worker gathers jobs.
#[derive(Clone, Copy, Debug)]
pub struct BatchPolicy {
    /// How long the first job of a batch waits for others.
    pub window: Duration,
    /// Most proteins in one batch.
    pub max_proteins: usize,
}

/// The sending side of the queue.
#[derive(Clone)]
pub struct Queue {
    sender: SyncSender<Job>,
    counters: Arc<Counters>,
}

/// Why a job was not queued.
#[derive(Debug)]
pub enum Refused {
    /// The queue is full.
    Full,
    /// The worker has stopped.
    Closed,
}

impl Queue {
    /// Queue `job`, or say why not at once.
    pub fn submit(&self, job: Job) -> Result<(), Refused> {
        self.counters.queued.fetch_add(1, Ordering::Relaxed);
        self.sender.try_send(job).map_err(|e| {
            self.counters.queued.fetch_sub(1, Ordering::Relaxed);
            match e {
                TrySendError::Full(_) => Refused::Full,
                TrySendError::Disconnected(_) => Refused::Closed,
            }
        })
    }
}

/// Start the worker thread that owns `predictor`, with a queue of `capacity` jobs.
pub fn start(
    predictor: Predictor,
    forward: PredictOptions,
    policy: BatchPolicy,
    capacity: usize,
    counters: Arc<Counters>,
) -> std::io::Result<(Queue, std::thread::JoinHandle<()>)> {
    let (sender, receiver) = std::sync::mpsc::sync_channel(capacity.max(1));
    let worker_counters = counters.clone();
    let handle = std::thread::Builder::new()
        .name("codon-serve model".into())
        .spawn(move || run(&predictor, &forward, policy, &receiver, &worker_counters))?;
    Ok((Queue { sender, counters }, handle))
}

/// The worker: until every sender is gone, gather a batch and run it.
fn run(
    predictor: &Predictor,
    forward: &PredictOptions,
    policy: BatchPolicy,
    jobs: &Receiver<Job>,
    counters: &Counters,
) {
    while let Ok(first) = jobs.recv() {
        let mut batch = vec![first];
        let mut proteins = batch[0].items.len();
        let until = Instant::now() + policy.window;
        while proteins < policy.max_proteins {
            let left = until.saturating_duration_since(Instant::now());
            match jobs.recv_timeout(left) {
                Ok(job) => {
                    proteins += job.items.len();
                    batch.push(job);
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
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
    counters.proteins.fetch_add(items.len() as u64, Ordering::Relaxed);
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
