//! The tiny BigBird fixture model on the emulated NPU (`npu-sim:0`) against the CPU: logits,
//! loss and every parameter gradient, in each attention mode, f32 and bf16.
use std::collections::HashMap;
use std::path::PathBuf;

use candle_core::{DType, Device, Tensor, Var};
use codon_model::bigbird::{load_model, masked_lm_loss, AttentionType, ForwardMode, ModelInput};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/bigbird")
}

fn sim() -> Device {
    candle_ascend::parse_device("npu-sim:0").expect("the emulated toolkit loads")
}

/// The backend counts launches per device, and every test here launches on `npu-sim:0`: they
/// run one at a time, so a test's count holds only its own launches.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static DEVICE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    DEVICE.lock().unwrap_or_else(|p| p.into_inner())
}

fn inputs(case: &str, device: &Device) -> (ModelInput, Tensor) {
    let t = candle_core::safetensors::load(fixtures().join(case).join("inputs.safetensors"), device).unwrap();
    let input = ModelInput {
        input_ids: t["input_ids"].clone(),
        token_type_ids: t["token_type_ids"].clone(),
        attention_mask: t["attention_mask"].clone(),
    };
    (input, t["labels"].clone())
}

/// Logits, loss and named gradients of one forward/backward pass on `device`.
fn run(device: &Device, dtype: DType, case: &str, mode: ForwardMode) -> (Tensor, f32, HashMap<String, Tensor>) {
    let m = load_model(fixtures(), None, device, dtype).unwrap();
    let (model, vars) = m.trainable(dtype).unwrap();
    let (input, labels) = inputs(case, device);
    let logits = model.forward(&input, mode).unwrap();
    let loss = masked_lm_loss(&logits, &labels).unwrap();
    let grads = loss.backward().unwrap();
    let grads = vars
        .iter()
        .filter_map(|(n, v)| grads.get(v).map(|g| (n.clone(), g.to_device(&Device::Cpu).unwrap())))
        .collect();
    let logits = logits.to_device(&Device::Cpu).unwrap().to_dtype(DType::F32).unwrap();
    let loss = loss.to_device(&Device::Cpu).unwrap().to_dtype(DType::F32).unwrap().to_scalar::<f32>().unwrap();
    (logits, loss, grads)
}

fn norm(t: &Tensor) -> f32 {
    t.to_dtype(DType::F32).unwrap().sqr().unwrap().sum_all().unwrap().sqrt().unwrap().to_scalar::<f32>().unwrap()
}

/// ‖a − b‖ / max(‖b‖, floor). The floor matters for the key biases, whose gradient is zero in
/// exact arithmetic (softmax ignores a per-query shift): both sides hold only rounding noise.
fn rel_diff_floor(a: &Tensor, b: &Tensor, floor: f32) -> f32 {
    norm(&(a.to_dtype(DType::F32).unwrap() - b.to_dtype(DType::F32).unwrap()).unwrap()) / norm(b).max(floor)
}

fn rel_diff(a: &Tensor, b: &Tensor) -> f32 {
    let a = a.to_dtype(DType::F32).unwrap();
    let b = b.to_dtype(DType::F32).unwrap();
    let norm = |t: &Tensor| t.sqr().unwrap().sum_all().unwrap().sqrt().unwrap().to_scalar::<f32>().unwrap();
    norm(&(&a - &b).unwrap()) / norm(&b).max(1e-4)
}

fn compare(dtype: DType, tolerance: f32) {
    let dev = sim();
    let modes = [
        ForwardMode::eval(AttentionType::OriginalFull),
        ForwardMode::eval(AttentionType::BlockSparse),
        ForwardMode::train(AttentionType::BlockSparse, 7),
    ];
    for case in ["case_pad_b2_45", "case_even_b2_64"] {
        for mode in modes {
            let (cl, closs, cg) = run(&Device::Cpu, dtype, case, mode);
            let (sl, sloss, sg) = run(&dev, dtype, case, mode);
            let what = format!("{case} {mode:?} {dtype:?}");
            let dl = rel_diff(&sl, &cl);
            eprintln!("{what}: logits rel {dl:.2e}, loss {sloss} vs {closs}");
            assert!(dl <= tolerance, "{what}: logits differ by {dl:e}");
            assert!(((sloss - closs) / closs).abs() <= tolerance, "{what}: loss {sloss} vs {closs}");
            assert_eq!(sg.len(), cg.len(), "{what}: gradient count");
            let floor = 1e-3 * cg.values().map(norm).fold(0f32, f32::max);
            for (name, g) in &cg {
                let d = rel_diff_floor(&sg[name], g, floor);
                assert!(d <= tolerance * 10.0, "{what}: gradient of {name} differs by {d:e}");
            }
        }
    }
}

fn soc() -> candle_ascend::Soc {
    candle_ascend::ascend_device(&sim()).unwrap().soc().clone()
}

