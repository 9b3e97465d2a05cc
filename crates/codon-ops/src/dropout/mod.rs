//! Dropout as one op, with masks keyed by (seed, offset) so that runs are reproducible and the
//! mask of any draw can be computed again. On an Ascend part the op is `aclnnDropoutGenMaskV2` +
//! `aclnnDropoutDoMask` forward and `aclnnDropoutDoMask` of the kept mask backward, as torch_npu
//! runs it: the mask never leaves the device. On the CPU (and devices without the two
//! operators) the mask multiplies the input, one pass each way; the CPU's fused kernels take the
//! same mask as multipliers ([`DropoutStream::multipliers`]). A CUDA GPU draws the same mask
//! inside its dropout kernel (the op's CUDA body), and again for the backward pass: bit for bit
//! the CPU's, never stored.
//!
//! Mask layout: draw (seed, offset) keeps element i when `(w + ½)/2³²` is below the FLOAT keep
//! probability 1 − p, where w is word i % 4 of Philox4x32-10 keyed by the seed at the counter
//! {i / 4, offset} (offset in the high 64 bits). That is the one layout the vendor publishes
//! (ops-math `stateless_drop_out_gen_mask_pt.h`, Ascend 950), and the emulator draws the same
//! bits, so the CPU and `npu-sim` agree bit for bit. A real 910A or 910B draws from a generator
//! whose algorithm is not published: the same distribution, other bits.
use std::sync::Mutex;

use crate::launch::LaunchState;
use crate::selection::{Body, FusedOp, OnCpu, OnCuda, Row};
#[cfg(feature = "ascend")]
use candle_ascend::fused;
#[cfg(feature = "ascend")]
use candle_ascend::soc::AclnnOp;
#[cfg(feature = "ascend")]
use candle_core::custom_backend::{BoxStorage, DynBackendStorage};
use candle_core::{CpuStorage, CustomOp1, DType, Device, Layout, Shape, Tensor};
use rayon::prelude::*;

use crate::philox::philox4x32_10;

/// Where the masks of one pass come from: draw k uses (seed, k).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DropoutStream {
    seed: u64,
    offset: u64,
}

/// Mask elements per parallel task (a multiple of 4, one Philox block per 4 elements).
const CHUNK: usize = 64 * 1024;

impl DropoutStream {
    /// The stream of a pass seeded by `seed`, at its first draw.
    pub fn new(seed: u64) -> Self {
        Self { seed, offset: 0 }
    }

    /// The key of the next draw; the stream moves past it.
    pub(crate) fn next_draw(&mut self) -> (u64, u64) {
        let draw = (self.seed, self.offset);
        self.offset += 1;
        draw
    }

    /// The next draw's mask for `len` elements as multipliers: 0 where dropped, 1/(1 − p) where
    /// kept, with 1 − p rounded to `dtype` first as the device's kernel does.
    pub fn multipliers(&mut self, len: usize, p: f64, dtype: DType) -> candle_core::Result<Vec<f32>> {
        Ok(self.draw(p)?.multipliers(len, dtype))
    }

    /// The next draw, for an op that draws each element of its mask where it needs it.
    pub fn draw(&mut self, p: f64) -> candle_core::Result<DropoutDraw> {
        check_p(p)?;
        let (seed, offset) = self.next_draw();
        Ok(DropoutDraw { p, seed, offset })
    }
}

/// One draw of a [`DropoutStream`]: the key of its mask and the probability (in [0, 1)).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DropoutDraw {
    /// Probability of dropping an element.
    pub p: f64,
    /// The stream's seed.
    pub seed: u64,
    /// The draw's place in its stream.
    pub offset: u64,
}

impl DropoutDraw {
    /// The draw's mask for `len` elements as multipliers (see [`DropoutStream::multipliers`]).
    pub fn multipliers(&self, len: usize, dtype: DType) -> Vec<f32> {
        multipliers(self.seed, self.offset, len, self.p, dtype)
    }

    /// The integer form of the keep test that the CUDA kernels apply to each mask word.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn keep_threshold(&self) -> u64 {
        keep_threshold(self.p)
    }

    /// A kept element's multiplier in f32, as [`Self::multipliers`] gives it.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn kept_multiplier(&self, dtype: DType) -> f32 {
        1.0 / keep_probability(self.p, dtype)
    }
}

fn check_p(p: f64) -> candle_core::Result<()> {
    if !(0.0..1.0).contains(&p) {
        candle_core::bail!("dropout: probability {p} must lie in [0, 1)")
    }
    Ok(())
}

/// The keep probability 1 − p as the device's kernel gets it: FLOAT, then rounded to `dtype`.
fn keep_probability(p: f64, dtype: DType) -> f32 {
    let keep = (1.0 - p) as f32;
    match dtype {
        DType::F16 => half::f16::from_f32(keep).to_f32(),
        DType::BF16 => half::bf16::from_f32(keep).to_f32(),
        _ => keep,
    }
}

/// The multipliers of draw (seed, offset); see the module for the layout.
fn multipliers(seed: u64, offset: u64, len: usize, p: f64, dtype: DType) -> Vec<f32> {
    let keep = f64::from((1.0 - p) as f32);
    let scale = 1.0 / keep_probability(p, dtype);
    let key = [seed as u32, (seed >> 32) as u32];
    let mut out = vec![0f32; len];
    out.par_chunks_mut(CHUNK).enumerate().for_each(|(c, chunk)| {
        for (b, block) in chunk.chunks_mut(4).enumerate() {
            let group = ((c * CHUNK) / 4 + b) as u64;
            let counter = [group as u32, (group >> 32) as u32, offset as u32, (offset >> 32) as u32];
            let words = philox4x32_10(counter, key);
            for (m, w) in block.iter_mut().zip(words) {
                *m = if (f64::from(w) + 0.5) / 4_294_967_296.0 < keep { scale } else { 0.0 };
            }
        }
    });
    out
}

