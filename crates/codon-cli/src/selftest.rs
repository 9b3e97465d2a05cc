//! The first run on a real NPU (`codon npu selftest`): every route of the backend's op table on
//! small tensors in each dtype the part has, compared with candle's CPU backend within the
//! dtype's tolerance; an HCCL all-reduce across the devices present; one training run of a tiny
//! BigBird compared with the CPU. The report is a table for the terminal and JSON for a bug
//! report (toolkit version, SoC, every case's result).
use candle_core::{DType, Device, IndexOp, Tensor};
use serde::Serialize;

use candle_ascend::op_table::{self, CandleOp, Coverage};
use candle_ascend::{AscendDevice, SocFamily};
use candle_core::custom_backend::{BinaryOpKind, UnaryOpKind};
use candle_core::op::ReduceOp;

/// A case's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Within tolerance of the CPU.
    Pass,
    /// Outside it, or an error.
    Fail,
    /// Not run: the part does not have the op or dtype, or there is nothing to compare.
    Skip,
}

/// One case of the self-test.
#[derive(Debug, Clone, Serialize)]
pub struct Case {
    /// What ran: a candle op, `all_reduce` or `training`.
    pub name: String,
    /// The dtype it ran in.
    pub dtype: String,
    /// The aclnn ops the route launches, as the op table says.
    pub aclnn: Vec<String>,
    /// The outcome.
    pub status: Status,
    /// The largest difference from the CPU, relative to `1 + |cpu|`, where values were compared.
    pub max_error: Option<f64>,
    /// The bound it was held to.
    pub tolerance: Option<f64>,
    /// Why it failed or was skipped.
    pub detail: String,
}

/// What `codon npu selftest` found.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The device tested, e.g. `npu:0`.
    pub device: String,
    /// The toolkit's version (`version.cfg`).
    pub toolkit_version: Option<String>,
    /// The toolkit root.
    pub toolkit_root: String,
    /// The NPU driver's version (`version.info` of the driver folder), where one is installed.
    pub driver: Option<String>,
    /// `aclrtGetSocName`.
    pub soc: String,
    /// The SoC family.
    pub soc_family: String,
    /// Devices visible to the runtime.
    pub devices: usize,
    /// Every case, in the order run.
    pub cases: Vec<Case>,
}

impl Report {
    /// The cases that failed.
    pub fn failures(&self) -> impl Iterator<Item = &Case> {
        self.cases.iter().filter(|c| c.status == Status::Fail)
    }

    /// Count of cases with `status`.
    pub fn count(&self, status: Status) -> usize {
        self.cases.iter().filter(|c| c.status == status).count()
    }
}

/// Why the self-test could not start.
#[derive(Debug, thiserror::Error)]
pub enum SelfTestError {
    /// The device is not an Ascend device.
    #[error("{0} is not an Ascend device (npu:N or npu-sim:N)")]
    NotAscend(String),
    /// The runtime could not answer a basic question.
    #[error("{0}")]
    Device(#[from] candle_ascend::AscendError),
}

/// Run every case on `device`.
pub fn run(device: &Device) -> Result<Report, SelfTestError> {
    let ascend = candle_ascend::ascend_device(device).ok_or_else(|| SelfTestError::NotAscend(format!("{device:?}")))?;
    let soc = ascend.soc().clone();
    let devices = ascend.count()?;
    let mut cases = Vec::new();
    let dtypes = [DType::F32, DType::F16, DType::BF16];
    for op in op_table::all_ops() {
        for dtype in dtypes {
            cases.push(op_case(device, ascend, op, dtype));
        }
    }
    cases.push(all_reduce_case(ascend, devices));
    let low = if soc.has_bf16() { codon_train::Precision::Bf16 } else { codon_train::Precision::F16 };
    for precision in [codon_train::Precision::F32, low] {
        cases.push(training_case(device, ascend, precision));
    }
    Ok(Report {
        device: ascend.name(),
        toolkit_version: ascend.toolkit().version(),
        toolkit_root: ascend.toolkit().root.display().to_string(),
        driver: driver_version(),
        soc: soc.name.clone(),
        soc_family: soc.family.description().to_string(),
        devices,
        cases,
    })
}

/// `Version=` of the driver's `version.info` (`$ASCEND_DRIVER_PATH`, else the default install).
fn driver_version() -> Option<String> {
    let dir = std::env::var_os("ASCEND_DRIVER_PATH")
        .map_or_else(|| std::path::PathBuf::from("/usr/local/Ascend/driver"), std::path::PathBuf::from);
    let text = std::fs::read_to_string(dir.join("version.info")).ok()?;
    text.lines().find_map(|l| l.trim().strip_prefix("Version=").map(str::to_string))
}

/// The documented tolerance of a dtype, relative to `1 + |cpu|` (the conformance tests' bound).
fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 2e-3,
        DType::BF16 => 1.6e-2,
        _ => 1e-5,
    }
}