#[test]
fn tiny_bigbird_f32_matches_cpu_forward_and_backward() {
    let _serial = serial();
    // The Atlas training series runs FP32 matmuls on its FP16 cube (cubeMathType USE_FP16).
    let tolerance = if soc().family == candle_ascend::SocFamily::AtlasTraining { 2e-3 } else { 1e-5 };
    compare(DType::F32, tolerance);
}

#[test]
fn tiny_bigbird_bf16_matches_cpu_within_bf16_rounding_or_is_refused_without_bf16() {
    let _serial = serial();
    if soc().has_bf16() {
        // The fixture README gives torch's own bf16 gap: about 1 % of the logits' scale.
        compare(DType::BF16, 2e-2);
    } else {
        let Err(err) = load_model(fixtures(), None, &sim(), DType::BF16) else { panic!("BF16 must be refused") };
        let err = err.to_string();
        assert!(err.contains("BF16") && err.contains(&soc().name), "{err}");
    }
}

#[test]
fn tiny_bigbird_f16_matches_cpu_within_f16_rounding() {
    let _serial = serial();
    compare(DType::F16, 2e-2);
}

/// candle's backward stores a node's first gradient as it is (the vendored patch's
/// `GradStore::accumulate`), where upstream adds it to a fresh tensor of zeros: a fill and an
/// add per node. Counted by the backend on the emulated part.
#[test]
fn backward_does_not_fill_zeros_for_first_gradients() {
    let _serial = serial();
    let dev = sim();
    let ascend = candle_ascend::ascend_device(&dev).unwrap();
    let x = Var::from_tensor(&Tensor::new(&[1f32, 2.0, 3.0], &Device::Cpu).unwrap().to_device(&dev).unwrap()).unwrap();
    let w = Tensor::new(&[0.5f32, -1.0, 2.0], &Device::Cpu).unwrap().to_device(&dev).unwrap();
    let loss = ((x.as_tensor() * &w).unwrap().exp().unwrap() + x.as_tensor()).unwrap().sum_all().unwrap();
    let before = ascend.counters();
    let grads = loss.backward().unwrap();
    let launched = ascend.counters().since(&before).launches;
    // d/dx [exp(w·x) + x] = w·exp(w·x) + 1
    let got: Vec<f32> = grads.get(x.as_tensor()).unwrap().to_vec1().unwrap();
    for (g, (xi, wi)) in got.iter().zip([(1f32, 0.5f32), (2.0, -1.0), (3.0, 2.0)]) {
        let want = wi * (wi * xi).exp() + 1.0;
        assert!((g - want).abs() <= 1e-5 * want.abs().max(1.0), "{got:?}");
    }
    assert_eq!(launched.get("aclnnInplaceZero"), None, "{launched:?}");
    // One add where the two paths to x meet; upstream adds once per contribution.
    assert_eq!(launched.get("aclnnAdd").copied().unwrap_or(0), 1, "{launched:?}");
}

/// `codon_ops::layer_norm` on the emulated part: its Ascend body (aclnnLayerNorm, keeping the
/// row statistics, and aclnnLayerNormBackward for the three gradients) gives the CPU's values
/// and gradients, in two launches for a forward and backward where the composed reference takes
/// dozens.
#[test]
fn layer_norm_op_matches_the_cpu_in_a_few_launches() {
    let _serial = serial();
    let dev = sim();
    let ascend = candle_ascend::ascend_device(&dev).unwrap();
    let cpu = Device::Cpu;
    let x = Tensor::randn(0.3f32, 1.7, (2, 5, 24), &cpu).unwrap();
    let w = Tensor::randn(1f32, 0.2, 24, &cpu).unwrap();
    let b = Tensor::randn(0f32, 0.2, 24, &cpu).unwrap();
    let up = Tensor::randn(0f32, 1.0, (2, 5, 24), &cpu).unwrap();
    let run = |device: &Device| {
        let vars: Vec<Var> =
            [&x, &w, &b].iter().map(|t| Var::from_tensor(&t.to_device(device).unwrap()).unwrap()).collect();
        let y = codon_ops::layer_norm(vars[0].as_tensor(), vars[1].as_tensor(), vars[2].as_tensor(), 1e-12).unwrap();
        let loss = (&y * up.to_device(device).unwrap()).unwrap().sum_all().unwrap();
        let grads = loss.backward().unwrap();
        let mut out = vec![y.to_device(&cpu).unwrap()];
        out.extend(vars.iter().map(|v| grads.get(v.as_tensor()).unwrap().to_device(&cpu).unwrap()));
        out
    };
    let want = run(&cpu);
    let before = ascend.counters();
    let got = run(&dev);
    let launched = ascend.counters().since(&before).launches;
    for (name, (a, b)) in ["y", "dx", "dw", "db"].iter().zip(want.iter().zip(&got)) {
        let diff = rel_diff(a, b);
        assert!(diff < 1e-5, "{name}: relative difference {diff}");
    }
    assert_eq!(launched.get("aclnnLayerNorm"), Some(&1), "{launched:?}");
    assert_eq!(launched.get("aclnnLayerNormBackward"), Some(&1), "{launched:?}");
    // The composed reference divides by √(var + eps); the fused bodies launch neither op.
    assert!(!launched.contains_key("aclnnSqrt") && !launched.contains_key("aclnnDiv"), "{launched:?}");

    // An f32 weight and bias beside f16 activations get f32 gradients.
    let half = Var::from_tensor(&x.to_dtype(DType::F16).unwrap().to_device(&dev).unwrap()).unwrap();
    let (w32, b32) = (
        Var::from_tensor(&w.to_device(&dev).unwrap()).unwrap(),
        Var::from_tensor(&b.to_device(&dev).unwrap()).unwrap(),
    );
    let y = codon_ops::layer_norm(half.as_tensor(), w32.as_tensor(), b32.as_tensor(), 1e-5).unwrap();
    let up16 = up.to_dtype(DType::F16).unwrap().to_device(&dev).unwrap();
    let grads = (&y * up16).unwrap().sum_all().unwrap().backward().unwrap();
    let dtypes = [&half, &w32, &b32].map(|v| grads.get(v.as_tensor()).unwrap().dtype());
    assert_eq!(dtypes, [DType::F16, DType::F32, DType::F32]);
    for (name, (v, want)) in ["dw", "db"].iter().zip([&w32, &b32].iter().zip(&want[2..])) {
        let got = grads.get(v.as_tensor()).unwrap().to_device(&cpu).unwrap();
        let diff = rel_diff(want, &got);
        assert!(diff < 2e-2, "{name} beside f16 activations: relative difference {diff}");
    }
}

