//! A generic backend slot: devices and storages implemented outside candle-core.
//!
//! An out-of-tree backend implements [`BackendStorage`] and [`BackendDevice`] exactly as
//! the CPU, CUDA and Metal backends do. The blanket impls below turn any such pair into the
//! object-safe [`DynBackendStorage`] / [`DynBackendDevice`], which `Storage::Custom` and
//! `Device::Custom` hold. Generic unary/binary ops cross the object boundary as the
//! runtime tags [`UnaryOpKind`] / [`BinaryOpKind`] and are turned back into the op types on
//! the other side, so the backend sees the same `unary_impl::<B>` calls as in-tree ones.
use std::any::Any;
use std::fmt::Debug;
use std::sync::Arc;

use crate::backend::{BackendDevice, BackendStorage};
use crate::op::{self, BinaryOpT, CmpOp, ReduceOp, UnaryOpT};
use crate::{conv, CpuStorage, DType, DeviceLocation, Error, Layout, Result, Shape};

/// A boxed storage of a custom backend.
pub type BoxStorage = Box<dyn DynBackendStorage>;

macro_rules! op_kinds {
    ($(#[$meta:meta])* $kind:ident : $trait:ident { $($variant:ident),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $kind { $($variant),* }

        impl $kind {
            /// Every variant.
            pub const ALL: &'static [$kind] = &[$($kind::$variant),*];

            /// The tag of the op type `B`.
            pub fn of<B: $trait>() -> Result<Self> {
                $(if B::NAME == <op::$variant as $trait>::NAME { return Ok(Self::$variant); })*
                Err(Error::Msg(format!("op {} has no custom-backend tag", B::NAME)).bt())
            }

            /// The op's name (`B::NAME`).
            pub fn name(self) -> &'static str {
                match self { $(Self::$variant => <op::$variant as $trait>::NAME),* }
            }

            /// The op's kernel name (`B::KERNEL`).
            pub fn kernel(self) -> &'static str {
                match self { $(Self::$variant => <op::$variant as $trait>::KERNEL),* }
            }
        }
    };
}

op_kinds!(
    /// Runtime tag of every [`UnaryOpT`] implementation.
    UnaryOpKind: UnaryOpT {
        Exp, Log, Sin, Cos, Tanh, Neg, Recip, Sqr, Sqrt, Gelu, GeluErf, Erf, Relu, Silu, Abs,
        Ceil, Floor, Round, Sign,
    }
);
op_kinds!(
    /// Runtime tag of every [`BinaryOpT`] implementation.
    BinaryOpKind: BinaryOpT { Add, Sub, Mul, Div, Minimum, Maximum }
);

