//! Linear layers, `x·Wᵀ + b`: the op's folder. `mod.rs` holds the entries, the selection (its
//! rows of the support table) and the composed reference; `op.rs` the [`Linear`] op (the CPU
//! training body and the Ascend body); `cpu.rs` CPU inference; `cuda.rs` the CUDA body (cuBLAS
//! and the bias kernels); `grad_accumulate.rs` the Ascend input gradient into its accumulator.
//!
//! - [`linear`] picks the body: CPU inference takes [`fused_linear`], CPU training and Ascend
//!   parts the [`Linear`] op, a CUDA GPU (the `cuda` feature) cuBLAS's product with the bias and
//!   a residual added by one kernel of this crate's (`AddBias`, `AddBiasResidual`), other devices
//!   the composed [`reference()`]. [`linear_residual`],
//!   [`linear_gelu_new`] and [`linear_dropout`] add what follows the layer, in the GEMM's
//!   epilogue where the body has one.
//! - CPU inference ([`fused_linear`]): the bias and a residual are written into the GEMM's
//!   destination first, so the output takes one pass instead of a GEMM followed by one or two
//!   element-wise passes.
//! - The [`Linear`] op: on the CPU the product with an element-wise epilogue (gelu_new or a
//!   dropout mask) and a backward pass that reads the weight and the input in place, so
//!   neither is transposed into a copy, and sums the bias gradient in the same step. On an
//!   Ascend part (identity epilogue) one `aclnnAddmm` reading W through transposed strides
//!   and adding the bias; its backward is two batched matmuls that write dx and dW in their
//!   own layouts (no transposed copy) and one `aclnnReduceSum` for db.

mod cpu;
mod cuda;
mod grad_accumulate;
mod op;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use candle_core::{DType, Tensor, D};

use crate::dropout::DropoutStream;
use crate::fast_math;
use crate::selection::{Body, FusedOp, OnCpu, OnCuda, Row};
#[cfg(feature = "ascend")]
use candle_ascend::soc::AclnnOp;

pub use cpu::fused_linear;
use cpu::{fused_linear_with, PackCache};
pub use cuda::BiasGeluNew;
use cuda::{cuda_linear, ColumnSums};
pub use op::{Epilogue, Linear};

/// Elements per parallel task of the epilogue.
pub(super) const EPILOGUE_CHUNK: usize = 16 * 1024;

/// The linear layer's row of the support table: the CPU's GEMMs, cuBLAS with this crate's bias
/// kernels on a CUDA GPU, `aclnnAddmm` forward and two batched matmuls and a sum backward on an
/// Ascend part.
pub(crate) const ROW: Row = Row {
    op: FusedOp::Linear,
    cpu: OnCpu::Kernel,
    cuda: OnCuda::Kernels,
    #[cfg(feature = "ascend")]
    ascend: &[AclnnOp::Addmm, AclnnOp::BatchMatMul, AclnnOp::ReduceSum],
};

/// The input gradient added into its accumulator in the product's launch: Ascend only.
pub(crate) const GRAD_ACCUMULATE_ROW: Row = Row {
    op: FusedOp::LinearGradAccumulate,
    cpu: OnCpu::Composed,
    cuda: OnCuda::Composed,
    #[cfg(feature = "ascend")]
    ascend: &[AclnnOp::Addmm],
};

/// `x·Wᵀ + b` for x (…, in), W (out, in) and b (out), on any device (see the module): on the
/// CPU the in-place GEMM for inference, else the [`Linear`] op; on a CUDA GPU cuBLAS and this
/// crate's bias kernel; on an Ascend part the [`Linear`] op, its operands of one dtype.
pub fn linear(x: &Tensor, weight: &Tensor, bias: &Tensor) -> candle_core::Result<Tensor> {
    let op = || x.contiguous()?.apply_op3(&weight.contiguous()?, bias, Linear::new(Epilogue::Identity));
    match ROW.select(x.device(), x.dtype())? {
        Body::Cpu => {
            if !needs_grad(&[x, weight, bias]) {
                if let Some(y) = fused_linear(x, weight, Some(bias), None, None)? {
                    return Ok(y);
                }
            }
            op()
        }
        Body::Cuda => cuda_linear(x, weight, Some(bias), None),
        Body::Ascend if weight.dtype() == x.dtype() && bias.dtype() == x.dtype() => op(),
        Body::Ascend | Body::Composed | Body::Refused => reference(x, weight, bias),
    }
}