/// `codon_ops::linear` on the emulated part: its Ascend body gives the CPU's values and the
/// three gradients in four launches (one aclnnAddmm forward; two matmuls and one sum
/// backward), with no transposed copy of dW and no zero fill.
#[test]
fn linear_op_matches_the_cpu_without_transposed_copies() {
    let _serial = serial();
    let dev = sim();
    let ascend = candle_ascend::ascend_device(&dev).unwrap();
    let cpu = Device::Cpu;
    let x = Tensor::randn(0f32, 1.0, (2, 5, 24), &cpu).unwrap();
    let w = Tensor::randn(0f32, 0.3, (40, 24), &cpu).unwrap();
    let b = Tensor::randn(0f32, 1.0, 40, &cpu).unwrap();
    let up = Tensor::randn(0f32, 1.0, (2, 5, 40), &cpu).unwrap();
    // Forward and backward of `Σ linear(x, W, b)·up`, counting the device's launches between.
    let run = |device: &Device| {
        let vars: Vec<Var> =
            [&x, &w, &b].iter().map(|t| Var::from_tensor(&t.to_device(device).unwrap()).unwrap()).collect();
        let up = up.to_device(device).unwrap();
        let before = ascend.counters();
        let y = codon_ops::linear(vars[0].as_tensor(), vars[1].as_tensor(), vars[2].as_tensor()).unwrap();
        let grads = (&y * up).unwrap().sum_all().unwrap().backward().unwrap();
        let launched = ascend.counters().since(&before).launches;
        let mut out = vec![y];
        out.extend(vars.iter().map(|v| grads.get(v.as_tensor()).unwrap().clone()));
        (out, launched)
    };
    // The reference: the composed ops on the CPU.
    let want = {
        let vars: Vec<Var> = [&x, &w, &b].iter().map(|t| Var::from_tensor(t).unwrap()).collect();
        let y = codon_ops::linear::reference(vars[0].as_tensor(), vars[1].as_tensor(), vars[2].as_tensor()).unwrap();
        let grads = (&y * &up).unwrap().sum_all().unwrap().backward().unwrap();
        let mut out = vec![y];
        out.extend(vars.iter().map(|v| grads.get(v.as_tensor()).unwrap().clone()));
        out
    };
    // The Atlas training series runs FP32 matmuls on its FP16 cube.
    let npu_tolerance = if ascend.soc().has_bf16() { 1e-5 } else { 2e-3 };
    for (device, tolerance) in [(cpu.clone(), 1e-5), (dev.clone(), npu_tolerance)] {
        let (got, launched) = run(&device);
        let got: Vec<Tensor> = got.iter().map(|t| t.to_device(&cpu).unwrap()).collect();
        for (name, (a, b)) in ["y", "dx", "dW", "db"].iter().zip(want.iter().zip(&got)) {
            let diff = rel_diff(b, a);
            assert!(diff < tolerance, "{:?} {name}: relative difference {diff}", device.location());
        }
        if device.is_custom() {
            let expected: std::collections::BTreeMap<String, u64> = [
                ("aclnnAddmm", 1),       // y = b + x·Wᵀ
                ("aclnnBatchMatMul", 2), // dx, dW
                ("aclnnReduceSum", 2),   // db, and the test's sum
                // The test's Σ y·up: the product and y's gradient (the constant `up` gets none),
                // the ones of the sum's gradient, and that broadcast gradient stored contiguous.
                ("aclnnMul", 2),
                ("aclnnInplaceFillScalar", 1),
                ("aclnnInplaceCopy", 1),
            ]
            .into_iter()
            .map(|(op, n)| (op.to_string(), n))
            .collect();
            assert_eq!(launched, expected);
        }
    }
}

