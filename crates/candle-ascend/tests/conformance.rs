//! Op conformance: every implemented op, per dtype and layout (contiguous, transposed, sliced
//! with an offset, broadcast), on `npu-sim:0` against candle's CPU backend, under the emulated
//! part that `CANDLE_ASCEND_SIM_SOC` selects (CI runs an A2 part and a 910A).
use candle_core::{DType, Device, IndexOp, Result, Tensor, D};

fn sim() -> Device {
    candle_ascend::parse_device("npu-sim:0").expect("the emulated toolkit loads")
}

fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 1e-5,
        DType::F16 => 2e-3,
        DType::BF16 => 1.6e-2,
        _ => 0.0,
    }
}

/// Run `f` on CPU and on npu-sim with the same inputs and compare element by element.
fn check(name: &str, inputs: &[Tensor], f: impl Fn(&[Tensor]) -> Result<Tensor>) {
    check_scaled(name, inputs, 1.0, f)
}

/// As `check`, with the dtype's tolerance times `scale` (for sums, whose rounding in f16/bf16
/// depends on the accumulation order: the CPU accumulates in the dtype, aclnn in f32).
fn check_scaled(name: &str, inputs: &[Tensor], scale: f64, f: impl Fn(&[Tensor]) -> Result<Tensor>) {
    let dev = sim();
    let expected = f(inputs).unwrap_or_else(|e| panic!("{name} on cpu: {e}"));
    let on_sim: Vec<Tensor> = inputs.iter().map(|t| t.to_device(&dev).unwrap()).collect();
    let got = f(&on_sim).unwrap_or_else(|e| panic!("{name} on npu-sim: {e}"));
    assert!(got.device().is_custom(), "{name}: result left the device");
    assert_eq!(got.dims(), expected.dims(), "{name}: shape");
    assert_eq!(got.dtype(), expected.dtype(), "{name}: dtype");
    let got = got.to_device(&Device::Cpu).unwrap();
    let tol = tolerance(expected.dtype()) * scale;
    let a: Vec<f64> = expected.to_dtype(DType::F64).unwrap().flatten_all().unwrap().to_vec1().unwrap();
    let b: Vec<f64> = got.to_dtype(DType::F64).unwrap().flatten_all().unwrap().to_vec1().unwrap();
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        let ok = (x - y).abs() <= tol * (1.0 + x.abs()) || (x.is_nan() && y.is_nan());
        assert!(ok, "{name} [{:?}]: element {i}: cpu {x} vs npu-sim {y}", expected.dtype());
    }
}

fn input(shape: (usize, usize), dtype: DType, seed: u64) -> Tensor {
    let n = shape.0 * shape.1;
    let v: Vec<f32> = (0..n).map(|i| (((i as u64 * 2654435761 + seed * 97) % 1000) as f32 / 250.0) - 2.0).collect();
    Tensor::from_vec(v, shape, &Device::Cpu).unwrap().to_dtype(dtype).unwrap()
}

/// The float dtypes the emulated part has: BF16 only from Ascend910B1 on.
fn floats() -> Vec<DType> {
    let dev = sim();
    let soc = candle_ascend::ascend_device(&dev).unwrap().soc().clone();
    if soc.has_bf16() {
        vec![DType::F32, DType::F16, DType::BF16]
    } else {
        vec![DType::F32, DType::F16]
    }
}

/// The Atlas training series computes FP32 matmuls on its FP16 cube (cubeMathType USE_FP16).
fn fp32_matmul_scale() -> f64 {
    let dev = sim();
    match candle_ascend::ascend_device(&dev).unwrap().soc().family {
        candle_ascend::SocFamily::AtlasTraining => 300.0,
        _ => 1.0,
    }
}

/// The four layouts of an (6, 8) operand: contiguous, transposed, sliced with an offset, broadcast.
fn layouts(x: &Tensor) -> Vec<(&'static str, Tensor)> {
    vec![
        ("contiguous", x.clone()),
        ("transposed", x.t().unwrap()),
        ("sliced", x.narrow(0, 1, 4).unwrap().narrow(1, 2, 5).unwrap()),
        ("broadcast", x.i((.., 0..1)).unwrap().broadcast_as((6, 8)).unwrap()),
    ]
}

