//! Starting and stopping the server: the HTTP thread with its runtime, the routes, and the
//! jobs' scheduler beside them ([`RunningServer`]). The settings are in [`crate::config`], the
//! handlers in [`crate::handlers`].
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::DefaultBodyLimit;
use axum::http::{header, HeaderValue};
use axum::routing::{get, post};
use axum::Router;
use codon_model::Predictor;

use crate::batcher::{self, Counters};
pub use crate::config::{ServeConfig, ServeError};
use crate::handlers::{cancel_job, create_job, enzymes, evaluate, health, job, metrics, organisms, predict};
use crate::histogram::{Histogram, SECONDS};
use crate::job_runner::schedule_jobs;
use crate::jobs::{Jobs, JobsDb, PostgresJobStore, SqliteJobStore};
use crate::metrics::DeviceMemory;
use crate::state::{AppState, JobEvent};

/// How a server stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped {
    /// Batch jobs still unfinished in the jobs database: the next start on it resumes them (in
    /// a shared store, every replica's running jobs, which the others go on with).
    pub jobs_left: usize,
}

/// A server running on threads of its own.
pub struct RunningServer {
    /// The address it listens on.
    pub addr: SocketAddr,
    stop: Option<tokio::sync::watch::Sender<bool>>,
    /// The HTTP thread's end: what it served, sent as it stops.
    ended: Option<std::sync::Mutex<std::sync::mpsc::Receiver<Result<(), ServeError>>>>,
    /// The jobs, counted at the stop.
    store: Jobs,
    /// How long a stop may take past the grace before the threads are left behind.
    grace: Duration,
}

impl RunningServer {
    /// Bind `config`'s address and serve `predictor` until [`RunningServer::stop`] (or a signal the
    /// caller turns into one).
    pub fn start(predictor: Predictor, config: ServeConfig) -> Result<Self, ServeError> {
        Self::start_with(predictor, config, None)
    }

    /// [`RunningServer::start`], with `memory` reading the model's device memory for
    /// `/metrics` (the caller that opened the device knows how; none: no memory gauges).
    pub fn start_with(
        predictor: Predictor,
        config: ServeConfig,
        memory: Option<Arc<dyn DeviceMemory>>,
    ) -> Result<Self, ServeError> {
        config.validate()?;
        // The jobs database first: a path that cannot hold it is one error before anything runs.
        let store: Jobs = match &config.jobs_db {
            Some(JobsDb::File(path)) => Arc::new(SqliteJobStore::open(path, config.jobs_db_max_bytes)?),
            Some(JobsDb::Postgres(target)) => {
                Arc::new(PostgresJobStore::open(target, config.jobs_db_max_bytes, config.jobs_lease)?)
            }
            None => Arc::new(SqliteJobStore::temporary(config.jobs_db_max_bytes)?),
        };
        // Jobs a killed or stopped server left are resumed where they stopped.
        store.expire()?;
        let pending = store.unfinished()?;
        let addr = SocketAddr::new(config.host, config.port);
        let listener = std::net::TcpListener::bind(addr).map_err(|source| ServeError::Bind { addr, source })?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let limits = crate::net::ConnLimits::of(&config);
        let grace = config.stop_grace;
        let counters = Arc::new(Counters::default());
        let organisms = predictor.organisms().clone();
        let (queue, worker) =
            batcher::start(predictor, config.forward.clone(), config.batch, config.queue_capacity, counters.clone())?;
        let (job_events, jobs_in) = tokio::sync::mpsc::unbounded_channel();
        let state = Arc::new(AppState {
            queue,
            counters,
            organisms,
            config,
            latency: Histogram::new(SECONDS),
            predicted: Default::default(),
            jobs: store.clone(),
            job_events,
            memory,
            bands: Default::default(),
        });
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let (end, ended) = std::sync::mpsc::channel();
        std::thread::Builder::new().name("codon-serve http".into()).spawn(move || {
            let served = serve_until_stopped(state, listener, pending, jobs_in, stopped, addr, limits, grace, worker);
            let _ = end.send(served);
        })?;
        Ok(Self { addr, stop: Some(stop), ended: Some(std::sync::Mutex::new(ended)), store, grace })
    }

    /// Stop accepting connections, finish the requests in flight and the batch jobs' parts the
    /// model has taken (saved), then return with the number of jobs left to resume.
    pub fn stop(mut self) -> Result<Stopped, ServeError> {
        self.finish()
    }

    /// Serve until SIGINT or SIGTERM, then [`RunningServer::stop`].
    pub fn stop_on_signal(self) -> Result<Stopped, ServeError> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        runtime.block_on(async {
            #[cfg(unix)]
            {
                let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            #[cfg(not(unix))]
            tokio::signal::ctrl_c().await?;
            Ok::<(), std::io::Error>(())
        })?;
        self.stop()
    }

