//! The devices a benchmark compares: the CPU and an Ascend device. Without an NPU the Ascend
//! device is `npu-sim:0`, whose times measure the emulator (arithmetic in C on the host), not
//! an NPU; benches then use small sizes there, and say so.
use candle_core::Device;

/// A device to benchmark on.
pub struct BenchDevice {
    /// `cpu`, `npu:0` or `npu-sim:0`: the id criterion reports.
    pub name: &'static str,
    /// The device.
    pub device: Device,
}

impl BenchDevice {
    /// Whether this is the emulator, whose times are not an NPU's.
    pub fn emulated(&self) -> bool {
        self.name == "npu-sim:0"
    }
}

/// The CPU, then `npu:0` when a CANN toolkit and a device are present, else `npu-sim:0`
/// (printing why).
pub fn devices() -> Vec<BenchDevice> {
    let mut out = vec![BenchDevice { name: "cpu", device: Device::Cpu }];
    match candle_ascend::parse_device("npu:0") {
        Ok(device) => out.push(BenchDevice { name: "npu:0", device }),
        Err(why) => match candle_ascend::parse_device("npu-sim:0") {
            Ok(device) => {
                codon_cli::errln!(
                    "no NPU ({why}): comparing with npu-sim:0, whose times measure the emulator, not an NPU, at small sizes"
                );
                out.push(BenchDevice { name: "npu-sim:0", device });
            }
            Err(e) => codon_cli::errln!("no Ascend device to compare with: {e}"),
        },
    }
    out
}

/// On an Ascend device, run `run` once and print what it did: launches, allocations,
/// synchronisations, reads and peak device memory. Elsewhere nothing runs.
pub fn print_counters(label: &str, device: &Device, run: impl FnOnce()) {
    let Some(ascend) = candle_ascend::ascend_device(device) else { return };
    ascend.reset_peak_memory();
    let before = ascend.counters();
    run();
    let c = ascend.counters().since(&before);
    codon_cli::errln!(
        "{label} on {}: {} launches, {} allocations, {} syncs, {} reads, peak device memory {:.1} MiB",
        ascend.name(),
        c.total_launches(),
        c.allocations,
        c.synchronizations,
        c.reads,
        c.peak_memory_bytes as f64 / (1024.0 * 1024.0)
    );
}
