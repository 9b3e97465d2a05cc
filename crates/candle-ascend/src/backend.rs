//! candle's `BackendStorage` and `BackendDevice` for Ascend: each candle operation becomes one
//! or two aclnn launches on the device's stream; nothing goes through the host but explicit
//! transfers.
use crate::soc::AclnnOp;
use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::custom_backend::{BinaryOpKind, UnaryOpKind};
use candle_core::op::{BinaryOpT, CmpOp, ReduceOp, UnaryOpT};
use candle_core::{conv, CpuStorage, DType, DeviceLocation, Layout, Result, Shape};

use crate::error::AscendError;
use crate::ffi::types::dtype as acl;
use crate::op_table::{route, CandleOp, Route};
use crate::ops::{self, acl_dtype, View};
use crate::runtime::AscendDevice;
use crate::storage::AscendStorage;

fn unsupported<T>(op: &'static str) -> Result<T> {
    Err(AscendError::Unsupported { op, detail: "BigBird does not need it; run it on the CPU".into() }.into())
}

/// The single aclnn op of a natively routed candle operation.
fn native(op: CandleOp) -> Result<AclnnOp> {
    match route(op) {
        Route::Native(name) => Ok(name),
        _ => Err(AscendError::Unsupported { op: "route", detail: format!("{op} has no single aclnn op") }.into()),
    }
}

impl AscendStorage {
    fn new_like(&self, shape: &Shape, dtype: DType) -> Result<(Self, View)> {
        let out = Self::empty(&self.device, shape.elem_count(), dtype)?;
        let view = out.contiguous(shape)?;
        Ok((out, view))
    }

    /// The dtype `aclnn` computes in for this storage: its own, or INT64 for an integer dtype
    /// the part lacks for that op (u32 on most ops; the table, `soc/op_support.tsv`, decides).
    fn compute_dtype(&self, aclnn: AclnnOp) -> Result<DType> {
        let soc = &self.dev().soc;
        if soc.runs(aclnn, acl_dtype(self.dtype)?) || !self.dtype.is_int() || !soc.runs(aclnn, acl::INT64) {
            return Ok(self.dtype);
        }
        Ok(DType::I64)
    }

    /// This operand as a view of `dtype`: itself, or a cast copy kept alive by the storage returned.
    fn view_as(&self, l: &Layout, dtype: DType) -> Result<(View, Option<AscendStorage>)> {
        if dtype == self.dtype {
            return Ok((self.view(l)?, None));
        }
        let (tmp, tv) = self.new_like(l.shape(), dtype)?;
        ops::copy::cast(self.dev(), &self.view(l)?, &tv)?;
        Ok((tv, Some(tmp)))
    }

    /// An output of `shape` and `dtype` computed by `f` into a view of `compute` dtype, cast to
    /// `dtype` afterwards when the two differ.
    fn output(
        &self,
        shape: &Shape,
        dtype: DType,
        compute: DType,
        f: impl FnOnce(&View) -> crate::error::Result<()>,
    ) -> Result<Self> {
        let (out, ov) = self.new_like(shape, dtype)?;
        if compute == dtype {
            f(&ov)?;
        } else {
            let (_tmp, tv) = self.new_like(shape, compute)?;
            f(&tv)?;
            ops::copy::cast(self.dev(), &tv, &ov)?;
        }
        Ok(out)
    }

    /// 3-D (batch, rows, cols) view of a matmul operand, or `None` if its batch dims do not
    /// collapse into one stride.
    fn matmul_view(&self, l: &Layout, batch: usize, rows: usize, cols: usize) -> Result<Option<View>> {
        let dims = l.dims();
        let stride = l.stride();
        let r = dims.len();
        let (rs, cs) = (stride[r - 2], stride[r - 1]);
        let batch_stride = if batch == 1 {
            Some(rows * cols)
        } else {
            // Batch dims collapse when each stride is the next one times its size (or all zero).
            let bd = &dims[..r - 2];
            let bs = &stride[..r - 2];
            let ok = (0..bd.len().saturating_sub(1)).all(|i| bd[i] == 1 || bs[i] == bs[i + 1] * bd[i + 1]);
            ok.then(|| bs.iter().zip(bd).rev().find(|(_, &d)| d > 1).map_or(0, |(&s, _)| s))
        };
        let Some(bstride) = batch_stride else { return Ok(None) };
        let mut v = self.view(l)?;
        v.dims = vec![batch as i64, rows as i64, cols as i64];
        v.strides = vec![bstride as i64, rs as i64, cs as i64];
        Ok(Some(v))
    }