/// A deterministic (rows, cols) input in [-2, 2).
fn input(rows: usize, cols: usize, dtype: DType, seed: u64) -> candle_core::Result<Tensor> {
    let v: Vec<f32> =
        (0..rows * cols).map(|i| (((i as u64 * 2654435761 + seed * 97) % 1000) as f32 / 250.0) - 2.0).collect();
    Tensor::from_vec(v, (rows, cols), &Device::Cpu)?.to_dtype(dtype)
}

type OpFn = Box<dyn Fn(&[Tensor]) -> candle_core::Result<Tensor>>;

/// The computation that exercises `op`, its inputs, and a tolerance factor; `None` for an op the
/// backend does not implement.
fn computation(op: CandleOp, dtype: DType) -> candle_core::Result<Option<(OpFn, Vec<Tensor>, f64)>> {
    let (x, y) = (input(6, 8, dtype, 1)?, input(6, 8, dtype, 2)?);
    let ids = Tensor::new(&[0u32, 3, 5, 1], &Device::Cpu)?;
    let cols = Tensor::new(&[[1u32, 7], [0, 2], [5, 5], [3, 4], [6, 0], [2, 1]], &Device::Cpu)?;
    let one: Vec<Tensor> = vec![x.clone()];
    let two: Vec<Tensor> = vec![x.clone(), y.clone()];
    let f: OpFn;
    let mut inputs = one.clone();
    let mut scale = 1.0;
    match op {
        CandleOp::Unary(kind) => {
            f = Box::new(move |t: &[Tensor]| {
                let x = &t[0];
                match kind {
                    UnaryOpKind::Exp => x.exp(),
                    UnaryOpKind::Log => (x.abs()? + 0.5)?.log(),
                    UnaryOpKind::Sin => x.sin(),
                    UnaryOpKind::Cos => x.cos(),
                    UnaryOpKind::Tanh => x.tanh(),
                    UnaryOpKind::Neg => x.neg(),
                    UnaryOpKind::Recip => (x.abs()? + 1.0)?.recip(),
                    UnaryOpKind::Sqr => x.sqr(),
                    UnaryOpKind::Sqrt => x.abs()?.sqrt(),
                    UnaryOpKind::Gelu => x.gelu(),
                    UnaryOpKind::GeluErf => x.gelu_erf(),
                    UnaryOpKind::Erf => x.erf(),
                    UnaryOpKind::Relu => x.relu(),
                    UnaryOpKind::Silu => x.silu(),
                    UnaryOpKind::Abs => x.abs(),
                    UnaryOpKind::Ceil => x.ceil(),
                    UnaryOpKind::Floor => x.floor(),
                    UnaryOpKind::Round => (x * 1.3)?.round(),
                    UnaryOpKind::Sign => x.sign(),
                }
            });
        }
        CandleOp::Binary(kind) => {
            inputs = two;
            f = Box::new(move |t: &[Tensor]| {
                let (a, b) = (&t[0], &t[1]);
                match kind {
                    BinaryOpKind::Add => a.broadcast_add(b),
                    BinaryOpKind::Sub => a.broadcast_sub(b),
                    BinaryOpKind::Mul => a.broadcast_mul(b),
                    BinaryOpKind::Div => a.broadcast_div(&(b.abs()? + 0.5)?),
                    BinaryOpKind::Maximum => a.broadcast_maximum(b),
                    BinaryOpKind::Minimum => a.broadcast_minimum(b),
                }
            });
        }
        CandleOp::Cmp(cmp) => {
            inputs = two;
            f = Box::new(move |t: &[Tensor]| t[0].cmp(&t[1], cmp));
        }
        CandleOp::Reduce(reduce) => {
            // The CPU sums in the dtype, aclnn in f32.
            scale = 4.0;
            f = Box::new(move |t: &[Tensor]| match reduce {
                ReduceOp::Sum => t[0].sum_keepdim(1),
                ReduceOp::Max => t[0].max_keepdim(1),
                ReduceOp::Min => t[0].min_keepdim(1),
                ReduceOp::ArgMax => t[0].argmax_keepdim(1),
                ReduceOp::ArgMin => t[0].argmin_keepdim(1),
            });
        }
        CandleOp::Affine => f = Box::new(|t: &[Tensor]| t[0].affine(1.5, -0.25)),
        CandleOp::Powf => f = Box::new(|t: &[Tensor]| (t[0].abs()? + 0.1)?.powf(1.7)),
        CandleOp::ToDtype => {
            let to = if dtype == DType::F32 { DType::F16 } else { DType::F32 };
            f = Box::new(move |t: &[Tensor]| t[0].to_dtype(to));
        }
        CandleOp::WhereCond => {
            inputs = two;
            f = Box::new(|t: &[Tensor]| t[0].ge(0.0)?.where_cond(&t[0], &t[1]));
        }
        CandleOp::MatMul => {
            inputs = two;
            scale = 8.0;
            f = Box::new(|t: &[Tensor]| t[0].matmul(&t[1].t()?));
        }
        CandleOp::IndexSelect => {
            inputs = vec![x, ids];
            f = Box::new(|t: &[Tensor]| t[0].index_select(&t[1], 0));
        }
        CandleOp::IndexAdd => {
            inputs = vec![x, ids, y.i(0..4)?];
            f = Box::new(|t: &[Tensor]| t[0].index_add(&t[1], &t[2], 0));
        }
        CandleOp::Gather => {
            inputs = vec![x, cols];
            f = Box::new(|t: &[Tensor]| t[0].gather(&t[1], 1));
        }
        CandleOp::ScatterAdd => {
            inputs = vec![x, cols, y.i((.., 0..2))?.contiguous()?];
            f = Box::new(|t: &[Tensor]| t[0].scatter_add(&t[1], &t[2], 1));
        }
        CandleOp::Copy => f = Box::new(|t: &[Tensor]| t[0].t()?.contiguous()),
        CandleOp::ConstSet => f = Box::new(|t: &[Tensor]| t[0].ones_like()),
        CandleOp::Zeros => f = Box::new(|t: &[Tensor]| t[0].zeros_like()),
        // Random numbers are compared by their moments, below.
        CandleOp::RandUniform => {
            f = Box::new(|t: &[Tensor]| Tensor::zeros((64, 64), t[0].dtype(), t[0].device())?.rand_like(0.0, 1.0))
        }
        CandleOp::RandNormal => {
            f = Box::new(|t: &[Tensor]| Tensor::zeros((64, 64), t[0].dtype(), t[0].device())?.randn_like(0.0, 1.0))
        }
        CandleOp::Elu | CandleOp::ScatterSet | CandleOp::Conv | CandleOp::Pool | CandleOp::Upsample => return Ok(None),
    }
    Ok(Some((f, inputs, scale)))
}