/// `codon_ops::cross_entropy` (the masked-LM loss) on the emulated part: aclnnLogSoftmax and
/// aclnnNLLLoss forward, aclnnNLLLossBackward and aclnnLogSoftmaxBackward backward give the
/// composed reference's loss and gradient, ignored rows included, in four launches and a fill.
#[test]
fn cross_entropy_op_matches_the_reference_in_four_launches() {
    let _serial = serial();
    use codon_model::bigbird::IGNORE_INDEX;
    let dev = sim();
    let ascend = candle_ascend::ascend_device(&dev).unwrap();
    let cpu = Device::Cpu;
    let logits = Tensor::randn(0f32, 2.0, (9, 13), &cpu).unwrap();
    let labels = Tensor::new(&[3i64, IGNORE_INDEX, 0, 12, 5, IGNORE_INDEX, 7, 7, 1], &cpu).unwrap();
    let x = Var::from_tensor(&logits).unwrap();
    let want = codon_ops::cross_entropy::reference(x.as_tensor(), &labels).unwrap();
    let want_grad = (&want * 3.0).unwrap().backward().unwrap().get(&x).unwrap().clone();
    let xd = Var::from_tensor(&logits.to_device(&dev).unwrap()).unwrap();
    let labels_d = labels.to_device(&dev).unwrap();
    let before = ascend.counters();
    let loss = codon_ops::cross_entropy(xd.as_tensor(), &labels_d).unwrap();
    let grads = loss.backward().unwrap();
    let launched = ascend.counters().since(&before).launches;
    let got_grad = (grads.get(&xd).unwrap() * 3.0).unwrap().to_device(&cpu).unwrap();
    assert!(rel_diff(&loss.to_device(&cpu).unwrap(), &want) < 1e-6);
    assert!(rel_diff(&got_grad, &want_grad) < 1e-6, "gradient");
    let expected: std::collections::BTreeMap<String, u64> = [
        ("aclnnLogSoftmax", 1),
        ("aclnnNLLLoss", 1),
        ("aclnnNLLLossBackward", 1),
        ("aclnnLogSoftmaxBackward", 1),
        // The unit class weights, and backward's seed gradient of 1.
        ("aclnnInplaceFillScalar", 2),
    ]
    .into_iter()
    .map(|(op, n)| (op.to_string(), n))
    .collect();
    assert_eq!(launched, expected);
}

/// `codon_ops::embedding` on the emulated part: aclnnEmbedding forward and
/// aclnnEmbeddingDenseBackward backward give the CPU's rows and table gradient, padding row
/// without gradient, one launch each way and no composed gather.
#[test]
fn embedding_op_matches_the_cpu_in_one_launch_each_way() {
    let _serial = serial();
    let dev = sim();
    let ascend = candle_ascend::ascend_device(&dev).unwrap();
    let cpu = Device::Cpu;
    let table = Tensor::randn(0f32, 1.0, (11, 24), &cpu).unwrap();
    let ids = Tensor::new(&[[3u32, 0, 10, 3, 5], [0, 0, 7, 3, 1]], &cpu).unwrap();
    let up = Tensor::randn(0f32, 1.0, (2, 5, 24), &cpu).unwrap();
    for dtype in [DType::F32, DType::F16] {
        let w = Var::from_tensor(&table.to_dtype(dtype).unwrap()).unwrap();
        let want = codon_ops::embedding(w.as_tensor(), &ids, Some(0)).unwrap();
        let want_grad = (&want * up.to_dtype(dtype).unwrap()).unwrap().sum_all().unwrap().backward().unwrap();
        let wd = Var::from_tensor(&w.as_tensor().to_device(&dev).unwrap()).unwrap();
        let (ids_d, up_d) = (ids.to_device(&dev).unwrap(), up.to_dtype(dtype).unwrap().to_device(&dev).unwrap());
        let before = ascend.counters();
        let got = codon_ops::embedding(wd.as_tensor(), &ids_d, Some(0)).unwrap();
        let grads = (&got * &up_d).unwrap().sum_all().unwrap().backward().unwrap();
        let launched = ascend.counters().since(&before).launches;
        assert_eq!(rel_diff(&got.to_device(&cpu).unwrap(), &want), 0.0, "{dtype:?} rows");
        let got_grad = grads.get(&wd).unwrap().to_device(&cpu).unwrap();
        assert!(rel_diff(&got_grad, want_grad.get(&w).unwrap()) < 1e-3, "{dtype:?} gradient");
        let pad_row = got_grad.get(0).unwrap().to_dtype(DType::F32).unwrap().abs().unwrap().sum_all().unwrap();
        assert_eq!(pad_row.to_scalar::<f32>().unwrap(), 0.0);
        for (op, n) in
            [("aclnnEmbedding", 1), ("aclnnEmbeddingDenseBackward", 1), ("aclnnIndexSelect", 0), ("aclnnIndexAdd", 0)]
        {
            assert_eq!(launched.get(op).copied().unwrap_or(0), n, "{dtype:?} {op}: {launched:?}");
        }
    }
}

