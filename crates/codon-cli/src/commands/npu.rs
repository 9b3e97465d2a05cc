//! What a user needs to debug an Ascend setup, like `accelerate env` or `npu-smi info`: the
//! toolkit root and version, the libraries loaded, the devices, SoC and memory, and for each
//! candle op and dtype whether this SoC runs it natively, composed, or not at all.
//!
//! ```text
//! codon npu env [--device npu:0|npu-sim:0]
//! codon npu check-toolkit [/usr/local/Ascend/ascend-toolkit/latest]
//! codon npu selftest --device npu:0 [--report npu-selftest.json]
//! codon npu watch [SECONDS] [--device npu-sim:0]
//! ```
use crate::outln;
use candle_ascend::op_table::Coverage;
use candle_ascend::{self as ascend, AscendDevice};

/// `codon npu …`: the Ascend setup, checked and watched.
#[derive(clap::Subcommand)]
pub enum NpuCommand {
    /// The device, its toolkit, SoC and memory, and which candle ops run natively there.
    Env(DeviceArg),
    /// Check an installed toolkit (default: the first one found, as `npu:N` finds it) for every
    /// function and aclnn op this backend needs, and its headers' prototypes; exits 1 if anything
    /// is missing or differs. No device is opened.
    CheckToolkit {
        /// The toolkit's root (e.g. /usr/local/Ascend/ascend-toolkit/latest).
        root: Option<std::path::PathBuf>,
    },
    /// Run every op route, an HCCL all-reduce and a tiny training run on the device, compare each
    /// with the CPU, print a pass/fail table and write `--report`; exits 1 if any case fails.
    Selftest {
        #[command(flatten)]
        device: DeviceArg,
        /// Where the JSON report (for a bug report) is written.
        #[arg(long, default_value = "npu-selftest.json")]
        report: std::path::PathBuf,
    },
    /// An `npu-smi info`-like table of every device (health, power, temperature, HBM,
    /// utilisation and the processes using it) every second, for SECONDS or until interrupted;
    /// the toolkit of `--device` (npu or npu-sim) is used, no device is opened.
    Watch {
        #[command(flatten)]
        device: DeviceArg,
        /// Stop after this many seconds (0: until interrupted).
        #[arg(default_value_t = 0)]
        seconds: u64,
    },
    /// Print the emulated toolkit's root (the folder whose lib64/ holds its libraries).
    #[command(hide = true)]
    SimToolkitPath,
}

/// The device a `codon npu` command inspects.
type DeviceArg = crate::cli::NpuDeviceArg<false>;

/// Run a `codon npu` command.
pub fn run(command: NpuCommand) -> anyhow::Result<()> {
    match command {
        NpuCommand::SimToolkitPath => {
            outln!("{}", ascend::emulated_root().display());
            Ok(())
        }
        NpuCommand::CheckToolkit { root } => check_toolkit(&root.unwrap_or_default()),
        NpuCommand::Watch { device, seconds } => {
            device.apply_tf32()?;
            watch(&device.spec, seconds)
        }
        NpuCommand::Selftest { device, report } => selftest(&device.open()?, &report),
        NpuCommand::Env(device) => env(&device),
    }
}

