//! CodonTransformer as an HTTP service: the model loaded once, a JSON API on 127.0.0.1, and
//! concurrent predict requests batched into shared forward passes (crate `codon-serve`).
//! SIGINT or SIGTERM stops it after the requests in flight; batch jobs are kept in an SQLite file
//! (`--jobs-db`), and the next start resumes the unfinished ones; `--jobs-db postgres://…` shares
//! them between replicas.
//!
//! ```text
//! codon serve --model adibvafa/CodonTransformer --port 8080
//! curl -s localhost:8080/v1/predict -H 'Content-Type: application/json' -d '{"proteins": [{"protein": "MALWMRLLPLL", "organism": "Escherichia coli general"}]}'
//! ```
//!
//! The page at http://127.0.0.1:8080/ designs a gene in a browser; `--reference train.jsonl` (or
//! `--codon-table FILE`) adds each sequence's metrics.
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::cli::ModelRunArgs;
use clap::Parser;
use codon_model::predict::max_padding_fraction_on;
use codon_model::PredictOptions;
use codon_serve::batcher::BatchPolicy;
use codon_serve::jobs::{JobsDb, PartBounds};
use codon_serve::{DeviceMemory, MemoryReading, RunningServer, ServeConfig};

use crate::commands::common::reference_args;

/// Reference sequences kept per organism for its %MinMax band.
const BAND_SEQUENCES: usize = 200;

/// The design service.
#[derive(Parser)]
pub struct Args {
    #[command(flatten)]
    run: ModelRunArgs,
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    /// The port.
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// A bearer token every request but /health must carry (default: CODON_API_KEY, if set).
    #[arg(long)]
    api_key: Option<String>,
    /// How long a request waits for others to share its forward pass, in milliseconds.
    #[arg(long, default_value_t = 5)]
    batch_window_ms: u64,
    /// Most requests waiting; past it the answer is 503 with Retry-After.
    #[arg(long, default_value_t = 64)]
    queue: usize,
    /// Most proteins in one request.
    #[arg(long, default_value_t = 256)]
    max_proteins: usize,
    /// Most residues in one protein.
    #[arg(long, default_value_t = 10_000)]
    max_residues: usize,
    /// Codon statistics for the metrics (optional): every sequence then carries its CSI, GC,
    /// CFD and %MinMax.
    #[command(flatten)]
    reference: reference_args::ReferenceArgs,
    /// An origin a browser may call the API from, such as https://lab.example.org (repeatable;
    /// CORS is off without it).
    #[arg(long, value_name = "ORIGIN")]
    cors: Vec<String>,
    /// A DNS name the server answers to besides its address, such as design.lab.example.org
    /// (repeatable): requests naming any other host are refused (against DNS rebinding).
    #[arg(long, value_name = "NAME")]
    host_name: Vec<String>,
    /// Where batch jobs are kept, so that a restart resumes them: an SQLite file (default:
    /// $XDG_DATA_HOME/codon/jobs.sqlite3, else ~/.local/share/codon/jobs.sqlite3; one server per
    /// file), or a postgres://USER@HOST:PORT/DB URL that several replicas share (libpq's PG*
    /// variables and ~/.pgpass fill in what it leaves out; keep the password there, not here).
    #[arg(long, value_name = "PATH|URL")]
    jobs_db: Option<PathBuf>,
    /// How long a replica's claim on a part of a job lasts in a shared (PostgreSQL) jobs
    /// database, renewed while the part runs: a replica that dies leaves its parts to the
    /// others this long after.
    #[arg(long, value_name = "SECONDS", default_value_t = codon_serve::jobs::LEASE.as_secs())]
    jobs_lease_secs: u64,
    /// The jobs database's size cap in MiB: past it the oldest finished jobs are dropped, and a
    /// job that still does not fit is refused (503).
    #[arg(long, value_name = "MIB", default_value_t = codon_serve::jobs::MAX_DB_BYTES >> 20)]
    jobs_db_max_mb: u64,
    /// Most proteins in one part of a batch job: a predict request waits for at most one part.
    #[arg(long, value_name = "N", default_value_t = codon_serve::jobs::PART)]
    job_part_proteins: usize,
    /// Most residues in one part of a batch job (a longer protein is a part of its own).
    #[arg(long, value_name = "N", default_value_t = codon_serve::jobs::PART_RESIDUES)]
    job_part_residues: usize,
}

