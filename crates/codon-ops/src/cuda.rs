//! The CUDA bodies' kernels (`kernels/codon_ops.cu`, compiled to PTX by `build.rs`) and their
//! launches, one function per kernel over candle's CUDA storage. Each op module calls these from
//! its `cuda_fwd`; inputs are contiguous (the callers make them so) and outputs fresh.
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{DeviceRepr, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaDType, WrapErr};
use candle_core::{CudaStorage, DType, Layout, Result};

const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/codon_ops.ptx"));
const MODULE: &str = "codon_ops";

/// Threads per block of the row kernels (softmax, layer norm).
const ROW_THREADS: u32 = 256;
/// Blocks of the element-wise kernels: enough to fill any current GPU; each thread loops.
const MAX_BLOCKS: u64 = 8192;

/// Load kernel `$name` for `$dtype` (`name_f32`, `name_bf16`, `name_f16`) from the module.
macro_rules! function {
    ($dev:expr, $name:expr, $dtype:expr) => {{
        let suffix = match $dtype {
            DType::F32 => "f32",
            DType::BF16 => "bf16",
            DType::F16 => "f16",
            other => candle_core::bail!("{}: no CUDA kernel for {other:?} (f32, bf16 or f16)", $name),
        };
        $dev.get_or_load_custom_func(&format!("{}_{suffix}", $name), MODULE, PTX)?
    }};
}

/// A fresh output of `$n` elements of `$t`, written by kernel `$func` launched over `$cfg` with
/// `$args` and then the output, wrapped as a storage: the allocate/build/launch/wrap of every
/// launch that makes one output. Unsafe: expand it inside `unsafe`, whose SAFETY comment says
/// why the arguments match the kernel's signature and why the kernel writes every element.
macro_rules! launch_into_fresh {
    ($dev:expr, $func:expr, $cfg:expr, $t:ty, $n:expr; $($arg:expr),+ $(,)?) => {{
        let out = $dev.alloc::<$t>($n)?;
        let mut builder = $func.builder();
        $( builder.arg($arg); )+
        builder.arg(&out);
        builder.launch($cfg).w()?;
        CudaStorage::wrap_cuda_slice(out, $dev.clone())
    }};
}

fn elementwise_config(n: usize) -> LaunchConfig {
    let blocks = (n as u64).div_ceil(256).clamp(1, MAX_BLOCKS) as u32;
    LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 }
}

/// One block per row (callers return early for no rows).
fn rows_config(rows: usize) -> Result<LaunchConfig> {
    Ok(LaunchConfig { grid_dim: (grid(rows)?, 1, 1), block_dim: (ROW_THREADS, 1, 1), shared_mem_bytes: 0 })
}

/// A grid of `blocks` blocks: CUDA takes at most 2³¹ − 1 in x.
fn grid(blocks: usize) -> Result<u32> {
    match i32::try_from(blocks) {
        Ok(b) if b > 0 => Ok(b as u32),
        _ => candle_core::bail!("{blocks} blocks: outside one launch's grid (1 to 2^31 - 1)"),
    }
}

/// `other` holds as many elements as `first`.
fn same_count(first: &Layout, other: &Layout, op: &str) -> Result<()> {
    if first.shape().elem_count() != other.shape().elem_count() {
        candle_core::bail!("{op}: operands of {:?} and {:?}", first.shape(), other.shape())
    }
    Ok(())
}

/// The contiguous elements of `s` under `l`.
fn view<'a, T: CudaDType + DeviceRepr>(
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
            DType::F32 => {
                type $t = f32;
                $body
            }
            DType::BF16 => {
                type $t = half::bf16;
                $body
            }
            DType::F16 => {
                type $t = half::f16;
                $body
            }
            other => candle_core::bail!("{}: no CUDA kernel for {other:?} (f32, bf16 or f16)", $op),
        }
    };
}

/// A bias added along the last dimension: `(storage, layout)` of `cols` elements in x's dtype.
pub type Bias<'a> = Option<(&'a CudaStorage, &'a Layout)>;

/// The bias argument of a kernel: its elements' view, or a null pointer.
macro_rules! bias_arg {
    ($builder:expr, $view:expr, $null:expr) => {
        match &$view {
            Some(v) => $builder.arg(v),
            None => $builder.arg(&$null),
        }
    };
}

fn bias_view<'a, T: CudaDType + DeviceRepr>(
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

