//! The model's hot operations, behind one seam: layer norm, softmax, gelu_new, linear
//! layers, dropout and the masked-softmax attention product.
//!
//! Model code calls only these functions. Each picks an implementation. On the CPU:
//! inference uses fused kernels without a backward pass (`codon_ops::linear::fused_linear`,
//! `codon_ops::attention::cpu_inference`, candle-nn's `layer_norm`); training uses fused custom ops
//! that carry their own backward pass (`codon_ops::linear::Linear`,
//! `codon_ops::attention::cpu_training`, `codon_ops::layer_norm`,
//! `cpu_activation`), since candle-nn 0.11.1's fused `layer_norm` and `softmax_last_dim`
//! record none and composed ops spend most of a step on temporaries. On other devices
//! (candle-ascend) it composes device ops, which always have a backward pass. A device
//! backend supplies its own fused kernels by adding a branch here, without touching the
//! model. Normalisation and softmax always run in f32, so bf16 and f16 models accumulate
//! them in f32.

use candle_core::{DType, Tensor, D};

use crate::error::Result;
use codon_ops::attention::cpu_training::{AttentionPlan, BlockAttention};
use codon_ops::fast_math;
use codon_ops::linear::{fused_linear, Epilogue, Linear};
use codon_ops::{dropout, DropoutStream};

fn needs_grad(tensors: &[&Tensor]) -> bool {
    tensors.iter().any(|t| t.track_op())
}

/// LayerNorm over the last dimension: (x − mean)/√(var + eps)·w + b (`codon_ops::layer_norm`).
pub fn layer_norm(x: &Tensor, weight: &Tensor, bias: &Tensor, eps: f64) -> Result<Tensor> {
    Ok(codon_ops::layer_norm(x, weight, bias, eps)?)
}

/// LayerNorm of `x + residual` (`codon_ops::add_layer_norm`).
pub fn add_layer_norm(x: &Tensor, residual: &Tensor, weight: &Tensor, bias: &Tensor, eps: f64) -> Result<Tensor> {
    Ok(codon_ops::add_layer_norm(x, residual, weight, bias, eps)?)
}

/// Softmax over the last dimension, computed in f32; the result is f32
/// (`codon_ops::softmax_last_dim_f32`).
pub fn softmax_f32(x: &Tensor) -> Result<Tensor> {
    Ok(codon_ops::softmax_last_dim_f32(x)?)
}

/// `gelu_new`: the tanh approximation of GELU (`codon_ops::gelu_new`).
pub fn gelu_new(x: &Tensor) -> Result<Tensor> {
    Ok(codon_ops::gelu_new(x)?)
}

/// Matrix product. The CPU GEMM has no fast bf16 kernel, so bf16 operands are multiplied
/// in f32 (f32 accumulation) and the result rounded back to bf16.
pub fn matmul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    if a.dtype() == DType::BF16 && a.device().is_cpu() {
        return Ok(a.to_dtype(DType::F32)?.matmul(&b.to_dtype(DType::F32)?)?.to_dtype(DType::BF16)?);
    }
    Ok(a.matmul(b)?)
}

/// `x·Wᵀ + b` for x of shape (…, in) and W of shape (out, in).
pub fn linear(x: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    linear_residual(x, weight, bias, None)
}

/// `x·Wᵀ + b + residual`: a linear layer followed by a residual connection. Inference on
/// the CPU folds the bias and the residual into the GEMM.
pub fn linear_residual(
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    residual: Option<&Tensor>,
) -> Result<Tensor> {
    let mut operands = vec![x, weight];
    operands.extend(bias);
    operands.extend(residual);
    if !needs_grad(&operands) {
        if let Some(y) = fused_linear(x, weight, bias, residual, None) {
            return Ok(y);
        }
    }
    let y = match train_linear(x, weight, bias, Epilogue::Identity)? {
        Some(y) => y,
        None => composed_linear(x, weight, bias)?,
    };
    Ok(match residual {
        Some(r) => (y + r)?,
        None => y,
    })
}

/// `gelu_new(x·Wᵀ + b)`: a linear layer and its activation; inference on the CPU applies
/// the activation to the GEMM's output in place.
pub fn linear_gelu_new(x: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    let mut operands = vec![x, weight];
    operands.extend(bias);
    if !needs_grad(&operands) {
        let epilogue = Some(fast_math::gelu_new_in_place as fn(&mut [f32]));
        if let Some(y) = fused_linear(x, weight, bias, None, epilogue) {
            return Ok(y);
        }
    }
    match train_linear(x, weight, bias, Epilogue::GeluNew)? {
        Some(y) => Ok(y),
        None => gelu_new(&composed_linear(x, weight, bias)?),
    }
}

/// `dropout(x·Wᵀ + b)`: a linear layer whose output passes through dropout; training on the
/// CPU applies the mask in the GEMM's epilogue. The mask is drawn the same way on every
/// device, so runs agree across devices.
pub fn linear_dropout(
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    stream: &mut DropoutStream,
    p: f64,
) -> Result<Tensor> {
    if x.device().is_cpu() && p > 0.0 {
        let elements = x.elem_count() / x.dim(D::Minus1)?.max(1) * weight.dim(0)?;
        let mask = stream.multipliers(elements, p, x.dtype())?;
        if let Some(y) = train_linear(x, weight, bias, Epilogue::Dropout(mask))? {
            return Ok(y);
        }
    }
    Ok(dropout(&composed_linear(x, weight, bias)?, p, stream)?)
}

