//! A linear layer's input gradient added into the one already accumulated, in the product's own
//! launch: `acc + a·b` (`aclnnAddmm` with the accumulator as self) on an Ascend part.
use candle_core::{CpuStorage, CustomOp3, Layout, Shape};

use crate::cpu_gemm::{matmul_into, Mat};
use crate::f32_views::store_like;
#[cfg(feature = "ascend")]
use candle_ascend::fused;
#[cfg(feature = "ascend")]
use candle_core::custom_backend::{BoxStorage, DynBackendStorage};

/// `acc + a·b` in one launch (Ascend only): a linear layer's input gradient added into the
/// one already accumulated.
pub(super) struct MatmulAdd;

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