/// gelu_new(x + bias) of every element (bias along the last dimension, or none).
pub fn gelu_new(s: &CudaStorage, l: &Layout, bias: Bias) -> Result<CudaStorage> {
    let dev = &s.device;
    let n = l.shape().elem_count();
    if n == 0 {
        return s.try_clone(l);
    }
    let cols = l.dims().last().copied().unwrap_or(1).max(1);
    let func = function!(dev, "gelu_new_fwd", s.dtype());
    let cols32 = u32::try_from(cols).w_msg("gelu_new")?;
    with_float_type!(s.dtype(), "gelu_new", T => {
        let x = view::<T>(s, l, "gelu_new")?;
        let bv = bias_view::<T>(s, bias, cols, "gelu_new")?;
        // SAFETY: every element is written by the kernel.
        let y = unsafe { dev.alloc::<T>(n)? };
        let (n64, null) = (n as u64, 0u64);
        let mut b = func.builder();
        b.arg(&n64).arg(&x);
        bias_arg!(b, bv, null);
        b.arg(&cols32).arg(&y);
        // SAFETY: the arguments match the kernel's signature; a null bias is allowed.
        unsafe { b.launch(elementwise_config(n)) }.w()?;
        Ok(CudaStorage::wrap_cuda_slice(y, dev.clone()))
    })
}

/// `g · gelu_new'(x + bias)`.
pub fn gelu_new_grad(x: &CudaStorage, xl: &Layout, bias: Bias, g: &CudaStorage, gl: &Layout) -> Result<CudaStorage> {
    let dev = &x.device;
    let n = xl.shape().elem_count();
    same_count(xl, gl, "gelu_new_grad")?;
    if n == 0 {
        return x.try_clone(xl);
    }
    let cols = xl.dims().last().copied().unwrap_or(1).max(1);
    same_dtype(x, g, "gelu_new_grad")?;
    let func = function!(dev, "gelu_new_bwd", x.dtype());
    let cols32 = u32::try_from(cols).w_msg("gelu_new_grad")?;
    with_float_type!(x.dtype(), "gelu_new_grad", T => {
        let (xv, gv) = (view::<T>(x, xl, "gelu_new_grad")?, view::<T>(g, gl, "gelu_new_grad")?);
        let bv = bias_view::<T>(x, bias, cols, "gelu_new_grad")?;
        // SAFETY: every element is written by the kernel.
        let dx = unsafe { dev.alloc::<T>(n)? };
        let (n64, null) = (n as u64, 0u64);
        let mut b = func.builder();
        b.arg(&n64).arg(&xv);
        bias_arg!(b, bv, null);
        b.arg(&cols32).arg(&gv).arg(&dx);
        // SAFETY: the arguments match the kernel's signature; a null bias is allowed.
        unsafe { b.launch(elementwise_config(n)) }.w()?;
        Ok(CudaStorage::wrap_cuda_slice(dx, dev.clone()))
    })
}

/// `x + bias (+ residual)`, the bias along the last dimension, rounded once.
pub fn add_bias(x: &CudaStorage, xl: &Layout, bias: (&CudaStorage, &Layout), residual: Bias) -> Result<CudaStorage> {
    let dev = &x.device;
    let n = xl.shape().elem_count();
    if n == 0 {
        return x.try_clone(xl);
    }
    let cols = xl.dims().last().copied().unwrap_or(1).max(1);
    let func = function!(dev, "add_bias", x.dtype());
    let cols32 = u32::try_from(cols).w_msg("add_bias")?;
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
        // SAFETY: every element is written by the kernel.
        let y = unsafe { dev.alloc::<T>(n)? };
        let (n64, null) = (n as u64, 0u64);
        let mut b = func.builder();
        b.arg(&n64).arg(&xv);
        bias_arg!(b, bv, null);
        b.arg(&cols32);
        bias_arg!(b, rv, null);
        b.arg(&y);
        // SAFETY: the arguments match the kernel's signature; a null residual is allowed.
        unsafe { b.launch(elementwise_config(n)) }.w()?;
        Ok(CudaStorage::wrap_cuda_slice(y, dev.clone()))
    })
}

/// Blocks that each sum a share of the rows (or elements) in the two-stage reductions.
const REDUCE_BLOCKS: usize = 256;

