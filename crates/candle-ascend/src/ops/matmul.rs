//! Batched matrix products; transposed operands are expressed through strides.
use crate::soc::AclnnOp;
use std::sync::Arc;

use super::{cube_work, launch_cube, phase1, scalar, View};
use crate::error::Result;
use crate::ffi::types::*;
use crate::runtime::device::DeviceInner;

type T = AclTensorPtr;
type S = AclScalarPtr;

/// `out (b, m, n) = a (b, m, k) · b (b, k, n)` (`aclnnBatchMatMul`), with the SoC's cubeMathType.
pub fn batch_matmul(dev: &Arc<DeviceInner>, a: &View, b: &View, out: &View) -> Result<()> {
    let (ta, tb, to) = (a.acl(dev)?, b.acl(dev)?, out.acl(dev)?);
    let cube = dev.soc.cube_math_type(dev.allow_hf32.load(std::sync::atomic::Ordering::Relaxed));
    let work = cube_work(out, a.dims.last().copied().unwrap_or(1), 1);
    launch_cube(dev, AclnnOp::BatchMatMul, &[a, b, out], work, |addr, ws, ex| {
        phase1!(addr, ws, ex, fn(T, T, T, i8), ta.ptr(), tb.ptr(), to.ptr(), cube)
    })
}

/// `out (m, n) = beta·c + alpha·a (m, k) · b (k, n)` (`aclnnAddmm`), with `c` broadcast to
/// (m, n) (a bias row) and the SoC's cubeMathType.
pub fn addmm(dev: &Arc<DeviceInner>, c: &View, a: &View, b: &View, beta: f64, alpha: f64, out: &View) -> Result<()> {
    let (tc, ta, tb, to) = (c.acl(dev)?, a.acl(dev)?, b.acl(dev)?, out.acl(dev)?);
    let (sbeta, salpha) = (scalar(dev, beta, out.acl_dtype)?, scalar(dev, alpha, out.acl_dtype)?);
    let cube = dev.soc.cube_math_type(dev.allow_hf32.load(std::sync::atomic::Ordering::Relaxed));
    let work = cube_work(out, a.dims.last().copied().unwrap_or(1), 1);
    launch_cube(dev, AclnnOp::Addmm, &[c, a, b, out], work, |addr, ws, ex| {
        phase1!(
            addr,
            ws,
            ex,
            fn(T, T, T, S, S, T, i8),
            tc.ptr(),
            ta.ptr(),
            tb.ptr(),
            sbeta.ptr(),
            salpha.ptr(),
            to.ptr(),
            cube
        )
    })
}

/// The fused bodies built on these launches, for op types outside this crate (re-exported as
/// `candle_ascend::fused`).
pub mod fused {
    use crate::fused::prelude::*;

    /// The Ascend body of a linear layer `x·Wᵀ + b`, x (…, in) contiguous, W (out, in), b (out):
    /// one `aclnnAddmm` that reads W transposed through its strides and adds the broadcast bias
    /// (torch_npu's op-plugin calls the same operator for `addmm`).
    #[allow(clippy::too_many_arguments)]
    pub fn linear(
        x: &dyn DynBackendStorage,
        xl: &Layout,
        w: &dyn DynBackendStorage,
        wl: &Layout,
        b: &dyn DynBackendStorage,
        bl: &Layout,
    ) -> candle_core::Result<(BoxStorage, Shape)> {
        let (xs, ws, bs) = (ascend_storage(x)?, ascend_storage(w)?, ascend_storage(b)?);
        let in_f = hidden_of(xl);
        let rows = xl.shape().elem_count() / in_f;
        let out_f = match (wl.dims(), bl.dims()) {
            ([o, i], [bo]) if *i == in_f && bo == o && wl.is_contiguous() && xl.is_contiguous() => *o,
            _ => candle_core::bail!(
                "linear: input {:?}, weight {:?} and bias {:?} must fit, x and W contiguous",
                xl.dims(),
                wl.dims(),
                bl.dims()
            ),
        };
        let mut a = xs.view(xl)?;
        (a.dims, a.strides) = (vec![rows as i64, in_f as i64], vec![in_f as i64, 1]);
        let mut wt = ws.view(wl)?;
        (wt.dims, wt.strides) = (vec![in_f as i64, out_f as i64], vec![1, in_f as i64]);
        let (out, ov) = output_like(xs, &Shape::from_dims(&[rows, out_f]))?;
        crate::ops::matmul::addmm(xs.dev(), &bs.view(bl)?, &a, &wt, 1.0, 1.0, &ov)?;
        let mut dims = xl.dims().to_vec();
        if let Some(last) = dims.last_mut() {
            *last = out_f;
        }
        Ok((Box::new(out), Shape::from(dims)))
    }

    /// The Ascend body of `acc + a·b` for acc (rows, n), a (rows, k) and b (k, n), all
    /// contiguous: one `aclnnAddmm` with acc as its self, so that a product adds into a sum (a
    /// gradient into the one already accumulated) without a pass of its own.
    pub fn matmul_add(
        acc: &dyn DynBackendStorage,
        accl: &Layout,
        a: &dyn DynBackendStorage,
        al: &Layout,
        b: &dyn DynBackendStorage,
        bl: &Layout,
    ) -> candle_core::Result<(BoxStorage, Shape)> {
        let (cs, as_, bs) = (ascend_storage(acc)?, ascend_storage(a)?, ascend_storage(b)?);
        match (accl.dims(), al.dims(), bl.dims()) {
            ([r, n], [ra, k], [kb, nb])
                if r == ra && k == kb && n == nb && [accl, al, bl].iter().all(|l| l.is_contiguous()) => {}
            (c, a, b) => candle_core::bail!("matmul_add: {c:?} + {a:?}·{b:?} do not fit, or are not contiguous"),
        }
        let (out, ov) = output_like(cs, accl.shape())?;
        crate::ops::matmul::addmm(cs.dev(), &cs.view(accl)?, &as_.view(al)?, &bs.view(bl)?, 1.0, 1.0, &ov)?;
        Ok((Box::new(out), accl.shape().clone()))
    }
}
