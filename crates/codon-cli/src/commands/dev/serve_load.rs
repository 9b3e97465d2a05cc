//! A bounded load test of the design service on loopback: `--clients` concurrent clients send
//! `--requests` predict requests each, one protein of 100–600 residues per request, and the
//! run reports throughput, p50/p99 latency, gathered batches, forward passes, errors and resident memory, beside
//! the same proteins through `predict --input`'s batch prediction in this process.
//!
//! ```text
//! cargo run --release -- dev serve-load --clients 8 --requests 50
//! ```
//! Without `--model` the model is CodonTransformer's size with random weights (the time is the
//! same as the published model's; the DNA is not).
use crate::cli::{ModelRunArgs, SeedArg};
use std::time::{Duration, Instant};

use crate::outln;
use clap::Parser;
use codon_model::bigbird::{init_weights, load_model, BigBirdConfig, BigBirdForMaskedLM};
use codon_model::{OrganismRef, OrganismTable, PredictOptions, Predictor, ProteinInput};
use codon_serve::{RunningServer, ServeConfig};

/// The load test.
#[derive(Parser)]
pub struct Args {
    /// Without one: random weights of CodonTransformer's size.
    #[command(flatten)]
    run: ModelRunArgs,
    /// Concurrent clients.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Requests per client.
    #[arg(long, default_value_t = 50)]
    requests: usize,
    #[command(flatten)]
    seed: SeedArg<1>,
    /// Most padding per forward pass, for both sides.
    #[command(flatten)]
    max_padding: super::MaxPadding,
    /// Run the server's side first and the batch prediction after it.
    #[arg(long)]
    served_first: bool,
}

/// This process's resident memory, MiB (Linux).
fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// `n` proteins of 100–600 residues from a fixed-seed generator (SplitMix64).
fn proteins(n: usize, seed: u64) -> Vec<String> {
    let mut state = seed;
    let mut next = move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    const AMINO: &[u8] = b"ACDEFGHIKLMNPQRSTVWY";
    (0..n)
        .map(|_| {
            let len = 100 + (next() % 501) as usize;
            let body: String = (1..len).map(|_| AMINO[(next() % 20) as usize] as char).collect();
            format!("M{body}")
        })
        .collect()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted.get(((sorted.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or(f64::NAN)
}

/// Run the command.
pub fn run(args: Args) -> anyhow::Result<()> {
    let device = args.run.device.open()?;
    codon_ops::malloc_tuning::retain_freed_memory();
    let predictor = || -> anyhow::Result<Predictor> {
        let (model, organisms) = match args.run.model.as_deref() {
            Some(spec) => {
                let dir = codon_model::hub::resolve_model(spec)?;
                (load_model(&dir, None, &device, args.run.dtype.into())?, OrganismTable::for_model(&dir)?)
            }
            None => {
                let config = BigBirdConfig::default();
                let weights = init_weights(&config, 0, &device, args.run.dtype.into())?;
                (BigBirdForMaskedLM::from_named(config, weights)?, OrganismTable::builtin())
            }
        };
        Ok(Predictor::with_organisms(model, organisms)?)
    };
    let forward = PredictOptions { max_padding_fraction: args.max_padding.on(&device), ..Default::default() };
    let total = args.clients * args.requests;
    let proteins = proteins(total, args.seed.value);
    let items: Vec<ProteinInput> = proteins
        .iter()
        .map(|p| ProteinInput { protein: p.clone(), organism: OrganismRef::Id(51), known_dna: None })
        .collect();

    // The same proteins as `predict --input` runs them: one batch prediction, before the server
    // or after it (machines drift: swapping the order shows by how much).
    let batch_predict = |predictor: &Predictor| -> anyhow::Result<f64> {
        let start = Instant::now();
        for result in predictor.predict_batch_with_progress(&items, &forward, &mut |_| {})? {
            result?;
        }
        Ok(start.elapsed().as_secs_f64())
    };
    let alone = predictor()?;
    let mut batch_s = if args.served_first { 0.0 } else { batch_predict(&alone)? };

    let forward_padding = forward.max_padding_fraction;
    let server = RunningServer::start(
        predictor()?,
        ServeConfig { port: 0, forward: forward.clone(), ..ServeConfig::default() },
    )?;
    let url = format!("http://{}/v1/predict", server.addr);
    let rss_start = rss_mib();
    let start = Instant::now();
    let per_client: Vec<(Vec<f64>, usize, f64)> = std::thread::scope(|scope| {
        let handles: Vec<_> = proteins
            .chunks(args.requests)
            .map(|mine| {
                let url = &url;
                scope.spawn(move || {
                    let (mut latencies, mut errors, mut rss_mid) = (Vec::new(), 0, 0.0);
                    for (i, protein) in mine.iter().enumerate() {
                        let body = format!(r#"{{"proteins": [{{"protein": "{protein}", "organism": 51}}]}}"#);
                        let sent = Instant::now();
                        let answer = ureq::post(url)
                            .timeout(Duration::from_secs(600))
                            .set("Content-Type", "application/json")
                            .send_string(&body)
                            .ok()
                            .and_then(|r| r.into_string().ok());
                        let ok = answer.is_some_and(|text| text.contains("\"dna\"") && !text.contains("\"error\""));
                        latencies.push(sent.elapsed().as_secs_f64());
                        errors += usize::from(!ok);
                        if i == mine.len() / 2 {
                            rss_mid = rss_mib();
                        }
                    }
                    (latencies, errors, rss_mid)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_default()).collect()
    });
    let served_s = start.elapsed().as_secs_f64();
    let rss_end = rss_mib();
    let metrics = ureq::get(&format!("http://{}/metrics", server.addr)).call()?.into_string()?;
    let counter = |name: &str| -> u64 {
        metrics.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok()).unwrap_or(0)
    };
    let (batches, passes) = (counter("codon_gathered_batches_total"), counter("codon_forward_passes_total"));
    server.stop()?;
    if args.served_first {
        batch_s = batch_predict(&alone)?;
    }
    let mut latencies: Vec<f64> = per_client.iter().flat_map(|(l, _, _)| l.iter().copied()).collect();
    latencies.sort_by(f64::total_cmp);
    let errors: usize = per_client.iter().map(|(_, e, _)| e).sum();
    let rss_mid = per_client.iter().map(|(_, _, m)| *m).fold(0.0, f64::max);
    let (served, batched) = (total as f64 / served_s, total as f64 / batch_s);
    outln!(
        "{{\"clients\": {}, \"requests\": {total}, \"device\": \"{}\", \"dtype\": \"{}\", \"served_s\": {served_s:.2}, \
         \"proteins_per_s\": {served:.3}, \"predict_input_s\": {batch_s:.2}, \"predict_input_proteins_per_s\": {batched:.3}, \
         \"max_padding\": {}, \"served_first\": {}, \"throughput_ratio\": {:.3}, \"p50_s\": {:.3}, \"p99_s\": {:.3}, \"gathered_batches\": {batches}, \"forward_passes\": {passes}, \"errors\": {errors}, \
         \"rss_mib_start\": {rss_start:.0}, \"rss_mib_mid\": {rss_mid:.0}, \"rss_mib_end\": {rss_end:.0}}}",
        args.clients,
        args.run.device,
        args.run.dtype,
        forward_padding,
        args.served_first,
        served / batched,
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
    );
    Ok(())
}