/// `codon_ops::dropout` on the emulated part: aclnnDropoutGenMaskV2 + aclnnDropoutDoMask
/// forward and aclnnDropoutDoMask backward draw the CPU's mask bit for bit, nothing uploaded.
#[test]
fn dropout_op_draws_the_cpu_mask_on_the_device() {
    let _serial = serial();
    let dev = sim();
    let ascend = candle_ascend::ascend_device(&dev).unwrap();
    let cpu = Device::Cpu;
    let x = Tensor::randn(0f32, 1.0, (3, 5, 67), &cpu).unwrap();
    for dtype in [DType::F32, DType::F16] {
        let xc = Var::from_tensor(&x.to_dtype(dtype).unwrap()).unwrap();
        let mut stream = codon_ops::DropoutStream::new(11);
        codon_ops::dropout(xc.as_tensor(), 0.2, &mut stream).unwrap();
        let want = codon_ops::dropout(xc.as_tensor(), 0.2, &mut stream).unwrap();
        let want_grad = want.sum_all().unwrap().backward().unwrap().get(&xc).unwrap().clone();
        let xd = Var::from_tensor(&xc.as_tensor().to_device(&dev).unwrap()).unwrap();
        let mut stream = codon_ops::DropoutStream::new(11);
        codon_ops::dropout(xd.as_tensor(), 0.2, &mut stream).unwrap();
        let before = ascend.counters();
        let got = codon_ops::dropout(xd.as_tensor(), 0.2, &mut stream).unwrap();
        let grads = got.sum_all().unwrap().backward().unwrap();
        let spent = ascend.counters().since(&before);
        // f32 agrees exactly (the same bits); f16 within rounding: the device scales in f32,
        // the CPU multiplies by the f16 multiplier.
        let tolerance = if dtype == DType::F32 { 0.0 } else { 1e-3 };
        assert!(rel_diff(&got.to_device(&cpu).unwrap(), &want) <= tolerance, "{dtype:?} values");
        assert!(
            rel_diff(&grads.get(&xd).unwrap().to_device(&cpu).unwrap(), &want_grad) <= tolerance,
            "{dtype:?} gradient"
        );
        assert_eq!(spent.uploads, 0, "{dtype:?}: the mask is drawn on the device");
        let launched = spent.launches;
        for (op, n) in [("aclnnDropoutGenMaskV2", 1), ("aclnnDropoutDoMask", 2), ("aclnnMul", 0)] {
            assert_eq!(launched.get(op).copied().unwrap_or(0), n, "{dtype:?} {op}: {launched:?}");
        }
    }
}

/// `codon_ops::add_layer_norm` on the emulated part: on an A2, one aclnnAddLayerNorm forward
/// (no separate add or LayerNorm) and LayerNormBackward of the kept sum give the CPU's values and
/// all four gradients; a 910A, which lacks the operator, adds and then normalizes.
#[test]
fn add_layer_norm_matches_the_cpu_in_one_launch_where_the_part_has_it() {
    let _serial = serial();
    let dev = sim();
    let ascend = candle_ascend::ascend_device(&dev).unwrap();
    let cpu = Device::Cpu;
    let vars = |dev: &Device| -> Vec<Var> {
        [(2usize, 5usize, 24usize), (2, 5, 24), (1, 1, 24), (1, 1, 24)]
            .iter()
            .enumerate()
            .map(|(i, &(a, b, c))| {
                let t = Tensor::randn(0f32, 1.0, (a, b, c), &cpu).unwrap().affine(1.0, i as f64 * 0.1).unwrap();
                let t = if a == 1 { t.flatten_all().unwrap() } else { t };
                Var::from_tensor(&t.to_device(dev).unwrap()).unwrap()
            })
            .collect()
    };
    let (vc, vd) = (vars(&cpu), vars(&dev));
    for (c, d) in vc.iter().zip(&vd) {
        d.set(&c.as_tensor().to_device(&dev).unwrap()).unwrap();
    }
    let up = Tensor::randn(0f32, 1.0, (2, 5, 24), &cpu).unwrap();
    let run = |v: &[Var], up: &Tensor| {
        let y =
            codon_ops::add_layer_norm(v[0].as_tensor(), v[1].as_tensor(), v[2].as_tensor(), v[3].as_tensor(), 1e-12)
                .unwrap();
        let grads = (&y * up).unwrap().sum_all().unwrap().backward().unwrap();
        (y, v.iter().map(|x| grads.get(x).unwrap().to_device(&Device::Cpu).unwrap()).collect::<Vec<_>>())
    };
    let (want, want_grads) = run(&vc, &up);
    let before = ascend.counters();
    let (got, got_grads) = run(&vd, &up.to_device(&dev).unwrap());
    let launched = ascend.counters().since(&before).launches;
    assert!(rel_diff(&got.to_device(&cpu).unwrap(), &want) < 1e-5);
    for (g, w) in got_grads.iter().zip(&want_grads) {
        assert!(rel_diff(g, w) < 1e-5);
    }
    let fused = candle_ascend::fused::aclnn_runs(
        candle_ascend::soc::AclnnOp::AddLayerNorm,
        vd[0].as_tensor().device(),
        DType::F32,
    );
    let count = |op: &str| launched.get(op).copied().unwrap_or(0);
    assert_eq!(
        (count("aclnnAddLayerNorm"), count("aclnnLayerNorm")),
        if fused { (1, 0) } else { (0, 1) },
        "{launched:?}"
    );
    assert_eq!(count("aclnnLayerNormBackward"), 1);
}