    /// Indices as an INT32/INT64 view (u32 ids are read as INT32; u8 ones are cast to INT64).
    pub(crate) fn index_view(&self, l: &Layout) -> Result<(View, Option<AscendStorage>)> {
        match self.dtype {
            DType::U32 => Ok((self.view(l)?.reinterpret(acl::INT32), None)),
            DType::I64 | DType::I32 => Ok((self.view(l)?, None)),
            _ => {
                let (tmp, tv) = self.new_like(l.shape(), DType::I64)?;
                ops::copy::cast(self.dev(), &self.view(l)?, &tv)?;
                Ok((tv, Some(tmp)))
            }
        }
    }
}

impl BackendStorage for AscendStorage {
    type Device = AscendDevice;

    fn try_clone(&self, _: &Layout) -> Result<Self> {
        let shape = Shape::from(self.len);
        let (out, ov) = self.new_like(&shape, self.dtype)?;
        ops::copy::copy_into(self.dev(), &ov, &self.contiguous(&shape)?)?;
        Ok(out)
    }

    fn dtype(&self) -> DType {
        self.dtype
    }

    fn device(&self) -> &AscendDevice {
        &self.device
    }

    fn to_cpu_storage(&self) -> Result<CpuStorage> {
        let mut bytes = vec![0u8; self.len * self.dtype.size_in_bytes()];
        self.dev().download(&mut bytes, self.buffer.ptr())?;
        fn cast<T: plain_bytes::Pod>(bytes: &[u8]) -> Vec<T> {
            plain_bytes::from_bytes(bytes)
        }
        Ok(match self.dtype {
            DType::U8 => CpuStorage::U8(bytes),
            DType::U32 => CpuStorage::U32(cast(&bytes)),
            DType::I16 => CpuStorage::I16(cast(&bytes)),
            DType::I32 => CpuStorage::I32(cast(&bytes)),
            DType::I64 => CpuStorage::I64(cast(&bytes)),
            DType::BF16 => CpuStorage::BF16(cast(&bytes)),
            DType::F16 => CpuStorage::F16(cast(&bytes)),
            DType::F32 => CpuStorage::F32(cast(&bytes)),
            DType::F64 => CpuStorage::F64(cast(&bytes)),
            other => return Err(AscendError::Unsupported { op: "to_cpu_storage", detail: format!("{other:?}") }.into()),
        })
    }

    fn affine(&self, l: &Layout, mul: f64, add: f64) -> Result<Self> {
        let dt = self.compute_dtype(AclnnOp::Muls)?;
        let (src, _tmp) = self.view_as(l, dt)?;
        self.output(l.shape(), self.dtype, dt, |ov| {
            ops::elementwise::mul_scalar(self.dev(), &src, mul, ov)?;
            if add != 0.0 {
                ops::elementwise::add_scalar(self.dev(), ov, add, ov)?;
            }
            Ok(())
        })
    }

    fn powf(&self, l: &Layout, e: f64) -> Result<Self> {
        let (out, ov) = self.new_like(l.shape(), self.dtype)?;
        ops::elementwise::pow_scalar(self.dev(), &self.view(l)?, e, &ov)?;
        Ok(out)
    }

    fn elu(&self, _: &Layout, _: f64) -> Result<Self> {
        unsupported("elu")
    }