fn op_case(device: &Device, ascend: &AscendDevice, op: CandleOp, dtype: DType) -> Case {
    let soc = ascend.soc();
    let route = op_table::route(op);
    let mut case = Case {
        name: op.to_string(),
        dtype: format!("{dtype:?}").to_lowercase(),
        aclnn: route.aclnn_ops().iter().map(|o| o.name().to_string()).collect(),
        status: Status::Skip,
        max_error: None,
        tolerance: None,
        detail: String::new(),
    };
    let acl = candle_ascend::ops::acl_dtype(dtype).unwrap_or(-1);
    if let Coverage::Unavailable(why) = op_table::coverage(op, soc, acl) {
        case.detail = if dtype == DType::BF16 && !soc.has_bf16() { "no BF16 on this part".into() } else { why };
        return case;
    }
    let result = (|| -> candle_core::Result<Option<(f64, f64)>> {
        let Some((f, inputs, scale)) = computation(op, dtype)? else { return Ok(None) };
        let on_device: Vec<Tensor> = inputs.iter().map(|t| t.to_device(device)).collect::<candle_core::Result<_>>()?;
        let got = f(&on_device)?.to_device(&Device::Cpu)?;
        if matches!(op, CandleOp::RandUniform | CandleOp::RandNormal) {
            return moments(op, &got).map(Some);
        }
        let expected = f(&inputs)?;
        if got.dims() != expected.dims() || got.dtype() != expected.dtype() {
            return Err(candle_core::Error::Msg(format!(
                "got {:?} {:?}, the CPU {:?} {:?}",
                got.dtype(),
                got.dims(),
                expected.dtype(),
                expected.dims()
            )));
        }
        let mut tol = tolerance(expected.dtype()) * scale;
        if op == CandleOp::MatMul && soc.family == SocFamily::AtlasTraining && dtype == DType::F32 {
            // The Atlas training series runs FP32 matmuls on its FP16 cube (cubeMathType USE_FP16).
            tol = tolerance(DType::F16) * scale;
        }
        let exact = matches!(expected.dtype(), DType::U8 | DType::U32 | DType::I64);
        let tol = if exact { 0.0 } else { tol };
        Ok(Some((max_error(&expected, &got)?, tol)))
    })();
    match result {
        Ok(None) => case.detail = "the backend has no route for it".into(),
        Ok(Some((err, tol))) => {
            case.tolerance = Some(tol);
            case.status = if err <= tol { Status::Pass } else { Status::Fail };
            if err.is_finite() {
                case.max_error = Some(err);
            } else {
                case.detail = "a NaN or infinity where the CPU has a number, or a draw out of range".into();
            }
        }
        Err(e) => {
            case.status = Status::Fail;
            case.detail = e.to_string();
        }
    }
    case
}

