//! What the CUDA bodies' launches share: the kernels' module (`kernels/codon_ops.cu`, compiled to
//! PTX by `build.rs`), the launch helper and the checks of operands. Each op's launches sit with
//! the op (a `cuda_launch` module beside its type) and import [`prelude`]; inputs are contiguous
//! (the callers make them so) and outputs fresh.
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{DeviceRepr, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaDType, WrapErr};
use candle_core::{CudaStorage, Layout, Result};

/// What an op's `cuda_launch` module imports: the helpers below and the candle and cudarc
/// names every launch uses.
pub(crate) mod prelude {
    pub(crate) use super::{
        bias_view, elementwise_config, function, grid, launch_into_fresh, rows_config, same_count, same_dtype,
        sum_partials, view, with_float_type, Bias, WithMessage, MODULE, PTX, REDUCE_BLOCKS, ROW_THREADS,
    };
    pub(crate) use candle_core::backend::BackendStorage;
    pub(crate) use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
    pub(crate) use candle_core::cuda_backend::WrapErr;
    pub(crate) use candle_core::{CudaStorage, Layout, Result};
}

/// The kernels, compiled for the GPUs `build.rs` targets.
pub(crate) const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/codon_ops.ptx"));
/// The module's name in candle's cache of loaded modules.
pub(crate) const MODULE: &str = "codon_ops";

/// Threads per block of the row kernels (softmax, layer norm).
pub(crate) const ROW_THREADS: u32 = 256;
/// Blocks of the element-wise kernels: enough to fill any current GPU; each thread loops.
const MAX_BLOCKS: u64 = 8192;

/// Load kernel `$name` for `$dtype` (`name_f32`, `name_bf16`, `name_f16`) from the module.
macro_rules! function {
    ($dev:expr, $name:expr, $dtype:expr) => {{
        let suffix = match $dtype {
            candle_core::DType::F32 => "f32",
            candle_core::DType::BF16 => "bf16",
            candle_core::DType::F16 => "f16",
            other => candle_core::bail!("{}: no CUDA kernel for {other:?} (f32, bf16 or f16)", $name),
        };
        $dev.get_or_load_custom_func(&format!("{}_{suffix}", $name), $crate::cuda::MODULE, $crate::cuda::PTX)?
    }};
}
pub(crate) use function;

/// A fresh output of `$n` elements of `$t`, written by kernel `$func` launched over `$cfg` with
/// the arguments in the kernel's order, wrapped as a storage: the allocate/build/launch/wrap of
/// every launch that makes one output. An argument is a reference, `opt(view)` for an optional
/// operand (a null pointer when `None`), or `out` for the output. Unsafe: expand it inside
/// `unsafe`, whose SAFETY comment says why the arguments match the kernel's signature and why
/// the kernel writes every element.
macro_rules! launch_into_fresh {
    ($dev:expr, $func:expr, $cfg:expr, $t:ty, $n:expr; $($args:tt)+) => {{
        let out = $dev.alloc::<$t>($n)?;
        let mut builder = $func.builder();
        $crate::cuda::push_args!(builder, out; $($args)+);
        builder.launch($cfg).w()?;
        candle_core::CudaStorage::wrap_cuda_slice(out, $dev.clone())
    }};
}
pub(crate) use launch_into_fresh;

/// [`launch_into_fresh`]'s arguments, pushed in order.
macro_rules! push_args {
    ($b:ident, $out:ident;) => {};
    ($b:ident, $out:ident; out $(, $($rest:tt)*)?) => {
        $b.arg(&$out);
        $crate::cuda::push_args!($b, $out; $($($rest)*)?);
    };
    ($b:ident, $out:ident; opt($view:expr) $(, $($rest:tt)*)?) => {
        match &$view {
            Some(v) => $b.arg(v),
            None => $b.arg(&0u64),
        };
        $crate::cuda::push_args!($b, $out; $($($rest)*)?);
    };
    ($b:ident, $out:ident; $arg:expr $(, $($rest:tt)*)?) => {
        $b.arg($arg);
        $crate::cuda::push_args!($b, $out; $($($rest)*)?);
    };
}
pub(crate) use push_args;

/// Blocks of 256 threads over `n` elements, at most [`MAX_BLOCKS`] (each thread loops).
pub(crate) fn elementwise_config(n: usize) -> LaunchConfig {
    let blocks = (n as u64).div_ceil(256).clamp(1, MAX_BLOCKS) as u32;
    LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 }
}

/// One block per row (callers return early for no rows).
pub(crate) fn rows_config(rows: usize) -> Result<LaunchConfig> {
    Ok(LaunchConfig { grid_dim: (grid(rows)?, 1, 1), block_dim: (ROW_THREADS, 1, 1), shared_mem_bytes: 0 })
}

