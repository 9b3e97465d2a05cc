//! Error paths through the emulator's fault injection (environment variables read when the
//! toolkit initialises, so this file runs as its own process): a failing op and device
//! memory running out.
use candle_core::{DType, Tensor};

#[test]
fn injected_op_failure_and_out_of_memory_are_clear_errors() {
    // SAFETY (env): set before any thread of this process touches the toolkit.
    std::env::set_var("CANDLE_ASCEND_SIM_FAIL_OP", "aclnnExp");
    std::env::set_var("CANDLE_ASCEND_SIM_FAIL_ALLOC", "6");
    let dev = candle_ascend::parse_device("npu-sim:1").unwrap();
    let x = Tensor::new(&[1f32, 2.0, 3.0], &dev).unwrap();
    let err = x.exp().unwrap_err().to_string();
    assert!(err.contains("aclnnExp failed with status 561000 on f32[3]"), "{err}");
    assert!(err.contains("injected"), "{err}");
    // Other ops still work.
    assert_eq!(x.sqr().unwrap().to_vec1::<f32>().unwrap(), vec![1.0, 4.0, 9.0]);
    // From the 6th aclrtMalloc on, the device is out of memory: growing sizes above the shared
    // segments' 10 MiB each need a segment of their own, and fail.
    let mut last = Ok(());
    for n in 1..16usize {
        if let Err(e) = Tensor::zeros(n * (3 << 20), DType::F32, &dev) {
            last = Err(e.to_string());
            break;
        }
    }
    let err = last.expect_err("allocations must fail once the device is out of memory");
    assert!(err.contains("out of device memory allocating"), "{err}");
    assert!(err.contains("npu-sim:1") && err.contains("207001"), "{err}");
}