/// The CPU training linear layer with an epilogue and its own backward pass; `None` on other
/// devices.
fn train_linear(x: &Tensor, weight: &Tensor, bias: Option<&Tensor>, epilogue: Epilogue) -> Result<Option<Tensor>> {
    if !x.device().is_cpu() || !weight.device().is_cpu() {
        return Ok(None);
    }
    let bias = bias_or_zeros(weight, bias)?;
    let op = Linear::new(epilogue);
    Ok(Some(x.contiguous()?.apply_op3(&weight.contiguous()?, &bias, op)?))
}

/// The bias, or zeros for a layer without one.
fn bias_or_zeros(weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    Ok(match bias {
        Some(b) => b.clone(),
        None => Tensor::zeros(weight.dim(0)?, weight.dtype(), weight.device())?,
    })
}

/// `x·Wᵀ + b` through `codon_ops::linear` (its Ascend body, or the composed reference).
fn composed_linear(x: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    Ok(codon_ops::linear(x, weight, &bias_or_zeros(weight, bias)?)?)
}

/// Attention product: softmax(q·kᵀ·scale + bias)·v with the softmax in f32.
/// `bias` broadcasts against the scores and holds the (finite) mask penalties.
pub fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    bias: Option<&Tensor>,
    dropout: Option<(&mut DropoutStream, f64)>,
) -> Result<Tensor> {
    if let (None, Some(bias)) = (&dropout, bias) {
        if !needs_grad(&[q, k, v]) {
            if let Some(out) = codon_ops::attention::cpu_inference::fused_attention(q, k, v, scale, bias)? {
                return Ok(out);
            }
        }
    }
    let scores = (matmul(q, &k.t()?)? * scale)?.to_dtype(DType::F32)?;
    let scores = match bias {
        Some(b) => scores.broadcast_add(b)?,
        None => scores,
    };
    let mut probs = softmax_f32(&scores)?.to_dtype(v.dtype())?;
    if let Some((stream, p)) = dropout {
        probs = codon_ops::dropout(&probs, p, stream)?;
    }
    matmul(&probs, v)
}

/// Attention over q, k, v of shape (batch, tokens, heads·head_dim) by the plan that `plan`
/// builds: the CPU training kernel, whose backward pass is fused. `None` (and `plan` never
/// called) on other devices and in inference, which have their own kernels.
pub fn planned_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    plan: impl FnOnce() -> Result<AttentionPlan>,
) -> Result<Option<Tensor>> {
    let on_cpu = [q, k, v].iter().all(|t| t.device().is_cpu());
    if !on_cpu || !needs_grad(&[q, k, v]) {
        return Ok(None);
    }
    let op = BlockAttention::new(plan()?);
    Ok(Some(q.contiguous()?.apply_op3(&k.contiguous()?, &v.contiguous()?, op)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    #[test]
    fn fused_linear_matches_composed_ops() {
        let dev = Device::Cpu;
        let x = Tensor::randn(0f32, 1.0, (2, 5, 24), &dev).unwrap();
        let w = Tensor::randn(0f32, 1.0, (40, 24), &dev).unwrap();
        let b = Tensor::randn(0f32, 1.0, 40, &dev).unwrap();
        let r = Tensor::randn(0f32, 1.0, (2, 5, 40), &dev).unwrap();
        let reference = x.reshape((10, 24)).unwrap().matmul(&w.t().unwrap()).unwrap().broadcast_add(&b).unwrap();
        let reference = reference.reshape((2, 5, 40)).unwrap();
        let max_diff = |a: &Tensor, b: &Tensor| {
            (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap()
        };
        assert!(max_diff(&linear(&x, &w, Some(&b)).unwrap(), &reference) < 1e-5);
        let with_residual = linear_residual(&x, &w, Some(&b), Some(&r)).unwrap();
        assert!(max_diff(&with_residual, &(&reference + &r).unwrap()) < 1e-5);
        let activated = linear_gelu_new(&x, &w, Some(&b)).unwrap();
        assert!(max_diff(&activated, &reference.gelu().unwrap()) < 1e-5);
        // A gradient-tracking input takes the composed path and still agrees.
        let v = Var::from_tensor(&x).unwrap();
        assert!(max_diff(&linear_residual(v.as_tensor(), &w, Some(&b), Some(&r)).unwrap(), &with_residual) < 1e-5);
    }

    #[test]
    fn gelu_kernel_matches_tanh_form_and_its_gradient() {
        let x = Tensor::arange(-800i64, 800, &Device::Cpu)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap()
            .affine(0.01, 0.003)
            .unwrap();
        let reference = x.gelu().unwrap();
        let ours = gelu_new(&x).unwrap();
        let diff = (&ours - &reference).unwrap().abs().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
        assert!(diff < 2e-6, "max |Δ| {diff}");
        let v = Var::from_tensor(&x).unwrap();
        let g_ours = gelu_new(v.as_tensor()).unwrap().sum_all().unwrap().backward().unwrap();
        let g_ref = v.as_tensor().gelu().unwrap().sum_all().unwrap().backward().unwrap();
        let d = (g_ours.get(&v).unwrap() - g_ref.get(&v).unwrap()).unwrap().abs().unwrap().max(0).unwrap();
        assert!(d.to_scalar::<f32>().unwrap() < 1e-5);
        // Strided input.
        let m = x.reshape((40, 40)).unwrap().t().unwrap();
        let a = gelu_new(&m).unwrap();
        let b = m.gelu().unwrap();
        assert!(
            (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap() < 2e-6
        );
    }
}