/// `codon_ops::attention::flash_attention` on an emulated A2: one aclnnFlashAttentionScore
/// forward (after one aclnnDropoutGenMaskV2) and one aclnnFlashAttentionScoreGrad backward give
/// the composed attention's output and q, k, v gradients, with masked keys and dropout drawing
/// the CPU's bits. A 910A has no FlashAttentionScore and the op reports so.
#[test]
fn flash_attention_matches_the_composed_attention_where_the_part_has_it() {
    let _serial = serial();
    let dev = sim();
    let ascend = candle_ascend::ascend_device(&dev).unwrap();
    let cpu = Device::Cpu;
    let (b, n, heads, d) = (2, 9, 3, 8);
    let probe = Tensor::zeros((b, n, heads * d), DType::F32, &dev).unwrap();
    if !codon_ops::attention::fused_attention_runs(&probe) {
        assert!(!soc().has_bf16(), "only the 910A lacks FlashAttentionScore here");
        return;
    }
    let qkv: Vec<Tensor> = (0..3).map(|_| Tensor::randn(0f32, 1.0, (b, n, heads * d), &cpu).unwrap()).collect();
    // Sequence 1 has its last three keys masked, as padding.
    let mut bias = vec![0f32; b * n];
    bias[n + 6..].iter_mut().for_each(|x| *x = f32::MIN);
    let key_bias = Tensor::from_vec(bias, (b, 1, 1, n), &cpu).unwrap();
    let up = Tensor::randn(0f32, 1.0, (b, n, heads * d), &cpu).unwrap();
    let vc: Vec<Var> = qkv.iter().map(|t| Var::from_tensor(t).unwrap()).collect();
    let mask =
        codon_ops::attention::reference_dropout(&mut codon_ops::DropoutStream::new(3), (b, heads, n), 0.1, DType::F32)
            .unwrap();
    let want = codon_ops::attention::reference(
        vc[0].as_tensor(),
        vc[1].as_tensor(),
        vc[2].as_tensor(),
        heads,
        &key_bias,
        Some(&mask),
    )
    .unwrap();
    let want_grads = (&want * &up).unwrap().sum_all().unwrap().backward().unwrap();
    let vd: Vec<Var> = qkv.iter().map(|t| Var::from_tensor(&t.to_device(&dev).unwrap()).unwrap()).collect();
    let mut stream = codon_ops::DropoutStream::new(3);
    let before = ascend.counters();
    let got = codon_ops::attention::flash_attention(
        vd[0].as_tensor(),
        vd[1].as_tensor(),
        vd[2].as_tensor(),
        heads,
        &key_bias.to_device(&dev).unwrap(),
        Some((&mut stream, 0.1)),
    )
    .unwrap();
    let grads = (&got * up.to_device(&dev).unwrap()).unwrap().sum_all().unwrap().backward().unwrap();
    let launched = ascend.counters().since(&before).launches;
    assert!(rel_diff(&got.to_device(&cpu).unwrap(), &want) < 1e-5, "output");
    for (c, dv) in vc.iter().zip(&vd) {
        let g = grads.get(dv).unwrap().to_device(&cpu).unwrap();
        assert!(rel_diff(&g, want_grads.get(c).unwrap()) < 1e-5, "gradient");
    }
    let count = |op: &str| launched.get(op).copied().unwrap_or(0);
    assert_eq!(
        [count("aclnnFlashAttentionScore"), count("aclnnFlashAttentionScoreGrad"), count("aclnnDropoutGenMaskV2")],
        [1, 1, 1],
        "{launched:?}"
    );
    assert_eq!(count("aclnnSoftmax") + count("aclnnBatchMatMul"), 0, "{launched:?}");
}