/// The largest |cpu − device| / (1 + |cpu|); NaN on both sides counts as equal.
fn max_error(expected: &Tensor, got: &Tensor) -> candle_core::Result<f64> {
    let a: Vec<f64> = expected.to_dtype(DType::F64)?.flatten_all()?.to_vec1()?;
    let b: Vec<f64> = got.to_dtype(DType::F64)?.flatten_all()?.to_vec1()?;
    Ok(a.iter()
        .zip(&b)
        .map(|(x, y)| if x.is_nan() && y.is_nan() { 0.0 } else { (x - y).abs() / (1.0 + x.abs()) })
        .fold(0.0, |m, e| if e.is_nan() { f64::INFINITY } else { m.max(e) }))
}

/// For random numbers: the distance of the sample's mean and standard deviation from the
/// distribution's, against about five standard errors of 4,096 draws.
fn moments(op: CandleOp, got: &Tensor) -> candle_core::Result<(f64, f64)> {
    let v: Vec<f64> = got.to_dtype(DType::F64)?.flatten_all()?.to_vec1()?;
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let std = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt();
    let (want_mean, want_std) = if op == CandleOp::RandUniform { (0.5, (1.0f64 / 12.0).sqrt()) } else { (0.0, 1.0) };
    // In f16 and bf16 a draw just under 1 rounds to 1.
    let in_range = op != CandleOp::RandUniform || v.iter().all(|x| (0.0..=1.0).contains(x));
    let err = if in_range { (mean - want_mean).abs().max((std - want_std).abs()) } else { f64::INFINITY };
    Ok((err, 5.0 * want_std / n.sqrt()))
}

