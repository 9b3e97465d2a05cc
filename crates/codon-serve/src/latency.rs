//! A latency histogram in Prometheus' form: fixed buckets, counted without a lock.
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the buckets, seconds (Prometheus' default buckets, to 30 s).
const BOUNDS: [f64; 12] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

/// Observations by bucket, their count and their sum.
#[derive(Default)]
pub struct Histogram {
    /// Per bucket (the last: above every bound), not cumulative.
    buckets: [AtomicU64; BOUNDS.len() + 1],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Histogram {
    /// Count one observation.
    pub fn observe(&self, took: Duration) {
        let seconds = took.as_secs_f64();
        let bucket = BOUNDS.iter().position(|&b| seconds <= b).unwrap_or(BOUNDS.len());
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add(took.as_micros().min(u128::from(u64::MAX)) as u64, Ordering::Relaxed);
    }

    /// The histogram as Prometheus text: cumulative buckets, sum and count.
    pub fn prometheus(&self, name: &str, help: &str) -> String {
        let mut out = format!("# HELP {name} {help}\n# TYPE {name} histogram\n");
        let mut cumulative = 0;
        for (i, bucket) in self.buckets.iter().enumerate() {
            cumulative += bucket.load(Ordering::Relaxed);
            let le = BOUNDS.get(i).map_or("+Inf".to_string(), |b| b.to_string());
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {cumulative}");
        }
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {}", self.count.load(Ordering::Relaxed));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_end_with_every_observation() {
        let h = Histogram::default();
        for ms in [3, 40, 40, 70_000] {
            h.observe(Duration::from_millis(ms));
        }
        let text = h.prometheus("t", "help");
        assert!(text.contains("t_bucket{le=\"0.005\"} 1\n"), "{text}");
        assert!(text.contains("t_bucket{le=\"0.05\"} 3\n"), "{text}");
        assert!(text.contains("t_bucket{le=\"30\"} 3\n"), "{text}");
        assert!(text.contains("t_bucket{le=\"+Inf\"} 4\n"), "{text}");
        assert!(text.contains("t_sum 70.083\nt_count 4\n"), "{text}");
    }
}
