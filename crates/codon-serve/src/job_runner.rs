//! Batch jobs' scheduling: the loop that takes each job's parts in turn, runs a few at a time in
//! the queue's job lane, and saves their results. With a store that several servers share, it
//! also looks for the jobs the others accepted or cancelled, and for parts whose claims lapsed.
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tokio::task::AbortHandle;

use crate::api::{PredictRequest, ProteinResult};
use crate::batcher::{Job, Lane, Refused};
use crate::jobs::PartInput;
use crate::prepared::{job_limits, Prepared};
use crate::state::{AppState, JobEvent};

/// How long a part whose results could not be saved (the store unreachable) waits before it
/// tries again; its results are kept meanwhile.
const SAVE_RETRY: Duration = Duration::from_secs(1);

/// The jobs' parts, taken from each job in turn and run a few at a time (as many as the queue's
/// job lane holds, or as a shared store allows), until the server stops; then the parts still
/// waiting are withdrawn (the next start, or another server, resumes them) and those the model
/// has taken are finished and saved.
pub(crate) async fn schedule_jobs(
    state: Arc<AppState>,
    pending: Vec<String>,
    mut events: tokio::sync::mpsc::UnboundedReceiver<JobEvent>,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    // Each job with the index its next part starts from.
    let mut turns: VecDeque<(String, usize)> = pending.into_iter().map(|id| (id, 0)).collect();
    let mut running = tokio::task::JoinSet::new();
    // Each job's parts under way, to be dropped if it is cancelled.
    let mut under_way: HashMap<String, Vec<AbortHandle>> = HashMap::new();
    let sharing = state.jobs.sharing();
    let most = match sharing {
        Some(sharing) => state.queue.background_capacity().min(sharing.parts_in_flight.max(1)),
        None => state.queue.background_capacity(),
    };
    let bounds = state.config.job_part;
    // A shared store is looked at now and then: jobs accepted or cancelled by the other servers,
    // and parts whose claims lapsed (their server died), which a job's turn that reached its end
    // passed over.
    let mut poll = sharing.map(|sharing| {
        let mut poll = tokio::time::interval(sharing.poll);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        poll
    });
    let mut poll_failing = false;
    loop {
        if *stopped.borrow() {
            break;
        }
        if running.len() < most {
            if let Some((id, from)) = turns.pop_front() {
                let store = state.jobs.clone();
                let job = id.clone();
                match tokio::task::spawn_blocking(move || store.next_part(&job, from, bounds)).await {
                    Ok(Ok(Some(part))) => {
                        let next = part.first + part.proteins.len();
                        let handle = running.spawn(run_part(state.clone(), id.clone(), part, stopped.clone()));
                        let handles = under_way.entry(id.clone()).or_default();
                        handles.retain(|h| !h.is_finished());
                        handles.push(handle);
                        turns.push_back((id, next));
                    }
                    // Every part of the job has run or runs (or it was cancelled meanwhile).
                    Ok(Ok(None)) => {
                        if let Some(handles) = under_way.get_mut(&id) {
                            handles.retain(|h| !h.is_finished());
                        }
                    }
                    // The store is unreachable for now: the job waits for the next look at
                    // the store (a shared store's poll), not failed.
                    Ok(Err(e)) if e.is_unavailable() => eprintln!("codon-serve: job {id}: {e}"),
                    Ok(Err(e)) => fail_job(&state, id, e.to_string()).await,
                    Err(_) => fail_job(&state, id, "reading the job's next part failed".into()).await,
                }
                under_way.retain(|_, handles| !handles.is_empty());
                continue;
            }
        }
        tokio::select! {
            event = events.recv() => match event {
                Some(JobEvent::New(id)) => {
                    if !turns.iter().any(|(job, _)| *job == id) {
                        turns.push_back((id, 0));
                    }
                }
                Some(JobEvent::Cancelled(id)) => {
                    turns.retain(|(job, _)| *job != id);
                    // A part waiting in the queue is dropped unrun (its answer's receiver goes);
                    // one the model runs is finished, and its results not saved.
                    for handle in under_way.remove(&id).unwrap_or_default() {
                        handle.abort();
                    }
                }
                None => break,
            },
            Some(_) = running.join_next(), if !running.is_empty() => {
                // Finished parts' handles go (at most the lane's capacity are under way).
                under_way.retain(|_, handles| {
                    handles.retain(|h| !h.is_finished());
                    !handles.is_empty()
                });
            }
            () = tick(poll.as_mut()) => {
                let store = state.jobs.clone();
                match tokio::task::spawn_blocking(move || store.unfinished()).await {
                    Ok(Ok(jobs)) => {
                        poll_failing = false;
                        take_turns(&jobs, &mut turns, &mut under_way);
                    }
                    Ok(Err(e)) if !poll_failing => {
                        poll_failing = true;
                        eprintln!("codon-serve: looking for jobs: {e}");
                    }
                    _ => {}
                }
            }
            changed = stopped.changed() => if changed.is_err() { break },
        }
    }
    state.queue.withdraw_background();
    while running.join_next().await.is_some() {}
}

