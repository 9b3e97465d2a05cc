//! Linear layers, `x·Wᵀ + b`.
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

use std::sync::{Arc, Mutex, OnceLock};

use candle_core::{CpuStorage, CustomOp1, CustomOp2, CustomOp3, DType, Device, Layout, Shape, Tensor, D};
use rayon::prelude::*;

use crate::support::{runs_natively, FusedOp};
#[cfg(feature = "ascend")]
use candle_ascend::fused;
#[cfg(feature = "ascend")]
use candle_core::custom_backend::{BoxStorage, DynBackendStorage};

use crate::cpu_bf16::{self, PackedWeight, ValuesMut};
use crate::cpu_gemm::{matmul_into, Mat};
use crate::dropout::DropoutStream;
use crate::f32_views::{cow_f32, store_like, tensor_from_f32, with_f32, with_optional_values, with_values};
use crate::fast_math;

/// Elements per parallel task of the epilogue.
const EPILOGUE_CHUNK: usize = 16 * 1024;

/// `x·Wᵀ + b` for x (…, in), W (out, in) and b (out), on any device (see the module).
pub fn linear(x: &Tensor, weight: &Tensor, bias: &Tensor) -> candle_core::Result<Tensor> {
    if runs_natively(FusedOp::Linear, x.device(), x.dtype()) {
        if let Some(y) = native(x, weight, bias)? {
            return Ok(y);
        }
    }
    reference(x, weight, bias)
}

/// The device's own body, where the operands fit it (`None` where they do not): on the CPU the
/// in-place GEMM for inference, else the [`Linear`] op; on a CUDA GPU cuBLAS and this crate's
/// bias kernel; on an Ascend part the [`Linear`] op, its operands of one dtype.
fn native(x: &Tensor, weight: &Tensor, bias: &Tensor) -> candle_core::Result<Option<Tensor>> {
    let op = || x.contiguous()?.apply_op3(&weight.contiguous()?, bias, Linear::new(Epilogue::Identity));
    match x.device() {
        Device::Cpu => {
            if !needs_grad(&[x, weight, bias]) {
                if let Some(y) = fused_linear(x, weight, Some(bias), None, None)? {
                    return Ok(Some(y));
                }
            }
            op().map(Some)
        }
        Device::Cuda(_) => cuda_linear(x, weight, Some(bias), None).map(Some),
        _ if weight.dtype() == x.dtype() && bias.dtype() == x.dtype() => op().map(Some),
        _ => Ok(None),
    }
}

