//! The CUDA launches of the op's kernels (`kernels/codon_ops.cu`).
use crate::cuda::prelude::*;

/// Σ x² over every element, as an f32 scalar: deterministic.
pub(crate) fn sum_of_squares(x: &CudaStorage, xl: &Layout) -> Result<CudaStorage> {
    let dev = &x.device;
    let n = xl.shape().elem_count();
    let func = function!(dev, "sum_squares_partial", x.dtype());
    let partial = dev.alloc_zeros::<f32>(REDUCE_BLOCKS)?;
    with_float_type!(x.dtype(), "sum_of_squares", T => {
        let xv = view::<T>(x, xl, "sum_of_squares")?;
        let n64 = n as u64;
        let mut b = func.builder();
        b.arg(&n64).arg(&xv).arg(&partial);
        let cfg = LaunchConfig { grid_dim: (REDUCE_BLOCKS as u32, 1, 1), block_dim: (ROW_THREADS, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: the arguments match the kernel's signature.
        unsafe { b.launch(cfg) }.w()?;
    });
    sum_partials(dev, &partial, REDUCE_BLOCKS, 1)
}

/// `m ← m + (1 − β)(g − m)`, or with `squared`, `m ← β·m + (1 − β)·g²`, in place (f32);
/// `rest` is 1 − β as the CPU body rounds it.
pub(crate) fn adamw_moment(
    m: &mut CudaStorage,
    ml: &Layout,
    g: &CudaStorage,
    gl: &Layout,
    [beta, rest]: [f32; 2],
    squared: bool,
) -> Result<()> {
    let dev = m.device.clone();
    let n = ml.shape().elem_count();
    let (Some((start, end)), true) = (ml.contiguous_offsets(), gl.shape().elem_count() == n) else {
        candle_core::bail!("adamw_moment: {n} contiguous moments for {} gradients", gl.shape().elem_count())
    };
    let func = dev.get_or_load_custom_func("adamw_moment_f32", MODULE, PTX)?;
    let gv = view::<f32>(g, gl, "adamw_moment")?;
    let mut mv = m.as_cuda_slice_mut::<f32>()?.slice_mut(start..end);
    let (n64, squared) = (n as u64, u32::from(squared));
    let mut b = func.builder();
    b.arg(&n64).arg(&mut mv).arg(&gv).arg(&beta).arg(&rest).arg(&squared);
    // SAFETY: the arguments match the kernel's signature.
    unsafe { b.launch(elementwise_config(n)) }.w()?;
    Ok(())
}

/// `θ ← θ·decay − m / (√v / bias2_sqrt + eps) · step_size`, in place (f32).
#[allow(clippy::too_many_arguments)]
pub(crate) fn adamw_parameter(
    theta: &mut CudaStorage,
    tl: &Layout,
    m: &CudaStorage,
    ml: &Layout,
    v: &CudaStorage,
    vl: &Layout,
    [decay, step_size, bias2_sqrt, eps]: [f32; 4],
) -> Result<()> {
    let dev = theta.device.clone();
    let n = tl.shape().elem_count();
    let (Some((start, end)), true) =
        (tl.contiguous_offsets(), ml.shape().elem_count() == n && vl.shape().elem_count() == n)
    else {
        candle_core::bail!("adamw_parameter: {n} contiguous weights need as many moments")
    };
    let func = dev.get_or_load_custom_func("adamw_parameter_f32", MODULE, PTX)?;
    let (mv, vv) = (view::<f32>(m, ml, "adamw_parameter")?, view::<f32>(v, vl, "adamw_parameter")?);
    let mut tv = theta.as_cuda_slice_mut::<f32>()?.slice_mut(start..end);
    let n64 = n as u64;
    let mut b = func.builder();
    b.arg(&n64).arg(&mut tv).arg(&mv).arg(&vv).arg(&decay).arg(&step_size).arg(&bias2_sqrt).arg(&eps);
    // SAFETY: the arguments match the kernel's signature.
    unsafe { b.launch(elementwise_config(n)) }.w()?;
    Ok(())
}
