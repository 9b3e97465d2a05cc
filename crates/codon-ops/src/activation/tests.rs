//! The op's bodies against its reference.
use candle_core::{DType, Device, Tensor, Var};

use crate::f32_views::max_abs_diff as max_diff;

#[test]
fn softmax_and_its_gradient_match_the_composed_ops() {
    let x = Tensor::randn(0f32, 3.0, (3, 5, 37), &Device::Cpu).unwrap();
    let w = Tensor::randn(0f32, 1.0, (3, 5, 37), &Device::Cpu).unwrap();
    let v = Var::from_tensor(&x).unwrap();
    let ours = v.as_tensor().apply_op1(super::Softmax).unwrap();
    let reference = super::softmax_reference(v.as_tensor()).unwrap();
    assert!(max_diff(&ours, &reference) < 1e-6);
    let g_ours = (ours * &w).unwrap().sum_all().unwrap().backward().unwrap();
    let g_ref = (reference * &w).unwrap().sum_all().unwrap().backward().unwrap();
    assert!(max_diff(g_ours.get(&v).unwrap(), g_ref.get(&v).unwrap()) < 1e-6);
    // bf16 storage computes in f32 and rounds once.
    let xb = x.to_dtype(DType::BF16).unwrap();
    let ours = xb.apply_op1(super::Softmax).unwrap();
    let reference = super::softmax_reference(&xb.to_dtype(DType::F32).unwrap()).unwrap();
    assert_eq!(ours.dtype(), DType::BF16);
    assert!(max_diff(&ours, &reference) < 4e-3);
}

#[test]
fn gelu_new_matches_the_tanh_form_and_its_gradient() {
    let x = Tensor::arange(-800i64, 800, &Device::Cpu).unwrap().to_dtype(DType::F32).unwrap();
    let x = x.affine(0.01, 0.003).unwrap();
    assert!(max_diff(&crate::gelu_new(&x).unwrap(), &x.gelu().unwrap()) < 2e-6);
    let v = Var::from_tensor(&x).unwrap();
    let g_ours = crate::gelu_new(v.as_tensor()).unwrap().sum_all().unwrap().backward().unwrap();
    let g_ref = v.as_tensor().gelu().unwrap().sum_all().unwrap().backward().unwrap();
    assert!(max_diff(g_ours.get(&v).unwrap(), g_ref.get(&v).unwrap()) < 1e-5);
    // A strided input.
    let m = x.reshape((40, 40)).unwrap().t().unwrap();
    assert!(max_diff(&crate::gelu_new(&m).unwrap(), &m.gelu().unwrap()) < 2e-6);
}

#[test]
fn scaled_softmax_with_a_grouped_key_bias_matches_the_composed_ops() {
    let dev = &Device::Cpu;
    let (b, h, rows, keys) = (2, 3, 5, 19);
    let x = Var::from_tensor(&Tensor::randn(0f32, 3.0, (b, h, rows, keys), dev).unwrap()).unwrap();
    let w = Tensor::randn(0f32, 1.0, (b, h, rows, keys), dev).unwrap();
    // Sequence 1 masks its last 4 keys.
    let penalty: Vec<f32> = (0..b * keys).map(|i| if i >= 2 * keys - 4 { f32::MIN } else { 0.0 }).collect();
    let bias = Tensor::from_vec(penalty, (b, 1, 1, keys), dev).unwrap();
    assert_eq!(super::ScaledSoftmax::bias_groups(bias.dims(), x.dims()), Some(h * rows));
    assert_eq!(super::ScaledSoftmax::bias_groups(&[b, h, 1, keys], x.dims()), Some(rows));
    assert_eq!(super::ScaledSoftmax::bias_groups(&[1, 1, rows, keys], x.dims()), None);
    assert_eq!(super::ScaledSoftmax::bias_groups(&[b, 1, rows, keys], x.dims()), None);
    let op = super::ScaledSoftmax::with_key_bias(0.125, &bias, x.dims()).unwrap().unwrap();
    let ours = x.as_tensor().apply_op1(op).unwrap();
    let reference = super::softmax_reference(&(x.as_tensor() * 0.125).unwrap().broadcast_add(&bias).unwrap()).unwrap();
    assert!(max_diff(&ours, &reference) < 1e-6);
    let masked = ours.narrow(0, 1, 1).unwrap().narrow(3, keys - 4, 4).unwrap();
    assert_eq!(masked.abs().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap(), 0.0);
    let g_ours = (ours * &w).unwrap().sum_all().unwrap().backward().unwrap();
    let g_ref = (reference * &w).unwrap().sum_all().unwrap().backward().unwrap();
    assert!(max_diff(g_ours.get(&x).unwrap(), g_ref.get(&x).unwrap()) < 1e-6);
}
