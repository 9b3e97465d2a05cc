//! The CUDA bodies of codon-ops' ops against their CPU bodies, on random inputs: forward values
//! and gradients, f32 and bf16. Built only with the `cuda` feature; run on a GPU machine:
//!
//! ```text
//! cargo test --release -p codon-ops --features cuda --test cuda_bodies --no-run
//! CODON_TEST_DEVICE=cuda:0 target/release/deps/cuda_bodies-*
//! ```
#![cfg(feature = "cuda")]

use candle_core::{DType, Device, Tensor, Var};
use codon_ops::activation::ScaledSoftmax;
use codon_ops::optim::AdamWStep;
use codon_ops::DropoutStream;

/// The GPU `CODON_TEST_DEVICE` names (`cuda:N`; `cuda:0` without it).
fn gpu() -> Device {
    let name = std::env::var("CODON_TEST_DEVICE").unwrap_or_else(|_| "cuda:0".into());
    let id =
        name.strip_prefix("cuda:").and_then(|i| i.parse().ok()).unwrap_or_else(|| panic!("CODON_TEST_DEVICE={name}"));
    Device::new_cuda(id).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// max |a − b| over host copies in f32.
fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
    let host = |t: &Tensor| t.to_device(&Device::Cpu).unwrap().to_dtype(DType::F32).unwrap();
    let d = (host(a) - host(b)).unwrap().abs().unwrap().flatten_all().unwrap();
    d.max(0).unwrap().to_scalar::<f32>().unwrap()
}

fn randn(shape: &[usize], std: f32, seed: u64) -> Tensor {
    // Seeded through the values themselves: candle's CPU generator is not seedable per call.
    let n: usize = shape.iter().product();
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let values: Vec<f32> = (0..n)
        .map(|_| {
            // Sum of four uniforms, centred: close enough to normal for these checks.
            let mut s = 0f32;
            for _ in 0..4 {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                s += (state >> 40) as f32 / (1u64 << 24) as f32;
            }
            (s - 2.0) * std * 1.7
        })
        .collect();
    Tensor::from_vec(values, shape, &Device::Cpu).unwrap()
}

/// f(x) and d(Σ f(x)⊙w)/dx on the CPU and on the GPU, for x in `dtype`.
fn value_and_grad(
    x: &Tensor,
    w: &Tensor,
    dtype: DType,
    f: &dyn Fn(&Tensor) -> candle_core::Result<Tensor>,
) -> [(Tensor, Tensor); 2] {
    [Device::Cpu, gpu()].map(|dev| {
        let v = Var::from_tensor(&x.to_dtype(dtype).unwrap().to_device(&dev).unwrap()).unwrap();
        let y = f(v.as_tensor()).unwrap();
        let w = w.to_dtype(DType::F32).unwrap().to_device(&dev).unwrap();
        let loss = (y.to_dtype(DType::F32).unwrap() * w).unwrap().sum_all().unwrap();
        let g = loss.backward().unwrap().get(v.as_tensor()).unwrap().clone();
        (y, g)
    })
}

fn check(what: &str, x: &Tensor, dtype: DType, tol: (f32, f32), f: &dyn Fn(&Tensor) -> candle_core::Result<Tensor>) {
    let w = randn(x.dims(), 1.0, 99);
    let [(y_cpu, g_cpu), (y_gpu, g_gpu)] = value_and_grad(x, &w, dtype, f);
    assert_eq!(y_gpu.dtype(), y_cpu.dtype(), "{what}");
    let (dy, dg) = (max_diff(&y_cpu, &y_gpu), max_diff(&g_cpu, &g_gpu));
    println!("{what} {dtype:?}: value {dy:.3e}, gradient {dg:.3e}");
    assert!(dy <= tol.0, "{what} {dtype:?}: values differ by {dy}");
    assert!(dg <= tol.1, "{what} {dtype:?}: gradients differ by {dg}");
}

