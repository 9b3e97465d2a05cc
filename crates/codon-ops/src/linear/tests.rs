//! The linear layer's bodies against the reference.
use candle_core::{DType, Device, Tensor, Var};

use super::cuda::{AddBias, AddBiasResidual, BiasGeluNew, ColumnSums};
use super::grad_accumulate::MatmulAdd;
use super::{Epilogue, Linear};

use crate::f32_views::max_abs_diff as max_diff;

/// A layer keeps its packed bf16 weight only where nothing can change the weight under it;
/// a view of a `Var` that is updated gives the updated result.
#[test]
fn a_layer_keeps_a_packed_weight_only_when_nothing_else_can_change_it() {
    let dev = Device::Cpu;
    let w = Tensor::randn(0f32, 1.0, (40, 24), &dev).unwrap().to_dtype(DType::BF16).unwrap();
    let b = Tensor::randn(0f32, 1.0, 40, &dev).unwrap().to_dtype(DType::BF16).unwrap();
    let x = Tensor::randn(0f32, 1.0, (3, 5, 24), &dev).unwrap().to_dtype(DType::BF16).unwrap();
    let fresh = super::linear_residual(&x, &w, Some(&b), None).unwrap();

    let layer = super::LinearLayer::new(w.clone(), Some(b.clone()));
    assert!(!layer.is_packed());
    let first = layer.forward(&x).unwrap();
    assert!(layer.is_packed(), "a weight nothing else holds is packed once");
    let again = layer.forward(&x).unwrap();
    assert_eq!(max_diff(&first, &fresh), 0.0);
    assert_eq!(max_diff(&again, &fresh), 0.0);

    // A detached view of a Var: not a Var itself, but its storage changes with the Var.
    let var = Var::from_tensor(&w).unwrap();
    let view = var.as_tensor().detach();
    let shared = super::LinearLayer::new(view, Some(b.clone()));
    shared.forward(&x).unwrap();
    assert!(!shared.is_packed(), "a weight sharing its storage is packed per call");
    var.set(&w.zeros_like().unwrap()).unwrap();
    let after = shared.forward(&x).unwrap();
    let bias_only = b.broadcast_as((3, 5, 40)).unwrap();
    assert_eq!(max_diff(&after, &bias_only), 0.0, "the update shows in the next forward pass");
}

/// The Ascend input-gradient accumulation is `acc + g·w` on the CPU.
#[test]
fn matmul_add_accumulates_the_product_on_the_cpu() {
    let dev = Device::Cpu;
    let acc = Tensor::randn(0f32, 1.0, (7, 12), &dev).unwrap();
    let g = Tensor::randn(0f32, 1.0, (7, 5), &dev).unwrap();
    let w = Tensor::randn(0f32, 1.0, (5, 12), &dev).unwrap();
    let fused = acc.apply_op3_no_bwd(&g, &w, &MatmulAdd).unwrap();
    assert!(max_diff(&fused, &(&acc + g.matmul(&w).unwrap()).unwrap()) < 1e-5);
    assert!(acc.apply_op3_no_bwd(&g, &w.t().unwrap().contiguous().unwrap(), &MatmulAdd).is_err());
}

/// The bias ops shaped for the CUDA GEMM's epilogue run on the CPU too, as their composed
/// references: values and (for bias + GELU) gradients.
#[test]
fn the_bias_ops_run_their_composed_reference_on_the_cpu() {
    let dev = Device::Cpu;
    let x = Tensor::randn(0f32, 1.0, (3, 5, 8), &dev).unwrap();
    let b = Tensor::randn(0f32, 1.0, 8, &dev).unwrap();
    let r = Tensor::randn(0f32, 1.0, (3, 5, 8), &dev).unwrap();
    let plus_bias = x.broadcast_add(&b).unwrap();
    assert!(max_diff(&x.apply_op2(&b, AddBias).unwrap(), &plus_bias) < 1e-6);
    let with_residual = x.apply_op3(&b, &r, AddBiasResidual).unwrap();
    assert!(max_diff(&with_residual, &(&plus_bias + &r).unwrap()) < 1e-6);
    let sums = x.apply_op1_no_bwd(&ColumnSums).unwrap();
    assert!(max_diff(&sums, &x.reshape((15, 8)).unwrap().sum(0).unwrap()) < 1e-5);

    let (xv, bv) = (Var::from_tensor(&x).unwrap(), Var::from_tensor(&b).unwrap());
    let fused = xv.as_tensor().apply_op2(bv.as_tensor(), BiasGeluNew).unwrap();
    let composed = xv.as_tensor().broadcast_add(bv.as_tensor()).unwrap().gelu().unwrap();
    assert!(max_diff(&fused, &composed) < 1e-5);
    let upstream = Tensor::randn(0f32, 1.0, (3, 5, 8), &dev).unwrap();
    let grads = |y: &Tensor| (y * &upstream).unwrap().sum_all().unwrap().backward().unwrap();
    let (gf, gc) = (grads(&fused), grads(&composed));
    for v in [&xv, &bv] {
        assert!(max_diff(gf.get(v).unwrap(), gc.get(v).unwrap()) < 1e-4);
    }
    let bf = x.to_dtype(DType::BF16).unwrap().apply_op2(&b.to_dtype(DType::BF16).unwrap(), AddBias).unwrap();
    assert_eq!(bf.dtype(), DType::BF16);
}

