//! Device monitoring through the emulator's DCMI (`libdcmi.so`): HBM in use follows the
//! allocations, utilisation the modelled busy time, and an injected fault shows as a critical
//! health with its error code from the chosen launch on. One test: the fault is injected through
//! the environment, which the other checks must not see.
use candle_ascend::{AscendDevice, Health};
use candle_core::{DType, Device, Tensor};

#[test]
fn dcmi_reports_memory_utilisation_and_an_injected_fault() {
    let monitor_dir = tempfile::tempdir().unwrap();
    // SAFETY: this binary runs this one test; nothing else reads the environment meanwhile.
    unsafe {
        std::env::set_var("CANDLE_ASCEND_SIM_MONITOR_DIR", monitor_dir.path());
        std::env::remove_var("CANDLE_ASCEND_SIM_DEVICE_FAULT");
        // Power follows modelled busy time over wall time: without arithmetic the wall time is
        // short however loaded the host is (computing, a loaded CI host once read 70.0 W).
        std::env::set_var("CANDLE_ASCEND_SIM_NO_MATH", "1");
    }
    let dev: Device = candle_ascend::parse_device("npu-sim:1").unwrap();
    let ascend: AscendDevice = candle_ascend::ascend_device(&dev).unwrap().clone();
    let before = ascend.status().unwrap();
    assert_eq!((before.card, before.chip), (1, 0));
    assert_eq!(before.health, Health::Ok);
    assert!(before.error_codes.is_empty());
    let hbm_gib = before.hbm_total_mb as f64 / 1024.0;
    assert!(hbm_gib == 32.0 || hbm_gib == 64.0, "{hbm_gib} GiB");

    // 64 MiB held on the device shows as HBM in use, and work as utilisation and power.
    let x = Tensor::ones((16, 1024, 1024), DType::F32, &dev).unwrap();
    let mut y = x.clone();
    for _ in 0..64 {
        y = (&y + &x).unwrap();
    }
    ascend.synchronize().unwrap();
    let busy = ascend.status().unwrap();
    assert!(busy.hbm_used_mb >= before.hbm_used_mb + 64, "{} then {} MiB", before.hbm_used_mb, busy.hbm_used_mb);
    assert!(busy.utilization_pct <= 100);
    // The work's modelled busy time shows as power above the idle 70 W.
    assert!(busy.power_w > 70.0 && busy.temperature_c >= 40, "{busy:?}");
    let me = std::process::id() as i32;
    let procs = ascend.processes().unwrap();
    assert!(procs.iter().any(|p| p.pid == me && p.memory_bytes >= 64 << 20), "{procs:?}");
    drop((x, y));

    // A fault from the device's 3rd launch onwards (this process has made more already).
    unsafe { std::env::set_var("CANDLE_ASCEND_SIM_DEVICE_FAULT", "1:0x80E18402:3") };
    let (health, codes) = ascend.health().unwrap();
    assert_eq!(health, Health::Critical);
    assert!(health.is_fault());
    assert_eq!(codes, vec![0x80E1_8402]);
    assert_eq!(ascend.status().unwrap().error_codes_hex(), "0x80E18402");
    // Not before that launch, and never on another device.
    unsafe { std::env::set_var("CANDLE_ASCEND_SIM_DEVICE_FAULT", "1:0x80E18402:1000000") };
    assert_eq!(ascend.health().unwrap().0, Health::Ok);
    let other = candle_ascend::ascend_device(&candle_ascend::parse_device("npu-sim:0").unwrap()).unwrap().clone();
    unsafe { std::env::set_var("CANDLE_ASCEND_SIM_DEVICE_FAULT", "1:0x80E18402") };
    assert_eq!(other.health().unwrap(), (Health::Ok, vec![]));
    assert_eq!(ascend.health().unwrap().0, Health::Critical);
}
