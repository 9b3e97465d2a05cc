//! The bf16 paths against the f32 product.
use super::*;

/// out + x·Wᵀ in f64 from the bf16-rounded operands: what both paths compute, up to f32
/// rounding of the sums.
fn reference(out: &[f32], x: &[f32], w: &[bf16], rows: usize, k: usize, n: usize, round_x: bool) -> Vec<f64> {
    let xr = |v: f32| if round_x { f64::from(bf16::from_f32(v).to_f32()) } else { f64::from(v) };
    (0..rows * n)
        .map(|i| {
            let (r, c) = (i / n, i % n);
            f64::from(out[i]) + (0..k).map(|j| xr(x[r * k + j]) * f64::from(w[c * k + j].to_f32())).sum::<f64>()
        })
        .collect()
}

/// Every path this machine has, against the reference, on shapes with every kind of tail:
/// odd k (below and above one rounding step of 16 and one AMX step of 32), row and column
/// tails of each path's blocks, a single row.
#[test]
fn each_path_matches_the_reference_on_awkward_shapes() {
    eprintln!("bf16 linear on this machine: {:?} of {:?}", bf16_path(), available_paths());
    let shapes = [(1, 1, 1), (9, 7, 33), (5, 37, 20), (17, 64, 48), (3, 768, 90), (502, 96, 70), (33, 70, 65)];
    for path in available_paths() {
        for (rows, k, n) in shapes {
            let x: Vec<f32> = (0..rows * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 23.0).collect();
            let w: Vec<bf16> = (0..n * k).map(|i| bf16::from_f32(((i * 53 % 89) as f32 - 44.0) / 31.0)).collect();
            let start: Vec<f32> = (0..rows * n).map(|i| (i % 5) as f32).collect();
            let mut out = start.clone();
            linear_on(path, &mut out, &x, &w, rows, k, n).unwrap();
            let round_x = path != Bf16Path::WidenedF32;
            let want = reference(&start, &x, &w, rows, k, n, round_x);
            for (i, (&got, &want)) in out.iter().zip(&want).enumerate() {
                let scale: f64 = 1.0 + want.abs();
                assert!(
                    (f64::from(got) - want).abs() <= 1e-5 * scale * k as f64,
                    "{path:?} {rows}×{k}×{n} at {i}: {got} vs {want}"
                );
            }
        }
    }
}

#[test]
fn the_portable_path_agrees_with_the_fast_one() {
    let (rows, k, n) = (13, 150, 40);
    let x: Vec<f32> = (0..rows * k).map(|i| (i as f32 * 0.37).sin()).collect();
    let w: Vec<bf16> = (0..n * k).map(|i| bf16::from_f32((i as f32 * 0.11).cos())).collect();
    let mut fast = vec![0.0; rows * n];
    linear_on(bf16_path(), &mut fast, &x, &w, rows, k, n).unwrap();
    let mut portable = vec![0.0; rows * n];
    linear_on(Bf16Path::WidenedF32, &mut portable, &x, &w, rows, k, n).unwrap();
    // The fast path rounds x to bf16 (8 bits of mantissa): sums of 150 terms agree to ~1e-2.
    for (a, b) in fast.iter().zip(&portable) {
        assert!((a - b).abs() <= 2e-2 * (1.0 + b.abs()), "{a} vs {b}");
    }
}

fn gelu_new_f64(z: f64) -> f64 {
    0.5 * z * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (z + 0.044715 * z * z * z)).tanh())
}

/// bf16 activations in, bf16 out, with every part of the epilogue, on each path: x read in
/// place (even k) or copied into pairs (odd k), tails of rows and columns.
#[test]
fn bf16_rows_with_bias_residual_and_gelu_match_the_reference() {
    for path in available_paths() {
        for (rows, k, n) in [(11, 64, 45), (9, 33, 70), (1, 768, 96)] {
            let x: Vec<bf16> = (0..rows * k).map(|i| bf16::from_f32(((i * 29 % 97) as f32 - 48.0) / 40.0)).collect();
            let w: Vec<bf16> = (0..n * k).map(|i| bf16::from_f32(((i * 53 % 89) as f32 - 44.0) / 300.0)).collect();
            let bias: Vec<f32> = (0..n).map(|c| c as f32 * 0.01 - 0.2).collect();
            let residual: Vec<bf16> = (0..rows * n).map(|i| bf16::from_f32((i % 7) as f32 * 0.1)).collect();
            let packed = PackedWeight::for_path(path, &w, n, k).unwrap();
            let epilogue = Epilogue {
                bias: Some(&bias),
                residual: Some(Values::Bf16(&residual)),
                activation: Some(crate::fast_math::gelu_new_in_place),
            };
            let mut out = vec![bf16::ZERO; rows * n];
            linear(Values::Bf16(&x), &packed, rows, &epilogue, ValuesMut::Bf16(&mut out)).unwrap();
            for i in 0..rows * n {
                let (r, c) = (i / n, i % n);
                let dot: f64 =
                    (0..k).map(|j| f64::from(x[r * k + j].to_f32()) * f64::from(w[c * k + j].to_f32())).sum();
                let want = gelu_new_f64(dot + f64::from(bias[c]) + f64::from(residual[i].to_f32()));
                let got = f64::from(out[i].to_f32());
                // One bf16 rounding of the output (2⁻⁸ relative) and f32 sums.
                assert!(
                    (got - want).abs() <= 4e-3 * want.abs() + 1e-4,
                    "{path:?} {rows}×{k}×{n} at {i}: {got} vs {want}"
                );
            }
        }
    }
}

#[test]
fn a_weight_packed_for_a_path_this_cpu_lacks_is_an_error() {
    let w = vec![bf16::ONE; 4];
    for path in [Bf16Path::Amx, Bf16Path::Avx512Bf16] {
        if !available_paths().contains(&path) {
            assert!(PackedWeight::for_path(path, &w, 2, 2).is_err());
        }
    }
    assert!(PackedWeight::for_path(Bf16Path::WidenedF32, &w, 3, 2).is_err(), "4 values are not 3×2");
}
