//! The op's bodies against its reference.
use candle_core::{Device, Tensor, Var};

use crate::f32_views::max_abs_diff as max_diff;

/// The residual add that Ascend parts fuse with LayerNorm is the plain sum on the CPU, and
/// passes its gradient to both operands.
#[test]
fn the_residual_sum_op_adds_on_the_cpu() {
    let dev = Device::Cpu;
    let x = Var::from_tensor(&Tensor::randn(0f32, 1.0, (4, 16), &dev).unwrap()).unwrap();
    let r = Var::from_tensor(&Tensor::randn(0f32, 1.0, (4, 16), &dev).unwrap()).unwrap();
    let (w, b) = (
        Tensor::ones(16, candle_core::DType::F32, &dev).unwrap(),
        Tensor::zeros(16, candle_core::DType::F32, &dev).unwrap(),
    );
    let op = super::ResidualSum { weight: w, bias: b, eps: 1e-12, normalized: Default::default() };
    let sum = x.as_tensor().apply_op2(r.as_tensor(), op).unwrap();
    assert!(max_diff(&sum, &(x.as_tensor() + r.as_tensor()).unwrap()) < 1e-6);
    let grads = sum.sum_all().unwrap().backward().unwrap();
    for v in [&x, &r] {
        assert!(max_diff(grads.get(v).unwrap(), &v.as_tensor().ones_like().unwrap()) == 0.0);
    }
}

#[test]
fn layer_norm_and_all_three_gradients_match_the_composed_ops() {
    let dev = Device::Cpu;
    let (x, w, b) = (
        Var::from_tensor(&Tensor::randn(0.5f32, 2.0, (3, 7, 24), &dev).unwrap()).unwrap(),
        Var::from_tensor(&Tensor::randn(1f32, 0.3, 24, &dev).unwrap()).unwrap(),
        Var::from_tensor(&Tensor::randn(0f32, 0.3, 24, &dev).unwrap()).unwrap(),
    );
    let upstream = Tensor::randn(0f32, 1.0, (3, 7, 24), &dev).unwrap();
    let ours = x.as_tensor().apply_op3(w.as_tensor(), b.as_tensor(), super::LayerNormOp::new(1e-12)).unwrap();
    let reference = super::reference(x.as_tensor(), w.as_tensor(), b.as_tensor(), 1e-12).unwrap();
    assert!(max_diff(&ours, &reference) < 1e-5);
    let g1 = (ours * &upstream).unwrap().sum_all().unwrap().backward().unwrap();
    let g2 = (reference * &upstream).unwrap().sum_all().unwrap().backward().unwrap();
    for v in [&x, &w, &b] {
        let (a, r) = (g1.get(v).unwrap(), g2.get(v).unwrap());
        assert_eq!(a.dims(), r.dims());
        assert!(max_diff(a, r) < 2e-5, "gradient differs by {}", max_diff(a, r));
    }
}