#[test]
fn gelu_new_and_its_gradient() {
    let x = randn(&[64, 3072], 2.0, 1);
    // The CPU body computes gelu_new as x/(1 + e^(−2u)) with its own exp: a few ulps apart.
    check("gelu_new", &x, DType::F32, (2e-6, 1e-5), &codon_ops::gelu_new);
    check("gelu_new", &x, DType::BF16, (3e-2, 3e-2), &codon_ops::gelu_new);
}

#[test]
fn softmax_and_its_gradient() {
    let x = randn(&[3, 7, 517], 3.0, 2);
    check("softmax", &x, DType::F32, (1e-6, 1e-6), &codon_ops::softmax_last_dim_f32);
}

#[test]
fn scaled_softmax_with_a_key_bias_and_its_gradient() {
    let (b, h, rows, keys) = (2, 3, 33, 300);
    let x = randn(&[b, h, rows, keys], 4.0, 3);
    let penalty: Vec<f32> = (0..b * keys).map(|i| if i % 97 > 80 { f32::MIN } else { 0.0 }).collect();
    let bias = Tensor::from_vec(penalty, (b, 1, 1, keys), &Device::Cpu).unwrap();
    for (dtype, tol) in [(DType::F32, (1e-6, 1e-6)), (DType::BF16, (8e-3, 8e-3))] {
        let f = |t: &Tensor| {
            let bias = bias.to_device(t.device())?;
            let op = ScaledSoftmax::with_key_bias(0.125, &bias, t.dims())?.expect("the bias fits");
            t.apply_op1(op)
        };
        check("scaled_softmax", &x, dtype, tol, &f);
    }
}

#[test]
fn layer_norm_and_its_three_gradients() {
    let x = randn(&[300, 768], 1.5, 4);
    let (w, b) = (randn(&[768], 0.3, 5).affine(1.0, 1.0).unwrap(), randn(&[768], 0.3, 6));
    // Bounds for the value, dx, dw and db: dw and db sum 300 rows (values up to about 50, where a
    // bf16 step is 0.25).
    for (dtype, bounds) in [(DType::F32, [2e-5, 2e-5, 2e-4, 2e-4]), (DType::BF16, [3e-2, 2e-2, 0.5, 0.5])] {
        let upstream = randn(&[300, 768], 1.0, 7);
        let grads = [Device::Cpu, gpu()].map(|dev| {
            let on = |t: &Tensor| Var::from_tensor(&t.to_dtype(dtype).unwrap().to_device(&dev).unwrap()).unwrap();
            let (xv, wv, bv) = (on(&x), on(&w), on(&b));
            let y = codon_ops::layer_norm(xv.as_tensor(), wv.as_tensor(), bv.as_tensor(), 1e-12).unwrap();
            let up = upstream.to_device(&dev).unwrap();
            let g = (y.to_dtype(DType::F32).unwrap() * up).unwrap().sum_all().unwrap().backward().unwrap();
            [
                y,
                g.get(xv.as_tensor()).unwrap().clone(),
                g.get(wv.as_tensor()).unwrap().clone(),
                g.get(bv.as_tensor()).unwrap().clone(),
            ]
        });
        for (i, name) in ["value", "dx", "dw", "db"].iter().enumerate() {
            let d = max_diff(&grads[0][i], &grads[1][i]);
            println!("layer_norm {dtype:?} {name}: {d:.3e}");
            assert!(d <= bounds[i], "layer_norm {dtype:?} {name}: differs by {d}");
        }
    }
}

#[test]
fn dropout_draws_the_cpu_mask_bit_for_bit() {
    let x = randn(&[37, 1001], 1.0, 8);
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        let outputs = [Device::Cpu, gpu()].map(|dev| {
            let v = Var::from_tensor(&x.to_dtype(dtype).unwrap().to_device(&dev).unwrap()).unwrap();
            let mut stream = DropoutStream::new(0xDEAD_BEEF_0042);
            codon_ops::dropout(v.as_tensor(), 0.3, &mut stream).unwrap();
            let y = codon_ops::dropout(v.as_tensor(), 0.1, &mut stream).unwrap();
            let g = y.to_dtype(DType::F32).unwrap().sum_all().unwrap().backward().unwrap();
            (y.to_device(&Device::Cpu).unwrap(), g.get(v.as_tensor()).unwrap().to_device(&Device::Cpu).unwrap())
        });
        let bits = |t: &Tensor| t.to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(bits(&outputs[0].0), bits(&outputs[1].0), "{dtype:?}: the masked values differ");
        assert_eq!(bits(&outputs[0].1), bits(&outputs[1].1), "{dtype:?}: the gradients differ");
        let kept = bits(&outputs[1].0).iter().filter(|v| **v != 0.0).count() as f64 / x.elem_count() as f64;
        assert!((kept - 0.9).abs() < 0.01, "{dtype:?}: kept {kept}");
    }
}