    fn reduce_op(&self, op: ReduceOp, l: &Layout, dims: &[usize]) -> Result<Self> {
        let mut out_dims = l.dims().to_vec();
        for &d in dims {
            out_dims[d] = 1;
        }
        let shape = Shape::from(out_dims);
        let axes: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        let dev = self.dev();
        let aclnn = route(CandleOp::Reduce(op)).aclnn_ops()[0];
        let dt = self.compute_dtype(aclnn)?;
        let (src, _tmp) = self.view_as(l, dt)?;
        match op {
            ReduceOp::Sum => self.output(&shape, self.dtype, dt, |ov| ops::reduce::sum(dev, &src, &axes, ov)),
            ReduceOp::Max | ReduceOp::Min => {
                self.output(&shape, self.dtype, dt, |ov| ops::reduce::extremum(dev, aclnn, &src, &axes, ov))
            }
            ReduceOp::ArgMax | ReduceOp::ArgMin => self
                .output(&shape, DType::U32, DType::I64, |iv| ops::reduce::arg_extremum(dev, aclnn, &src, axes[0], iv)),
        }
    }

    fn cmp(&self, op: CmpOp, rhs: &Self, l: &Layout, rl: &Layout) -> Result<Self> {
        let name = native(CandleOp::Cmp(op))?;
        let dt = self.compute_dtype(name)?;
        let (a, _ta) = self.view_as(l, dt)?;
        let (b, _tb) = rhs.view_as(rl, dt)?;
        let (out, ov) = self.new_like(l.shape(), DType::U8)?;
        ops::elementwise::binary(self.dev(), name, &a, &b, &ov)?;
        Ok(out)
    }

    fn to_dtype(&self, l: &Layout, dtype: DType) -> Result<Self> {
        let (out, ov) = self.new_like(l.shape(), dtype)?;
        ops::copy::cast(self.dev(), &self.view(l)?, &ov)?;
        Ok(out)
    }

    fn unary_impl<B: UnaryOpT>(&self, l: &Layout) -> Result<Self> {
        let kind = UnaryOpKind::of::<B>()?;
        let ops = route(CandleOp::Unary(kind)).aclnn_ops();
        let dt = self.compute_dtype(ops[0])?;
        let (src, _tmp) = self.view_as(l, dt)?;
        let dev = self.dev();
        self.output(l.shape(), self.dtype, dt, |ov| match kind {
            UnaryOpKind::Sqr => ops::elementwise::binary(dev, ops[0], &src, &src, ov),
            UnaryOpKind::Gelu | UnaryOpKind::GeluErf => {
                ops::elementwise::gelu(dev, kind == UnaryOpKind::Gelu, &src, ov)
            }
            _ => ops::elementwise::unary(dev, ops[0], &src, ov),
        })
    }

    fn binary_impl<B: BinaryOpT>(&self, rhs: &Self, l: &Layout, rl: &Layout) -> Result<Self> {
        let op = native(CandleOp::Binary(BinaryOpKind::of::<B>()?))?;
        let dt = self.compute_dtype(op)?;
        let (a, _ta) = self.view_as(l, dt)?;
        let (b, _tb) = rhs.view_as(rl, dt)?;
        self.output(l.shape(), self.dtype, dt, |ov| ops::elementwise::binary(self.dev(), op, &a, &b, ov))
    }

    fn where_cond(&self, l: &Layout, t: &Self, tl: &Layout, f: &Self, fl: &Layout) -> Result<Self> {
        let (_cond, cv) = self.new_like(l.shape(), DType::U8)?;
        let cv = cv.reinterpret(acl::BOOL);
        ops::copy::cast(self.dev(), &self.view(l)?, &cv)?;
        let dt = t.compute_dtype(AclnnOp::SWhere)?;
        let (tv, _tt) = t.view_as(tl, dt)?;
        let (fv, _tf) = f.view_as(fl, dt)?;
        self.output(l.shape(), t.dtype, dt, |ov| ops::elementwise::select(self.dev(), &cv, &tv, &fv, ov))
    }