/// Object-safe mirror of [`BackendStorage`]; blanket-implemented for every backend.
#[allow(clippy::too_many_arguments)]
pub trait DynBackendStorage: Any + Send + Sync + Debug {
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
    fn dyn_try_clone(&self, l: &Layout) -> Result<BoxStorage>;
    fn dyn_dtype(&self) -> DType;
    fn dyn_device(&self) -> Arc<dyn DynBackendDevice>;
    fn dyn_to_cpu_storage(&self) -> Result<CpuStorage>;
    fn dyn_affine(&self, l: &Layout, mul: f64, add: f64) -> Result<BoxStorage>;
    fn dyn_powf(&self, l: &Layout, e: f64) -> Result<BoxStorage>;
    fn dyn_elu(&self, l: &Layout, alpha: f64) -> Result<BoxStorage>;
    fn dyn_reduce_op(&self, op: ReduceOp, l: &Layout, dims: &[usize]) -> Result<BoxStorage>;
    fn dyn_cmp(&self, op: CmpOp, rhs: &dyn DynBackendStorage, l: &Layout, rl: &Layout) -> Result<BoxStorage>;
    fn dyn_to_dtype(&self, l: &Layout, dtype: DType) -> Result<BoxStorage>;
    fn dyn_unary(&self, op: UnaryOpKind, l: &Layout) -> Result<BoxStorage>;
    fn dyn_binary(&self, op: BinaryOpKind, rhs: &dyn DynBackendStorage, l: &Layout, rl: &Layout) -> Result<BoxStorage>;
    fn dyn_where_cond(
        &self,
        l: &Layout,
        t: &dyn DynBackendStorage,
        tl: &Layout,
        f: &dyn DynBackendStorage,
        fl: &Layout,
    ) -> Result<BoxStorage>;
    fn dyn_conv1d(
        &self,
        l: &Layout,
        k: &dyn DynBackendStorage,
        kl: &Layout,
        p: &conv::ParamsConv1D,
    ) -> Result<BoxStorage>;
    fn dyn_conv_transpose1d(
        &self,
        l: &Layout,
        k: &dyn DynBackendStorage,
        kl: &Layout,
        p: &conv::ParamsConvTranspose1D,
    ) -> Result<BoxStorage>;
    fn dyn_conv2d(
        &self,
        l: &Layout,
        k: &dyn DynBackendStorage,
        kl: &Layout,
        p: &conv::ParamsConv2D,
    ) -> Result<BoxStorage>;
    fn dyn_conv_transpose2d(
        &self,
        l: &Layout,
        k: &dyn DynBackendStorage,
        kl: &Layout,
        p: &conv::ParamsConvTranspose2D,
    ) -> Result<BoxStorage>;
    fn dyn_avg_pool2d(&self, l: &Layout, k: (usize, usize), s: (usize, usize)) -> Result<BoxStorage>;
    fn dyn_max_pool2d(&self, l: &Layout, k: (usize, usize), s: (usize, usize)) -> Result<BoxStorage>;
    fn dyn_upsample_nearest1d(&self, l: &Layout, sz: usize) -> Result<BoxStorage>;
    fn dyn_upsample_nearest2d(&self, l: &Layout, h: usize, w: usize) -> Result<BoxStorage>;
    fn dyn_upsample_bilinear2d(
        &self,
        l: &Layout,
        h: usize,
        w: usize,
        ac: bool,
        sh: Option<f64>,
        sw: Option<f64>,
    ) -> Result<BoxStorage>;
    fn dyn_gather(&self, l: &Layout, ids: &dyn DynBackendStorage, il: &Layout, dim: usize) -> Result<BoxStorage>;
    fn dyn_scatter_set(
        &mut self,
        l: &Layout,
        ids: &dyn DynBackendStorage,
        il: &Layout,
        src: &dyn DynBackendStorage,
        sl: &Layout,
        dim: usize,
    ) -> Result<()>;
    fn dyn_scatter_add_set(
        &mut self,
        l: &Layout,
        ids: &dyn DynBackendStorage,
        il: &Layout,
        src: &dyn DynBackendStorage,
        sl: &Layout,
        dim: usize,
    ) -> Result<()>;
    fn dyn_index_select(&self, ids: &dyn DynBackendStorage, l: &Layout, il: &Layout, dim: usize) -> Result<BoxStorage>;
    fn dyn_index_add(
        &self,
        l: &Layout,
        ids: &dyn DynBackendStorage,
        il: &Layout,
        src: &dyn DynBackendStorage,
        sl: &Layout,
        dim: usize,
    ) -> Result<BoxStorage>;
    fn dyn_matmul(
        &self,
        rhs: &dyn DynBackendStorage,
        bmnk: (usize, usize, usize, usize),
        l: &Layout,
        rl: &Layout,
    ) -> Result<BoxStorage>;
    fn dyn_copy_strided_src(&self, dst: &mut dyn DynBackendStorage, dst_offset: usize, l: &Layout) -> Result<()>;
    fn dyn_copy2d(
        &self,
        dst: &mut dyn DynBackendStorage,
        d1: usize,
        d2: usize,
        src_s: usize,
        dst_s: usize,
        src_o: usize,
        dst_o: usize,
    ) -> Result<()>;
    fn dyn_const_set(&mut self, v: crate::scalar::Scalar, l: &Layout) -> Result<()>;
}