/// Dropout's row of the support table: the CPU multiplies by the drawn multipliers (the
/// composed path), a CUDA GPU and Ascend parts generate the mask on the device.
pub(crate) const ROW: Row = Row {
    op: FusedOp::Dropout,
    cpu: OnCpu::Composed,
    cuda: OnCuda::Kernels,
    #[cfg(feature = "ascend")]
    ascend: &[AclnnOp::DropoutGenMaskV2, AclnnOp::DropoutDoMask],
};

/// Zero each element of `x` with probability `p` and scale the rest by 1/(1 − p), with the next
/// mask of `stream`. p = 0 returns x itself and draws nothing.
pub fn dropout(x: &Tensor, p: f64, stream: &mut DropoutStream) -> candle_core::Result<Tensor> {
    check_p(p)?;
    if p == 0.0 {
        return Ok(x.clone());
    }
    let (seed, offset) = stream.next_draw();
    match ROW.select(x.device(), x.dtype())? {
        // The CUDA kernel reads its operand in order.
        Body::Cuda => x.contiguous()?.apply_op1(Dropout::new(p, (seed, offset))),
        Body::Ascend => x.apply_op1(Dropout::new(p, (seed, offset))),
        Body::Cpu | Body::Composed | Body::Refused => reference(x, p, seed, offset),
    }
}

/// The Philox words that keep an element: w keeps when (w + ½)/2³² < 1 − p (the FLOAT keep
/// probability), that is when w is below the returned bound.
fn keep_threshold(p: f64) -> u64 {
    let keep = f64::from((1.0 - p) as f32);
    // keep·2³² is exact in f64 (keep has 24 significant bits), and so is the half subtracted.
    (keep * 4_294_967_296.0 - 0.5).ceil() as u64
}

/// The kept elements' multiplier, 1/(1 − p) as [`multipliers`] gives it, rounded to `dtype` as
/// the product's operand is.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
fn kept_scale(p: f64, dtype: DType) -> f32 {
    let scale = 1.0 / keep_probability(p, dtype);
    match dtype {
        DType::F16 => half::f16::from_f32(scale).to_f32(),
        DType::BF16 => half::bf16::from_f32(scale).to_f32(),
        _ => scale,
    }
}

/// Dropout by draw (seed, offset) as a product with the uploaded multipliers (the CPU body, and
/// the composed path of devices without the operators).
pub fn reference(x: &Tensor, p: f64, seed: u64, offset: u64) -> candle_core::Result<Tensor> {
    let m = multipliers(seed, offset, x.elem_count(), p, x.dtype());
    // Converted on the host: the upload is then in x's dtype, with no cast on the device.
    let m = Tensor::from_vec(m, x.shape(), &Device::Cpu)?.to_dtype(x.dtype())?.to_device(x.device())?;
    x * m
}

/// Dropout of draw (seed, offset), one op with a body per device. The CPU multiplies by the
/// draw's mask. A CUDA GPU's kernel draws the same mask for each element and multiplies, in one
/// pass; its backward pass is the same op on the gradient (the mask drawn again, never stored).
/// An Ascend part generates the mask on the device and keeps it for the backward pass.
struct Dropout {
    p: f64,
    seed: u64,
    offset: u64,
    /// The Ascend forward's mask, for its backward pass.
    mask: Mutex<Option<LaunchState>>,
}

impl Dropout {
    fn new(p: f64, (seed, offset): (u64, u64)) -> Self {
        Self { p, seed, offset, mask: Mutex::default() }
    }
}

impl CustomOp1 for Dropout {
    fn name(&self) -> &'static str {
        "dropout"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let mut x = crate::f32_views::f32_vec(s, l, "dropout")?;
        let dtype = candle_core::backend::BackendStorage::dtype(s);
        let m = multipliers(self.seed, self.offset, x.len(), self.p, dtype);
        x.par_iter_mut().zip(&m).for_each(|(x, m)| *x *= m);
        Ok((crate::f32_views::store_like(s, x), l.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s: &candle_core::CudaStorage,
        l: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        use candle_core::backend::BackendStorage;
        let scale = kept_scale(self.p, s.dtype());
        let out = cuda_launch::dropout(s, l, self.seed, self.offset, keep_threshold(self.p), scale)?;
        Ok((out, l.shape().clone()))
    }

    #[cfg(feature = "ascend")]
    fn custom_fwd(&self, s: &dyn DynBackendStorage, l: &Layout) -> candle_core::Result<(BoxStorage, Shape)> {
        let (out, mask) = fused::dropout(s, l, self.p, self.seed, self.offset)?;
        *self.mask.lock().unwrap_or_else(|e| e.into_inner()) = Some(LaunchState::new(mask));
        Ok((out, l.shape().clone()))
    }

    fn bwd(&self, _x: &Tensor, _res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        #[cfg(feature = "ascend")]
        if let Some(mask) = self.mask.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            // The kept mask times the gradient, in one aclnnDropoutDoMask.
            return Ok(Some(crate::launch::ascend_launch("dropout_grad", [grad], |[(s, l)]| {
                Ok((fused::dropout_grad(s, l, mask.get("dropout_grad")?, self.p)?, l.shape().clone()))
            })?));
        }
        Ok(Some(grad.contiguous()?.apply_op1_no_bwd(&Dropout::new(self.p, (self.seed, self.offset)))?))
    }
}

/// The CUDA launch of dropout (kernel in `kernels/codon_ops.cu`).
#[cfg(feature = "cuda")]
pub(crate) mod cuda_launch;

#[cfg(test)]
mod tests;