/// A CUDA GPU's linear layer: cuBLAS's `x·Wᵀ`, then the bias (and a residual) added in one
/// pass by [`AddBias`] or [`AddBiasResidual`].
fn cuda_linear(
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    residual: Option<&Tensor>,
) -> candle_core::Result<Tensor> {
    let y = product(x, weight)?;
    match (bias, residual) {
        (Some(b), Some(r)) => y.apply_op3(&b.to_dtype(y.dtype())?, &r.contiguous()?, AddBiasResidual),
        (Some(b), None) => y.apply_op2(&b.to_dtype(y.dtype())?, AddBias),
        (None, Some(r)) => y + r,
        (None, None) => Ok(y),
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
    if !needs_grad(&operands) {
        if let Some(y) = fused_linear_with(x, weight, pack, bias, residual, None)? {
            return Ok(y);
        }
    }
    if crate::cuda_kernels_take(x) {
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
    if !needs_grad(&operands) {
        let epilogue = Some(fast_math::gelu_new_in_place as fn(&mut [f32]));
        if let Some(y) = fused_linear_with(x, weight, pack, bias, None, epilogue)? {
            return Ok(y);
        }
    }
    if let (true, Some(b)) = (crate::cuda_kernels_take(x), bias) {
        let y = product(x, weight)?;
        return y.apply_op2(&b.to_dtype(y.dtype())?, BiasGeluNew);
    }
    match cpu_linear_op(x, weight, bias, Epilogue::GeluNew)? {
        Some(y) => Ok(y),
        None => crate::gelu_new(&linear(x, weight, &bias_or_zeros(weight, bias)?)?),
    }
}

/// The sums over every row of `t`'s last dimension, f32 (cols,): one deterministic reduction on a
/// CUDA GPU (a bias's gradient), candle's sum elsewhere.
pub fn bias_grad(t: &Tensor) -> candle_core::Result<Tensor> {
    let cols = t.dim(D::Minus1)?;
    if crate::cuda_kernels_take(t) {
        return t.contiguous()?.apply_op1_no_bwd(&ColumnSums);
    }
    t.reshape(((), cols))?.to_dtype(DType::F32)?.sum(0)
}

/// `gelu_new(x + bias)`, the bias along the last dimension: a linear layer's bias and its
/// activation in one pass each way on a CUDA GPU (the bias's gradient is the column sums of the
/// activation's). CUDA body only: other devices add, then apply [`GeluNew`].
pub struct BiasGeluNew;

impl CustomOp2 for BiasGeluNew {
    fn name(&self) -> &'static str {
        "bias_gelu_new"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        // The CPU's linear layers fuse the bias into the GEMM; this body serves CPU operands
        // given to the op directly.
        let mut y = with_bias(s1, l1, s2, l2, None, "bias_gelu_new")?;
        y.par_chunks_mut(EPILOGUE_CHUNK).for_each(fast_math::gelu_new_in_place);
        Ok((store_like(s1, y), l1.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        Ok((crate::activation::cuda_launch::gelu_new(s1, l1, Some((s2, l2)))?, l1.shape().clone()))
    }

    fn bwd(
        &self,
        x: &Tensor,
        bias: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let d = x.apply_op3_no_bwd(bias, &grad.contiguous()?, &BiasGeluNewGrad)?;
        let db = bias_grad(&d)?.to_dtype(bias.dtype())?;
        Ok((Some(d), Some(db)))
    }
}

/// `grad · gelu_new'(x + bias)` in one pass.
struct BiasGeluNewGrad;

impl CustomOp3 for BiasGeluNewGrad {
    fn name(&self) -> &'static str {
        "bias_gelu_new_grad"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let z = with_bias(s1, l1, s2, l2, None, "bias_gelu_new_grad")?;
        let mut g = crate::f32_views::f32_vec(s3, l3, "bias_gelu_new_grad")?;
        if g.len() != z.len() {
            candle_core::bail!("bias_gelu_new_grad: {} gradients for {} inputs", g.len(), z.len())
        }
        g.par_chunks_mut(EPILOGUE_CHUNK)
            .zip(z.par_chunks(EPILOGUE_CHUNK))
            .for_each(|(g, z)| fast_math::gelu_new_grad(z, g));
        Ok((store_like(s3, g), l1.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        Ok((crate::activation::cuda_launch::gelu_new_grad(s1, l1, Some((s2, l2)), s3, l3)?, l1.shape().clone()))
    }
}

/// [`bias_grad`]'s CUDA body.
struct ColumnSums;

impl CustomOp1 for ColumnSums {
    fn name(&self) -> &'static str {
        "column_sums"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let cols = l.dims().last().copied().unwrap_or(1).max(1);
        let v = crate::f32_views::f32_vec(s, l, "column_sums")?;
        Ok((CpuStorage::F32(column_sums(&v, cols)), Shape::from(cols)))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s: &candle_core::CudaStorage,
        l: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let cols = l.dims().last().copied().unwrap_or(1);
        Ok((cuda_launch::sum_rows(s, l)?, Shape::from(cols)))
    }
}

/// `x + bias` along the last dimension in one pass (CUDA body); the bias's gradient is the
/// column sums of the output's.
struct AddBias;

impl CustomOp2 for AddBias {
    fn name(&self) -> &'static str {
        "add_bias"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        Ok((store_like(s1, with_bias(s1, l1, s2, l2, None, "add_bias")?), l1.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        Ok((cuda_launch::add_bias(s1, l1, (s2, l2), None)?, l1.shape().clone()))
    }

    fn bwd(
        &self,
        _x: &Tensor,
        b: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        Ok((Some(grad.clone()), Some(bias_grad(grad)?.to_dtype(b.dtype())?)))
    }
}

/// `x + bias + residual` in one pass (CUDA body).
struct AddBiasResidual;

impl CustomOp3 for AddBiasResidual {
    fn name(&self) -> &'static str {
        "add_bias_residual"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let y = with_bias(s1, l1, s2, l2, Some((s3, l3)), "add_bias_residual")?;
        Ok((store_like(s1, y), l1.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        Ok((cuda_launch::add_bias(s1, l1, (s2, l2), Some((s3, l3)))?, l1.shape().clone()))
    }

    fn bwd(
        &self,
        _x: &Tensor,
        b: &Tensor,
        _r: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        Ok((Some(grad.clone()), Some(bias_grad(grad)?.to_dtype(b.dtype())?), Some(grad.clone())))
    }
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
    if x.device().is_cpu() && p > 0.0 {
        let elements = x.elem_count() / x.dim(D::Minus1)?.max(1) * weight.dim(0)?;
        let mask = stream.multipliers(elements, p, x.dtype())?;
        if let Some(y) = cpu_linear_op(x, weight, bias, Epilogue::Dropout(mask))? {
            return Ok(y);
        }
    }
    crate::dropout(&linear(x, weight, &bias_or_zeros(weight, bias)?)?, p, stream)
}

fn needs_grad(tensors: &[&Tensor]) -> bool {
    tensors.iter().any(|t| t.track_op())
}

/// The [`Linear`] op with an epilogue on CPU operands; `None` on other devices.
fn cpu_linear_op(
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    epilogue: Epilogue,
) -> candle_core::Result<Option<Tensor>> {
    if !x.device().is_cpu() || !weight.device().is_cpu() {
        return Ok(None);
    }
    let bias = bias_or_zeros(weight, bias)?;
    Ok(Some(x.contiguous()?.apply_op3(&weight.contiguous()?, &bias, Linear::new(epilogue))?))
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

/// `x·Wᵀ + bias + residual` for CPU tensors: x (…, in), W (out, in), bias (out), residual
/// shaped like the output; then `epilogue` (an element-wise activation) in place on the result.
/// f32 operands take the f32 GEMM; a bf16 weight takes the bf16 kernels ([`crate::cpu_bf16`]),
/// which read bf16 activations in place and write the output in x's dtype. `Ok(None)` when the
/// inputs do not fit this kernel (another path computes them); a failure inside the kernel is an
/// error, not a silent fallback.
pub fn fused_linear(
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    residual: Option<&Tensor>,
    epilogue: Option<fn(&mut [f32])>,
) -> candle_core::Result<Option<Tensor>> {
    fused_linear_with(x, weight, None, bias, residual, epilogue)
}

/// A layer's bf16 weight packed for the CPU's kernels, made on first use.
type PackCache = OnceLock<PackedWeight>;

fn fused_linear_with(
    x: &Tensor,
    weight: &Tensor,
    pack: Option<&PackCache>,
    bias: Option<&Tensor>,
    residual: Option<&Tensor>,
    epilogue: Option<fn(&mut [f32])>,
) -> candle_core::Result<Option<Tensor>> {
    let bf16_weight = weight.dtype() == DType::BF16 && x.dtype().is_float();
    if !matches!(x.device(), Device::Cpu) || !(bf16_weight || (x.dtype() == DType::F32 && weight.dtype() == DType::F32))
    {
        return Ok(None);
    }
    let Ok((out_f, in_f)) = weight.dims2() else { return Ok(None) };
    let dims = x.dims();
    let Some((_, batch)) = dims.split_last().filter(|(&last, _)| last == in_f) else { return Ok(None) };
    let rows: usize = batch.iter().product();
    let out_dims: Vec<usize> = batch.iter().copied().chain([out_f]).collect();
    if bias.is_some_and(|b| b.dims() != [out_f]) || residual.is_some_and(|r| r.dims() != out_dims.as_slice()) {
        return Ok(None);
    }
    let bias = bias.map(|b| with_f32(b, "linear", <[f32]>::to_vec)).transpose()?;
    if bf16_weight {
        // Only a weight that nothing else can change (not a `Var`, its storage shared with no
        // view or detached copy) keeps its packed copy.
        let fresh;
        let packed = match pack.filter(|_| !weight.is_variable() && !weight.shares_storage()) {
            Some(cell) => match cell.get() {
                Some(p) => p,
                None => {
                    let p = packed_now(weight)?;
                    cell.get_or_init(|| p)
                }
            },
            None => {
                fresh = packed_now(weight)?;
                &fresh
            }
        };
        return bf16_linear(x, packed, rows, bias.as_deref(), residual, epilogue, &out_dims).map(Some);
    }
    let mut out: Vec<f32> = match residual {
        Some(r) => with_f32(r, "linear", <[f32]>::to_vec)?,
        None => vec![0f32; rows * out_f],
    };
    if let Some(bias) = &bias {
        out.par_chunks_mut(out_f).for_each(|row| row.iter_mut().zip(bias).for_each(|(y, b)| *y += b));
    }
    let accumulate = bias.is_some() || residual.is_some();
    with_f32(x, "linear", |xv| {
        with_f32(weight, "linear", |wv| {
            let (x, w) = (Mat::rows(xv, rows, in_f, in_f), Mat::rows(wv, out_f, in_f, in_f));
            matmul_into(&mut out, out_f, x, w.t(), 1.0, accumulate, true)
        })
    })???;
    if let Some(f) = epilogue {
        out.par_chunks_mut(EPILOGUE_CHUNK).for_each(f);
    }
    tensor_from_f32(out, &out_dims, x.dtype()).map(Some)
}

/// A bf16 CPU weight (out, in) packed for this machine's bf16 kernel.
fn packed_now(weight: &Tensor) -> candle_core::Result<PackedWeight> {
    let (out_f, in_f) = weight.dims2()?;
    let weight = weight.contiguous()?;
    let (storage, layout) = weight.storage_and_layout();
    match &*storage {
        candle_core::Storage::Cpu(CpuStorage::BF16(v)) => {
            PackedWeight::new(crate::f32_views::contiguous(v, layout, "linear")?, out_f, in_f)
        }
        _ => candle_core::bail!("linear: expected a bf16 weight on the CPU"),
    }
}

/// `epilogue(x·Wᵀ + bias + residual)` on the bf16 kernels, in x's dtype.
fn bf16_linear(
    x: &Tensor,
    packed: &PackedWeight,
    rows: usize,
    bias: Option<&[f32]>,
    residual: Option<&Tensor>,
    activation: Option<fn(&mut [f32])>,
    out_dims: &[usize],
) -> candle_core::Result<Tensor> {
    let n = rows * packed.dims().0;
    with_values(x, "linear", |xv| {
        with_optional_values(residual, "linear", |residual| {
            let epilogue = cpu_bf16::Epilogue { bias, residual, activation };
            if x.dtype() == DType::BF16 {
                let mut out = vec![half::bf16::ZERO; n];
                cpu_bf16::linear(xv, packed, rows, &epilogue, ValuesMut::Bf16(&mut out))?;
                Tensor::from_vec(out, out_dims, &Device::Cpu)
            } else {
                let mut out = vec![0f32; n];
                cpu_bf16::linear(xv, packed, rows, &epilogue, ValuesMut::F32(&mut out))?;
                tensor_from_f32(out, out_dims, x.dtype())
            }
        })?
    })?
}

/// What [`Linear`] applies to `z = x·Wᵀ + b`.
pub enum Epilogue {
    /// y = z.
    Identity,
    /// y = gelu_new(z).
    GeluNew,
    /// y = z ⊙ mask, the mask holding 0 or 1/(1 − p) per output element.
    Dropout(Vec<f32>),
}

/// `epilogue(x·Wᵀ + b)` with x (…, in), W (out, in), b (out); its backward pass gives
/// dx = dz·W, dW = dzᵀ·x and db = Σ dz. The CPU body computes in f32 for any float dtype and
/// takes every epilogue; the Ascend body takes the identity.
pub struct Linear {
    epilogue: Epilogue,
    /// z, kept for gelu_new's derivative (the saved tensor of a framework's autograd).
    pre_activation: Mutex<Vec<f32>>,
}

impl Linear {
    /// A linear layer followed by `epilogue`.
    pub fn new(epilogue: Epilogue) -> Self {
        Self { epilogue, pre_activation: Mutex::new(Vec::new()) }
    }
}

/// (rows, in, out) of a linear layer's operands, checked.
fn linear_dims(x: &[usize], w: &[usize], b: &[usize]) -> candle_core::Result<(usize, usize, usize)> {
    let (&in_f, lead) = x.split_last().unwrap_or((&0, &[]));
    match (w, b) {
        ([out_f, w_in], [b_out]) if *w_in == in_f && b_out == out_f && in_f > 0 => {
            Ok((lead.iter().product(), in_f, *out_f))
        }
        _ => candle_core::bail!("linear: input {x:?}, weight {w:?} and bias {b:?} do not fit"),
    }
}

impl CustomOp3 for Linear {
    fn name(&self) -> &'static str {
        "linear"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (rows, in_f, out_f) = linear_dims(l1.dims(), l2.dims(), l3.dims())?;
        let (x, w, b) = (cow_f32(s1, l1, "linear")?, cow_f32(s2, l2, "linear")?, cow_f32(s3, l3, "linear")?);
        let mut z = vec![0f32; rows * out_f];
        z.par_chunks_mut(out_f).for_each(|row| row.copy_from_slice(&b));
        matmul_into(
            &mut z,
            out_f,
            Mat::rows(&x, rows, in_f, in_f),
            Mat::rows(&w, out_f, in_f, in_f).t(),
            1.0,
            true,
            true,
        )?;
        match &self.epilogue {
            Epilogue::Identity => {}
            Epilogue::GeluNew => {
                let mut saved = self.pre_activation.lock().map_err(|_| candle_core::Error::msg("linear: poisoned"))?;
                *saved = z.clone();
                z.par_chunks_mut(EPILOGUE_CHUNK).for_each(fast_math::gelu_new_in_place);
            }
            Epilogue::Dropout(mask) => {
                if mask.len() != z.len() {
                    candle_core::bail!("linear: dropout mask has {} elements, output {}", mask.len(), z.len());
                }
                z.par_chunks_mut(EPILOGUE_CHUNK)
                    .zip(mask.par_chunks(EPILOGUE_CHUNK))
                    .for_each(|(z, m)| z.iter_mut().zip(m).for_each(|(z, m)| *z *= m));
            }
        }
        let mut shape = l1.dims().to_vec();
        if let Some(last) = shape.last_mut() {
            *last = out_f;
        }
        Ok((store_like(s1, z), Shape::from(shape)))
    }

    #[allow(clippy::too_many_arguments)]
    #[cfg(feature = "ascend")]
    fn custom_fwd(
        &self,
        s1: &dyn DynBackendStorage,
        l1: &Layout,
        s2: &dyn DynBackendStorage,
        l2: &Layout,
        s3: &dyn DynBackendStorage,
        l3: &Layout,
    ) -> candle_core::Result<(BoxStorage, Shape)> {
        if !matches!(self.epilogue, Epilogue::Identity) {
            candle_core::bail!("linear: the Ascend body has no epilogue; apply the activation or dropout after it")
        }
        fused::linear(s1, l1, s2, l2, s3, l3)
    }

    /// On an Ascend part, dx goes into the gradient x already has in the product's own
    /// launch (aclnnAddmm with it as self): x feeds q, k, v and a residual, so this saves a
    /// pass over (rows × in) per use.
    fn bwd_accumulate(
        &self,
        x: &Tensor,
        w: &Tensor,
        b: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
        acc: &Tensor,
    ) -> candle_core::Result<Option<(Tensor, Option<Tensor>, Option<Tensor>)>> {
        if !runs_natively(FusedOp::LinearGradAccumulate, x.device(), grad.dtype())
            || acc.dtype() != grad.dtype()
            || w.dtype() != grad.dtype()
        {
            return Ok(None);
        }
        let (rows, in_f, out_f) = linear_dims(x.dims(), w.dims(), b.dims())?;
        // Detached: the gradients must not keep the activations' graph alive.
        let (x2, w, g) = (x.detach().reshape((rows, in_f))?, w.detach(), grad.detach().reshape((rows, out_f))?);
        let acc = acc.detach().reshape((rows, in_f))?.contiguous()?;
        let dx = acc.apply_op3_no_bwd(&g.contiguous()?, &w.contiguous()?, &MatmulAdd)?.reshape(x.shape())?;
        let dw = g.t()?.matmul(&x2)?;
        let db = g.sum(0)?;
        Ok(Some((dx, Some(dw), Some(db))))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        b: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (rows, in_f, out_f) = linear_dims(x.dims(), w.dims(), b.dims())?;
        if !x.device().is_cpu() {
            // Detached: the gradients must not keep the activations' graph alive.
            let (x2, w, g) = (x.detach().reshape((rows, in_f))?, w.detach(), grad.detach().reshape((rows, out_f))?);
            let dx = g.matmul(&w)?.reshape(x.shape())?;
            let dw = g.t()?.matmul(&x2)?;
            let db = g.sum(0)?;
            return Ok((Some(dx), Some(dw), Some(db)));
        }
        // dz = dy ⊙ epilogue'(z).
        let mut dz = with_f32(grad, "linear backward", <[f32]>::to_vec)?;
        match &self.epilogue {
            Epilogue::Identity => {}
            Epilogue::GeluNew => {
                let z = self.pre_activation.lock().map_err(|_| candle_core::Error::msg("linear: poisoned"))?;
                if z.len() != dz.len() {
                    candle_core::bail!("linear backward: no saved pre-activation");
                }
                dz.par_chunks_mut(EPILOGUE_CHUNK)
                    .zip(z.par_chunks(EPILOGUE_CHUNK))
                    .for_each(|(g, z)| fast_math::gelu_new_grad(z, g));
            }
            Epilogue::Dropout(mask) => dz
                .par_chunks_mut(EPILOGUE_CHUNK)
                .zip(mask.par_chunks(EPILOGUE_CHUNK))
                .for_each(|(g, m)| g.iter_mut().zip(m).for_each(|(g, m)| *g *= m)),
        }
        let dz_mat = Mat::rows(&dz, rows, out_f, out_f);
        let mut dx = vec![0f32; rows * in_f];
        let mut dw = vec![0f32; out_f * in_f];
        with_f32(w, "linear backward", |w| {
            matmul_into(&mut dx, in_f, dz_mat, Mat::rows(w, out_f, in_f, in_f), 1.0, false, true)
        })??;
        with_f32(x, "linear backward", |x| {
            matmul_into(&mut dw, in_f, dz_mat.t(), Mat::rows(x, rows, in_f, in_f), 1.0, false, true)
        })??;
        let db = column_sums(&dz, out_f);
        Ok((
            Some(tensor_from_f32(dx, x.dims(), x.dtype())?),
            Some(tensor_from_f32(dw, w.dims(), w.dtype())?),
            Some(tensor_from_f32(db, b.dims(), b.dtype())?),
        ))
    }
}

/// Σ over rows of a row-major (rows × width) matrix: partial sums over fixed blocks of rows
/// in parallel, then added in block order, so the result does not depend on the schedule.
/// `x + bias (+ residual)` in f32 on the CPU, the bias along x's last dimension and the
/// residual of x's shape: the CPU body of the CUDA-shaped bias ops.
fn with_bias(
    x: &CpuStorage,
    xl: &Layout,
    bias: &CpuStorage,
    bl: &Layout,
    residual: Option<(&CpuStorage, &Layout)>,
    op: &str,
) -> candle_core::Result<Vec<f32>> {
    let mut y = crate::f32_views::f32_vec(x, xl, op)?;
    let b = crate::f32_views::f32_vec(bias, bl, op)?;
    let cols = xl.dims().last().copied().unwrap_or(1);
    if b.len() != cols {
        candle_core::bail!("{op}: a bias of {} for rows of {cols}", b.len())
    }
    if cols > 0 {
        y.par_chunks_mut(cols).for_each(|row| row.iter_mut().zip(&b).for_each(|(v, b)| *v += b));
    }
    if let Some((r, rl)) = residual {
        let r = crate::f32_views::f32_vec(r, rl, op)?;
        if r.len() != y.len() {
            candle_core::bail!("{op}: a residual of {} elements for {}", r.len(), y.len())
        }
        y.par_iter_mut().zip(&r).for_each(|(v, r)| *v += r);
    }
    Ok(y)
}

fn column_sums(m: &[f32], width: usize) -> Vec<f32> {
    let rows_per_task = (EPILOGUE_CHUNK / width).max(1);
    let partial: Vec<Vec<f32>> = m
        .par_chunks(rows_per_task * width)
        .map(|block| {
            let mut acc = vec![0f32; width];
            block.chunks(width).for_each(|row| acc.iter_mut().zip(row).for_each(|(a, v)| *a += v));
            acc
        })
        .collect();
    partial.into_iter().fold(vec![0f32; width], |mut a, b| {
        a.iter_mut().zip(&b).for_each(|(a, b)| *a += b);
        a
    })
}

/// `acc + a·b` in one launch (Ascend only): a linear layer's input gradient added into the
/// one already accumulated.
struct MatmulAdd;

impl CustomOp3 for MatmulAdd {
    fn name(&self) -> &'static str {
        "matmul_add"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (&[rows, in_f], &[g_rows, out_f], &[w_out, w_in]) = (l1.dims(), l2.dims(), l3.dims()) else {
            candle_core::bail!(
                "matmul_add: expected matrices, got {:?}, {:?} and {:?}",
                l1.dims(),
                l2.dims(),
                l3.dims()
            )
        };
        if g_rows != rows || w_out != out_f || w_in != in_f {
            candle_core::bail!("matmul_add: {:?} + {:?}·{:?} do not fit", l1.dims(), l2.dims(), l3.dims())
        }
        let mut acc = crate::f32_views::f32_vec(s1, l1, "matmul_add")?;
        let g = crate::f32_views::f32_vec(s2, l2, "matmul_add")?;
        let w = crate::f32_views::f32_vec(s3, l3, "matmul_add")?;
        matmul_into(
            &mut acc,
            in_f,
            Mat::rows(&g, rows, out_f, out_f),
            Mat::rows(&w, out_f, in_f, in_f),
            1.0,
            true,
            true,
        )?;
        Ok((store_like(s1, acc), l1.shape().clone()))
    }

    #[allow(clippy::too_many_arguments)]
    #[cfg(feature = "ascend")]
    fn custom_fwd(
        &self,
        s1: &dyn DynBackendStorage,
        l1: &Layout,
        s2: &dyn DynBackendStorage,
        l2: &Layout,
        s3: &dyn DynBackendStorage,
        l3: &Layout,
    ) -> candle_core::Result<(BoxStorage, Shape)> {
        fused::matmul_add(s1, l1, s2, l2, s3, l3)
    }
}

/// The CUDA launches of the bias epilogues and the bias gradient (kernels in
/// `kernels/codon_ops.cu`).
#[cfg(feature = "cuda")]
pub(crate) mod cuda_launch {
    use crate::cuda::prelude::*;

    /// `x + bias (+ residual)`, the bias along the last dimension, rounded once.
    pub(crate) fn add_bias(
        x: &CudaStorage,
        xl: &Layout,
        bias: (&CudaStorage, &Layout),
        residual: Bias,
    ) -> Result<CudaStorage> {
        let dev = &x.device;
        let n = xl.shape().elem_count();
        if n == 0 {
            return x.try_clone(xl);
        }
        let cols = xl.dims().last().copied().unwrap_or(1).max(1);
        let func = function!(dev, "add_bias", x.dtype());
        let (n64, cols32) = (n as u64, u32::try_from(cols).w_msg("add_bias")?);
        with_float_type!(x.dtype(), "add_bias", T => {
            let xv = view::<T>(x, xl, "add_bias")?;
            let bv = bias_view::<T>(x, Some(bias), cols, "add_bias")?;
            let rv = match residual {
                Some((r, rl)) => {
                    same_dtype(x, r, "add_bias")?;
                    if rl.shape() != xl.shape() {
                        candle_core::bail!("add_bias: a residual of {:?} for {:?}", rl.shape(), xl.shape())
                    }
                    Some(view::<T>(r, rl, "add_bias")?)
                }
                None => None,
            };
            // SAFETY: the arguments match the kernel's signature (a null residual is allowed), and
            // it writes every element.
            Ok(unsafe { launch_into_fresh!(dev, func, elementwise_config(n), T, n; &n64, &xv, opt(bv), &cols32, opt(rv), out) })
        })
    }

    /// The sums over all rows of x's last dimension, f32 (cols,): deterministic (fixed shares,
    /// fixed order).
    pub(crate) fn sum_rows(x: &CudaStorage, xl: &Layout) -> Result<CudaStorage> {
        let dev = &x.device;
        let n = xl.shape().elem_count();
        let cols = xl.dims().last().copied().unwrap_or(1).max(1);
        let rows = n / cols;
        let parts = rows.clamp(1, REDUCE_BLOCKS);
        let func = function!(dev, "sum_rows_partial", x.dtype());
        let (rows32, cols32) = (u32::try_from(rows).w_msg("sum_rows")?, u32::try_from(cols).w_msg("sum_rows")?);
        let partial = dev.alloc_zeros::<f32>(parts * cols)?;
        with_float_type!(x.dtype(), "sum_rows", T => {
            let xv = view::<T>(x, xl, "sum_rows")?;
            let mut b = func.builder();
            b.arg(&rows32).arg(&cols32).arg(&xv).arg(&partial);
            let cfg = LaunchConfig { grid_dim: (parts as u32, 1, 1), block_dim: (ROW_THREADS, 1, 1), shared_mem_bytes: 0 };
            // SAFETY: the arguments match the kernel's signature.
            unsafe { b.launch(cfg) }.w()?;
        });
        sum_partials(dev, &partial, parts, cols)
    }
}

#[cfg(test)]
mod tests {
    use candle_core::{DType, Device, Tensor, Var};

    use super::{AddBias, AddBiasResidual, BiasGeluNew, ColumnSums, Epilogue, Linear, MatmulAdd};

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
        assert!(
            max_diff(&super::linear_residual(v.as_tensor(), &w, Some(&b), Some(&r)).unwrap(), &with_residual) < 1e-5
        );
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
        let z =
            x.as_tensor().broadcast_matmul(&w.as_tensor().t().unwrap()).unwrap().broadcast_add(b.as_tensor()).unwrap();
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
}