/// Object-safe mirror of [`BackendDevice`] (without `new`); blanket-implemented.
pub trait DynBackendDevice: Any + Send + Sync + Debug {
    fn as_any(&self) -> &dyn Any;
    fn dyn_location(&self) -> DeviceLocation;
    fn dyn_same_device(&self, other: &dyn DynBackendDevice) -> bool;
    fn dyn_zeros(&self, shape: &Shape, dtype: DType) -> Result<BoxStorage>;
    /// # Safety
    /// The storage is uninitialised, as for [`BackendDevice::alloc_uninit`].
    unsafe fn dyn_alloc_uninit(&self, shape: &Shape, dtype: DType) -> Result<BoxStorage>;
    fn dyn_storage_from_cpu_storage(&self, s: &CpuStorage) -> Result<BoxStorage>;
    fn dyn_storage_from_cpu_storage_owned(&self, s: CpuStorage) -> Result<BoxStorage>;
    fn dyn_rand_uniform(&self, shape: &Shape, dtype: DType, lo: f64, up: f64) -> Result<BoxStorage>;
    fn dyn_rand_normal(&self, shape: &Shape, dtype: DType, mean: f64, std: f64) -> Result<BoxStorage>;
    fn dyn_set_seed(&self, seed: u64) -> Result<()>;
    fn dyn_get_current_seed(&self) -> Result<u64>;
    fn dyn_synchronize(&self) -> Result<()>;
    fn dyn_supports_bf16(&self) -> bool;
}

fn mixed() -> Error {
    Error::Msg("mixing storages of two different custom backends".into()).bt()
}

fn cast<T: 'static>(s: &dyn DynBackendStorage) -> Result<&T> {
    s.as_any().downcast_ref::<T>().ok_or_else(mixed)
}

fn cast_mut<T: 'static>(s: &mut dyn DynBackendStorage) -> Result<&mut T> {
    s.as_any_mut().downcast_mut::<T>().ok_or_else(mixed)
}

fn boxed<T: DynBackendStorage>(r: Result<T>) -> Result<BoxStorage> {
    r.map(|s| Box::new(s) as BoxStorage)
}

macro_rules! dispatch {
    ($kind:expr, $enum:ident, [$($variant:ident),*], |$b:ident| $call:expr) => {
        match $kind { $($enum::$variant => { type $b = op::$variant; $call })* }
    };
}