/// A grid of `blocks` blocks: CUDA takes at most 2³¹ − 1 in x.
pub(crate) fn grid(blocks: usize) -> Result<u32> {
    match i32::try_from(blocks) {
        Ok(b) if b > 0 => Ok(b as u32),
        _ => candle_core::bail!("{blocks} blocks: outside one launch's grid (1 to 2^31 - 1)"),
    }
}

/// `other` holds as many elements as `first`.
pub(crate) fn same_count(first: &Layout, other: &Layout, op: &str) -> Result<()> {
    if first.shape().elem_count() != other.shape().elem_count() {
        candle_core::bail!("{op}: operands of {:?} and {:?}", first.shape(), other.shape())
    }
    Ok(())
}

/// The contiguous elements of `s` under `l`.
pub(crate) fn view<'a, T: CudaDType + DeviceRepr>(
    s: &'a CudaStorage,
    l: &Layout,
    op: &str,
) -> Result<candle_core::cuda_backend::cudarc::driver::CudaView<'a, T>> {
    match l.contiguous_offsets() {
        Some((start, end)) => Ok(s.as_cuda_slice::<T>()?.slice(start..end)),
        None => candle_core::bail!("{op}: the CUDA kernel takes contiguous operands"),
    }
}

/// Run `$body` with `$t` bound to the Rust element type of `$dtype`.
macro_rules! with_float_type {
    ($dtype:expr, $op:expr, $t:ident => $body:expr) => {
        match $dtype {
            candle_core::DType::F32 => {
                type $t = f32;
                $body
            }
            candle_core::DType::BF16 => {
                type $t = half::bf16;
                $body
            }
            candle_core::DType::F16 => {
                type $t = half::f16;
                $body
            }
            other => candle_core::bail!("{}: no CUDA kernel for {other:?} (f32, bf16 or f16)", $op),
        }
    };
}
pub(crate) use with_float_type;

/// A bias added along the last dimension: `(storage, layout)` of `cols` elements in x's dtype.
pub(crate) type Bias<'a> = Option<(&'a CudaStorage, &'a Layout)>;

/// The view of a bias of `cols` elements in x's dtype, or none.
pub(crate) fn bias_view<'a, T: CudaDType + DeviceRepr>(
    x: &CudaStorage,
    bias: Bias<'a>,
    cols: usize,
    op: &str,
) -> Result<Option<candle_core::cuda_backend::cudarc::driver::CudaView<'a, T>>> {
    let Some((b, bl)) = bias else { return Ok(None) };
    same_dtype(x, b, op)?;
    if bl.shape().elem_count() != cols {
        candle_core::bail!("{op}: a bias of {} elements for rows of {cols}", bl.shape().elem_count())
    }
    Ok(Some(view::<T>(b, bl, op)?))
}

/// Blocks that each sum a share of the rows (or elements) in the two-stage reductions.
pub(crate) const REDUCE_BLOCKS: usize = 256;

/// Adds the `parts` rows of `partial` (parts × width, f32) in a fixed order into a new f32
/// storage of `width`.
pub(crate) fn sum_partials(
    dev: &candle_core::CudaDevice,
    partial: &candle_core::cuda_backend::cudarc::driver::CudaSlice<f32>,
    parts: usize,
    width: usize,
) -> Result<CudaStorage> {
    // SAFETY: every element is written by the kernel.
    let out = unsafe { dev.alloc::<f32>(width)? };
    let sum = dev.get_or_load_custom_func("column_sum_f32", MODULE, PTX)?;
    let (parts32, width32) = (u32::try_from(parts).w_msg("column_sum")?, u32::try_from(width).w_msg("column_sum")?);
    let mut launch = sum.builder();
    launch.arg(&parts32).arg(&width32).arg(partial).arg(&out);
    // SAFETY: the arguments match the kernel's signature.
    unsafe { launch.launch(elementwise_config(width)) }.w()?;
    Ok(CudaStorage::wrap_cuda_slice(out, dev.clone()))
}

/// `a` and `b` hold one dtype.
pub(crate) fn same_dtype(a: &CudaStorage, b: &CudaStorage, op: &str) -> Result<()> {
    if a.dtype() != b.dtype() {
        candle_core::bail!("{op}: operands of {:?} and {:?}", a.dtype(), b.dtype())
    }
    Ok(())
}

/// `u32::try_from` errors as candle errors naming the op.
pub(crate) trait WithMessage<T> {
    /// The error, naming `op`.
    fn w_msg(self, op: &str) -> Result<T>;
}

impl<T, E: std::fmt::Display> WithMessage<T> for std::result::Result<T, E> {
    fn w_msg(self, op: &str) -> Result<T> {
        self.map_err(|e| candle_core::Error::msg(format!("{op}: size too large for the kernel ({e})")))
    }
}