#[test]
fn unary_ops() {
    type Op = fn(&Tensor) -> Result<Tensor>;
    let ops: [(&str, Op); 20] = [
        ("exp", |x| x.exp()),
        ("log", |x| (x.abs()? + 0.5)?.log()),
        ("sqrt", |x| x.abs()?.sqrt()),
        ("tanh", |x| x.tanh()),
        ("neg", |x| x.neg()),
        ("abs", |x| x.abs()),
        ("sqr", |x| x.sqr()),
        ("recip", |x| (x.abs()? + 1.0)?.recip()),
        ("gelu", |x| x.gelu()),
        ("gelu_erf", |x| x.gelu_erf()),
        ("erf", |x| x.erf()),
        ("sin", |x| x.sin()),
        ("cos", |x| x.cos()),
        ("relu", |x| x.relu()),
        ("silu", |x| x.silu()),
        ("powf", |x| (x.abs()? + 0.1)?.powf(1.7)),
        ("ceil", |x| x.ceil()),
        ("floor", |x| x.floor()),
        ("round", |x| (x * 1.3)?.round()),
        ("sign", |x| x.sign()),
    ];
    for dtype in floats() {
        for (layout, x) in layouts(&input((6, 8), dtype, 1)) {
            for (name, op) in ops {
                check(&format!("{name} {layout}"), std::slice::from_ref(&x), |t| op(&t[0]));
            }
        }
    }
}

#[test]
fn binary_ops_with_broadcasting() {
    type Op = fn(&Tensor, &Tensor) -> Result<Tensor>;
    let ops: [(&str, Op); 6] = [
        ("add", |a, b| a.broadcast_add(b)),
        ("sub", |a, b| a.broadcast_sub(b)),
        ("mul", |a, b| a.broadcast_mul(b)),
        ("div", |a, b| a.broadcast_div(&(b.abs()? + 1.0)?)),
        ("maximum", |a, b| a.broadcast_maximum(b)),
        ("minimum", |a, b| a.broadcast_minimum(b)),
    ];
    for dtype in floats() {
        let b = input((6, 8), dtype, 2);
        let row = input((1, 8), dtype, 3);
        for (layout, a) in layouts(&input((6, 8), dtype, 1)) {
            let b = match layout {
                "sliced" => b.narrow(0, 0, 4).unwrap().narrow(1, 0, 5).unwrap(),
                "transposed" => b.t().unwrap(),
                _ => b.clone(),
            };
            for (name, op) in ops {
                check(&format!("{name} {layout}"), &[a.clone(), b.clone()], |t| op(&t[0], &t[1]));
                if layout == "contiguous" || layout == "broadcast" {
                    check(&format!("{name} {layout} row"), &[a.clone(), row.clone()], |t| op(&t[0], &t[1]));
                }
            }
        }
    }
    // Integer arithmetic, as candle uses it for ids and masks.
    let ids = Tensor::new(&[[3u32, 7, 1], [0, 2, 9]], &Device::Cpu).unwrap();
    check("u32 add", &[ids.clone(), ids.clone()], |t| &t[0] + &t[1]);
    let l = ids.to_dtype(DType::I64).unwrap();
    check("i64 mul", &[l.clone(), l.clone()], |t| &t[0] * &t[1]);
}

#[test]
fn affine_cmp_where_and_casts() {
    for dtype in floats() {
        let a = input((6, 8), dtype, 4);
        let b = input((6, 8), dtype, 5);
        for (layout, x) in layouts(&a) {
            check(&format!("affine {layout}"), std::slice::from_ref(&x), |t| t[0].affine(1.5, -0.25));
            let y = match layout {
                "sliced" => b.narrow(0, 0, 4).unwrap().narrow(1, 0, 5).unwrap(),
                "transposed" => b.t().unwrap(),
                _ => b.clone(),
            };
            check(&format!("eq {layout}"), &[x.clone(), x.clone()], |t| t[0].eq(&t[1]));
            check(&format!("ne {layout}"), &[x.clone(), y.clone()], |t| t[0].ne(&t[1]));
            check(&format!("lt {layout}"), &[x.clone(), y.clone()], |t| t[0].lt(&t[1]));
            check(&format!("le {layout}"), &[x.clone(), y.clone()], |t| t[0].le(&t[1]));
            check(&format!("gt {layout}"), &[x.clone(), y.clone()], |t| t[0].gt(&t[1]));
            check(&format!("ge {layout}"), &[x.clone(), y.clone()], |t| t[0].ge(&t[1]));
            check(&format!("where {layout}"), &[x.clone(), y.clone()], |t| t[0].ge(&t[1])?.where_cond(&t[0], &t[1]));
            for to in floats().into_iter().chain([DType::F64]) {
                check(&format!("{dtype:?}->{to:?} {layout}"), std::slice::from_ref(&x), |t| t[0].to_dtype(to));
            }
        }
    }
    let mask = Tensor::new(&[[1u8, 0, 1], [0, 0, 1]], &Device::Cpu).unwrap();
    check("u8 -> f16", std::slice::from_ref(&mask), |t| t[0].to_dtype(DType::F16));
    let ids = Tensor::new(&[[3u32, 7, 1], [0, 2, 9]], &Device::Cpu).unwrap();
    check("u32 -> f32", std::slice::from_ref(&ids), |t| t[0].to_dtype(DType::F32));
    check("u32 -> i64", std::slice::from_ref(&ids), |t| t[0].to_dtype(DType::I64));
    check("where u32 mask", &[ids.clone(), ids.ones_like().unwrap()], |t| {
        t[0].gt(&t[1])?.where_cond(&t[0], &t[1].zeros_like()?)
    });
}

