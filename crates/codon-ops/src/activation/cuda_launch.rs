//! The CUDA launches of the op's kernels (`kernels/codon_ops.cu`).
use crate::cuda::prelude::*;

/// gelu_new(x + bias) of every element (bias along the last dimension, or none).
pub(crate) fn gelu_new(s: &CudaStorage, l: &Layout, bias: Bias) -> Result<CudaStorage> {
    let dev = &s.device;
    let n = l.shape().elem_count();
    if n == 0 {
        return s.try_clone(l);
    }
    let cols = l.dims().last().copied().unwrap_or(1).max(1);
    let func = function!(dev, "gelu_new_fwd", s.dtype());
    let (n64, cols32) = (n as u64, u32::try_from(cols).w_msg("gelu_new")?);
    with_float_type!(s.dtype(), "gelu_new", T => {
        let x = view::<T>(s, l, "gelu_new")?;
        let bv = bias_view::<T>(s, bias, cols, "gelu_new")?;
        // SAFETY: the arguments match the kernel's signature (a null bias is allowed), and it
        // writes every element.
        Ok(unsafe { launch_into_fresh!(dev, func, elementwise_config(n), T, n; &n64, &x, opt(bv), &cols32, out) })
    })
}

/// `g · gelu_new'(x + bias)`.
pub(crate) fn gelu_new_grad(
    x: &CudaStorage,
    xl: &Layout,
    bias: Bias,
    g: &CudaStorage,
    gl: &Layout,
) -> Result<CudaStorage> {
    let dev = &x.device;
    let n = xl.shape().elem_count();
    same_count(xl, gl, "gelu_new_grad")?;
    if n == 0 {
        return x.try_clone(xl);
    }
    let cols = xl.dims().last().copied().unwrap_or(1).max(1);
    same_dtype(x, g, "gelu_new_grad")?;
    let func = function!(dev, "gelu_new_bwd", x.dtype());
    let (n64, cols32) = (n as u64, u32::try_from(cols).w_msg("gelu_new_grad")?);
    with_float_type!(x.dtype(), "gelu_new_grad", T => {
        let (xv, gv) = (view::<T>(x, xl, "gelu_new_grad")?, view::<T>(g, gl, "gelu_new_grad")?);
        let bv = bias_view::<T>(x, bias, cols, "gelu_new_grad")?;
        // SAFETY: the arguments match the kernel's signature (a null bias is allowed), and it
        // writes every element.
        Ok(unsafe { launch_into_fresh!(dev, func, elementwise_config(n), T, n; &n64, &xv, opt(bv), &cols32, &gv, out) })
    })
}

/// A key bias for [`softmax`]: f32 rows of the scores' width, row `r / rows_per_bias` serving
/// score row r.
pub(crate) struct RowBias<'a> {
    /// The bias storage (f32).
    pub(crate) storage: &'a CudaStorage,
    /// Its layout (contiguous).
    pub(crate) layout: &'a Layout,
    /// Consecutive score rows that share one bias row.
    pub(crate) rows_per_bias: usize,
}

/// softmax(x·scale + bias) over the last dimension, accumulated in f32.
pub(crate) fn softmax(s: &CudaStorage, l: &Layout, scale: f32, bias: Option<RowBias>) -> Result<CudaStorage> {
    let dev = &s.device;
    let n = l.shape().elem_count();
    if n == 0 {
        return s.try_clone(l);
    }
    let cols = l.dims().last().copied().unwrap_or(1).max(1);
    let rows = n / cols;
    let func = function!(dev, "softmax_fwd", s.dtype());
    let bias_view = match &bias {
        Some(b) => {
            let bias_rows = b.layout.shape().elem_count() / cols;
            if b.rows_per_bias == 0 || bias_rows * b.rows_per_bias != rows || b.layout.dims().last() != Some(&cols) {
                candle_core::bail!("softmax: a bias of {bias_rows} rows does not serve {rows} rows of {cols}")
            }
            Some(view::<f32>(b.storage, b.layout, "softmax bias")?)
        }
        None => None,
    };
    let rows_per_bias = u32::try_from(bias.as_ref().map_or(1, |b| b.rows_per_bias)).w_msg("softmax")?;
    let cols32 = u32::try_from(cols).w_msg("softmax")?;
    with_float_type!(s.dtype(), "softmax", T => {
        let x = view::<T>(s, l, "softmax")?;
        // SAFETY: the arguments match the kernel's signature (a null bias is allowed), and it
        // writes every element.
        Ok(unsafe { launch_into_fresh!(dev, func, rows_config(rows)?, T, n; &cols32, &x, opt(bias_view), &rows_per_bias, &scale, out) })
    })
}

/// `scale · y ⊙ (g − Σ g⊙y)` per row of the last dimension.
pub(crate) fn softmax_grad(
    y: &CudaStorage,
    yl: &Layout,
    g: &CudaStorage,
    gl: &Layout,
    scale: f32,
) -> Result<CudaStorage> {
    let dev = &y.device;
    let n = yl.shape().elem_count();
    same_count(yl, gl, "softmax_grad")?;
    if n == 0 {
        return y.try_clone(yl);
    }
    let cols = yl.dims().last().copied().unwrap_or(1).max(1);
    same_dtype(y, g, "softmax_grad")?;
    let func = function!(dev, "softmax_bwd", y.dtype());
    let cols32 = u32::try_from(cols).w_msg("softmax_grad")?;
    with_float_type!(y.dtype(), "softmax_grad", T => {
        let (yv, gv) = (view::<T>(y, yl, "softmax_grad")?, view::<T>(g, gl, "softmax_grad")?);
        let cfg = rows_config(n / cols)?;
        // SAFETY: the arguments match the kernel's signature, and it writes every element.
        Ok(unsafe { launch_into_fresh!(dev, func, cfg, T, n; &cols32, &yv, &gv, &scale, out) })
    })
}
