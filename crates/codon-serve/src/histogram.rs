//! A histogram in Prometheus' form: fixed buckets, counted without a lock.
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the latency buckets, seconds (Prometheus' default buckets, to 30 s).
pub const SECONDS: &[f64] = &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

/// Upper bounds of the buckets of proteins per forward pass.
pub const PROTEINS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];

/// Observations by bucket, their count and their sum.
pub struct Histogram {
    bounds: &'static [f64],
    /// Per bucket (the last: above every bound), not cumulative.
    buckets: Vec<AtomicU64>,
    count: AtomicU64,
    /// The sum's f64 bits.
    sum: AtomicU64,
}

impl Histogram {
    /// An empty histogram over buckets with these upper bounds (ascending).
    pub fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum: AtomicU64::new(0f64.to_bits()),
        }
    }

    /// Count one observation.
    pub fn observe(&self, value: f64) {
        let bucket = self.bounds.iter().position(|&b| value <= b).unwrap_or(self.bounds.len());
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        // A compare-and-swap loop: there is no atomic f64 add.
        let _ = self
            .sum
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| Some((f64::from_bits(bits) + value).to_bits()));
    }

    /// Count one duration, in seconds.
    pub fn observe_duration(&self, took: Duration) {
        self.observe(took.as_secs_f64());
    }

    /// Observations counted.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// The histogram as Prometheus text: cumulative buckets, sum and count.
    pub fn prometheus(&self, name: &str, help: &str) -> String {
        let mut out = format!("# HELP {name} {help}\n# TYPE {name} histogram\n");
        let mut cumulative = 0;
        for (i, bucket) in self.buckets.iter().enumerate() {
            cumulative += bucket.load(Ordering::Relaxed);
            let le = self.bounds.get(i).map_or("+Inf".to_string(), |b| b.to_string());
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {cumulative}");
        }
        let sum = f64::from_bits(self.sum.load(Ordering::Relaxed));
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {}", self.count());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_end_with_every_observation() {
        let h = Histogram::new(SECONDS);
        for ms in [3, 40, 40, 70_000] {
            h.observe_duration(Duration::from_millis(ms));
        }
        let text = h.prometheus("t", "help");
        assert!(text.contains("t_bucket{le=\"0.005\"} 1\n"), "{text}");
        assert!(text.contains("t_bucket{le=\"0.05\"} 3\n"), "{text}");
        assert!(text.contains("t_bucket{le=\"30\"} 3\n"), "{text}");
        assert!(text.contains("t_bucket{le=\"+Inf\"} 4\n"), "{text}");
        assert!(text.contains("t_sum 70.083\nt_count 4\n"), "{text}");
        let sizes = Histogram::new(PROTEINS);
        for n in [1.0, 1.0, 3.0, 300.0] {
            sizes.observe(n);
        }
        let text = sizes.prometheus("p", "help");
        assert!(text.contains("p_bucket{le=\"1\"} 2\n"), "{text}");
        assert!(text.contains("p_bucket{le=\"4\"} 3\n"), "{text}");
        assert!(text.contains("p_bucket{le=\"256\"} 3\n"), "{text}");
        assert!(text.contains("p_sum 305\np_count 4\n"), "{text}");
    }
}