/// `x·Wᵀ` for x (…, in) and W (out, in), shaped (…, out).
fn product(x: &Tensor, weight: &Tensor) -> candle_core::Result<Tensor> {
    let dims = x.dims().to_vec();
    let (rows, inner) = (dims[..dims.len().saturating_sub(1)].iter().product::<usize>(), x.dim(D::Minus1)?);
    let mut out_dims = dims;
    if let Some(last) = out_dims.last_mut() {
        *last = weight.dim(0)?;
    }
    x.reshape((rows, inner))?.matmul(&weight.t()?)?.reshape(out_dims)
}

/// A linear layer's parameters: W (out, in) and an optional bias (out). Its methods run the
/// functions of this module. On the CPU a bf16 weight that nothing else can change (not a `Var`,
/// no other tensor sharing its storage) is packed for the bf16 kernels on first use, and the
/// packed copy is kept with the layer and shared by its clones; other weights are packed on
/// each call.
#[derive(Debug, Clone)]
pub struct LinearLayer {
    weight: Tensor,
    bias: Option<Tensor>,
    packed: Arc<PackCache>,
}

impl LinearLayer {
    /// A layer of `weight` (out, in) and `bias` (out).
    pub fn new(weight: Tensor, bias: Option<Tensor>) -> Self {
        Self { weight, bias, packed: Arc::default() }
    }

    /// W (out, in).
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    /// The bias (out), if the layer has one.
    pub fn bias(&self) -> Option<&Tensor> {
        self.bias.as_ref()
    }

    /// `x·Wᵀ + b`.
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        residual_with(x, &self.weight, Some(&self.packed), self.bias.as_ref(), None)
    }

    /// `x·Wᵀ + b + residual` ([`linear_residual`]).
    pub fn forward_residual(&self, x: &Tensor, residual: &Tensor) -> candle_core::Result<Tensor> {
        residual_with(x, &self.weight, Some(&self.packed), self.bias.as_ref(), Some(residual))
    }

    /// `gelu_new(x·Wᵀ + b)` ([`linear_gelu_new`]).
    pub fn forward_gelu_new(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        gelu_new_with(x, &self.weight, Some(&self.packed), self.bias.as_ref())
    }

    /// `dropout(x·Wᵀ + b)` with the mask of `stream`'s next draw ([`linear_dropout`]).
    pub fn forward_dropout(&self, x: &Tensor, stream: &mut DropoutStream, p: f64) -> candle_core::Result<Tensor> {
        linear_dropout(x, &self.weight, self.bias.as_ref(), stream, p)
    }

    /// Whether the layer holds a packed copy of its weight (for tests).
    pub fn is_packed(&self) -> bool {
        self.packed.get().is_some()
    }
}

/// `x·Wᵀ + b + residual`: a linear layer followed by a residual connection (no bias: zeros).
/// CPU inference folds the bias and the residual into the GEMM's destination.
pub fn linear_residual(
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    residual: Option<&Tensor>,
) -> candle_core::Result<Tensor> {
    residual_with(x, weight, None, bias, residual)
}

/// [`linear_residual`] with the layer's packed-weight cache, if it has one.
fn residual_with(
    x: &Tensor,
    weight: &Tensor,
    pack: Option<&PackCache>,
    bias: Option<&Tensor>,
    residual: Option<&Tensor>,
) -> candle_core::Result<Tensor> {
    let mut operands = vec![x, weight];
    operands.extend(bias);
    operands.extend(residual);
    let body = ROW.select(x.device(), x.dtype())?;
    if body == Body::Cpu && !needs_grad(&operands) {
        if let Some(y) = fused_linear_with(x, weight, pack, bias, residual, None)? {
            return Ok(y);
        }
    }
    if body == Body::Cuda {
        return cuda_linear(x, weight, bias, residual);
    }
    let y = linear(x, weight, &bias_or_zeros(weight, bias)?)?;
    match residual {
        Some(r) => y + r,
        None => Ok(y),
    }
}

