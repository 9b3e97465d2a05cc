//! Batch jobs' scheduling: the loop that takes each job's parts in turn, runs a few at a time in
//! the queue's job lane, and saves their results.
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::api::PredictRequest;
use crate::batcher::{Job, Lane, Refused};
use crate::jobs::PartInput;
use crate::prepared::{job_limits, Prepared};
use crate::state::{AppState, JobEvent};

/// The jobs' parts, taken from each job in turn and run a few at a time (as many as the queue's
/// job lane holds), until the server stops; then the parts still waiting are withdrawn (the next
/// start resumes them) and those the model has taken are finished and saved.
pub(crate) async fn schedule_jobs(
    state: Arc<AppState>,
    pending: Vec<String>,
    mut events: tokio::sync::mpsc::UnboundedReceiver<JobEvent>,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    use std::collections::{HashMap, VecDeque};
    // Each job with the index its next part starts from.
    let mut turns: VecDeque<(String, usize)> = pending.into_iter().map(|id| (id, 0)).collect();
    let mut running = tokio::task::JoinSet::new();
    // Each job's parts under way, to be dropped if it is cancelled.
    let mut under_way: HashMap<String, Vec<tokio::task::AbortHandle>> = HashMap::new();
    let most = state.queue.background_capacity();
    let bounds = state.config.job_part;
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
                    Ok(Err(e)) => fail_job(&state, id, e.to_string()).await,
                    Err(_) => fail_job(&state, id, "reading the job's next part failed".into()).await,
                }
                under_way.retain(|_, handles| !handles.is_empty());
                continue;
            }
        }
        tokio::select! {
            event = events.recv() => match event {
                Some(JobEvent::New(id)) => turns.push_back((id, 0)),
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
            changed = stopped.changed() => if changed.is_err() { break },
        }
    }
    state.queue.withdraw_background();
    while running.join_next().await.is_some() {}
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
    let store = state.jobs.clone();
    let job = id.clone();
    match tokio::task::spawn_blocking(move || store.record_part(&job, first, &results)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => fail_job(&state, id, e.to_string()).await,
        Err(_) => fail_job(&state, id, "saving the results failed".into()).await,
    }
}