/// `codon npu env`.
fn env(spec: &DeviceArg) -> anyhow::Result<()> {
    let device = spec.open()?;
    let dev: &AscendDevice =
        ascend::ascend_device(&device).ok_or_else(|| anyhow::anyhow!("{spec} is not an Ascend device"))?;
    let tk = dev.toolkit();
    outln!("device:          {}", dev.name());
    if dev.skips_math() {
        outln!("arithmetic:      skipped (CANDLE_ASCEND_SIM_NO_MATH=1): launches and memory are counted, values are meaningless");
    }
    outln!("toolkit root:    {}", tk.root.display());
    outln!("toolkit version: {}", tk.version().unwrap_or_else(|| "unknown (no version.cfg)".into()));
    outln!("libraries:");
    for lib in &tk.libraries {
        outln!("  {}", lib.display());
    }
    let kind = dev.name().split(':').next().unwrap_or("npu").to_string();
    let count = dev.count()?;
    outln!("devices:         {count} ({})", (0..count).map(|i| format!("{kind}:{i}")).collect::<Vec<_>>().join(", "));
    let soc = dev.soc();
    outln!("SoC:             {} ({})", soc.name, soc.family.description());
    let (free, total) = dev.memory_info()?;
    outln!("memory:          {:.1} GiB free of {:.1} GiB", free as f64 / 1073741824.0, total as f64 / 1073741824.0);
    outln!("BF16:            {}", if soc.has_bf16() { "yes" } else { "no (use --precision f16)" });
    outln!("ASCEND_OPP_PATH: {}", std::env::var("ASCEND_OPP_PATH").unwrap_or_else(|_| "(not set)".into()));
    match tk.hccl_path() {
        Some(path) => outln!("HCCL:            {}", path.display()),
        None => outln!("HCCL:            not found (multi-NPU training needs libhccl.so)"),
    }
    let timeouts = ascend::HcclTimeouts::from_env(soc);
    for (name, effective) in [("HCCL_CONNECT_TIMEOUT", timeouts.connect_s), ("HCCL_EXEC_TIMEOUT", timeouts.exec_s)] {
        let set = std::env::var(name).unwrap_or_else(|_| "not set".into());
        outln!("{name}: {set} (effective {effective:.0} s)");
    }
    outln!("op coverage on {} (candle op: f32 / f16 / bf16):", soc.name);
    for op in ascend::op_table::all_ops() {
        let cells: Vec<String> = [ascend::DType::F32, ascend::DType::F16, ascend::DType::BF16]
            .into_iter()
            .map(|dt| match ascend::op_table::coverage(op, soc, ascend::ops::acl_dtype(dt).unwrap_or(-1)) {
                Coverage::Unavailable(_) if dt == ascend::DType::BF16 && !soc.has_bf16() => {
                    "no BF16 on this part".into()
                }
                Coverage::Native(aclnn) => format!("native {aclnn}"),
                Coverage::Composed(ops) => {
                    format!("composed {}", ops.iter().map(|op| op.name()).collect::<Vec<_>>().join("+"))
                }
                Coverage::Unavailable(why) => format!("unavailable: {why}"),
            })
            .collect();
        if cells.iter().all(|c| c == &cells[0]) {
            outln!("  {:<14} {}", op.to_string(), cells[0]);
        } else {
            outln!("  {:<14} {}", op.to_string(), cells.join(" / "));
        }
    }
    outln!("fused ops (codon-ops): which body runs each, here and on the CPU:");
    for line in fused_op_table(&device).lines() {
        outln!("  {line}");
    }
    let dtype = if soc.has_bf16() { candle_core::DType::BF16 } else { candle_core::DType::F16 };
    outln!("why, here in {}:", dtype.as_str());
    for line in codon_ops::support::reasons(&device, dtype).lines() {
        outln!("  {line}");
    }
    Ok(())
}

/// codon-ops' support table for the CPU and `device`, in f32, f16 and bf16.
fn fused_op_table(device: &candle_core::Device) -> String {
    use candle_core::DType;
    let name = ascend::ascend_device(device).map_or_else(|| "device".to_string(), |d| d.name().to_string());
    codon_ops::support::table(
        &[("cpu", &candle_core::Device::Cpu), (&name, device)],
        &[DType::F32, DType::F16, DType::BF16],
    )
}