/// The next tick of a shared store's poll; never without one.
async fn tick(poll: Option<&mut tokio::time::Interval>) {
    match poll {
        Some(poll) => {
            poll.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// What a look at a shared store found: the running `jobs`, oldest first. Jobs no longer running
/// (cancelled, failed or finished elsewhere) lose their turns and their parts under way here;
/// running jobs without a turn get one from their first protein (a part whose claim lapsed is
/// then found).
fn take_turns(
    jobs: &[String],
    turns: &mut VecDeque<(String, usize)>,
    under_way: &mut HashMap<String, Vec<AbortHandle>>,
) {
    let running: HashSet<&str> = jobs.iter().map(String::as_str).collect();
    turns.retain(|(id, _)| running.contains(id.as_str()));
    under_way.retain(|id, handles| {
        if running.contains(id.as_str()) {
            return true;
        }
        handles.iter().for_each(AbortHandle::abort);
        false
    });
    for id in jobs {
        if !turns.iter().any(|(job, _)| job == id) {
            turns.push_back((id.clone(), 0));
        }
    }
}

/// Job `id` stopped for good with `why` (logged when even that cannot be saved).
async fn fail_job(state: &Arc<AppState>, id: String, why: String) {
    let store = state.jobs.clone();
    let failed = tokio::task::spawn_blocking(move || store.fail(&id, &why).map_err(|e| format!("job {id}: {e}"))).await;
    if let Ok(Err(e)) = failed {
        eprintln!("codon-serve: {e}");
    }
}

/// A part of job `id`: through the queue's job lane (waiting while it is full), finished as a
/// predict request's answers are, and saved. At a stop a part not yet taken by the model is
/// left for the next start.
async fn run_part(state: Arc<AppState>, id: String, input: PartInput, stopped: tokio::sync::watch::Receiver<bool>) {
    let first = input.first;
    let options = match serde_json::from_value(input.options) {
        Ok(options) => options,
        Err(e) => return fail_job(&state, id, format!("the saved options: {e}")).await,
    };
    let request = PredictRequest { proteins: input.proteins.into_iter().map(Into::into).collect(), options };
    let working = state.clone();
    let prepared = tokio::task::spawn_blocking(move || {
        Prepared::new(&working, request, job_limits(&working.config), true).map_err(|_| ())
    })
    .await;
    let Ok(Ok(prepared)) = prepared else {
        let why = "this server's limits refuse the job's proteins (they changed since it was accepted)";
        return fail_job(&state, id, why.into()).await;
    };
    let results = loop {
        if prepared.items.is_empty() {
            break Vec::new();
        }
        if *stopped.borrow() {
            return;
        }
        let (reply, answer) = oneshot::channel();
        let deadline = Instant::now() + state.config.request_timeout;
        match state.queue.submit_to(Lane::Background, Job { items: prepared.items.clone(), reply, deadline }) {
            // A part dropped unrun (it waited past its deadline, or a stop withdrew it) is sent
            // again unless the server is stopping.
            Ok(()) => match answer.await {
                Ok(results) => break results,
                Err(_) => continue,
            },
            Err(Refused::Full) => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(Refused::Closed) => return,
        }
    };
    let Ok(results) = prepared.finish(&state, results).await else {
        return fail_job(&state, id, "finishing the predictions failed".into()).await;
    };
    save_part(&state, id, first, Arc::new(results), stopped).await;
}

/// Save a part's results, counted in the metrics; while the store is unreachable they are kept
/// and tried again until the server stops (then the part runs again elsewhere or at the next
/// start).
async fn save_part(
    state: &Arc<AppState>,
    id: String,
    first: usize,
    results: Arc<Vec<ProteinResult>>,
    stopped: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        let (store, job, saving) = (state.jobs.clone(), id.clone(), results.clone());
        match tokio::task::spawn_blocking(move || store.record_part(&job, first, &saving)).await {
            Ok(Ok(recorded)) => {
                let counters = &state.counters;
                counters.job_results_saved.fetch_add(recorded.saved as u64, Ordering::Relaxed);
                counters.job_results_repeated.fetch_add(recorded.already_saved as u64, Ordering::Relaxed);
                return;
            }
            Ok(Err(e)) if e.is_unavailable() => {
                if *stopped.borrow() {
                    eprintln!("codon-serve: job {id}: {e}; the part is left to run again");
                    return;
                }
                eprintln!("codon-serve: job {id}: {e}; the part's results are kept and saved again");
                tokio::time::sleep(SAVE_RETRY).await;
            }
            Ok(Err(e)) => return fail_job(state, id, e.to_string()).await,
            Err(_) => return fail_job(state, id, "saving the results failed".into()).await,
        }
    }
}
