//! Error paths that need no injection: a missing CANN toolkit, unsupported ops, bad devices.
use candle_core::Tensor;

#[test]
fn npu_without_cann_lists_the_paths_searched_and_points_to_the_emulator() {
    let real = candle_ascend::ffi::loader::candidate_roots().iter().any(|r| r.join("lib64/libascendcl.so").is_file());
    match candle_ascend::parse_device("npu:0") {
        Ok(_) => assert!(real, "npu:0 opened without a CANN toolkit"),
        Err(e) => {
            let msg = e.to_string();
            assert!(!real, "a toolkit is installed, yet: {msg}");
            assert!(msg.contains("no CANN toolkit found"), "{msg}");
            assert!(msg.contains("/usr/local/Ascend/ascend-toolkit/latest"), "{msg}");
            assert!(msg.contains("npu-sim:0"), "{msg}");
        }
    }
}

#[test]
fn unsupported_ops_name_the_op() {
    let dev = candle_ascend::parse_device("npu-sim:0").unwrap();
    let x = Tensor::ones((1, 2, 8), candle_core::DType::F32, &dev).unwrap();
    let k = Tensor::ones((2, 2, 3), candle_core::DType::F32, &dev).unwrap();
    let err = x.conv1d(&k, 0, 1, 1, 1).unwrap_err().to_string();
    assert!(err.contains("conv1d is not supported by the Ascend backend"), "{err}");
    let err = x.elu(1.0).unwrap_err().to_string();
    assert!(err.contains("elu is not supported"), "{err}");
}

#[test]
fn bad_device_strings_are_rejected() {
    // The emulator has 8 devices unless CANDLE_ASCEND_SIM_DEVICES says otherwise.
    for s in ["gpu:0", "npu", "npu-sim:x", "npu-sim:8"] {
        assert!(candle_ascend::parse_device(s).is_err(), "{s}");
    }
    let err = candle_ascend::parse_device("npu-sim:8").unwrap_err().to_string();
    assert!(err.contains("device 8 does not exist"), "{err}");
    assert!(candle_ascend::parse_device("npu-sim:7").is_ok());
}

#[test]
fn device_memory_is_not_host_dereferenceable_and_work_is_counted() {
    let dev = candle_ascend::parse_device("npu-sim:0").unwrap();
    let ascend = candle_ascend::ascend_device(&dev).unwrap();
    let before = ascend.sim_counters().unwrap();
    let x = Tensor::new(&[1f32, 2.0, 3.0, 4.0], &dev).unwrap();
    let y = (x.exp().unwrap() + 1.0).unwrap();
    let v = y.to_vec1::<f32>().unwrap();
    assert!((v[0] - (1f32.exp() + 1.0)).abs() < 1e-5);
    let after = ascend.sim_counters().unwrap();
    assert!(
        after.launches.get("aclnnExp").copied().unwrap_or(0) > before.launches.get("aclnnExp").copied().unwrap_or(0)
    );
    assert!(after.host_to_device.1 >= before.host_to_device.1 + 16, "{after:?}");
    assert!(after.device_to_host.1 >= before.device_to_host.1 + 16, "{after:?}");
    // The storage's address is a device address: the emulator tags it so a host read faults.
    let (storage, _) = y.storage_and_layout();
    if let candle_core::Storage::Custom(s) = &*storage {
        let s = s.as_any().downcast_ref::<candle_ascend::AscendStorage>().unwrap();
        assert!(s.device_ptr() as usize & (1 << 62) != 0, "not a device address");
    } else {
        panic!("storage is not on the device");
    }
}

/// On a device of its own (`npu-sim:1`), so the backend's per-device count of `aclrtMalloc`
/// calls sees no other test's allocations.
#[test]
fn steady_state_reuses_cached_memory() {
    let dev = candle_ascend::parse_device("npu-sim:1").unwrap();
    let ascend = candle_ascend::ascend_device(&dev).unwrap();
    let step = || {
        let a = Tensor::ones((64, 64), candle_core::DType::F32, &dev).unwrap();
        let b = a.matmul(&a).unwrap().sum_all().unwrap();
        drop(b);
    };
    step();
    step();
    let before = ascend.counters().allocations;
    for _ in 0..5 {
        step();
    }
    assert_eq!(ascend.counters().allocations, before, "steady state must not call aclrtMalloc");
}

/// A host read through a device pointer must fault, as on hardware. The test re-runs itself in
/// a child process that performs the read, and expects the child to die of the signal.
#[test]
fn host_read_of_device_memory_faults() {
    const CHILD: &str = "CANDLE_ASCEND_DEREFERENCE_DEVICE_POINTER";
    if std::env::var_os(CHILD).is_some() {
        let dev = candle_ascend::parse_device("npu-sim:0").unwrap();
        let t = Tensor::new(&[1f32, 2.0], &dev).unwrap();
        let (storage, _) = t.storage_and_layout();
        if let candle_core::Storage::Custom(s) = &*storage {
            let s = s.as_any().downcast_ref::<candle_ascend::AscendStorage>().unwrap();
            // SAFETY: deliberately unsound: this must crash the child process.
            let v = unsafe { std::ptr::read_volatile(s.device_ptr() as *const f32) };
            println!("read {v} through a device pointer");
        }
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args(["--exact", "host_read_of_device_memory_faults", "--test-threads=1"])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success() && !stdout.contains("through a device pointer"), "the read did not fault: {stdout}");
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        let signal = out.status.signal();
        assert!(matches!(signal, Some(7) | Some(11)), "expected SIGSEGV or SIGBUS, got {:?}", out.status);
    }
}