#[test]
fn adamw_updates_match_the_cpu() {
    let n = 100_003;
    let (theta, g) = (randn(&[n], 1.0, 9), randn(&[n], 0.01, 10));
    let results = [Device::Cpu, gpu()].map(|dev| {
        let on = |t: &Tensor| t.to_device(&dev).unwrap();
        let theta = on(&theta).copy().unwrap();
        let (mut m, mut v) = (on(&randn(&[n], 0.01, 11)), on(&randn(&[n], 0.01, 12).sqr().unwrap()));
        let step = AdamWStep::new(3, 1e-3, 0.9, 0.999, 0.01, 1e-8);
        let kept = step.apply(&theta, &mut m, &mut v, &on(&g)).unwrap();
        assert!(kept.is_none(), "the update runs in place");
        [theta, m, v]
    });
    for (i, name) in ["theta", "m", "v"].iter().enumerate() {
        let d = max_diff(&results[0][i], &results[1][i]);
        assert!(d <= 1e-6, "adamw {name}: differs by {d}");
    }
}

#[test]
fn full_attention_trains_as_on_the_cpu() {
    let (b, n, heads) = (2, 96, 4);
    let x = randn(&[b, n, heads * 16], 1.0, 13);
    let penalty: Vec<f32> = (0..b * n).map(|i| if i >= 2 * n - 11 { f32::MIN } else { 0.0 }).collect();
    let key_bias = Tensor::from_vec(penalty, (b, 1, 1, n), &Device::Cpu).unwrap();
    let f = |t: &Tensor| {
        let bias = key_bias.to_device(t.device())?;
        codon_ops::attention::full_attention(t, t, t, heads, &bias, None)
    };
    check("full_attention", &x, DType::F32, (2e-6, 2e-5), &f);
}

#[test]
fn linear_layers_with_their_bias_activation_and_residual() {
    let (x, w, b, r) = (
        randn(&[4, 37, 96], 1.0, 14),
        randn(&[200, 96], 0.1, 15),
        randn(&[200], 0.5, 16),
        randn(&[4, 37, 200], 1.0, 17),
    );
    for (dtype, bound) in [(DType::F32, 1e-4), (DType::BF16, 6e-2)] {
        let up = randn(&[4, 37, 200], 1.0, 18);
        let results = [Device::Cpu, gpu()].map(|dev| {
            let on = |t: &Tensor| Var::from_tensor(&t.to_dtype(dtype).unwrap().to_device(&dev).unwrap()).unwrap();
            let (xv, wv, bv, rv) = (on(&x), on(&w), on(&b), on(&r));
            let gelu =
                codon_ops::linear::linear_gelu_new(xv.as_tensor(), wv.as_tensor(), Some(bv.as_tensor())).unwrap();
            let plain = codon_ops::linear(xv.as_tensor(), wv.as_tensor(), bv.as_tensor()).unwrap();
            let residual = codon_ops::linear::linear_residual(
                xv.as_tensor(),
                wv.as_tensor(),
                Some(bv.as_tensor()),
                Some(rv.as_tensor()),
            )
            .unwrap();
            let up = up.to_device(&dev).unwrap();
            let total = [&gelu, &plain, &residual]
                .iter()
                .map(|y| (y.to_dtype(DType::F32).unwrap() * &up).unwrap().sum_all().unwrap())
                .reduce(|a, b| (a + b).unwrap())
                .unwrap();
            let g = total.backward().unwrap();
            let grad = |v: &Var| g.get(v.as_tensor()).unwrap().clone();
            [gelu, plain, residual, grad(&xv), grad(&wv), grad(&bv), grad(&rv)]
        });
        for (i, name) in ["gelu", "plain", "residual", "dx", "dw", "db", "dr"].iter().enumerate() {
            let (d, scale) = (
                max_diff(&results[0][i], &results[1][i]),
                max_diff(&results[0][i], &results[0][i].zeros_like().unwrap()),
            );
            println!("linear {dtype:?} {name}: {d:.3e} of {scale:.3e}");
            assert!(d <= bound * scale.max(1.0), "linear {dtype:?} {name}: differs by {d} (largest {scale})");
        }
    }
}