/// Adds the `parts` rows of `partial` (parts × width, f32) in a fixed order into a new f32
/// storage of `width`.
fn sum_partials(
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

/// The sums over all rows of x's last dimension, f32 (cols,): deterministic (fixed shares,
/// fixed order).
pub fn sum_rows(x: &CudaStorage, xl: &Layout) -> Result<CudaStorage> {
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

/// Σ x² over every element, as an f32 scalar: deterministic.
pub fn sum_of_squares(x: &CudaStorage, xl: &Layout) -> Result<CudaStorage> {
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

/// Blocks of (sequences × src_blocks) blocks of `block_elems` elements: out block (s, j) is src
/// block (s, index[j]). `None` when the blocks are not whole 16-byte vectors (the caller gathers
/// another way).
pub fn gather_blocks(
    src: &CudaStorage,
    sl: &Layout,
    index: &CudaStorage,
    il: &Layout,
    block_elems: usize,
    src_blocks: usize,
) -> Result<Option<CudaStorage>> {
    let dev = &src.device;
    let size = src.dtype().size_in_bytes();
    let Some((start, end)) = sl.contiguous_offsets() else { return Ok(None) };
    if !(block_elems * size).is_multiple_of(16)
        || !(start * size).is_multiple_of(16)
        || block_elems == 0
        || src_blocks == 0
    {
        return Ok(None);
    }
    let sequences = (end - start) / (block_elems * src_blocks);
    let out_blocks = il.shape().elem_count();
    let grid = grid(sequences * out_blocks)?;
    let (vecs, src32, out32) = (
        u32::try_from(block_elems * size / 16).w_msg("gather_blocks")?,
        u32::try_from(src_blocks).w_msg("gather_blocks")?,
        u32::try_from(out_blocks).w_msg("gather_blocks")?,
    );
    let func = dev.get_or_load_custom_func("gather_blocks", MODULE, PTX)?;
    let iv = view::<u32>(index, il, "gather_blocks")?;
    let out = with_float_type!(src.dtype(), "gather_blocks", T => {
        let sv = view::<T>(src, sl, "gather_blocks")?;
        // SAFETY: the view's bytes are whole 16-byte vectors at a 16-byte aligned address (checked
        // above); the kernel copies them without reading their values.
        let sv = unsafe { sv.transmute::<u128>((end - start) * size / 16) }
            .ok_or_else(|| candle_core::Error::msg("gather_blocks: the source is shorter than its layout"))?;
        let cfg = LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (ROW_THREADS, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: the arguments match the kernel's signature, and it writes every output block;
        // every index is below src_blocks (the caller's table is checked when the op is built).
        unsafe {
            launch_into_fresh!(dev, func, cfg, T, sequences * out_blocks * block_elems; &vecs, &src32, &out32, &iv, &sv)
        }
    });
    Ok(Some(out))
}

/// The gathered blocks' sums added back into their source blocks: out block (s, t) = base block
/// (s, t) + the gathered blocks (s, sources[offsets[t]..offsets[t + 1]]), in f32 in that order.
/// Base is (sequences × blocks) blocks and gathered (sequences × gathered_blocks) blocks of
/// `block_elems` elements.
#[allow(clippy::too_many_arguments)]
pub fn scatter_add_blocks(
    base: &CudaStorage,
    bl: &Layout,
    gathered: &CudaStorage,
    gl: &Layout,
    (offsets, ol): (&CudaStorage, &Layout),
    (sources, srcl): (&CudaStorage, &Layout),
    block_elems: usize,
    gathered_blocks: usize,
) -> Result<CudaStorage> {
    let dev = &base.device;
    same_dtype(base, gathered, "scatter_add_blocks")?;
    let n = bl.shape().elem_count();
    let blocks = ol.shape().elem_count().saturating_sub(1);
    if block_elems == 0 || blocks == 0 || !n.is_multiple_of(block_elems * blocks) {
        candle_core::bail!(
            "scatter_add_blocks: {n} elements are not whole sequences of {blocks} blocks of {block_elems}"
        )
    }
    let sequences = n / (block_elems * blocks);
    if gl.shape().elem_count() != sequences * gathered_blocks * block_elems {
        candle_core::bail!("scatter_add_blocks: the gathered blocks do not match {sequences} sequences")
    }
    let grid = grid(sequences * blocks)?;
    let (elems32, blocks32, gathered32) = (
        u32::try_from(block_elems).w_msg("scatter_add_blocks")?,
        u32::try_from(blocks).w_msg("scatter_add_blocks")?,
        u32::try_from(gathered_blocks).w_msg("scatter_add_blocks")?,
    );
    let func = function!(dev, "scatter_add_blocks", base.dtype());
    let (ov, sv) = (view::<u32>(offsets, ol, "scatter_add_blocks")?, view::<u32>(sources, srcl, "scatter_add_blocks")?);
    with_float_type!(base.dtype(), "scatter_add_blocks", T => {
        let (bv, gv) = (view::<T>(base, bl, "scatter_add_blocks")?, view::<T>(gathered, gl, "scatter_add_blocks")?);
        let cfg = LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (ROW_THREADS, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: the arguments match the kernel's signature, and it writes every element; the
        // offsets and sources come from a checked inverse of the gather table.
        Ok(unsafe { launch_into_fresh!(dev, func, cfg, T, n; &elems32, &blocks32, &gathered32, &ov, &sv, &bv, &gv) })
    })
}

/// x times a Philox dropout mask: kept where the mask's word is below `threshold`, scaled by
/// `scale` (see `dropout.rs` for the layout).
pub fn dropout(s: &CudaStorage, l: &Layout, seed: u64, offset: u64, threshold: u64, scale: f32) -> Result<CudaStorage> {
    let dev = &s.device;
    let n = l.shape().elem_count();
    if n == 0 {
        return s.try_clone(l);
    }
    let func = function!(dev, "dropout", s.dtype());
    with_float_type!(s.dtype(), "dropout", T => {
        let x = view::<T>(s, l, "dropout")?;
        // SAFETY: every element is written by the kernel.
        let y = unsafe { dev.alloc::<T>(n)? };
        let mut b = func.builder();
        let n64 = n as u64;
        b.arg(&n64).arg(&x).arg(&y).arg(&seed).arg(&offset).arg(&threshold).arg(&scale);
        // SAFETY: the arguments match the kernel's signature.
        unsafe { b.launch(elementwise_config(n.div_ceil(4))) }.w()?;
        Ok(CudaStorage::wrap_cuda_slice(y, dev.clone()))
    })
}

/// A key bias for [`softmax`]: f32 rows of the scores' width, row `r / rows_per_bias` serving
/// score row r.
pub struct RowBias<'a> {
    /// The bias storage (f32).
    pub storage: &'a CudaStorage,
    /// Its layout (contiguous).
    pub layout: &'a Layout,
    /// Consecutive score rows that share one bias row.
    pub rows_per_bias: usize,
}

/// softmax(x·scale + bias) over the last dimension, accumulated in f32.
pub fn softmax(s: &CudaStorage, l: &Layout, scale: f32, bias: Option<RowBias>) -> Result<CudaStorage> {
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
        // SAFETY: every element is written by the kernel.
        let y = unsafe { dev.alloc::<T>(n)? };
        let null = 0u64;
        let mut b = func.builder();
        b.arg(&cols32).arg(&x);
        match &bias_view {
            Some(v) => b.arg(v),
            None => b.arg(&null),
        };
        b.arg(&rows_per_bias).arg(&scale).arg(&y);
        // SAFETY: the arguments match the kernel's signature; a null bias is allowed.
        unsafe { b.launch(rows_config(rows)?) }.w()?;
        Ok(CudaStorage::wrap_cuda_slice(y, dev.clone()))
    })
}

/// `scale · y ⊙ (g − Σ g⊙y)` per row of the last dimension.
pub fn softmax_grad(y: &CudaStorage, yl: &Layout, g: &CudaStorage, gl: &Layout, scale: f32) -> Result<CudaStorage> {
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
        Ok(unsafe { launch_into_fresh!(dev, func, cfg, T, n; &cols32, &yv, &gv, &scale) })
    })
}