/// `--check-toolkit`: what the toolkit at `root` (or the first one found) lacks.
fn check_toolkit(root: &std::path::Path) -> anyhow::Result<()> {
    let root = if root.as_os_str().is_empty() {
        let roots = ascend::ffi::loader::candidate_roots();
        roots
            .iter()
            .find(|r| r.join("lib64").is_dir())
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("no CANN toolkit found (searched {roots:?}): give its root"))?
    } else {
        root.to_path_buf()
    };
    let report = ascend::toolkit_check::check_toolkit(&root);
    outln!("toolkit root:    {}", report.root.display());
    outln!("version:         {}", report.version.as_deref().unwrap_or("unknown"));
    match &report.header_dir {
        Some(dir) => outln!("aclnn headers:   {}", dir.display()),
        None => outln!("aclnn headers:   not shipped with this toolkit: prototypes not compared"),
    }
    for line in report
        .missing
        .iter()
        .map(|m| format!("missing:         {m}"))
        .chain(report.mismatched.iter().map(|m| format!("differs:         {m}")))
    {
        outln!("{line}");
    }
    if !report.ok() {
        anyhow::bail!(
            "{} missing, {} differing of {} functions, ops and prototypes this backend needs",
            report.missing.len(),
            report.mismatched.len(),
            report.checked
        );
    }
    outln!("all {} functions, ops and prototypes this backend needs are there", report.checked);
    Ok(())
}

/// `--watch`: the device table every second, for `seconds` (0: until interrupted).
fn watch(device: &crate::cli::DeviceSpec, seconds: u64) -> anyhow::Result<()> {
    let crate::cli::DeviceSpec::Ascend { kind, .. } = device else {
        anyhow::bail!("--watch follows Ascend devices: give --device npu:N or npu-sim:N for the toolkit");
    };
    let started = std::time::Instant::now();
    loop {
        let rows = ascend::survey(*kind)?;
        outln!("{}", clock_heading());
        outln!(
            "{:<11} {:<13} {:<9} {:>8} {:>7} {:>19} {:>9}",
            "NPU",
            "Part",
            "Health",
            "Power(W)",
            "Temp(C)",
            "HBM-Usage(MB)",
            "AICore(%)"
        );
        for row in &rows {
            let name = format!("{}:{}", kind.device_prefix(), row.logical);
            let s = match &row.status {
                Ok(s) => s,
                Err(e) => {
                    outln!("{name:<11} {e}");
                    continue;
                }
            };
            outln!(
                "{:<11} {:<13} {:<9} {:>8.1} {:>7} {:>19} {:>9}",
                name,
                s.part,
                s.health.to_string(),
                s.power_w,
                s.temperature_c,
                format!("{} / {}", s.hbm_used_mb, s.hbm_total_mb),
                s.utilization_pct
            );
            if !s.error_codes.is_empty() {
                outln!("      error codes: {}", s.error_codes_hex());
            }
            for p in &row.processes {
                let name = std::fs::read_to_string(format!("/proc/{}/comm", p.pid)).unwrap_or_default();
                outln!("      process {:>8} {:<16} {:>8} MB", p.pid, name.trim(), p.memory_bytes >> 20);
            }
        }
        if seconds > 0 && started.elapsed().as_secs() >= seconds {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// The time of day (UTC), as a heading for each table.
fn clock_heading() -> String {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs();
    format!("-- {:02}:{:02}:{:02} UTC", t / 3600 % 24, t / 60 % 60, t % 60)
}

/// `--selftest`: the table on stdout, the JSON report at `report`.
fn selftest(device: &candle_core::Device, report_path: &std::path::Path) -> anyhow::Result<()> {
    use std::io::Write as _;
    let report = crate::selftest::run(device)?;
    for line in crate::selftest::table(&report) {
        outln!("{line}");
    }
    outln!("fused ops: which body ran each case above");
    for line in fused_op_table(device).lines() {
        outln!("  {line}");
    }
    let json = serde_json::to_vec_pretty(&report)?;
    codon_files::write_atomically(report_path, |w| w.write_all(&json))?;
    outln!("report: {}", report_path.display());
    let failed: Vec<String> = report.failures().map(|c| format!("{} ({})", c.name, c.dtype)).collect();
    if !failed.is_empty() {
        anyhow::bail!("self-test: {} case(s) failed: {}", failed.len(), failed.join(", "));
    }
    Ok(())
}