#[test]
fn sum_of_squares_is_the_exact_sum_to_f32_rounding() {
    let g = randn(&[1_000_003], 0.01, 19);
    for dtype in [DType::F32, DType::BF16] {
        let values = g.to_dtype(dtype).unwrap().to_dtype(DType::F32).unwrap().to_vec1::<f32>().unwrap();
        let exact: f64 = values.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
        let t = codon_ops::optim::sum_of_squares(&g.to_dtype(dtype).unwrap().to_device(&gpu()).unwrap()).unwrap();
        let got = f64::from(t.to_device(&Device::Cpu).unwrap().to_scalar::<f32>().unwrap());
        println!("sum_of_squares {dtype:?}: {got} against {exact}");
        assert!(((got - exact) / exact).abs() <= 2e-6, "{dtype:?}: {got} against {exact}");
    }
}

#[test]
fn embedding_rows_and_their_gradient_skip_the_padding_row() {
    let table = randn(&[90, 64], 1.0, 20);
    let ids: Vec<u32> = (0..777).map(|i| (i * 37 % 90) as u32).collect();
    let ids = Tensor::from_vec(ids, (7, 111), &Device::Cpu).unwrap();
    let up = randn(&[7, 111, 64], 1.0, 21);
    for (dtype, bound) in [(DType::F32, 1e-5), (DType::BF16, 0.1)] {
        let [cpu, gpu] = [Device::Cpu, gpu()].map(|dev| {
            let w = Var::from_tensor(&table.to_dtype(dtype).unwrap().to_device(&dev).unwrap()).unwrap();
            let rows = codon_ops::embedding(w.as_tensor(), &ids.to_device(&dev).unwrap(), Some(3)).unwrap();
            let loss = (rows.to_dtype(DType::F32).unwrap() * up.to_device(&dev).unwrap()).unwrap().sum_all().unwrap();
            (rows, loss.backward().unwrap().get(w.as_tensor()).unwrap().clone())
        });
        assert_eq!(max_diff(&cpu.0, &gpu.0), 0.0, "{dtype:?}: the rows differ");
        let d = max_diff(&cpu.1, &gpu.1);
        println!("embedding {dtype:?}: gradient {d:.3e}");
        assert!(d <= bound, "{dtype:?}: gradients differ by {d}");
        let pad = gpu.1.to_device(&Device::Cpu).unwrap().get(3).unwrap().abs().unwrap().sum_all().unwrap();
        assert_eq!(
            pad.to_dtype(DType::F32).unwrap().to_scalar::<f32>().unwrap(),
            0.0,
            "the padding row got a gradient"
        );
    }
}

/// max |a − b| / max |b| over host copies in f32.
fn relative_diff(a: &Tensor, b: &Tensor) -> f32 {
    let scale = b.to_device(&Device::Cpu).unwrap().to_dtype(DType::F32).unwrap().abs().unwrap();
    let scale = scale.flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
    max_diff(a, b) / scale.max(f32::MIN_POSITIVE)
}