/// Layer norm over the last dimension; weight and bias take x's dtype.
pub fn layer_norm(
    x: &CudaStorage,
    xl: &Layout,
    w: &CudaStorage,
    wl: &Layout,
    b: &CudaStorage,
    bl: &Layout,
    eps: f32,
) -> Result<CudaStorage> {
    let dev = &x.device;
    let n = xl.shape().elem_count();
    if n == 0 {
        return x.try_clone(xl);
    }
    let cols = xl.dims().last().copied().unwrap_or(1).max(1);
    check_params(x, w, wl, cols, "layer_norm")?;
    check_params(x, b, bl, cols, "layer_norm")?;
    let func = function!(dev, "layer_norm_fwd", x.dtype());
    let cols32 = u32::try_from(cols).w_msg("layer_norm")?;
    with_float_type!(x.dtype(), "layer_norm", T => {
        let (xv, wv, bv) = (view::<T>(x, xl, "layer_norm")?, view::<T>(w, wl, "layer_norm")?, view::<T>(b, bl, "layer_norm")?);
        let cfg = rows_config(n / cols)?;
        // SAFETY: the arguments match the kernel's signature, and it writes every element.
        Ok(unsafe { launch_into_fresh!(dev, func, cfg, T, n; &cols32, &xv, &wv, &bv, &eps) })
    })
}