#[test]
fn reductions() {
    for dtype in floats() {
        for (layout, x) in layouts(&input((6, 8), dtype, 6)) {
            let x = std::slice::from_ref(&x);
            check_scaled(&format!("sum last {layout}"), x, 4.0, |t| t[0].sum_keepdim(D::Minus1));
            check_scaled(&format!("sum first {layout}"), x, 4.0, |t| t[0].sum_keepdim(0));
            check_scaled(&format!("sum all {layout}"), x, 4.0, |t| t[0].sum_all());
            check(&format!("max {layout}"), x, |t| t[0].max_keepdim(D::Minus1));
            check(&format!("min {layout}"), x, |t| t[0].min_keepdim(0));
            if layout != "broadcast" {
                check(&format!("argmax {layout}"), x, |t| t[0].argmax_keepdim(D::Minus1));
                check(&format!("argmin {layout}"), x, |t| t[0].argmin(0));
            }
        }
    }
}

#[test]
fn matmuls() {
    for dtype in floats() {
        let a = input((6, 8), dtype, 7);
        let b = input((8, 5), dtype, 8);
        let sc = if dtype == DType::F32 { fp32_matmul_scale() } else { 1.0 };
        let check =
            |name: &str, inputs: &[Tensor], f: fn(&[Tensor]) -> Result<Tensor>| check_scaled(name, inputs, sc, f);
        check("mm", &[a.clone(), b.clone()], |t| t[0].matmul(&t[1]));
        let bt = input((5, 8), dtype, 9);
        check("mm transposed rhs", &[a.clone(), bt.clone()], |t| t[0].matmul(&t[1].t()?));
        check("mm transposed lhs", &[a.clone(), input((6, 5), dtype, 3)], |t| t[0].t()?.matmul(&t[1]));
        check("mm sliced", &[a.clone(), b.clone()], |t| t[0].narrow(1, 2, 4)?.matmul(&t[1].narrow(0, 1, 4)?));
        let q = input((24, 8), dtype, 10).reshape((2, 3, 4, 8)).unwrap();
        let k = input((24, 8), dtype, 11).reshape((2, 3, 4, 8)).unwrap();
        check("batched q·kᵀ", &[q.clone(), k.clone()], |t| t[0].matmul(&t[1].t()?));
        check("batched kᵀ·q", &[q.clone(), k.clone()], |t| t[1].t()?.matmul(&t[0]));
        let w = input((8, 5), dtype, 12);
        check("broadcast weight", &[q.clone(), w], |t| t[0].broadcast_matmul(&t[1]));
    }
}

#[test]
fn indexing() {
    for dtype in floats() {
        let table = input((10, 4), dtype, 13);
        let ids32 = Tensor::new(&[3u32, 0, 9, 3], &Device::Cpu).unwrap();
        let ids64 = ids32.to_dtype(DType::I64).unwrap();
        for ids in [&ids32, &ids64] {
            check("index_select rows", &[table.clone(), ids.clone()], |t| t[0].index_select(&t[1], 0));
            let cols = ids.ge(4f64).unwrap().where_cond(&ids.zeros_like().unwrap(), ids).unwrap();
            check("index_select cols", &[table.clone(), cols], |t| t[0].index_select(&t[1], 1));
            let src = input((4, 4), dtype, 14);
            check("index_add", &[table.clone(), ids.clone(), src], |t| t[0].index_add(&t[1], &t[2], 0));
        }
        let g = Tensor::new(&[[1u32, 0, 3], [2, 2, 0]], &Device::Cpu).unwrap();
        let x = input((2, 4), dtype, 15);
        check("gather", &[x.clone(), g.clone()], |t| t[0].gather(&t[1], 1));
        let src = input((2, 3), dtype, 16);
        check("scatter_add", &[x, g, src], |t| t[0].scatter_add(&t[1], &t[2], 1));
    }
}

