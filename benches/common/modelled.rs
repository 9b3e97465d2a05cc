//! A criterion [`Measurement`] of an Ascend device's modelled time: what the time model
//! (`candle_ascend::runtime::time_model`, from the vendor's platform files and the assumptions of
//! `soc/time_model.tsv`) says the work would take on the part, host waits included. Modelled,
//! not measured. The benches run it on `npu-sim:0` without arithmetic, in a child process per
//! part, beside the CPU's wall-clock times ([`run_modelled_children`]).
use std::time::Duration;

use candle_ascend::AscendDevice;
use criterion::measurement::{Measurement, ValueFormatter};
use criterion::{Criterion, SamplingMode, Throughput};

/// The parts whose modelled time the benches report.
pub const PARTS: [&str; 2] = ["Ascend910A", "Ascend910B3"];

/// The environment variable that makes a bench process the modelled child of one part.
pub const CHILD: &str = "CODON_BENCH_MODELLED_PART";

/// Modelled time on one device, in ns (criterion budgets its runs in these units).
pub struct ModelledTime {
    device: AscendDevice,
}

impl ModelledTime {
    /// The modelled time of `npu-sim:0`.
    pub fn emulated() -> Self {
        let device = candle_ascend::parse_device("npu-sim:0").expect("the emulated toolkit loads");
        let device = candle_ascend::ascend_device(&device).expect("an Ascend device").clone();
        assert!(device.time_model().is_some(), "{} has no time model", device.soc().name);
        Self { device }
    }

    fn clock_us(&self) -> f64 {
        self.device.counters().modelled.map_or(0.0, |t| t.host_us)
    }
}

impl Measurement for ModelledTime {
    type Intermediate = f64;
    type Value = f64;

    fn start(&self) -> f64 {
        self.clock_us()
    }

    fn end(&self, start: f64) -> f64 {
        (self.clock_us() - start) * 1e3
    }

    fn add(&self, a: &f64, b: &f64) -> f64 {
        a + b
    }

    fn zero(&self) -> f64 {
        0.0
    }

    fn to_f64(&self, value: &f64) -> f64 {
        *value
    }

    fn formatter(&self) -> &dyn ValueFormatter {
        &ModelledFormatter
    }
}

/// Formats modelled nanoseconds, saying they are modelled.
struct ModelledFormatter;

impl ValueFormatter for ModelledFormatter {
    fn scale_values(&self, typical_ns: f64, values: &mut [f64]) -> &'static str {
        let (factor, unit) = match typical_ns {
            t if t >= 1e9 => (1e-9, "s (modelled)"),
            t if t >= 1e6 => (1e-6, "ms (modelled)"),
            t if t >= 1e3 => (1e-3, "µs (modelled)"),
            _ => (1.0, "ns (modelled)"),
        };
        values.iter_mut().for_each(|v| *v *= factor);
        unit
    }

    fn scale_throughputs(&self, _typical: f64, throughput: &Throughput, values: &mut [f64]) -> &'static str {
        let per_iteration = match throughput {
            Throughput::Elements(n) | Throughput::Bytes(n) | Throughput::BytesDecimal(n) => *n as f64,
            Throughput::ElementsAndBytes { elements, .. } => *elements as f64,
            Throughput::Bits(n) => *n as f64,
        };
        values.iter_mut().for_each(|v| *v = per_iteration * 1e9 / *v);
        "/s (modelled)"
    }

    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}

/// A criterion for modelled runs: the model is deterministic, so no warm-up to speak of, and a
/// second of modelled time per workload.
pub fn modelled_criterion() -> Criterion<ModelledTime> {
    Criterion::default()
        .with_measurement(ModelledTime::emulated())
        .sample_size(10)
        .warm_up_time(Duration::from_nanos(1))
        .measurement_time(Duration::from_secs(1))
        .configure_from_args()
}

/// Flat sampling for a modelled group.
pub const MODELLED_SAMPLING: SamplingMode = SamplingMode::Flat;

/// In the parent bench process: run this bench again once per part of [`PARTS`], as the
/// modelled child of that part (the emulator fixes its part and no-math mode when it starts),
/// with the same arguments.
pub fn run_modelled_children() {
    let exe = std::env::current_exe().expect("the bench's own path");
    for part in PARTS {
        let status = std::process::Command::new(&exe)
            .args(std::env::args_os().skip(1))
            .env(CHILD, part)
            .env("CANDLE_ASCEND_SIM_SOC", part)
            .env("CANDLE_ASCEND_SIM_NO_MATH", "1")
            .status()
            .expect("run the modelled bench");
        assert!(status.success(), "the modelled bench of {part} failed");
    }
}

/// A bench's `main`: in the modelled child of a part, `modelled` alone with modelled time;
/// otherwise the wall-clock `benches`, then a modelled child per part.
pub fn main_with(benches: fn(), modelled: fn(&mut Criterion<ModelledTime>)) {
    if std::env::var_os(CHILD).is_some() {
        let mut c = modelled_criterion();
        modelled(&mut c);
        c.final_summary();
        return;
    }
    benches();
    run_modelled_children();
    Criterion::default().configure_from_args().final_summary();
}