/// Run the command.
pub fn run(args: Args) -> anyhow::Result<()> {
    // A key, origin or name that cannot work is one line now, not after the model loads.
    let checked = ServeConfig {
        api_key: args.api_key.clone().or_else(|| std::env::var("CODON_API_KEY").ok().filter(|k| !k.is_empty())),
        cors_origins: args.cors.clone(),
        allowed_hosts: args.host_name.clone(),
        job_part: PartBounds { proteins: args.job_part_proteins, residues: args.job_part_residues },
        jobs_lease: Duration::from_secs(args.jobs_lease_secs),
        ..ServeConfig::default()
    };
    checked.validate()?;
    // A URL's syntax is checked before the model loads; its password is never shown.
    let jobs_db = match args.jobs_db.as_deref() {
        Some(value) => JobsDb::parse(value.as_os_str())?,
        None => match codon_serve::jobs::default_db_path() {
            Some(path) => JobsDb::File(path),
            None => anyhow::bail!("no data folder for the jobs database (HOME is not set): give --jobs-db PATH"),
        },
    };
    let device = args.run.device.open()?;
    let predictor = crate::predictor::open_predictor(args.run.model.as_deref(), None, &device, args.run.dtype.into())?;
    // The first sequences of each organism are kept for its %MinMax band (a bounded sample).
    let kept = std::cell::RefCell::new(std::collections::HashMap::<u32, usize>::new());
    let keep = |organism: u32| {
        let mut kept = kept.borrow_mut();
        let n = kept.entry(organism).or_default();
        *n += 1;
        *n <= BAND_SEQUENCES
    };
    let reference = match args.reference.paths().next() {
        Some(_) => Some(Arc::new(args.reference.load(keep)?)),
        None => None,
    };
    let defaults = ServeConfig::default();
    let config = ServeConfig {
        host: args.host,
        port: args.port,
        api_key: checked.api_key,
        queue_capacity: args.queue,
        max_proteins: args.max_proteins,
        max_residues: args.max_residues,
        batch: BatchPolicy { window: Duration::from_millis(args.batch_window_ms), ..defaults.batch },
        forward: PredictOptions { max_padding_fraction: max_padding_fraction_on(&device), ..Default::default() },
        reference,
        cors_origins: checked.cors_origins,
        allowed_hosts: checked.allowed_hosts,
        jobs_db: Some(jobs_db.clone()),
        jobs_lease: checked.jobs_lease,
        jobs_db_max_bytes: args.jobs_db_max_mb.saturating_mul(1 << 20),
        job_part: checked.job_part,
        ..defaults
    };
    let server = RunningServer::start_with(predictor, config, Some(Arc::new(NpuMemory(device.clone()))))?;
    crate::errln!(
        "serving {} on http://{} (jobs in {}; SIGINT or SIGTERM stops it)",
        args.run.model.as_deref().map_or(codon_model::hub::DEFAULT_MODEL.into(), |m| m.display().to_string()),
        server.addr,
        jobs_db
    );
    let stopped = server.stop_on_signal()?;
    match jobs_db {
        JobsDb::Postgres(_) => {
            crate::errln!(
                "stopped: {} batch jobs running in the shared database for the other replicas",
                stopped.jobs_left
            )
        }
        JobsDb::File(_) => crate::errln!("stopped: {} batch jobs left to resume at the next start", stopped.jobs_left),
    }
    Ok(())
}

/// An NPU's memory for `/metrics` (`aclrtGetMemInfo`: what the driver has handed out, the
/// allocator's cache included, and the total); nothing on other devices.
struct NpuMemory(candle_core::Device);

impl DeviceMemory for NpuMemory {
    fn read(&self) -> Option<MemoryReading> {
        let npu = candle_ascend::ascend_device(&self.0)?;
        let (free, total) = npu.memory_info().ok()?;
        Some(MemoryReading { device: npu.name(), free: free as u64, total: total as u64 })
    }
}