#[test]
fn copies_fills_and_transfers() {
    for dtype in floats() {
        for (layout, x) in layouts(&input((6, 8), dtype, 17)) {
            check(&format!("contiguous {layout}"), std::slice::from_ref(&x), |t| t[0].contiguous());
            check(&format!("cat {layout}"), std::slice::from_ref(&x), |t| Tensor::cat(&[&t[0], &t[0]], 1));
        }
        check("zeros_like", &[input((3, 5), dtype, 1)], |t| t[0].zeros_like());
        check("ones_like", &[input((3, 5), dtype, 1)], |t| t[0].ones_like());
        check("full", &[input((3, 5), dtype, 1)], |t| Tensor::full(2.5f32, (3, 5), t[0].device())?.to_dtype(dtype));
    }
    let dev = sim();
    for v in [vec![1u8, 2, 3], vec![0, 255]] {
        assert_eq!(Tensor::new(v.as_slice(), &dev).unwrap().to_vec1::<u8>().unwrap(), v);
    }
    let i = Tensor::new(&[-5i64, 1 << 40], &dev).unwrap();
    assert_eq!(i.to_vec1::<i64>().unwrap(), vec![-5, 1 << 40]);
}

#[test]
fn random_fills_have_the_right_moments() {
    let dev = sim();
    let u = Tensor::rand(-1f32, 3.0, 20_000, &dev).unwrap().to_vec1::<f32>().unwrap();
    let mean = u.iter().sum::<f32>() / u.len() as f32;
    assert!(u.iter().all(|&x| (-1.0..3.0).contains(&x)) && (mean - 1.0).abs() < 0.05, "uniform mean {mean}");
    let n = Tensor::randn(2f32, 0.5, 20_000, &dev).unwrap().to_vec1::<f32>().unwrap();
    let mean = n.iter().sum::<f32>() / n.len() as f32;
    let var = n.iter().map(|x| (x - mean).powi(2)).sum::<f32>() / n.len() as f32;
    assert!((mean - 2.0).abs() < 0.02 && (var.sqrt() - 0.5).abs() < 0.02, "normal mean {mean} std {}", var.sqrt());
    let again = Tensor::randn(2f32, 0.5, 20_000, &dev).unwrap().to_vec1::<f32>().unwrap();
    assert_ne!(n, again, "each draw must advance the generator");
}

/// A CustomOp with a CPU body only, as a library written for candle's CPU backend brings.
struct RowCumsum;

impl candle_core::CustomOp1 for RowCumsum {
    fn name(&self) -> &'static str {
        "row_cumsum"
    }

    fn cpu_fwd(
        &self,
        storage: &candle_core::CpuStorage,
        layout: &candle_core::Layout,
    ) -> Result<(candle_core::CpuStorage, candle_core::Shape)> {
        let candle_core::CpuStorage::F32(data) = storage else { candle_core::bail!("row_cumsum: f32 only") };
        let (rows, cols) = layout.shape().dims2()?;
        let (start, _) = layout.contiguous_offsets().expect("contiguous input");
        let mut out = data[start..start + rows * cols].to_vec();
        for row in out.chunks_mut(cols) {
            for i in 1..cols {
                row[i] += row[i - 1];
            }
        }
        Ok((candle_core::CpuStorage::F32(out), layout.shape().clone()))
    }
}

#[test]
fn custom_ops_fall_back_through_the_host() {
    let x = input((4, 6), DType::F32, 18);
    check("row_cumsum", std::slice::from_ref(&x), |t| t[0].apply_op1(RowCumsum));
}

/// Every unary and binary op type that the vendored candle-core declares has a backend-slot tag
/// (and so a row in the op table's exhaustive match). After a rebase onto an upstream that adds
/// an op, this fails until the patch tags it.
#[test]
fn every_candle_op_type_has_a_tag() {
    use candle_core::custom_backend::{BinaryOpKind, UnaryOpKind};
    let op_rs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../third_party/candle-core/src/op.rs");
    let text = std::fs::read_to_string(op_rs).unwrap();
    let declared = |macro_call: &str, impl_line: &str| -> Vec<String> {
        let mut names: Vec<String> = text
            .lines()
            .filter_map(|l| {
                let l = l.trim();
                l.strip_prefix(macro_call)
                    .or_else(|| l.strip_prefix(impl_line))
                    .map(|rest| rest.split(|c: char| !c.is_alphanumeric()).next().unwrap_or("").to_string())
            })
            .filter(|n| !n.is_empty() && n != "op")
            .collect();
        names.sort();
        names
    };
    let unary = declared("unary_op!(", "impl UnaryOpT for ");
    let binary = declared("bin_op!(", "impl BinaryOpT for ");
    let mut tagged_unary: Vec<String> = UnaryOpKind::ALL.iter().map(|k| format!("{k:?}")).collect();
    let mut tagged_binary: Vec<String> = BinaryOpKind::ALL.iter().map(|k| format!("{k:?}")).collect();
    tagged_unary.sort();
    tagged_binary.sort();
    assert_eq!(unary, tagged_unary, "unary op types in candle-core vs tags");
    assert_eq!(binary, tagged_binary, "binary op types in candle-core vs tags");
}