    fn conv1d(&self, _: &Layout, _: &Self, _: &Layout, _: &conv::ParamsConv1D) -> Result<Self> {
        unsupported("conv1d")
    }

    fn conv_transpose1d(&self, _: &Layout, _: &Self, _: &Layout, _: &conv::ParamsConvTranspose1D) -> Result<Self> {
        unsupported("conv_transpose1d")
    }

    fn conv2d(&self, _: &Layout, _: &Self, _: &Layout, _: &conv::ParamsConv2D) -> Result<Self> {
        unsupported("conv2d")
    }

    fn conv_transpose2d(&self, _: &Layout, _: &Self, _: &Layout, _: &conv::ParamsConvTranspose2D) -> Result<Self> {
        unsupported("conv_transpose2d")
    }

    fn avg_pool2d(&self, _: &Layout, _: (usize, usize), _: (usize, usize)) -> Result<Self> {
        unsupported("avg_pool2d")
    }

    fn max_pool2d(&self, _: &Layout, _: (usize, usize), _: (usize, usize)) -> Result<Self> {
        unsupported("max_pool2d")
    }

    fn upsample_nearest1d(&self, _: &Layout, _: usize) -> Result<Self> {
        unsupported("upsample_nearest1d")
    }

    fn upsample_nearest2d(&self, _: &Layout, _: usize, _: usize) -> Result<Self> {
        unsupported("upsample_nearest2d")
    }

    fn upsample_bilinear2d(
        &self,
        _: &Layout,
        _: usize,
        _: usize,
        _: bool,
        _: Option<f64>,
        _: Option<f64>,
    ) -> Result<Self> {
        unsupported("upsample_bilinear2d")
    }

    fn gather(&self, l: &Layout, ids: &Self, il: &Layout, dim: usize) -> Result<Self> {
        let (iv, _tmp) = ids.index_view(il)?;
        let (out, ov) = self.new_like(il.shape(), self.dtype)?;
        ops::index::gather(self.dev(), &self.view(l)?, dim as i64, &iv, &ov)?;
        Ok(out)
    }

    fn scatter_set(&mut self, _: &Layout, _: &Self, _: &Layout, _: &Self, _: &Layout, _: usize) -> Result<()> {
        unsupported("scatter_set")
    }

    fn scatter_add_set(
        &mut self,
        l: &Layout,
        ids: &Self,
        il: &Layout,
        src: &Self,
        sl: &Layout,
        dim: usize,
    ) -> Result<()> {
        let (iv, _tmp) = ids.index_view(il)?;
        let me = self.view(l)?;
        Ok(ops::index::scatter_add(self.dev(), &me, dim as i64, &iv, &src.view(sl)?, &me)?)
    }

    fn index_select(&self, ids: &Self, l: &Layout, il: &Layout, dim: usize) -> Result<Self> {
        let (iv, _tmp) = ids.index_view(il)?;
        let mut dims = l.dims().to_vec();
        dims[dim] = il.shape().elem_count();
        let (out, ov) = self.new_like(&Shape::from(dims), self.dtype)?;
        ops::index::index_select(self.dev(), &self.view(l)?, dim as i64, &iv, &ov)?;
        Ok(out)
    }

    fn index_add(&self, l: &Layout, ids: &Self, il: &Layout, src: &Self, sl: &Layout, dim: usize) -> Result<Self> {
        let (iv, _tmp) = ids.index_view(il)?;
        let (out, ov) = self.new_like(l.shape(), self.dtype)?;
        ops::index::index_add(self.dev(), &self.view(l)?, dim as i64, &iv, &src.view(sl)?, &ov)?;
        Ok(out)
    }