fn all_reduce_case(ascend: &AscendDevice, devices: usize) -> Case {
    let mut case = Case {
        name: format!("all_reduce over {devices} device(s)"),
        dtype: "f32".into(),
        aclnn: vec!["HcclAllReduce".into()],
        status: Status::Skip,
        max_error: None,
        tolerance: Some(0.0),
        detail: String::new(),
    };
    if ascend.toolkit().hccl_path().is_none() {
        case.detail = "libhccl.so not found".into();
        return case;
    }
    let prefix = ascend.name().split(':').next().unwrap_or("npu").to_string();
    let result = (|| -> Result<f64, Box<dyn std::error::Error>> {
        let mut tensors = Vec::new();
        let mut handles = Vec::new();
        for rank in 0..devices {
            let dev = candle_ascend::parse_device(&format!("{prefix}:{rank}"))?;
            let handle = candle_ascend::ascend_device(&dev).ok_or("not an Ascend device")?.clone();
            let values: Vec<f32> = (0..16).map(|i| (rank * 16 + i) as f32).collect();
            tensors.push(Tensor::new(values.as_slice(), &dev)?);
            handles.push(handle);
        }
        let comms = candle_ascend::Communicator::init_all(&handles)?;
        // One thread per rank, as training runs them: a real HCCL collective returns only once
        // every rank has joined.
        std::thread::scope(|scope| {
            let running: Vec<_> = comms
                .iter()
                .zip(&tensors)
                .map(|(c, t)| scope.spawn(move || c.all_reduce(t, candle_ascend::ReduceOp::Sum)))
                .collect();
            running
                .into_iter()
                .try_for_each(|r| r.join().map_err(|_| "an all-reduce thread panicked")?.map_err(|e| e.to_string()))
        })?;
        let mut worst = 0f64;
        for t in &tensors {
            let got: Vec<f32> = t.to_vec1()?;
            for (i, g) in got.iter().enumerate() {
                let want: f32 = (0..devices).map(|r| (r * 16 + i) as f32).sum();
                worst = worst.max(f64::from((g - want).abs()));
            }
        }
        Ok(worst)
    })();
    match result {
        Ok(err) => {
            case.max_error = Some(err);
            case.status = if err == 0.0 { Status::Pass } else { Status::Fail };
        }
        Err(e) => {
            case.status = Status::Fail;
            case.detail = e.to_string();
        }
    }
    case
}