/// The layer norm's input gradient from x, the weight (x's dtype) and the output's gradient.
pub fn layer_norm_input_grad(
    x: &CudaStorage,
    xl: &Layout,
    w: &CudaStorage,
    wl: &Layout,
    dy: &CudaStorage,
    dyl: &Layout,
    eps: f32,
) -> Result<CudaStorage> {
    let dev = &x.device;
    let n = xl.shape().elem_count();
    same_count(xl, dyl, "layer_norm_input_grad")?;
    if n == 0 {
        return x.try_clone(xl);
    }
    let cols = xl.dims().last().copied().unwrap_or(1).max(1);
    check_params(x, w, wl, cols, "layer_norm_input_grad")?;
    same_dtype(x, dy, "layer_norm_input_grad")?;
    let func = function!(dev, "layer_norm_input_grad", x.dtype());
    let cols32 = u32::try_from(cols).w_msg("layer_norm_input_grad")?;
    with_float_type!(x.dtype(), "layer_norm_input_grad", T => {
        let (xv, wv, gv) = (view::<T>(x, xl, "layer_norm_input_grad")?, view::<T>(w, wl, "layer_norm_input_grad")?, view::<T>(dy, dyl, "layer_norm_input_grad")?);
        let cfg = rows_config(n / cols)?;
        // SAFETY: the arguments match the kernel's signature, and it writes every element.
        Ok(unsafe { launch_into_fresh!(dev, func, cfg, T, n; &cols32, &xv, &wv, &gv, &eps) })
    })
}

/// Blocks of the layer norm's parameter gradients: each sums its share of the rows.
const LAYER_NORM_GRAD_BLOCKS: usize = 256;

/// [Σ dy⊙x̂ ; Σ dy] over all rows, as f32 (2, cols): per-block sums, then one sum of them in a
/// fixed order (deterministic).
pub fn layer_norm_param_grad(
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
    let out = dev.alloc_zeros::<f32>(2 * cols)?;
    if rows == 0 {
        return Ok(CudaStorage::wrap_cuda_slice(out, dev.clone()));
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
    let sum = dev.get_or_load_custom_func("column_sum_f32", MODULE, PTX)?;
    let (parts, width) = (blocks as u32, 2 * cols32);
    let mut launch = sum.builder();
    launch.arg(&parts).arg(&width).arg(&partial).arg(&out);
    // SAFETY: the arguments match the kernel's signature.
    unsafe { launch.launch(elementwise_config(2 * cols)) }.w()?;
    Ok(CudaStorage::wrap_cuda_slice(out, dev.clone()))
}

/// A weight or bias of `cols` elements in x's dtype.
fn check_params(x: &CudaStorage, p: &CudaStorage, pl: &Layout, cols: usize, op: &str) -> Result<()> {
    same_dtype(x, p, op)?;
    if pl.shape().elem_count() != cols {
        candle_core::bail!("{op}: weight and bias must have {cols} elements")
    }
    Ok(())
}

/// `m ← m + (1 − β)(g − m)`, or with `squared`, `m ← β·m + (1 − β)·g²`, in place (f32);
/// `rest` is 1 − β as the CPU body rounds it.
pub fn adamw_moment(
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
pub fn adamw_parameter(
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

fn same_dtype(a: &CudaStorage, b: &CudaStorage, op: &str) -> Result<()> {
    if a.dtype() != b.dtype() {
        candle_core::bail!("{op}: operands of {:?} and {:?}", a.dtype(), b.dtype())
    }
    Ok(())
}

/// `u32::try_from` errors as candle errors naming the op.
trait WithMessage<T> {
    fn w_msg(self, op: &str) -> Result<T>;
}

impl<T, E: std::fmt::Display> WithMessage<T> for std::result::Result<T, E> {
    fn w_msg(self, op: &str) -> Result<T> {
        self.map_err(|e| candle_core::Error::msg(format!("{op}: size too large for the kernel ({e})")))
    }
}
