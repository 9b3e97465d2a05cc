//! The backend within each emulated part's rules: no op outside the SoC's table (sqr, integer
//! scalars, u32 zeros), the 910A's FP16 cube for FP32 matmuls, no BF16 on a 910A, host reads that
//! wait for the stream, and a preflight that lists what a part refuses. A test that needs a given
//! part re-runs itself in a child process with `CANDLE_ASCEND_SIM_SOC` set (the SoC is chosen
//! when the toolkit initialises).
use candle_core::{DType, Device, Tensor};

mod common;
use common::on_soc;

fn sim() -> Device {
    candle_ascend::parse_device("npu-sim:0").unwrap()
}

fn launches(dev: &Device, op: &str) -> u64 {
    let c = candle_ascend::ascend_device(dev).unwrap().sim_counters().unwrap();
    c.launches.get(op).copied().unwrap_or(0)
}

#[test]
fn sqr_runs_as_mul_because_no_training_part_has_square() {
    if !on_soc("Ascend910B3", "sqr_runs_as_mul_because_no_training_part_has_square") {
        return;
    }
    let dev = sim();
    let x = Tensor::new(&[1.5f32, -2.0, 3.0], &dev).unwrap();
    let (square, mul) = (launches(&dev, "aclnnSquare"), launches(&dev, "aclnnMul"));
    assert_eq!(x.sqr().unwrap().to_vec1::<f32>().unwrap(), vec![2.25, 4.0, 9.0]);
    assert_eq!(launches(&dev, "aclnnSquare"), square);
    assert_eq!(launches(&dev, "aclnnMul"), mul + 1);
    let soc = candle_ascend::ascend_device(&dev).unwrap().soc().clone();
    assert!(matches!(soc.supports(candle_ascend::soc::AclnnOp::Square, 0), candle_ascend::soc::Support::NoOp { .. }));
}

#[test]
fn integer_arithmetic_passes_integer_scalars() {
    let dev = sim();
    let a = Tensor::new(&[3i64, -7, 1 << 40], &dev).unwrap();
    assert_eq!((&a + &a).unwrap().to_vec1::<i64>().unwrap(), vec![6, -14, 2 << 40]);
    assert_eq!((&a - &a).unwrap().to_vec1::<i64>().unwrap(), vec![0, 0, 0]);
    assert_eq!(a.affine(2.0, 3.0).unwrap().to_vec1::<i64>().unwrap(), vec![9, -11, (2 << 40) + 3]);
    let ids = Tensor::new(&[4u32, 0, 4_000_000_000], &dev).unwrap();
    assert_eq!((&ids + &ids.ones_like().unwrap()).unwrap().to_vec1::<u32>().unwrap(), vec![5, 1, 4_000_000_001]);
    assert_eq!(Tensor::zeros(3, DType::U32, &dev).unwrap().to_vec1::<u32>().unwrap(), vec![0, 0, 0]);
    let err = a.affine(0.5, 0.0).unwrap_err().to_string();
    assert!(err.contains("not an integer"), "{err}");
}

#[test]
fn fp32_matmul_on_910a_uses_the_fp16_cube() {
    if !on_soc("Ascend910A", "fp32_matmul_on_910a_uses_the_fp16_cube") {
        return;
    }
    let dev = sim();
    // 1 + 2^-12 is exact in f32 and rounds to 1 in f16: the FP16 cube loses it.
    let a = Tensor::new(&[[1.0f32 + 1.0 / 4096.0]], &Device::Cpu).unwrap();
    let b = Tensor::new(&[[1.0f32]], &Device::Cpu).unwrap();
    let got = a.to_device(&dev).unwrap().matmul(&b.to_device(&dev).unwrap()).unwrap();
    assert_eq!(got.to_vec2::<f32>().unwrap(), vec![vec![1.0]]);
}

#[test]
fn bf16_on_910a_is_refused_naming_the_part() {
    if !on_soc("Ascend910A", "bf16_on_910a_is_refused_naming_the_part") {
        return;
    }
    let dev = sim();
    assert!(!dev.supports_bf16());
    let x = Tensor::new(&[1f32, 2.0], &dev).unwrap();
    let err = x.to_dtype(DType::BF16).unwrap_err().to_string();
    assert!(err.contains("161002") && err.contains("BF16") && err.contains("Ascend910A"), "{err}");
}

#[test]
fn host_reads_wait_for_the_stream() {
    let dev = sim();
    let mut x = Tensor::new(&[1f32; 1024], &dev).unwrap();
    for _ in 0..100 {
        x = (x + 1.0).unwrap();
    }
    assert!(x.to_vec1::<f32>().unwrap().iter().all(|&v| v == 101.0));
    let big: Vec<f32> = (0..2_000_000).map(|i| i as f32).collect();
    let t = Tensor::from_slice(&big, big.len(), &dev).unwrap();
    assert_eq!((t * 2.0).unwrap().to_vec1::<f32>().unwrap()[1_999_999], 3_999_998.0);
}

#[test]
fn preflight_lists_every_refused_op_before_anything_runs() {
    if !on_soc("Ascend910A", "preflight_lists_every_refused_op_before_anything_runs") {
        return;
    }
    let dev = sim();
    let ascend = candle_ascend::ascend_device(&dev).unwrap();
    let x = Tensor::new(&[[1f32, 2.0], [3.0, 4.0]], &dev).unwrap();
    let before = ascend.sim_counters().unwrap().total_launches();
    ascend.preflight(|| x.matmul(&x)?.exp()?.sum_all().map(|_| ())).unwrap();
    assert_eq!(ascend.sim_counters().unwrap().total_launches(), before, "a preflight launches nothing");
    let err = ascend
        .preflight(|| {
            let h = x.to_dtype(DType::BF16)?;
            (h.exp()? + 1.0)?.to_vec2::<half::bf16>().map(|_| ())
        })
        .unwrap_err()
        .to_string();
    assert!(err.contains("Ascend910A") && err.contains("aclnnCast") && err.contains("aclnnExp"), "{err}");
}
