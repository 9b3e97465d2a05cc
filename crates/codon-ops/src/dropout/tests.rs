//! The op's bodies against its reference.
use candle_core::{DType, Device, Tensor, Var};

use super::{dropout, multipliers, reference, Dropout, DropoutStream};
use crate::philox::philox4x32_10;

/// The dropout op on the CPU draws the CPU's mask, both ways.
#[test]
fn the_op_runs_the_cpu_mask_on_the_cpu() {
    let x = Tensor::randn(0f32, 1.0, (6, 50), &Device::Cpu).unwrap();
    let xv = Var::from_tensor(&x).unwrap();
    let y = xv.as_tensor().apply_op1(Dropout::new(0.3, (7, 2))).unwrap();
    let expected = reference(&x, 0.3, 7, 2).unwrap();
    assert_eq!(y.to_vec2::<f32>().unwrap(), expected.to_vec2::<f32>().unwrap());
    let grads = y.sum_all().unwrap().backward().unwrap();
    let ones = reference(&x.ones_like().unwrap(), 0.3, 7, 2).unwrap();
    assert_eq!(grads.get(&xv).unwrap().to_vec2::<f32>().unwrap(), ones.to_vec2::<f32>().unwrap());
    let half = x.to_dtype(DType::BF16).unwrap().apply_op1(Dropout::new(0.3, (7, 2))).unwrap();
    assert_eq!(half.dtype(), DType::BF16);
}

#[test]
fn masks_follow_the_published_layout_and_rate() {
    // Element 4g + w is word w of block g at offset 1 (the second draw).
    let mut stream = DropoutStream::new(0x1234_5678_9abc);
    stream.multipliers(10, 0.25, DType::F32).unwrap();
    let m = stream.multipliers(200_003, 0.25, DType::F32).unwrap();
    for i in [0usize, 3, 4, 131_071, 200_002] {
        let g = (i / 4) as u32;
        let w = philox4x32_10([g, 0, 1, 0], [0x5678_9abc, 0x1234])[i % 4];
        let kept = (f64::from(w) + 0.5) / 4_294_967_296.0 < 0.75;
        assert_eq!(m[i], if kept { 1.0 / 0.75 } else { 0.0 }, "element {i}");
    }
    let rate = m.iter().filter(|&&v| v > 0.0).count() as f64 / m.len() as f64;
    assert!((rate - 0.75).abs() < 0.005, "kept {rate}");
    // Another draw, another mask; the same draw, the same mask.
    assert_ne!(m[..64], multipliers(0x1234_5678_9abc, 2, 64, 0.25, DType::F32)[..]);
    assert_eq!(m, multipliers(0x1234_5678_9abc, 1, 200_003, 0.25, DType::F32));
    // bf16 scales by 1/bf16(0.9), as the device's DoMask.
    let b = multipliers(9, 0, 1000, 0.1, DType::BF16);
    assert!(b.iter().any(|&v| v == 1.0 / half::bf16::from_f32(0.9).to_f32()));
}

#[test]
fn the_kernels_integer_threshold_keeps_the_same_words() {
    for p in [0.1, 0.25, 0.5, 1e-7, 0.999] {
        let (t, keep) = (super::keep_threshold(p), f64::from((1.0 - p) as f32));
        for w in [t.saturating_sub(2), t.saturating_sub(1), t, t + 1].into_iter().filter(|&w| w <= u64::from(u32::MAX))
        {
            let kept = (w as f64 + 0.5) / 4_294_967_296.0 < keep;
            assert_eq!(kept, w < t, "p = {p}, w = {w}");
        }
    }
    // The multiplier as the CPU's mask gives it after rounding to the dtype.
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        let m = multipliers(3, 0, 400, 0.1, dtype).into_iter().find(|&m| m > 0.0).unwrap();
        let rounded = Tensor::new(&[m], &Device::Cpu).unwrap().to_dtype(dtype).unwrap().to_dtype(DType::F32).unwrap();
        assert_eq!(rounded.to_vec1::<f32>().unwrap()[0], super::kept_scale(0.1, dtype), "{dtype:?}");
    }
}

#[test]
fn dropout_scales_kept_elements_and_passes_the_mask_to_the_gradient() {
    let dev = &Device::Cpu;
    let x = Var::from_tensor(&Tensor::randn(0f32, 1.0, (7, 33), dev).unwrap()).unwrap();
    let y = dropout(x.as_tensor(), 0.3, &mut DropoutStream::new(5)).unwrap();
    let m = multipliers(5, 0, 7 * 33, 0.3, DType::F32);
    let (xv, yv) = (
        x.as_tensor().flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        y.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
    );
    for i in 0..xv.len() {
        assert_eq!(yv[i], xv[i] * m[i]);
    }
    let g = y.sum_all().unwrap().backward().unwrap().get(&x).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
    assert_eq!(g, m);
    assert!(dropout(x.as_tensor(), 1.0, &mut DropoutStream::new(5)).is_err());
    let same = dropout(x.as_tensor(), 0.0, &mut DropoutStream::new(5)).unwrap();
    assert_eq!(same.flatten_all().unwrap().to_vec1::<f32>().unwrap(), xv);
}