    fn matmul(&self, rhs: &Self, (b, m, n, k): (usize, usize, usize, usize), l: &Layout, rl: &Layout) -> Result<Self> {
        // Operands whose batch dims do not collapse into one stride are made contiguous first.
        let lhs_c;
        let a = match self.matmul_view(l, b, m, k)? {
            Some(v) => v,
            None => {
                lhs_c = self.contiguous_copy(l)?;
                lhs_c.matmul_view(&Layout::contiguous(l.shape()), b, m, k)?.ok_or_else(internal)?
            }
        };
        let rhs_c;
        let bv = match rhs.matmul_view(rl, b, k, n)? {
            Some(v) => v,
            None => {
                rhs_c = rhs.contiguous_copy(rl)?;
                rhs_c.matmul_view(&Layout::contiguous(rl.shape()), b, k, n)?.ok_or_else(internal)?
            }
        };
        let (out, ov) = self.new_like(&Shape::from((b, m, n)), self.dtype)?;
        ops::matmul::batch_matmul(self.dev(), &a, &bv, &ov)?;
        Ok(out)
    }

    fn copy_strided_src(&self, dst: &mut Self, dst_offset: usize, l: &Layout) -> Result<()> {
        let dl = Layout::contiguous_with_offset(l.shape(), dst_offset);
        Ok(ops::copy::copy_into(self.dev(), &dst.view(&dl)?, &self.view(l)?)?)
    }

    fn copy2d(&self, dst: &mut Self, d1: usize, d2: usize, ss: usize, ds: usize, so: usize, doff: usize) -> Result<()> {
        let view = |s: &Self, stride: usize, offset: usize| -> Result<View> {
            let mut v = s.contiguous(&Shape::from((d1, d2)))?;
            v.strides = vec![stride as i64, 1];
            v.offset = offset as i64;
            Ok(v)
        };
        Ok(ops::copy::copy_into(self.dev(), &view(dst, ds, doff)?, &view(self, ss, so)?)?)
    }

    fn const_set(&mut self, v: candle_core::scalar::Scalar, l: &Layout) -> Result<()> {
        let view = self.view(l)?;
        // InplaceFillScalar has no UINT32: fill the same bits as INT32.
        if let candle_core::scalar::Scalar::U32(x) = v {
            if !self.dev().soc.runs(AclnnOp::InplaceFillScalar, acl::UINT32) {
                return Ok(ops::copy::fill(self.dev(), &view.reinterpret(acl::INT32), f64::from(x as i32))?);
            }
        }
        Ok(ops::copy::fill(self.dev(), &view, v.to_f64())?)
    }
}

fn internal() -> candle_core::Error {
    candle_core::Error::Msg("matmul: a contiguous operand did not collapse (internal error)".into())
}

impl AscendStorage {
    fn contiguous_copy(&self, l: &Layout) -> Result<Self> {
        let (out, ov) = self.new_like(l.shape(), self.dtype)?;
        ops::copy::copy_into(self.dev(), &ov, &self.view(l)?)?;
        Ok(out)
    }
}

impl BackendDevice for AscendDevice {
    type Storage = AscendStorage;

    fn new(id: usize) -> Result<Self> {
        Ok(AscendDevice::npu(id)?)
    }

    fn location(&self) -> DeviceLocation {
        DeviceLocation::Custom { name: self.inner.location_name(), id: self.inner.id }
    }