#[test]
fn the_layer_entries_match_composed_ops_with_and_without_gradients() {
    let dev = Device::Cpu;
    let x = Tensor::randn(0f32, 1.0, (2, 5, 24), &dev).unwrap();
    let w = Tensor::randn(0f32, 1.0, (40, 24), &dev).unwrap();
    let b = Tensor::randn(0f32, 1.0, 40, &dev).unwrap();
    let r = Tensor::randn(0f32, 1.0, (2, 5, 40), &dev).unwrap();
    let want = x.reshape((10, 24)).unwrap().matmul(&w.t().unwrap()).unwrap().broadcast_add(&b).unwrap();
    let want = want.reshape((2, 5, 40)).unwrap();
    let with_residual = super::linear_residual(&x, &w, Some(&b), Some(&r)).unwrap();
    assert!(max_diff(&super::linear_residual(&x, &w, Some(&b), None).unwrap(), &want) < 1e-5);
    assert!(max_diff(&with_residual, &(&want + &r).unwrap()) < 1e-5);
    assert!(max_diff(&super::linear_gelu_new(&x, &w, Some(&b)).unwrap(), &want.gelu().unwrap()) < 1e-5);
    // A gradient-tracking input takes the training op and still agrees.
    let v = Var::from_tensor(&x).unwrap();
    assert!(max_diff(&super::linear_residual(v.as_tensor(), &w, Some(&b), Some(&r)).unwrap(), &with_residual) < 1e-5);
    assert!(max_diff(&super::linear_gelu_new(v.as_tensor(), &w, Some(&b)).unwrap(), &want.gelu().unwrap()) < 1e-5);
}

#[test]
fn every_epilogue_and_all_three_gradients_match_composed_ops() {
    let dev = &Device::Cpu;
    let (rows, in_f, out_f) = (7, 24, 40);
    let x = Var::from_tensor(&Tensor::randn(0f32, 1.0, (1, rows, in_f), dev).unwrap()).unwrap();
    let w = Var::from_tensor(&Tensor::randn(0f32, 0.3, (out_f, in_f), dev).unwrap()).unwrap();
    let b = Var::from_tensor(&Tensor::randn(0f32, 1.0, out_f, dev).unwrap()).unwrap();
    let weights = Tensor::randn(0f32, 1.0, (1, rows, out_f), dev).unwrap();
    let mask: Vec<f32> = (0..rows * out_f).map(|i| if i % 5 == 2 { 0.0 } else { 1.25 }).collect();
    let z = x.as_tensor().broadcast_matmul(&w.as_tensor().t().unwrap()).unwrap().broadcast_add(b.as_tensor()).unwrap();
    let cases = [
        (Epilogue::Identity, z.clone()),
        (Epilogue::GeluNew, z.gelu().unwrap()),
        (Epilogue::Dropout(mask.clone()), (&z * Tensor::from_vec(mask, (1, rows, out_f), dev).unwrap()).unwrap()),
    ];
    for (epilogue, expected) in cases {
        let name = match epilogue {
            Epilogue::Identity => "identity",
            Epilogue::GeluNew => "gelu_new",
            Epilogue::Dropout(_) => "dropout",
        };
        let ours = x.as_tensor().apply_op3(w.as_tensor(), b.as_tensor(), Linear::new(epilogue)).unwrap();
        assert!(max_diff(&ours, &expected) < 1e-5, "{name}: output");
        let g_ours = (ours * &weights).unwrap().sum_all().unwrap().backward().unwrap();
        let g_ref = (&expected * &weights).unwrap().sum_all().unwrap().backward().unwrap();
        for (what, v) in [("x", &x), ("W", &w), ("b", &b)] {
            let d = max_diff(g_ours.get(v).unwrap(), g_ref.get(v).unwrap());
            assert!(d < 1e-4, "{name}: d{what} differs by {d}");
        }
    }
    // bf16 operands compute in f32 and keep their dtype.
    let xb = x.as_tensor().to_dtype(DType::BF16).unwrap();
    let (wb, bb) = (w.as_tensor().to_dtype(DType::BF16).unwrap(), b.as_tensor().to_dtype(DType::BF16).unwrap());
    let ours = xb.apply_op3(&wb, &bb, Linear::new(Epilogue::Identity)).unwrap();
    assert_eq!(ours.dtype(), DType::BF16);
    assert!(max_diff(&ours, &z) < 0.1);
    // Shapes that do not fit are an error, not a panic.
    let err = x.as_tensor().apply_op3(b.as_tensor(), b.as_tensor(), Linear::new(Epilogue::Identity));
    assert!(err.is_err());
}
