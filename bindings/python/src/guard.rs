//! What keeps the Python process in charge while this extension computes: a process forked after
//! the extension started its threads is refused with a clear error (the threads do not survive
//! `fork`, so the child would wait on them for ever), and long batches run in chunks with the GIL
//! released, Python's signal handlers run between chunks, so that Ctrl-C interrupts them.

use std::sync::atomic::{AtomicU32, Ordering};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

/// The process in which this extension started its threads (candle's and rayon's pools, started by
/// the first model load or computation, and never stopped); 0 before that.
static THREADS_STARTED_IN: AtomicU32 = AtomicU32::new(0);

/// Called before anything that may start or use the extension's threads (`what` names the call):
/// records this process as the one that owns them, or refuses to run in a child forked after the
/// parent started them. Only the forking thread survives `fork`, so the pools' threads are gone
/// in the child while their queues still wait for them: a call would hang instead of failing.
pub fn threads_here(what: &str) -> PyResult<()> {
    let pid = std::process::id();
    match THREADS_STARTED_IN.compare_exchange(0, pid, Ordering::SeqCst, Ordering::SeqCst) {
        Ok(_) => Ok(()),
        Err(owner) if owner == pid => Ok(()),
        Err(owner) => Err(PyRuntimeError::new_err(format!(
            "{what}: this process (pid {pid}) was forked after codon_ascend started its threads in process {owner}, \
             and threads do not survive fork, so the call would hang; use multiprocessing.get_context('spawn') \
             (or 'forkserver') for worker processes, or load models only in the children, never in the parent"
        ))),
    }
}

/// Run `run` over `items` in chunks of about `max_tokens` tokens (`tokens` gives an item's),
/// shortest items first as the library's own batches go, each chunk with the GIL released; before
/// each chunk Python's signal handlers run, so Ctrl-C raises `KeyboardInterrupt` once the chunk in
/// progress (about one forward pass) is done. After each chunk `progress`, when given, is called
/// with the items done so far and the total (`progress(done, total)`); an exception it raises
/// stops the batch. `run` gives one result per item of its chunk; the results come back in the
/// order of `items`.
pub fn in_chunks<I, R>(
    py: Python<'_>,
    items: &[I],
    tokens: impl Fn(&I) -> usize,
    max_tokens: usize,
    progress: Option<&Bound<'_, PyAny>>,
    run: impl Fn(&[I]) -> PyResult<Vec<R>> + Sync,
) -> PyResult<Vec<R>>
where
    I: Clone + Sync,
    R: Send,
{
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by_key(|&i| tokens(&items[i]));
    let mut chunks: Vec<&[usize]> = Vec::new();
    let (mut start, mut sum) = (0, 0usize);
    for (at, &i) in order.iter().enumerate() {
        let t = tokens(&items[i]);
        if at > start && sum.saturating_add(t) > max_tokens {
            chunks.push(&order[start..at]);
            (start, sum) = (at, 0);
        }
        sum = sum.saturating_add(t);
    }
    if start < order.len() {
        chunks.push(&order[start..]);
    }
    let mut out: Vec<Option<R>> = (0..items.len()).map(|_| None).collect();
    let mut done = 0;
    for chunk in chunks {
        py.check_signals()?;
        let chunk_items: Vec<I> = chunk.iter().map(|&i| items[i].clone()).collect();
        let results = py.detach(|| run(&chunk_items))?;
        if results.len() != chunk.len() {
            return Err(PyRuntimeError::new_err(format!(
                "internal error: {} results for a chunk of {} items",
                results.len(),
                chunk.len()
            )));
        }
        for (&i, r) in chunk.iter().zip(results) {
            out[i] = Some(r);
        }
        done += chunk.len();
        if let Some(progress) = progress {
            progress.call1((done, items.len()))?;
        }
    }
    out.into_iter()
        .map(|r| r.ok_or_else(|| PyRuntimeError::new_err("internal error: an item was not computed")))
        .collect()
}