impl<T, D> DynBackendStorage for T
where
    T: BackendStorage<Device = D> + Debug + Send + Sync + 'static,
    D: BackendDevice<Storage = T> + Send + Sync + 'static,
{
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn dyn_try_clone(&self, l: &Layout) -> Result<BoxStorage> {
        boxed(self.try_clone(l))
    }
    fn dyn_dtype(&self) -> DType {
        self.dtype()
    }
    fn dyn_device(&self) -> Arc<dyn DynBackendDevice> {
        Arc::new(self.device().clone())
    }
    fn dyn_to_cpu_storage(&self) -> Result<CpuStorage> {
        self.to_cpu_storage()
    }
    fn dyn_affine(&self, l: &Layout, mul: f64, add: f64) -> Result<BoxStorage> {
        boxed(self.affine(l, mul, add))
    }
    fn dyn_powf(&self, l: &Layout, e: f64) -> Result<BoxStorage> {
        boxed(self.powf(l, e))
    }
    fn dyn_elu(&self, l: &Layout, alpha: f64) -> Result<BoxStorage> {
        boxed(self.elu(l, alpha))
    }
    fn dyn_reduce_op(&self, op: ReduceOp, l: &Layout, dims: &[usize]) -> Result<BoxStorage> {
        boxed(self.reduce_op(op, l, dims))
    }
    fn dyn_cmp(&self, op: CmpOp, rhs: &dyn DynBackendStorage, l: &Layout, rl: &Layout) -> Result<BoxStorage> {
        boxed(self.cmp(op, cast(rhs)?, l, rl))
    }
    fn dyn_to_dtype(&self, l: &Layout, dtype: DType) -> Result<BoxStorage> {
        boxed(self.to_dtype(l, dtype))
    }
    fn dyn_unary(&self, op: UnaryOpKind, l: &Layout) -> Result<BoxStorage> {
        dispatch!(
            op,
            UnaryOpKind,
            [
                Exp, Log, Sin, Cos, Tanh, Neg, Recip, Sqr, Sqrt, Gelu, GeluErf, Erf, Relu, Silu, Abs, Ceil, Floor,
                Round, Sign
            ],
            |B| boxed(self.unary_impl::<B>(l))
        )
    }
    fn dyn_binary(&self, op: BinaryOpKind, rhs: &dyn DynBackendStorage, l: &Layout, rl: &Layout) -> Result<BoxStorage> {
        let rhs = cast(rhs)?;
        dispatch!(op, BinaryOpKind, [Add, Sub, Mul, Div, Minimum, Maximum], |B| boxed(
            self.binary_impl::<B>(rhs, l, rl)
        ))
    }
    fn dyn_where_cond(
        &self,
        l: &Layout,
        t: &dyn DynBackendStorage,
        tl: &Layout,
        f: &dyn DynBackendStorage,
        fl: &Layout,
    ) -> Result<BoxStorage> {
        boxed(self.where_cond(l, cast(t)?, tl, cast(f)?, fl))
    }
    fn dyn_conv1d(
        &self,
        l: &Layout,
        k: &dyn DynBackendStorage,
        kl: &Layout,
        p: &conv::ParamsConv1D,
    ) -> Result<BoxStorage> {
        boxed(self.conv1d(l, cast(k)?, kl, p))
    }
    fn dyn_conv_transpose1d(
        &self,
        l: &Layout,
        k: &dyn DynBackendStorage,
        kl: &Layout,
        p: &conv::ParamsConvTranspose1D,
    ) -> Result<BoxStorage> {
        boxed(self.conv_transpose1d(l, cast(k)?, kl, p))
    }
    fn dyn_conv2d(
        &self,
        l: &Layout,
        k: &dyn DynBackendStorage,
        kl: &Layout,
        p: &conv::ParamsConv2D,
    ) -> Result<BoxStorage> {
        boxed(self.conv2d(l, cast(k)?, kl, p))
    }
    fn dyn_conv_transpose2d(
        &self,
        l: &Layout,
        k: &dyn DynBackendStorage,
        kl: &Layout,
        p: &conv::ParamsConvTranspose2D,
    ) -> Result<BoxStorage> {
        boxed(self.conv_transpose2d(l, cast(k)?, kl, p))
    }
    fn dyn_avg_pool2d(&self, l: &Layout, k: (usize, usize), s: (usize, usize)) -> Result<BoxStorage> {
        boxed(self.avg_pool2d(l, k, s))
    }
    fn dyn_max_pool2d(&self, l: &Layout, k: (usize, usize), s: (usize, usize)) -> Result<BoxStorage> {
        boxed(self.max_pool2d(l, k, s))
    }
    fn dyn_upsample_nearest1d(&self, l: &Layout, sz: usize) -> Result<BoxStorage> {
        boxed(self.upsample_nearest1d(l, sz))
    }
    fn dyn_upsample_nearest2d(&self, l: &Layout, h: usize, w: usize) -> Result<BoxStorage> {
        boxed(self.upsample_nearest2d(l, h, w))
    }
    fn dyn_upsample_bilinear2d(
        &self,
        l: &Layout,
        h: usize,
        w: usize,
        ac: bool,
        sh: Option<f64>,
        sw: Option<f64>,
    ) -> Result<BoxStorage> {
        boxed(self.upsample_bilinear2d(l, h, w, ac, sh, sw))
    }
    fn dyn_gather(&self, l: &Layout, ids: &dyn DynBackendStorage, il: &Layout, dim: usize) -> Result<BoxStorage> {
        boxed(self.gather(l, cast(ids)?, il, dim))
    }
    fn dyn_scatter_set(
        &mut self,
        l: &Layout,
        ids: &dyn DynBackendStorage,
        il: &Layout,
        src: &dyn DynBackendStorage,
        sl: &Layout,
        dim: usize,
    ) -> Result<()> {
        self.scatter_set(l, cast(ids)?, il, cast(src)?, sl, dim)
    }
    fn dyn_scatter_add_set(
        &mut self,
        l: &Layout,
        ids: &dyn DynBackendStorage,
        il: &Layout,
        src: &dyn DynBackendStorage,
        sl: &Layout,
        dim: usize,
    ) -> Result<()> {
        self.scatter_add_set(l, cast(ids)?, il, cast(src)?, sl, dim)
    }
    fn dyn_index_select(&self, ids: &dyn DynBackendStorage, l: &Layout, il: &Layout, dim: usize) -> Result<BoxStorage> {
        boxed(self.index_select(cast(ids)?, l, il, dim))
    }
    fn dyn_index_add(
        &self,
        l: &Layout,
        ids: &dyn DynBackendStorage,
        il: &Layout,
        src: &dyn DynBackendStorage,
        sl: &Layout,
        dim: usize,
    ) -> Result<BoxStorage> {
        boxed(self.index_add(l, cast(ids)?, il, cast(src)?, sl, dim))
    }
    fn dyn_matmul(
        &self,
        rhs: &dyn DynBackendStorage,
        bmnk: (usize, usize, usize, usize),
        l: &Layout,
        rl: &Layout,
    ) -> Result<BoxStorage> {
        boxed(self.matmul(cast(rhs)?, bmnk, l, rl))
    }
    fn dyn_copy_strided_src(&self, dst: &mut dyn DynBackendStorage, dst_offset: usize, l: &Layout) -> Result<()> {
        self.copy_strided_src(cast_mut(dst)?, dst_offset, l)
    }
    fn dyn_copy2d(
        &self,
        dst: &mut dyn DynBackendStorage,
        d1: usize,
        d2: usize,
        src_s: usize,
        dst_s: usize,
        src_o: usize,
        dst_o: usize,
    ) -> Result<()> {
        self.copy2d(cast_mut(dst)?, d1, d2, src_s, dst_s, src_o, dst_o)
    }
    fn dyn_const_set(&mut self, v: crate::scalar::Scalar, l: &Layout) -> Result<()> {
        self.const_set(v, l)
    }
}

