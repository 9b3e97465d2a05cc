//! Time the primitive ops of one CodonTransformer layer at a batch's shapes on a device, each
//! ended by a synchronisation, and print one JSON line per op with its median milliseconds: where
//! a forward pass's (or, with `--backward`, a training step's) time goes on an accelerator that
//! no profiler here reaches.
//!
//! ```text
//! codon op-timing --device cpu --batch 1 --length 512 --dtype bf16
//! ```
use std::time::Instant;

use crate::cli::{DTypeArg, DeviceArg};
use candle_core::{DType, Device, Tensor};
use clap::Parser;
use codon_ops as ops;

/// Op timing.
#[derive(Parser)]
pub struct Args {
    #[command(flatten)]
    device: DeviceArg,
    #[command(flatten)]
    shape: super::BatchShape<8, 2048>,
    #[command(flatten)]
    dtype: DTypeArg,
    #[command(flatten)]
    repeats: super::Repeats<5>,
    /// Time each trainable op's forward and backward pass together instead (as a training step
    /// runs them).
    #[arg(long)]
    backward: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let device = args.device.open()?;
    let dtype = DType::from(args.dtype);
    let (b, n, heads, hidden, inner) = (args.shape.batch, args.shape.length, 12, 768, 3072);
    let d = hidden / heads;
    let randn = |shape: &[usize]| -> candle_core::Result<Tensor> {
        Tensor::randn(0f32, 1.0, shape, &Device::Cpu)?.to_dtype(dtype)?.to_device(&device)
    };
    let x = randn(&[b, n, hidden])?;
    let w = randn(&[hidden, hidden])?;
    let w_up = randn(&[inner, hidden])?;
    let bias = randn(&[hidden])?;
    let bias_up = randn(&[inner])?;
    let gamma = randn(&[hidden])?;
    let qh = randn(&[b, heads, n, d])?;
    let kh = randn(&[b, heads, n, d])?;
    let key_bias = Tensor::zeros((b, 1, 1, n), DType::F32, &Device::Cpu)?.to_device(&device)?;
    let scores = qh.matmul(&kh.t()?)?;
    let scores_f32 = scores.to_dtype(DType::F32)?;
    let probs = ops::softmax_last_dim_f32(&scores_f32)?.to_dtype(dtype)?;
    let up = ops::linear(&x, &w_up, &bias_up)?;

    let time = |name: &str, f: &dyn Fn() -> candle_core::Result<Tensor>| -> anyhow::Result<()> {
        f()?;
        device.synchronize()?;
        let mut ms = Vec::with_capacity(args.repeats.count);
        for _ in 0..args.repeats.count {
            let start = Instant::now();
            f()?;
            device.synchronize()?;
            ms.push(start.elapsed().as_secs_f64() * 1e3);
        }
        ms.sort_by(f64::total_cmp);
        crate::outln!(
            "{{\"op\": \"{name}\", \"device\": \"{}\", \"dtype\": \"{}\", \"median_ms\": {:.3}}}",
            args.device,
            args.dtype,
            ms[ms.len() / 2]
        );
        Ok(())
    };
    if args.backward {
        let var = |t: &Tensor| candle_core::Var::from_tensor(t);
        let (xv, gv, bv) = (var(&x)?, var(&gamma)?, var(&bias)?);
        let (wv, uv, upv) = (var(&w_up)?, var(&bias_up)?, var(&up)?);
        let scores_v = var(&scores_f32)?;
        // The gradient of Σy with respect to `of`: the backward pass a training step runs.
        let backward = |y: Tensor, of: &candle_core::Var| -> candle_core::Result<Tensor> {
            let grads = y.to_dtype(DType::F32)?.sum_all()?.backward()?;
            grads.get(of.as_tensor()).cloned().ok_or_else(|| candle_core::Error::msg("no gradient"))
        };
        let labels: Vec<i64> = (0..b * n).map(|i| if i % 7 == 3 { 26 + (i % 64) as i64 } else { -100 }).collect();
        let labels = Tensor::from_vec(labels, b * n, &Device::Cpu)?.to_device(&device)?;
        let logits = var(&randn(&[b * n, 90])?)?;
        let mut stream = ops::DropoutStream::new(0);
        let stream = std::cell::RefCell::new(&mut stream);
        time("fwd+bwd linear 768->3072", &|| {
            backward(ops::linear(xv.as_tensor(), wv.as_tensor(), uv.as_tensor())?, &wv)
        })?;
        time("fwd+bwd gelu_new 3072", &|| backward(ops::gelu_new(upv.as_tensor())?, &upv))?;
        time("fwd+bwd layer_norm", &|| {
            backward(ops::layer_norm(xv.as_tensor(), gv.as_tensor(), bv.as_tensor(), 1e-12)?, &xv)
        })?;
        time("fwd+bwd dropout 0.1 (3072)", &|| {
            backward(ops::dropout(upv.as_tensor(), 0.1, &mut stream.borrow_mut())?, &upv)
        })?;
        time("fwd+bwd softmax f32 (scores)", &|| {
            backward(ops::softmax_last_dim_f32(scores_v.as_tensor())?, &scores_v)
        })?;
        time("fwd+bwd full attention", &|| {
            let t = xv.as_tensor();
            backward(ops::attention::full_attention(t, t, t, heads, &key_bias, None)?, &xv)
        })?;
        time("fwd+bwd cross_entropy", &|| backward(ops::cross_entropy(logits.as_tensor(), &labels)?, &logits))?;
        return Ok(());
    }
    time("linear 768->768", &|| ops::linear(&x, &w, &bias))?;
    time("linear 768->3072", &|| ops::linear(&x, &w_up, &bias_up))?;
    time("gelu_new 3072", &|| ops::gelu_new(&up))?;
    time("layer_norm", &|| ops::layer_norm(&x, &gamma, &bias, 1e-12))?;
    time("add (residual)", &|| &x + &x)?;
    time("split heads (transpose copy)", &|| x.reshape((b, n, heads, d))?.transpose(1, 2)?.contiguous())?;
    time("scores q.kT", &|| qh.matmul(&kh.t()?))?;
    time("scores * scale", &|| &scores * 0.125)?;
    time("scores to f32", &|| scores.to_dtype(DType::F32))?;
    time("scores + key bias (broadcast)", &|| scores_f32.broadcast_add(&key_bias))?;
    time("softmax f32", &|| ops::softmax_last_dim_f32(&scores_f32))?;
    time("probs to dtype", &|| ops::softmax_last_dim_f32(&scores_f32)?.to_dtype(dtype))?;
    time("probs.v", &|| probs.matmul(&kh))?;
    let (q, k, v) = (x.clone(), x.clone(), x.clone());
    time("full attention (whole op)", &|| ops::attention::full_attention(&q, &k, &v, heads, &key_bias, None))?;
    Ok(())
}
