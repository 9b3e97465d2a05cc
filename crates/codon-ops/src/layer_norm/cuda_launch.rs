//! The CUDA launches of the op's kernels (`kernels/codon_ops.cu`).
use crate::cuda::prelude::*;

/// Layer norm over the last dimension; weight and bias take x's dtype.
pub(crate) fn layer_norm(
    x: &CudaStorage,
    xl: &Layout,
    w: &CudaStorage,
    wl: &Layout,
    b: &CudaStorage,
    bl: &Layout,
    eps: f32,
) -> Result<CudaStorage> {
    row_kernel("layer_norm_fwd", (x, xl), (w, wl), RowOperand::Bias(b, bl), eps)
}

/// The layer norm's input gradient from x, the weight (x's dtype) and the output's gradient.
pub(crate) fn layer_norm_input_grad(
    x: &CudaStorage,
    xl: &Layout,
    w: &CudaStorage,
    wl: &Layout,
    dy: &CudaStorage,
    dyl: &Layout,
    eps: f32,
) -> Result<CudaStorage> {
    row_kernel("layer_norm_input_grad", (x, xl), (w, wl), RowOperand::OutputGrad(dy, dyl), eps)
}

/// The third operand of a LayerNorm row kernel, in x's dtype.
enum RowOperand<'a> {
    /// The bias: one element per column.
    Bias(&'a CudaStorage, &'a Layout),
    /// The output's gradient: x's shape.
    OutputGrad(&'a CudaStorage, &'a Layout),
}

/// A LayerNorm row kernel (one block per row) over x, the weight and `third`, into a fresh
/// output of x's shape.
fn row_kernel(
    kernel: &str,
    (x, xl): (&CudaStorage, &Layout),
    (w, wl): (&CudaStorage, &Layout),
    third: RowOperand,
    eps: f32,
) -> Result<CudaStorage> {
    let dev = &x.device;
    let n = xl.shape().elem_count();
    if let RowOperand::OutputGrad(_, gl) = third {
        same_count(xl, gl, kernel)?;
    }
    if n == 0 {
        return x.try_clone(xl);
    }
    let cols = xl.dims().last().copied().unwrap_or(1).max(1);
    check_params(x, w, wl, cols, kernel)?;
    let (t, tl) = match third {
        RowOperand::Bias(b, bl) => {
            check_params(x, b, bl, cols, kernel)?;
            (b, bl)
        }
        RowOperand::OutputGrad(g, gl) => {
            same_dtype(x, g, kernel)?;
            (g, gl)
        }
    };
    let func = function!(dev, kernel, x.dtype());
    let cols32 = u32::try_from(cols).w_msg(kernel)?;
    with_float_type!(x.dtype(), kernel, T => {
        let (xv, wv, tv) = (view::<T>(x, xl, kernel)?, view::<T>(w, wl, kernel)?, view::<T>(t, tl, kernel)?);
        // SAFETY: the arguments match the kernel's signature, and it writes every element.
        Ok(unsafe { launch_into_fresh!(dev, func, rows_config(n / cols)?, T, n; &cols32, &xv, &wv, &tv, &eps, out) })
    })
}

/// Blocks of the layer norm's parameter gradients: each sums its share of the rows.
const LAYER_NORM_GRAD_BLOCKS: usize = 256;

/// [Σ dy⊙x̂ ; Σ dy] over all rows, as f32 (2, cols): per-block sums, then one sum of them in a
/// fixed order (deterministic).
pub(crate) fn layer_norm_param_grad(
    x: &CudaStorage,
    xl: &Layout,
    dy: &CudaStorage,
    dyl: &Layout,
    eps: f32,
) -> Result<CudaStorage> {
    let dev = &x.device;
    let n = xl.shape().elem_count();
    same_count(xl, dyl, "layer_norm_param_grad")?;
    let cols = xl.dims().last().copied().unwrap_or(1).max(1);
    let rows = n / cols;
    same_dtype(x, dy, "layer_norm_param_grad")?;
    let shared = 2 * cols * std::mem::size_of::<f32>();
    // 48 KiB of dynamic and static shared memory: the kernel's reduction scratch takes 128 bytes.
    if shared > 48 * 1024 - 128 {
        candle_core::bail!("layer_norm_param_grad: {cols} columns do not fit the kernel's shared memory")
    }
    if rows == 0 {
        return Ok(CudaStorage::wrap_cuda_slice(dev.alloc_zeros::<f32>(2 * cols)?, dev.clone()));
    }
    let blocks = rows.min(LAYER_NORM_GRAD_BLOCKS);
    let func = function!(dev, "layer_norm_param_grad", x.dtype());
    let (rows32, cols32) =
        (u32::try_from(rows).w_msg("layer_norm_param_grad")?, u32::try_from(cols).w_msg("layer_norm_param_grad")?);
    // SAFETY: every partial sum is written by the kernel.
    let partial = unsafe { dev.alloc::<f32>(blocks * 2 * cols)? };
    let cfg = LaunchConfig {
        grid_dim: (blocks as u32, 1, 1),
        block_dim: (ROW_THREADS, 1, 1),
        shared_mem_bytes: shared as u32,
    };
    with_float_type!(x.dtype(), "layer_norm_param_grad", T => {
        let (xv, gv) = (view::<T>(x, xl, "layer_norm_param_grad")?, view::<T>(dy, dyl, "layer_norm_param_grad")?);
        let mut launch = func.builder();
        launch.arg(&rows32).arg(&cols32).arg(&xv).arg(&gv).arg(&eps).arg(&partial);
        // SAFETY: the arguments match the kernel's signature; the shared memory holds 2·cols floats.
        unsafe { launch.launch(cfg) }.w()?;
    });
    sum_partials(dev, &partial, blocks, 2 * cols)
}

/// A weight or bias of `cols` elements in x's dtype.
fn check_params(x: &CudaStorage, p: &CudaStorage, pl: &Layout, cols: usize, op: &str) -> Result<()> {
    same_dtype(x, p, op)?;
    if pl.shape().elem_count() != cols {
        candle_core::bail!("{op}: weight and bias must have {cols} elements")
    }
    Ok(())
}
