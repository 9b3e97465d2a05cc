//! The op's bodies against its reference.
use candle_core::{DType, Device, Tensor, Var};

use super::{embedding, reference};
use crate::f32_views::max_abs_diff;

#[test]
fn rows_and_table_gradient_match_the_composed_reference() {
    let dev = &Device::Cpu;
    for dtype in [DType::F32, DType::BF16] {
        // Fixed values in [-1, 1]: a bf16 row gradient sums at most three of them, so the two
        // orders of summation stay within 2e-2 (random normals once went past it).
        let values = |n: usize, f: f32| (0..n).map(|i| (i as f32 * f).sin()).collect::<Vec<f32>>();
        let w = Tensor::from_vec(values(35, 0.7), (7, 5), dev).unwrap().to_dtype(dtype).unwrap();
        let w = Var::from_tensor(&w).unwrap();
        let ids = Tensor::new(&[[3u32, 0, 6, 3], [1, 3, 0, 0]], dev).unwrap();
        let g = Tensor::from_vec(values(40, 1.3), (2, 4, 5), dev).unwrap().to_dtype(dtype).unwrap();
        for pad in [None, Some(0), Some(3)] {
            let ours = embedding(w.as_tensor(), &ids, pad).unwrap();
            let want = reference(w.as_tensor(), &ids.flatten_all().unwrap(), pad).unwrap().reshape((2, 4, 5)).unwrap();
            assert_eq!(ours.dims(), [2, 4, 5]);
            assert_eq!(max_abs_diff(&ours, &want), 0.0);
            let g_ours = (&ours * &g).unwrap().sum_all().unwrap().backward().unwrap();
            let g_want = (&want * &g).unwrap().sum_all().unwrap().backward().unwrap();
            let (a, b) = (g_ours.get(&w).unwrap(), g_want.get(&w).unwrap());
            assert!(max_abs_diff(a, b) < 2e-2, "{dtype:?} {pad:?}");
            // The padding row gets nothing; row 2 is never looked up.
            let row_sum = |i: usize| max_abs_diff(&a.get(i).unwrap(), &a.get(i).unwrap().zeros_like().unwrap());
            assert_eq!(pad.map_or(0.0, row_sum), 0.0);
            assert_eq!(row_sum(2), 0.0);
        }
    }
}

#[test]
fn bad_ids_and_padding_are_errors() {
    let dev = &Device::Cpu;
    let w = Tensor::zeros((4, 2), DType::F32, dev).unwrap();
    assert!(embedding(&w, &Tensor::new(&[0u32, 4], dev).unwrap(), None).is_err());
    assert!(embedding(&w, &Tensor::new(&[-1i64], dev).unwrap(), None).is_err());
    assert!(embedding(&w, &Tensor::new(&[1u32], dev).unwrap(), Some(4)).is_err());
}