/// `BlockAttention`'s CUDA body (flash attention over the plan: no score in memory) against its
/// CPU body: the output and the three gradients, f32 and bf16, on full attention with dropout and
/// masked keys, and on BigBird-like key blocks with an absent slot, a block listed twice and
/// masked queries; heads of 64 dimensions (CodonTransformer's) and of 20 (a partial register
/// row). Sequence lengths are not multiples of the kernels' tiles.
#[test]
fn block_attention_runs_as_on_the_cpu() {
    use codon_ops::attention::block_attention::{AttentionPlan, BlockAttention, KeyRange};
    use codon_ops::DropoutDraw;
    let (b, h) = (2, 3);
    let full = |n: usize| {
        let key_penalty = (0..b * n).map(|i| if i >= 2 * n - 20 { -10_000.0 } else { 0.0 }).collect();
        AttentionPlan {
            batch: b,
            heads: h,
            seq_len: n,
            query_blocks: (0..n).step_by(64).map(|s| (s, 64.min(n - s))).collect(),
            keys: vec![vec![KeyRange { start: 0, len: n, penalty: 0.0 }]; h * n.div_ceil(64)],
            key_penalty,
            query_mask: None,
            scale: 0.125,
            dropout: Some(DropoutDraw { p: 0.1, seed: 11, offset: 2 }),
        }
    };
    let sparse = |blocks: usize, w: usize| {
        let n = blocks * w;
        let range = |block: usize, penalty: f32| KeyRange { start: block * w, len: w, penalty };
        let mut keys = Vec::new();
        for head in 0..h {
            for j in 0..blocks {
                if j == 0 || j == blocks - 1 {
                    keys.push(vec![KeyRange { start: 0, len: n, penalty: 0.0 }]);
                    continue;
                }
                let random = (j + head + 2) % blocks;
                keys.push(vec![
                    range(0, 0.0),
                    range(j - 1, if j == 1 { -3.0e4 } else { 0.0 }),
                    range(j, 0.0),
                    range(j + 1, 0.0),
                    range(blocks - 1, 0.0),
                    range(random, 0.0),
                ]);
            }
        }
        let padded = |i: usize| i / n == 1 && i % n >= n - 10;
        AttentionPlan {
            batch: b,
            heads: h,
            seq_len: n,
            query_blocks: (0..blocks).map(|j| (j * w, w)).collect(),
            keys,
            key_penalty: (0..b * n).map(|i| if padded(i) { -10_000.0 } else { 0.0 }).collect(),
            query_mask: Some((0..b * n).map(|i| if padded(i) { 0.0 } else { 1.0 }).collect()),
            scale: 0.125,
            dropout: None,
        }
    };
    for (what, plan, d) in [("full", full(150), 64), ("full", full(90), 20), ("sparse", sparse(7, 32), 64)] {
        let n = plan.seq_len;
        let inputs = [21, 22, 23].map(|seed| randn(&[b, n, h * d], 1.0, seed));
        let w = randn(&[b, n, h * d], 1.0, 24);
        for (dtype, tol) in [(DType::F32, 1e-5), (DType::BF16, 2e-2)] {
            let [cpu, gpu] = [Device::Cpu, gpu()].map(|dev| {
                let vars = inputs
                    .clone()
                    .map(|t| Var::from_tensor(&t.to_dtype(dtype).unwrap().to_device(&dev).unwrap()).unwrap());
                let [q, k, v] = vars.each_ref().map(|v| v.as_tensor());
                let y = q.apply_op3(k, v, BlockAttention::new(plan.clone())).unwrap();
                let loss = (y.to_dtype(DType::F32).unwrap() * w.to_device(&dev).unwrap()).unwrap().sum_all().unwrap();
                let grads = loss.backward().unwrap();
                let [dq, dk, dv] = vars.each_ref().map(|v| grads.get(v.as_tensor()).unwrap().clone());
                [y, dq, dk, dv]
            });
            for (name, (c, g)) in ["output", "dq", "dk", "dv"].iter().zip(cpu.iter().zip(&gpu)) {
                assert_eq!(g.dtype(), dtype, "{what} {name}");
                let diff = relative_diff(g, c);
                println!("block attention {what} n={n} d={d} {dtype:?} {name}: {diff:.3e} of the largest");
                assert!(
                    diff <= tol,
                    "block attention {what} n={n} d={d} {dtype:?}: {name} differs by {diff} of the largest"
                );
            }
        }
    }
}
