//! The op's bodies against its reference.
use candle_core::{Device, Tensor, Var};

use super::{cross_entropy, reference, IGNORE_INDEX};
use crate::f32_views::max_abs_diff;

#[test]
fn loss_and_gradient_match_the_composed_reference() {
    let dev = &Device::Cpu;
    let x = Var::from_tensor(&Tensor::randn(0f32, 2.0, (9, 13), dev).unwrap()).unwrap();
    let labels = Tensor::new(&[3i64, IGNORE_INDEX, 0, 12, 5, IGNORE_INDEX, 7, 7, 1], dev).unwrap();
    let ours = cross_entropy(x.as_tensor(), &labels).unwrap();
    let want = reference(x.as_tensor(), &labels).unwrap();
    assert!(max_abs_diff(&ours, &want) < 1e-5);
    let g_ours = (&ours * 3.0).unwrap().backward().unwrap();
    let g_want = (&want * 3.0).unwrap().backward().unwrap();
    assert!(max_abs_diff(g_ours.get(&x).unwrap(), g_want.get(&x).unwrap()) < 1e-6);
    // Ignored rows get no gradient; no labelled row gives NaN, as torch.
    let row1 = g_ours.get(&x).unwrap().get(1).unwrap().abs().unwrap().sum_all().unwrap();
    assert_eq!(row1.to_scalar::<f32>().unwrap(), 0.0);
    let none = Tensor::new(&[IGNORE_INDEX; 9], dev).unwrap();
    assert!(cross_entropy(x.as_tensor(), &none).unwrap().to_scalar::<f32>().unwrap().is_nan());
    // A label out of range is an error, not a panic.
    let bad = Tensor::new(&[13i64, 0, 0, 0, 0, 0, 0, 0, 0], dev).unwrap();
    assert!(cross_entropy(x.as_tensor(), &bad).is_err());
}