/// `codon_ops::softmax_last_dim_f32` and `codon_ops::gelu_new` on the emulated part: their Ascend
/// bodies (aclnnSoftmax/aclnnSoftmaxBackward, aclnnGeluV2/aclnnGeluBackwardV2) give the CPU's
/// values and gradients, one launch each way.
#[test]
fn softmax_and_gelu_ops_match_the_cpu_in_one_launch_each_way() {
    let _serial = serial();
    let dev = sim();
    let ascend = candle_ascend::ascend_device(&dev).unwrap();
    let cpu = Device::Cpu;
    let x = Tensor::randn(0f32, 2.0, (3, 4, 33), &cpu).unwrap();
    let up = Tensor::randn(0f32, 1.0, (3, 4, 33), &cpu).unwrap();
    type Op = fn(&Tensor) -> candle_core::Result<Tensor>;
    let ops: [(&str, Op, [&str; 2]); 2] = [
        ("softmax", codon_ops::softmax_last_dim_f32, ["aclnnSoftmax", "aclnnSoftmaxBackward"]),
        ("gelu_new", codon_ops::gelu_new, ["aclnnGeluV2", "aclnnGeluBackwardV2"]),
    ];
    for (name, op, launches) in ops {
        let run = |device: &Device| {
            let v = Var::from_tensor(&x.to_device(device).unwrap()).unwrap();
            let y = op(v.as_tensor()).unwrap();
            let g = (&y * up.to_device(device).unwrap()).unwrap().sum_all().unwrap().backward().unwrap();
            (y.to_device(&cpu).unwrap(), g.get(v.as_tensor()).unwrap().to_device(&cpu).unwrap())
        };
        let (want_y, want_g) = run(&cpu);
        let before = ascend.counters();
        let (got_y, got_g) = run(&dev);
        let launched = ascend.counters().since(&before).launches;
        assert!(rel_diff(&want_y, &got_y) < 1e-5, "{name}: values differ by {}", rel_diff(&want_y, &got_y));
        assert!(rel_diff(&want_g, &got_g) < 1e-5, "{name}: gradients differ by {}", rel_diff(&want_g, &got_g));
        for op in launches {
            assert_eq!(launched.get(op), Some(&1), "{name}: {launched:?}");
        }
    }
}

/// Block-sparse attention on the emulated part against the CPU's: output and q, k, v gradients,
/// with a padded sequence and training-mode random blocks. An A2 runs each layer's two parts
/// (global rows, middle blocks) as two aclnnFlashAttentionScore and two grads, with no
/// softmax or batched matmul; a 910A composes them, computing the probabilities again in the
/// backward pass.
#[test]
fn block_sparse_attention_matches_the_cpu_with_flash_attention_where_the_part_has_it() {
    let _serial = serial();
    block_sparse_attention_matches_the_cpu_in(DType::F32, None);
}

/// In f16 a part without flash attention runs the composed softmax in f16 (the kernels
/// accumulate in f32): no cast of the (rows × keys) scores either way, only of the penalties.
#[test]
fn block_sparse_attention_matches_the_cpu_in_f16_without_widening_the_scores() {
    let _serial = serial();
    block_sparse_attention_matches_the_cpu_in(DType::F16, None);
}

/// Where the key blocks are gathered (on a part with flash attention: batches whose block mask
/// would pass its bound, here 0), the middle query blocks run in chunks of sequences when their
/// gathered keys exceed the budget: here one sequence per chunk.
#[test]
fn block_sparse_attention_in_chunks_of_sequences_matches_the_cpu() {
    let _serial = serial();
    for dtype in [DType::F32, DType::F16] {
        block_sparse_attention_matches_the_cpu_in(dtype, Some(1));
    }
}

/// The eval table repeats block 0 as every random block, which counts its keys more than once:
/// no mask can say that, so a part with flash attention gathers the key blocks.
#[test]
fn block_sparse_attention_with_repeated_key_blocks_matches_the_cpu() {
    let _serial = serial();
    block_sparse_attention_matches_the_cpu_with(DType::F32, None, true);
}

fn block_sparse_attention_matches_the_cpu_in(dtype: DType, chunk_bytes: Option<usize>) {
    block_sparse_attention_matches_the_cpu_with(dtype, chunk_bytes, false)
}