impl<T, D> DynBackendDevice for D
where
    T: BackendStorage<Device = D> + Debug + Send + Sync + 'static,
    D: BackendDevice<Storage = T> + Send + Sync + 'static,
{
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn dyn_location(&self) -> DeviceLocation {
        self.location()
    }
    fn dyn_same_device(&self, other: &dyn DynBackendDevice) -> bool {
        other.as_any().downcast_ref::<D>().is_some_and(|o| self.same_device(o))
    }
    fn dyn_zeros(&self, shape: &Shape, dtype: DType) -> Result<BoxStorage> {
        boxed(self.zeros_impl(shape, dtype))
    }
    unsafe fn dyn_alloc_uninit(&self, shape: &Shape, dtype: DType) -> Result<BoxStorage> {
        boxed(self.alloc_uninit(shape, dtype))
    }
    fn dyn_storage_from_cpu_storage(&self, s: &CpuStorage) -> Result<BoxStorage> {
        boxed(self.storage_from_cpu_storage(s))
    }
    fn dyn_storage_from_cpu_storage_owned(&self, s: CpuStorage) -> Result<BoxStorage> {
        boxed(self.storage_from_cpu_storage_owned(s))
    }
    fn dyn_rand_uniform(&self, shape: &Shape, dtype: DType, lo: f64, up: f64) -> Result<BoxStorage> {
        boxed(self.rand_uniform(shape, dtype, lo, up))
    }
    fn dyn_rand_normal(&self, shape: &Shape, dtype: DType, mean: f64, std: f64) -> Result<BoxStorage> {
        boxed(self.rand_normal(shape, dtype, mean, std))
    }
    fn dyn_set_seed(&self, seed: u64) -> Result<()> {
        self.set_seed(seed)
    }
    fn dyn_get_current_seed(&self) -> Result<u64> {
        self.get_current_seed()
    }
    fn dyn_synchronize(&self) -> Result<()> {
        self.synchronize()
    }
    fn dyn_supports_bf16(&self) -> bool {
        self.supports_bf16()
    }
}