/// `gelu_new(x·Wᵀ + b)`: a linear layer and its activation. On the CPU the activation is the
/// GEMM's epilogue (in place for inference, inside the [`Linear`] op for training).
pub fn linear_gelu_new(x: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> candle_core::Result<Tensor> {
    gelu_new_with(x, weight, None, bias)
}

/// [`linear_gelu_new`] with the layer's packed-weight cache, if it has one.
fn gelu_new_with(
    x: &Tensor,
    weight: &Tensor,
    pack: Option<&PackCache>,
    bias: Option<&Tensor>,
) -> candle_core::Result<Tensor> {
    let mut operands = vec![x, weight];
    operands.extend(bias);
    match (ROW.select(x.device(), x.dtype())?, bias) {
        (Body::Cpu, _) => {
            if !needs_grad(&operands) {
                let epilogue = Some(fast_math::gelu_new_in_place as fn(&mut [f32]));
                if let Some(y) = fused_linear_with(x, weight, pack, bias, None, epilogue)? {
                    return Ok(y);
                }
            }
            cpu_linear_op(x, weight, bias, Epilogue::GeluNew)
        }
        (Body::Cuda, Some(b)) => {
            let y = product(x, weight)?;
            y.apply_op2(&b.to_dtype(y.dtype())?, BiasGeluNew)
        }
        _ => crate::gelu_new(&linear(x, weight, &bias_or_zeros(weight, bias)?)?),
    }
}

/// The sums over every row of `t`'s last dimension, f32 (cols,): one deterministic reduction on a
/// CUDA GPU (a bias's gradient), candle's sum elsewhere.
pub fn bias_grad(t: &Tensor) -> candle_core::Result<Tensor> {
    let cols = t.dim(D::Minus1)?;
    if ROW.choose(t.device(), t.dtype()).body == Body::Cuda {
        return t.contiguous()?.apply_op1_no_bwd(&ColumnSums);
    }
    t.reshape(((), cols))?.to_dtype(DType::F32)?.sum(0)
}

/// `dropout(x·Wᵀ + b)` with the mask of `stream`'s next draw: on the CPU the mask is the
/// GEMM's epilogue; elsewhere the [`crate::dropout()`] op follows the layer. The mask is drawn
/// the same way on every device, so runs agree across devices.
pub fn linear_dropout(
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    stream: &mut DropoutStream,
    p: f64,
) -> candle_core::Result<Tensor> {
    if p > 0.0 && ROW.select(x.device(), x.dtype())? == Body::Cpu {
        let elements = x.elem_count() / x.dim(D::Minus1)?.max(1) * weight.dim(0)?;
        let mask = stream.multipliers(elements, p, x.dtype())?;
        return cpu_linear_op(x, weight, bias, Epilogue::Dropout(mask));
    }
    crate::dropout(&linear(x, weight, &bias_or_zeros(weight, bias)?)?, p, stream)
}

fn needs_grad(tensors: &[&Tensor]) -> bool {
    tensors.iter().any(|t| t.track_op())
}

/// The [`Linear`] op with an epilogue, on CPU operands.
fn cpu_linear_op(
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    epilogue: Epilogue,
) -> candle_core::Result<Tensor> {
    let bias = bias_or_zeros(weight, bias)?;
    x.contiguous()?.apply_op3(&weight.contiguous()?, &bias, Linear::new(epilogue))
}

/// The bias, or zeros for a layer without one.
fn bias_or_zeros(weight: &Tensor, bias: Option<&Tensor>) -> candle_core::Result<Tensor> {
    match bias {
        Some(b) => Ok(b.clone()),
        None => Tensor::zeros(weight.dim(0)?, weight.dtype(), weight.device()),
    }
}

/// The composed linear layer: a matmul over the flattened rows and a broadcast add.
pub fn reference(x: &Tensor, weight: &Tensor, bias: &Tensor) -> candle_core::Result<Tensor> {
    let dims = x.dims().to_vec();
    let (rows, inner) = (dims[..dims.len().saturating_sub(1)].iter().product::<usize>(), x.dim(D::Minus1)?);
    let y = x.reshape((rows, inner))?.matmul(&weight.t()?)?.broadcast_add(bias)?;
    let mut out_dims = dims;
    if let Some(last) = out_dims.last_mut() {
        *last = weight.dim(0)?;
    }
    y.reshape(out_dims)
}