/// Block-sparse attention on the device against the CPU, values and gradients, and the launches
/// it takes. `chunk_bytes` makes the device gather key blocks in chunks of that many bytes;
/// `eval_table` takes the eval table, whose random blocks all repeat block 0.
fn block_sparse_attention_matches_the_cpu_with(dtype: DType, chunk_bytes: Option<usize>, eval_table: bool) {
    use codon_model::bigbird::attention::{block_sparse_attention, block_sparse_masks};
    use codon_model::bigbird::{BlockGeometry, RandomBlocks};
    let dev = sim();
    let ascend = candle_ascend::ascend_device(&dev).unwrap();
    let cpu = Device::Cpu;
    let (b, heads, d, wm) = (2, 2, 8, 4);
    let geometry = BlockGeometry {
        seq_len: 48,
        block_size: wm,
        num_random_blocks: 2,
        num_heads: heads,
        max_position_embeddings: 64,
    };
    let n = geometry.seq_len;
    let rand = if eval_table { RandomBlocks::zeros(&geometry) } else { RandomBlocks::training(&geometry, 1) };
    // Sequence 1 ends in 7 padding tokens.
    let mut mask = vec![1f32; b * n];
    mask[2 * n - 7..].iter_mut().for_each(|x| *x = 0.0);
    let mask = Tensor::from_vec(mask, (b, n), &cpu).unwrap();
    let qkv: Vec<Tensor> = (0..3).map(|_| Tensor::randn(0f32, 1.0, (b, n, heads * d), &cpu).unwrap()).collect();
    let up = Tensor::randn(0f32, 1.0, (b, n, heads * d), &cpu).unwrap();
    let run = |device: &Device, dtype: DType| {
        let vars: Vec<Var> = qkv
            .iter()
            .map(|t| Var::from_tensor(&t.to_dtype(dtype).unwrap().to_device(device).unwrap()).unwrap())
            .collect();
        let mut masks = block_sparse_masks(&mask.to_device(device).unwrap(), wm, dtype).unwrap();
        if let Some(bytes) = chunk_bytes {
            masks = masks.with_middle_chunk_bytes(bytes).with_flash_mask_bytes(0);
        }
        let [q, k, v] = [0, 1, 2].map(|i| vars[i].as_tensor().clone());
        let out = block_sparse_attention(&q, &k, &v, &masks, &rand).unwrap();
        let up = up.to_dtype(dtype).unwrap().to_device(device).unwrap();
        let grads = (&out * up).unwrap().sum_all().unwrap().backward().unwrap();
        let f32_cpu = |t: &Tensor| t.to_device(&cpu).unwrap().to_dtype(DType::F32).unwrap();
        let grads: Vec<Tensor> = vars.iter().map(|v| f32_cpu(grads.get(v).unwrap())).collect();
        (f32_cpu(&out), grads)
    };
    let (want, want_grads) = run(&cpu, DType::F32);
    let before = ascend.counters();
    let (got, grads) = run(&dev, dtype);
    let launched = ascend.counters().since(&before).launches;
    let tolerance = match dtype {
        DType::F32 if soc().family != candle_ascend::SocFamily::AtlasTraining => 1e-5,
        DType::F32 => 2e-3,
        _ => 2e-2,
    };
    assert!(rel_diff(&got, &want) < tolerance, "{dtype:?}: output differs by {}", rel_diff(&got, &want));
    for (name, (g, w)) in ["q", "k", "v"].iter().zip(grads.iter().zip(&want_grads)) {
        assert!(rel_diff(g, w) < tolerance, "{dtype:?}: gradient of {name} differs by {}", rel_diff(g, w));
    }
    let count = |op: &str| launched.get(op).copied().unwrap_or(0);
    let q = qkv[0].to_dtype(dtype).unwrap().to_device(&dev).unwrap();
    if codon_ops::attention::fused_attention_runs(&q) && chunk_bytes.is_none() && !eval_table {
        // A launch per sequence each way over one sequence's block mask: nothing gathered,
        // split or merged, and the op's value is handed over, not copied. Of the copies,
        // attention's are the mask spread over the tokens (once: the backward pass keeps it)
        // and the bias; the inputs' three and the seed gradient's are the test's.
        let per_sequence = [b as u64; 2];
        assert_eq!(
            [count("aclnnFlashAttentionScore"), count("aclnnFlashAttentionScoreGrad")],
            per_sequence,
            "{launched:?}"
        );
        assert_eq!(count("aclnnIndexSelect") + count("aclnnIndexAdd"), 0, "{launched:?}");
        assert!(count("aclnnInplaceCopy") <= 6, "{launched:?}");
        return;
    }
    // The gathered keys' and values' gradients go back once per chunk.
    let chunks = chunk_bytes.map_or(1, |_| b as u64);
    assert_eq!(count("aclnnIndexAdd"), 2 * chunks, "{launched:?}");
    if codon_ops::attention::fused_attention_runs(&q) {
        let parts = 1 + chunks;
        assert_eq!(
            [count("aclnnFlashAttentionScore"), count("aclnnFlashAttentionScoreGrad")],
            [parts, parts],
            "{launched:?}"
        );
        assert_eq!(
            count("aclnnSoftmax") + count("aclnnSoftmaxBackward") + count("aclnnBatchMatMul"),
            0,
            "{launched:?}"
        );
    } else {
        // Each part's softmax runs again in the backward pass, which keeps no probabilities.
        let parts = 1 + chunks;
        assert_eq!([count("aclnnSoftmax"), count("aclnnSoftmaxBackward")], [2 * parts, parts], "{launched:?}");
        assert_eq!(count("aclnnFlashAttentionScore"), 0, "{launched:?}");
        if dtype == DType::F16 && chunk_bytes.is_none() {
            // The query mask, and each part's penalties once per softmax; the scores stay in
            // f16 (widened, they took 13 casts).
            assert!(count("aclnnCast") <= 5, "{launched:?}");
        }
    }
}