    fn same_device(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.inner, &other.inner)
    }

    fn zeros_impl(&self, shape: &Shape, dtype: DType) -> Result<AscendStorage> {
        let out = AscendStorage::empty(self, shape.elem_count(), dtype)?;
        if shape.elem_count() > 0 {
            let mut view = out.contiguous(shape)?;
            // InplaceZero has no UINT32 (ops-math math/zero_op): zero the same bits as INT32.
            if dtype == DType::U32 && !self.inner.soc.runs(AclnnOp::InplaceZero, acl::UINT32) {
                view = view.reinterpret(acl::INT32);
            }
            ops::copy::zero(&self.inner, &view)?;
        }
        Ok(out)
    }

    unsafe fn alloc_uninit(&self, shape: &Shape, dtype: DType) -> Result<AscendStorage> {
        Ok(AscendStorage::empty(self, shape.elem_count(), dtype)?)
    }

    fn storage_from_slice<T: candle_core::WithDType>(&self, data: &[T]) -> Result<AscendStorage> {
        self.storage_from_cpu_storage_owned(T::to_cpu_storage(data))
    }

    fn storage_from_cpu_storage(&self, s: &CpuStorage) -> Result<AscendStorage> {
        use candle_core::backend::BackendStorage as _;
        let dtype = s.dtype();
        let bytes: &[u8] = match s {
            CpuStorage::U8(v) => v,
            CpuStorage::U32(v) => plain_bytes::as_bytes(v),
            CpuStorage::I16(v) => plain_bytes::as_bytes(v),
            CpuStorage::I32(v) => plain_bytes::as_bytes(v),
            CpuStorage::I64(v) => plain_bytes::as_bytes(v),
            CpuStorage::BF16(v) => plain_bytes::as_bytes(v),
            CpuStorage::F16(v) => plain_bytes::as_bytes(v),
            CpuStorage::F32(v) => plain_bytes::as_bytes(v),
            CpuStorage::F64(v) => plain_bytes::as_bytes(v),
            _ => return Err(AscendError::Unsupported { op: "upload", detail: format!("{dtype:?}") }.into()),
        };
        let len = bytes.len() / dtype.size_in_bytes();
        let out = AscendStorage::empty(self, len, dtype)?;
        self.inner.upload(out.buffer.ptr(), bytes)?;
        Ok(out)
    }

    fn storage_from_cpu_storage_owned(&self, s: CpuStorage) -> Result<AscendStorage> {
        self.storage_from_cpu_storage(&s)
    }

    fn rand_uniform(&self, shape: &Shape, dtype: DType, lo: f64, up: f64) -> Result<AscendStorage> {
        let out = AscendStorage::empty(self, shape.elem_count(), dtype)?;
        let (seed, offset) = self.inner.next_random(shape.elem_count() as u64);
        ops::random::uniform(&self.inner, &out.contiguous(shape)?, lo, up, seed, offset)?;
        Ok(out)
    }

    fn rand_normal(&self, shape: &Shape, dtype: DType, mean: f64, std: f64) -> Result<AscendStorage> {
        let out = AscendStorage::empty(self, shape.elem_count(), dtype)?;
        let (seed, offset) = self.inner.next_random(shape.elem_count() as u64);
        ops::random::normal(&self.inner, &out.contiguous(shape)?, mean, std, seed, offset)?;
        Ok(out)
    }

    fn set_seed(&self, seed: u64) -> Result<()> {
        AscendDevice::set_seed(self, seed);
        Ok(())
    }

    fn get_current_seed(&self) -> Result<u64> {
        Ok(self.seed())
    }

    fn synchronize(&self) -> Result<()> {
        Ok(AscendDevice::synchronize(self)?)
    }

    /// BF16 exists from Ascend910B1 on (torch_npu `IsBF16Supported`).
    fn supports_bf16(&self) -> bool {
        self.inner.soc.has_bf16()
    }
}

/// Byte views of plain numeric slices, without a dependency for four lines.
mod plain_bytes {
    /// Plain numeric types: any bit pattern is a value, no padding.
    pub trait Pod: Copy + Default {}
    impl Pod for u32 {}
    impl Pod for i16 {}
    impl Pod for i32 {}
    impl Pod for i64 {}
    impl Pod for f32 {}
    impl Pod for f64 {}
    impl Pod for half::f16 {}
    impl Pod for half::bf16 {}

    pub fn as_bytes<T: Pod>(v: &[T]) -> &[u8] {
        // SAFETY: T is plain data without padding; the byte slice covers exactly `v`.
        unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), std::mem::size_of_val(v)) }
    }

    pub fn from_bytes<T: Pod>(bytes: &[u8]) -> Vec<T> {
        let mut out = vec![T::default(); bytes.len() / std::mem::size_of::<T>()];
        // SAFETY: `out` has room for exactly these bytes and any bit pattern is a valid T.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), out.as_mut_ptr().cast(), out.len() * std::mem::size_of::<T>())
        };
        out
    }
}