/// Losses of `steps` optimizer steps of a tiny BigBird (2 layers, hidden 32, block-sparse, the
/// given dropout) on `device`, from the same initial weights and batch on every device.
pub fn tiny_training_losses(
    device: &Device,
    precision: codon_train::Precision,
    steps: usize,
    dropout: f64,
) -> Result<Vec<f64>, String> {
    use codon_model::bigbird::{init_weights, AttentionType, BigBirdConfig, BigBirdForMaskedLM};
    use codon_model::training::MaskedLmModel;
    use codon_train::{Trainer, TrainerConfig};
    let config = BigBirdConfig::from_json(&format!(
        r#"{{"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 48,
            "block_size": 8, "num_random_blocks": 1, "max_position_embeddings": 256,
            "hidden_dropout_prob": {dropout}, "attention_probs_dropout_prob": {dropout}}}"#
    ))
    .map_err(|e| e.to_string())?;
    let weights = init_weights(&config, 0, &Device::Cpu, DType::F32).map_err(|e| e.to_string())?;
    let weights = weights
        .into_iter()
        .map(|(n, t)| Ok((n, t.to_device(device)?)))
        .collect::<candle_core::Result<_>>()
        .map_err(|e| e.to_string())?;
    let model = BigBirdForMaskedLM::from_named(config, weights).map_err(|e| e.to_string())?;
    let model = MaskedLmModel::new(model, precision, AttentionType::BlockSparse).map_err(|e| e.to_string())?;
    let data = codon_train::SameBatch(codon_data::synthetic_mlm_batch(2, 120));
    let trainer = Trainer::new(
        TrainerConfig::builder()
            .max_steps(Some(steps))
            .max_epochs(steps)
            .learning_rate(1e-3)
            .gradient_clip(Some(1.0))
            .precision(precision)
            .quiet(true)
            .build()
            .map_err(|e| e.to_string())?,
    );
    let report = trainer.fit(&model, &data, None::<&std::path::Path>).map_err(|e| e.to_string())?;
    Ok(report.steps.iter().map(|s| s.loss).collect())
}

fn training_case(device: &Device, ascend: &AscendDevice, precision: codon_train::Precision) -> Case {
    let f32_on_fp16_cube = ascend.soc().family == SocFamily::AtlasTraining;
    let tol = match precision {
        codon_train::Precision::F32 if f32_on_fp16_cube => 2e-3,
        codon_train::Precision::F32 => 1e-5,
        _ => 2e-2,
    };
    let mut case = Case {
        name: "training: tiny BigBird, 3 steps".into(),
        dtype: format!("{precision:?}").to_lowercase(),
        aclnn: Vec::new(),
        status: Status::Fail,
        max_error: None,
        tolerance: Some(tol),
        detail: String::new(),
    };
    let before = ascend.counters();
    let losses = tiny_training_losses(&Device::Cpu, precision, 3, 0.0)
        .map_err(|e| format!("on the CPU: {e}"))
        .and_then(|cpu| Ok((cpu, tiny_training_losses(device, precision, 3, 0.0)?)));
    let launched = ascend.counters().since(&before);
    case.aclnn = launched.launches.keys().cloned().collect();
    match losses {
        Ok((cpu, npu)) => {
            // A non-finite loss on either side fails, whatever the other says.
            let finite = cpu.iter().chain(&npu).all(|x| x.is_finite());
            let err = cpu.iter().zip(&npu).map(|(a, b)| ((a - b) / a).abs()).fold(0.0, f64::max);
            case.max_error = finite.then_some(err);
            case.status = if finite && err <= tol && cpu.len() == npu.len() { Status::Pass } else { Status::Fail };
            case.detail = format!("losses: cpu {cpu:.5?}, device {npu:.5?}");
        }
        Err(e) => case.detail = e,
    }
    case
}

/// The report as a table, one line per case.
pub fn table(report: &Report) -> Vec<String> {
    let mut lines = vec![format!(
        "{} · {} ({}) · toolkit {} · driver {} · {} device(s)",
        report.device,
        report.soc,
        report.soc_family,
        report.toolkit_version.as_deref().unwrap_or("unknown"),
        report.driver.as_deref().unwrap_or("not found"),
        report.devices
    )];
    for c in &report.cases {
        let status = match c.status {
            Status::Pass => "pass",
            Status::Fail => "FAIL",
            Status::Skip => "skip",
        };
        let error = match (c.max_error, c.tolerance) {
            (Some(e), Some(t)) => format!("{e:.2e} ≤ {t:.1e}"),
            _ => String::new(),
        };
        lines
            .push(format!("{status}  {:<34} {:<5} {:<20} {}", c.name, c.dtype, error, c.detail).trim_end().to_string());
    }
    lines.push(format!(
        "{} passed, {} failed, {} skipped",
        report.count(Status::Pass),
        report.count(Status::Fail),
        report.count(Status::Skip)
    ));
    lines
}