    fn finish(&mut self) -> Result<Stopped, ServeError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
        }
        let Some(ended) = self.ended.take() else { return Ok(Stopped { jobs_left: 0 }) };
        // The HTTP thread keeps to the grace by itself; this bound holds even if it cannot (a
        // handler stuck outside the runtime's control): the threads are then left behind, and
        // with them the parts they ran, which the next start runs again.
        let ended = ended.into_inner().unwrap_or_else(|p| p.into_inner());
        match ended.recv_timeout(self.grace + LEFT_BEHIND_AFTER + Duration::from_secs(2)) {
            Ok(served) => served?,
            Err(_) => {
                eprintln!("codon-serve: the server did not stop within {:?}; its threads were left behind", self.grace)
            }
        }
        Ok(Stopped { jobs_left: self.store.unfinished()?.len() })
    }
}

/// How long past the grace a stop waits for the HTTP thread and the model's worker before it
/// leaves them behind.
const LEFT_BEHIND_AFTER: Duration = Duration::from_secs(3);

/// The HTTP thread: the runtime, the router and the jobs' scheduler until a stop, then a stop
/// bounded by `grace` (the model's worker finishes its batch within it, or is left behind).
#[allow(clippy::too_many_arguments)]
fn serve_until_stopped(
    state: Arc<AppState>,
    listener: std::net::TcpListener,
    pending: Vec<String>,
    jobs_in: tokio::sync::mpsc::UnboundedReceiver<JobEvent>,
    stopped: tokio::sync::watch::Receiver<bool>,
    addr: SocketAddr,
    limits: crate::net::ConnLimits,
    grace: Duration,
    worker: std::thread::JoinHandle<()>,
) -> Result<(), ServeError> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let queue = state.queue.clone();
    let store = state.jobs.clone();
    let served = runtime.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let scheduler = tokio::spawn(schedule_jobs(state.clone(), pending, jobs_in, stopped.clone()));
        let serve = crate::net::serve(listener, router(state, addr), limits, stopped.clone());
        // On a stop the scheduler finishes the parts the worker has taken and saves them, and
        // the requests in flight are answered, within the grace; a client that never finishes
        // its request cannot hold the stop.
        let mut grace_clock = stopped;
        let deadline = async move {
            let _ = grace_clock.wait_for(|stop| *stop).await;
            tokio::time::sleep(grace).await;
        };
        let all = async move {
            let (served, _) = tokio::join!(serve, scheduler);
            served
        };
        tokio::select! {
            served = all => served,
            () = deadline => Ok(()),
        }
    });
    // Nothing more runs: what waits is dropped, and the worker exits after its batch.
    queue.close();
    // Parts this server claimed in a shared store and did not finish go to the others now, not
    // when their leases end (a part the worker still runs may yet be saved: it counts once).
    if let Err(e) = store.release_claims() {
        eprintln!("codon-serve: {e}");
    }
    drop(queue);
    // Handlers still running go with the runtime (blocking tasks are left to finish alone).
    runtime.shutdown_timeout(Duration::from_millis(500));
    // The worker's batch may be long (a big predict request): it is left behind rather than
    // waited for past the grace (the process exits without it; the parts it ran run again).
    let until = Instant::now() + LEFT_BEHIND_AFTER;
    while !worker.is_finished() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    if worker.is_finished() {
        let _ = worker.join();
    }
    served?;
    Ok(())
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

fn router(state: Arc<AppState>, addr: SocketAddr) -> Router {
    let guard = Arc::new(crate::net::Guard::new(&state.config, addr));
    let any_origin = state.config.cors_origins.iter().any(|o| o.trim() == "*");
    let origins: Vec<HeaderValue> = state.config.cors_origins.iter().filter_map(|o| o.trim().parse().ok()).collect();
    let router = Router::new()
        .route("/", get(crate::page::index))
        .route("/health", get(health))
        .route("/v1/organisms", get(organisms))
        .route("/v1/enzymes", get(enzymes))
        .route("/v1/predict", post(predict))
        .route("/v1/evaluate", post(evaluate))
        .route("/v1/jobs", post(create_job))
        .route("/v1/jobs/{id}", get(job).delete(cancel_job))
        .route("/metrics", get(metrics))
        // The handlers read their bodies with the limit, after the API key.
        .layer(DefaultBodyLimit::disable())
        // Inside CORS, so that an allowed origin's page can read the guard's refusals.
        .layer(axum::middleware::from_fn_with_state(guard, crate::net::guard))
        .with_state(state);
    if origins.is_empty() {
        return router;
    }
    let allowed = if any_origin { tower_http::cors::AllowOrigin::any() } else { origins.into() };
    router.layer(
        tower_http::cors::CorsLayer::new()
            .allow_origin(allowed)
            .allow_methods([axum::http::Method::GET, axum::http::Method::POST, axum::http::Method::DELETE])
            .allow_headers([header::CONTENT_TYPE, header::AUTHORIZATION]),
    )
}
