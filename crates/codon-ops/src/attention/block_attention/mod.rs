//! Attention with its own backward pass: the `BlockAttention` op, with a CPU body and a CUDA body.
//!
//! The queries are cut into blocks of rows, and each block attends to a list of key ranges:
//! full attention is one range of every key, BigBird's block-sparse attention is the global,
//! sliding and random key blocks (transformers' `BigBirdBlockSparseAttention`). q, k, v and the
//! output stay in the (batch, tokens, heads·head_dim) layout of the projections: a head is a
//! column range.
//! - The CPU body, per (sequence, head), gathers a block's keys and values, computes
//!   softmax(q·kᵀ·scale + penalty)·v, and keeps the probabilities for the backward pass, which
//!   then needs four small GEMMs per block and no saved score, gathered key or transposed copy.
//! - The CUDA body (`attention_*` in `kernels/attention.cuh`) is flash attention over the same
//!   plan: no score in memory, two numbers per row kept (the softmax's shift and 1/Σ), the
//!   probabilities and the dropout mask computed again in the backward pass, the key gradients
//!   summed in a fixed order. It
//!   takes heads of up to [`CUDA_MAX_HEAD_DIM`] dimensions. It has not yet run on a GPU, so
//!   attention's row of the support table keeps it behind `CODON_CUDA_ATTENTION=fused` until
//!   `cuda_bodies` has passed on one.

use std::sync::{Mutex, OnceLock};

use candle_core::{CpuStorage, CustomOp3, DType, Layout, Shape, Tensor};
use rayon::prelude::*;

use crate::cpu_gemm::{matmul_into, Mat};
use crate::dropout::DropoutDraw;
use crate::f32_views::{cow_f32, store_like, tensor_from_f32, with_f32};
use crate::fast_math;

/// Key rows `start..start + len`, each with `penalty` added to its score.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KeyRange {
    /// First key row.
    pub start: usize,
    /// Number of key rows.
    pub len: usize,
    /// Added to every score of the range (BigBird's absent slots get a huge negative one).
    pub penalty: f32,
}

/// Which keys every block of query rows attends to.
#[derive(Debug, Clone)]
pub struct AttentionPlan {
    /// Sequences.
    pub batch: usize,
    /// Attention heads.
    pub heads: usize,
    /// Tokens per sequence.
    pub seq_len: usize,
    /// Query row blocks `(start, len)`, covering every row once; shared by all heads.
    pub query_blocks: Vec<(usize, usize)>,
    /// The key ranges of query block `j` of head `h`, at `h·query_blocks.len() + j`.
    pub keys: Vec<Vec<KeyRange>>,
    /// Additive penalty per key, (batch, seq_len): 0 or the masked-key penalty.
    pub key_penalty: Vec<f32>,
    /// 0/1 per query, (batch, seq_len): output rows of 0-queries are zeroed (block-sparse).
    pub query_mask: Option<Vec<f32>>,
    /// Score scale, 1/√head_dim.
    pub scale: f32,
    /// Dropout on the probabilities: the draw whose mask covers (batch, heads, seq_len,
    /// seq_len); only when every query block attends to all keys.
    pub dropout: Option<DropoutDraw>,
}

impl AttentionPlan {
    fn check(&self, dims: &[usize]) -> candle_core::Result<usize> {
        let (b, n, nq) = (self.batch, self.seq_len, self.query_blocks.len());
        let [db, dn, hd] = dims else { candle_core::bail!("attention: q, k, v must be (batch, tokens, hidden)") };
        // The blocks tile the rows in order: each starts where the last ended (each row once).
        let mut end = 0;
        let tiled = self.query_blocks.iter().all(|&(start, len)| {
            let follows = start == end;
            end = start + len;
            follows
        }) && end == n;
        let ranges_fit =
            self.keys.iter().all(|k| !k.is_empty()) && self.keys.iter().flatten().all(|r| r.start + r.len <= n);
        let full = self.keys.iter().all(|k| k.len() == 1 && k[0].start == 0 && k[0].len == n);
        let ok = *db == b
            && *dn == n
            && self.heads > 0
            && hd % self.heads == 0
            && tiled
            && self.keys.len() == self.heads * nq
            && ranges_fit
            && self.key_penalty.len() == b * n
            && self.query_mask.as_ref().is_none_or(|m| m.len() == b * n)
            && (self.dropout.is_none() || full);
        if !ok {
            candle_core::bail!("attention: the plan does not fit q, k, v of shape {dims:?}");
        }
        Ok(hd / self.heads)
    }
}

/// Block attention over q, k, v of shape (batch, tokens, heads·head_dim); see the module.
pub struct BlockAttention {
    plan: AttentionPlan,
    /// CPU: softmax probabilities (before dropout) per (sequence, head), block after block.
    probs: Mutex<Vec<Vec<f32>>>,
    /// CPU: the plan's dropout mask as multipliers, drawn once for both passes.
    mask: OnceLock<Vec<f32>>,
    /// CUDA: the plan on the device and each row's softmax shift and 1/Σ, for the backward pass.
    #[cfg(feature = "cuda")]
    saved: Mutex<Option<std::sync::Arc<cuda::Saved>>>,
}

impl BlockAttention {
    /// The op for one forward pass.
    pub fn new(plan: AttentionPlan) -> Self {
        Self {
            plan,
            probs: Mutex::new(Vec::new()),
            mask: OnceLock::new(),
            #[cfg(feature = "cuda")]
            saved: Mutex::new(None),
        }
    }

    /// The dropout multipliers of the plan's draw (b, h, n, n), drawn on first use.
    fn dropout_mask(&self, dtype: DType) -> Option<&[f32]> {
        let draw = self.plan.dropout?;
        let p = &self.plan;
        Some(self.mask.get_or_init(|| draw.multipliers(p.batch * p.heads * p.seq_len * p.seq_len, dtype)))
    }
}

/// The largest head the CUDA body takes: two threads share a row, each holding half of its
/// columns in registers.
pub const CUDA_MAX_HEAD_DIM: usize = 64;

/// Whether this process opted in to the CUDA body with `CODON_CUDA_ATTENTION=fused` (read once;
/// the body has not run on a GPU yet, docs/cuda.md).
pub(crate) fn cuda_opted_in() -> bool {
    static OPTED_IN: OnceLock<bool> = OnceLock::new();
    *OPTED_IN.get_or_init(|| std::env::var("CODON_CUDA_ATTENTION").is_ok_and(|v| v == "fused"))
}

/// One (sequence, head): where its rows and columns sit in the (batch, tokens, hidden) tensors.
#[derive(Clone, Copy)]
struct SequenceHead {
    batch: usize,
    head: usize,
    n: usize,
    hidden: usize,
    d: usize,
}

impl SequenceHead {
    /// Offset of (token `row`, this head's first column).
    fn at(&self, row: usize) -> usize {
        (self.batch * self.n + row) * self.hidden + self.head * self.d
    }

    /// `len` rows of this head from `data`, starting at token `row`.
    fn rows<'a>(&self, data: &'a [f32], row: usize, len: usize) -> Mat<'a> {
        Mat::rows(&data[self.at(row)..], len, self.d, self.hidden)
    }
}

/// A query block's keys and values as matrices: read in place when they are one range,
/// gathered into `kbuf`/`vbuf` otherwise.
fn keys_and_values<'a>(
    s: SequenceHead,
    ranges: &[KeyRange],
    k: &'a [f32],
    v: &'a [f32],
    kbuf: &'a mut Vec<f32>,
    vbuf: &'a mut Vec<f32>,
) -> (Mat<'a>, Mat<'a>) {
    let total: usize = ranges.iter().map(|r| r.len).sum();
    if let [r] = ranges {
        return (s.rows(k, r.start, r.len), s.rows(v, r.start, r.len));
    }
    kbuf.clear();
    vbuf.clear();
    for r in ranges {
        for row in r.start..r.start + r.len {
            let at = s.at(row);
            kbuf.extend_from_slice(&k[at..at + s.d]);
            vbuf.extend_from_slice(&v[at..at + s.d]);
        }
    }
    (Mat::rows(kbuf, total, s.d, s.d), Mat::rows(vbuf, total, s.d, s.d))
}

/// Additive score bias of every gathered key.
fn key_bias(plan: &AttentionPlan, batch: usize, ranges: &[KeyRange], out: &mut Vec<f32>) {
    out.clear();
    let penalty = &plan.key_penalty[batch * plan.seq_len..(batch + 1) * plan.seq_len];
    for r in ranges {
        out.extend(penalty[r.start..r.start + r.len].iter().map(|p| p + r.penalty));
    }
}

/// Add a gathered (keys × d) gradient back onto the rows its keys came from.
fn scatter_add(s: SequenceHead, ranges: &[KeyRange], src: &[f32], dst: &mut [f32]) {
    let mut rows = src.chunks(s.d);
    for r in ranges {
        for row in r.start..r.start + r.len {
            if let Some(g) = rows.next() {
                dst[row * s.d..(row + 1) * s.d].iter_mut().zip(g).for_each(|(a, b)| *a += b);
            }
        }
    }
}

impl BlockAttention {
    fn forward_slice(
        &self,
        s: SequenceHead,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        dropout: Option<&[f32]>,
    ) -> candle_core::Result<(Vec<f32>, Vec<f32>)> {
        let plan = &self.plan;
        let nq = plan.query_blocks.len();
        let mut ctx = vec![0f32; s.n * s.d];
        let mut probs = Vec::new();
        let (mut kbuf, mut vbuf, mut bias, mut dropped) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (j, &(start, m)) in plan.query_blocks.iter().enumerate() {
            let ranges = &plan.keys[s.head * nq + j];
            key_bias(plan, s.batch, ranges, &mut bias);
            let width = bias.len();
            let (kmat, vmat) = keys_and_values(s, ranges, k, v, &mut kbuf, &mut vbuf);
            let offset = probs.len();
            probs.resize(offset + m * width, 0.0);
            let p = &mut probs[offset..];
            matmul_into(p, width, s.rows(q, start, m), kmat.t(), plan.scale, false, false)?;
            fast_math::softmax_rows(p, width, &bias);
            let p: &[f32] = match dropout {
                Some(mask) => {
                    let at = ((s.batch * plan.heads + s.head) * s.n + start) * s.n;
                    dropped.clear();
                    dropped.extend(p.iter().zip(&mask[at..at + m * width]).map(|(p, m)| p * m));
                    &dropped
                }
                None => p,
            };
            matmul_into(&mut ctx[start * s.d..], s.d, Mat::rows(p, m, width, width), vmat, 1.0, false, false)?;
        }
        if let Some(mask) = &plan.query_mask {
            let mask = &mask[s.batch * s.n..(s.batch + 1) * s.n];
            ctx.chunks_mut(s.d).zip(mask).filter(|(_, &m)| m == 0.0).for_each(|(row, _)| row.fill(0.0));
        }
        Ok((ctx, probs))
    }

    #[allow(clippy::too_many_arguments)]
    fn backward_slice(
        &self,
        s: SequenceHead,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        grad: &[f32],
        probs: &[f32],
        dropout: Option<&[f32]>,
    ) -> candle_core::Result<[Vec<f32>; 3]> {
        let plan = &self.plan;
        let nq = plan.query_blocks.len();
        let [mut dq, mut dk, mut dv] = [0; 3].map(|_| vec![0f32; s.n * s.d]);
        let (mut kbuf, mut vbuf, mut bias) = (Vec::new(), Vec::new(), Vec::new());
        let (mut dout, mut dscores, mut dropped, mut gathered) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut offset = 0;
        for (j, &(start, m)) in plan.query_blocks.iter().enumerate() {
            let ranges = &plan.keys[s.head * nq + j];
            key_bias(plan, s.batch, ranges, &mut bias);
            let width = bias.len();
            let p = &probs[offset..offset + m * width];
            offset += m * width;
            // The output gradient of this block; zeroed queries pass none back.
            dout.clear();
            for row in start..start + m {
                let keep = plan.query_mask.as_ref().is_none_or(|qm| qm[s.batch * s.n + row] != 0.0);
                let at = s.at(row);
                if keep {
                    dout.extend_from_slice(&grad[at..at + s.d]);
                } else {
                    dout.extend(std::iter::repeat_n(0.0, s.d));
                }
            }
            let dout_mat = Mat::rows(&dout, m, s.d, s.d);
            let mask = dropout.map(|mask| {
                let at = ((s.batch * plan.heads + s.head) * s.n + start) * s.n;
                &mask[at..at + m * width]
            });
            let used: &[f32] = match mask {
                Some(mask) => {
                    dropped.clear();
                    dropped.extend(p.iter().zip(mask).map(|(p, m)| p * m));
                    &dropped
                }
                None => p,
            };
            let (kmat, vmat) = keys_and_values(s, ranges, k, v, &mut kbuf, &mut vbuf);
            // dv += pᵀ·dout.
            accumulate_keys(s, ranges, &mut dv, &mut gathered, Mat::rows(used, m, width, width).t(), dout_mat)?;
            // dp = dout·vᵀ (⊙ dropout mask), then the softmax backward: ds = p ⊙ (dp − Σ dp⊙p)·scale.
            dscores.clear();
            dscores.resize(m * width, 0.0);
            matmul_into(&mut dscores, width, dout_mat, vmat.t(), 1.0, false, false)?;
            if let Some(mask) = mask {
                dscores.iter_mut().zip(mask).for_each(|(g, m)| *g *= m);
            }
            for (g, p) in dscores.chunks_mut(width).zip(p.chunks(width)) {
                let dot: f32 = g.iter().zip(p).map(|(g, p)| g * p).sum();
                g.iter_mut().zip(p).for_each(|(g, p)| *g = p * (*g - dot) * plan.scale);
            }
            let ds = Mat::rows(&dscores, m, width, width);
            // dq = ds·k; dk += dsᵀ·q.
            matmul_into(&mut dq[start * s.d..], s.d, ds, kmat, 1.0, false, false)?;
            accumulate_keys(s, ranges, &mut dk, &mut gathered, ds.t(), s.rows(q, start, m))?;
        }
        Ok([dq, dk, dv])
    }
}

/// `dst[key rows] += a·b` for the (keys × d) product a·b: straight into `dst` when the keys
/// are one range, through `scratch` and a scatter otherwise.
fn accumulate_keys(
    s: SequenceHead,
    ranges: &[KeyRange],
    dst: &mut [f32],
    scratch: &mut Vec<f32>,
    a: Mat<'_>,
    b: Mat<'_>,
) -> candle_core::Result<()> {
    if let [r] = ranges {
        return matmul_into(&mut dst[r.start * s.d..], s.d, a, b, 1.0, true, false);
    }
    let total: usize = ranges.iter().map(|r| r.len).sum();
    scratch.clear();
    scratch.resize(total * s.d, 0.0);
    matmul_into(scratch, s.d, a, b, 1.0, false, false)?;
    scatter_add(s, ranges, scratch, dst);
    Ok(())
}

/// Write per-(sequence, head) results (tokens × d) into a (batch, tokens, heads·d) tensor.
fn interleave(parts: &[Vec<f32>], batch: usize, n: usize, heads: usize, d: usize) -> Vec<f32> {
    let hidden = heads * d;
    let mut out = vec![0f32; batch * n * hidden];
    out.par_chunks_mut(hidden).enumerate().for_each(|(row, out)| {
        let (b, t) = (row / n, row % n);
        for (h, cols) in out.chunks_mut(d).enumerate() {
            cols.copy_from_slice(&parts[b * heads + h][t * d..(t + 1) * d]);
        }
    });
    out
}

impl BlockAttention {
    /// The head size of q, k and v under `l1`, `l2`, `l3`: one shape, which the plan fits.
    fn head_dim(&self, l1: &Layout, l2: &Layout, l3: &Layout) -> candle_core::Result<usize> {
        if l2.dims() != l1.dims() || l3.dims() != l1.dims() {
            candle_core::bail!("attention: q {:?}, k {:?}, v {:?} differ", l1.dims(), l2.dims(), l3.dims());
        }
        self.plan.check(l1.dims())
    }

    fn slices(&self, d: usize) -> Vec<SequenceHead> {
        let p = &self.plan;
        (0..p.batch * p.heads)
            .map(|i| SequenceHead { batch: i / p.heads, head: i % p.heads, n: p.seq_len, hidden: p.heads * d, d })
            .collect()
    }
}

impl CustomOp3 for BlockAttention {
    fn name(&self) -> &'static str {
        "block_attention"
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
        let d = self.head_dim(l1, l2, l3)?;
        let name = "block_attention";
        let (q, k, v) = (cow_f32(s1, l1, name)?, cow_f32(s2, l2, name)?, cow_f32(s3, l3, name)?);
        let dropout = self.dropout_mask(candle_core::backend::BackendStorage::dtype(s1));
        let results: Vec<(Vec<f32>, Vec<f32>)> = self
            .slices(d)
            .into_par_iter()
            .map(|s| self.forward_slice(s, &q, &k, &v, dropout))
            .collect::<candle_core::Result<_>>()?;
        let (ctx, probs): (Vec<Vec<f32>>, Vec<Vec<f32>>) = results.into_iter().unzip();
        *self.probs.lock().map_err(|_| candle_core::Error::msg("attention: poisoned"))? = probs;
        let p = &self.plan;
        let out = interleave(&ctx, p.batch, p.seq_len, p.heads, d);
        Ok((store_like(s1, out), l1.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let d = self.head_dim(l1, l2, l3)?;
        if d > CUDA_MAX_HEAD_DIM {
            candle_core::bail!(
                "attention: the CUDA body takes heads of at most {CUDA_MAX_HEAD_DIM} dimensions, not {d}"
            );
        }
        let (out, saved) = cuda::forward(&self.plan, d, (s1, l1), (s2, l2), (s3, l3))?;
        *self.saved.lock().map_err(|_| candle_core::Error::msg("attention: poisoned"))? = Some(saved);
        Ok((out, l1.shape().clone()))
    }

    fn bwd(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        #[cfg(feature = "cuda")]
        if q.device().is_cuda() {
            let saved = self.saved.lock().map_err(|_| candle_core::Error::msg("attention: poisoned"))?.clone();
            let saved =
                saved.ok_or_else(|| candle_core::Error::msg("attention backward: the forward pass saved nothing"))?;
            let [dq, dk, dv] = cuda::backward(&saved, [q, k, v, res, &grad.contiguous()?])?;
            return Ok((Some(dq), Some(dk), Some(dv)));
        }
        #[cfg(not(feature = "cuda"))]
        let _ = res;
        let d = self.plan.check(q.dims())?;
        let dropout = self.dropout_mask(q.dtype());
        let probs = self.probs.lock().map_err(|_| candle_core::Error::msg("attention: poisoned"))?;
        if probs.len() != self.plan.batch * self.plan.heads {
            candle_core::bail!("attention backward: the forward pass saved no probabilities");
        }
        let name = "block_attention backward";
        let grads: Vec<[Vec<f32>; 3]> = with_f32(q, name, |q| {
            with_f32(k, name, |k| {
                with_f32(v, name, |v| {
                    with_f32(grad, name, |g| {
                        self.slices(d)
                            .into_par_iter()
                            .zip(probs.par_iter())
                            .map(|(s, p)| self.backward_slice(s, q, k, v, g, p, dropout))
                            .collect::<candle_core::Result<Vec<_>>>()
                    })
                })
            })
        })?????;
        let p = &self.plan;
        let mut parts: [Vec<Vec<f32>>; 3] = Default::default();
        for slice_grads in grads {
            for (part, g) in parts.iter_mut().zip(slice_grads) {
                part.push(g);
            }
        }
        let [dq, dk, dv] = parts.map(|part| interleave(&part, p.batch, p.seq_len, p.heads, d));
        Ok((
            Some(tensor_from_f32(dq, q.dims(), q.dtype())?),
            Some(tensor_from_f32(dk, k.dims(), k.dtype())?),
            Some(tensor_from_f32(dv, v.dims(), v.dtype())?),
        ))
    }
}

/// The CUDA launches of [`BlockAttention`].
#[cfg(feature = "cuda")]
mod cuda;

#[cfg(test)]
mod tests {
    use candle_core::{DType, Device, Tensor, Var};

    use super::*;

    use crate::f32_views::max_abs_diff as max_diff;

    /// The plan as dense (b, h, n, n) score biases: a key outside every range of the query's
    /// block gets −1e30 (zero weight), the same as an absent slot.
    fn dense_bias(plan: &AttentionPlan) -> Vec<f32> {
        let (b, h, n) = (plan.batch, plan.heads, plan.seq_len);
        let mut bias = vec![-1.0e30f32; b * h * n * n];
        for bi in 0..b {
            for hi in 0..h {
                for (j, &(start, len)) in plan.query_blocks.iter().enumerate() {
                    for r in &plan.keys[hi * plan.query_blocks.len() + j] {
                        if r.penalty < -1.0e29 {
                            continue;
                        }
                        for row in start..start + len {
                            for key in r.start..r.start + r.len {
                                bias[((bi * h + hi) * n + row) * n + key] = plan.key_penalty[bi * n + key] + r.penalty;
                            }
                        }
                    }
                }
            }
        }
        bias
    }

    /// softmax(q·kᵀ·scale + bias) (⊙ dropout) · v (⊙ query mask), composed from candle ops.
    fn reference(plan: &AttentionPlan, q: &Tensor, k: &Tensor, v: &Tensor) -> Tensor {
        let (b, h, n) = (plan.batch, plan.heads, plan.seq_len);
        let dev = &Device::Cpu;
        let split = |t: &Tensor| t.reshape((b, n, h, ())).unwrap().transpose(1, 2).unwrap().contiguous().unwrap();
        let (qh, kh, vh) = (split(q), split(k), split(v));
        let bias = Tensor::from_vec(dense_bias(plan), (b, h, n, n), dev).unwrap();
        let scores = ((qh.matmul(&kh.t().unwrap()).unwrap() * plan.scale as f64).unwrap() + bias).unwrap();
        let mut probs = crate::activation::softmax_reference(&scores).unwrap();
        if let Some(draw) = &plan.dropout {
            let mask = draw.multipliers(b * h * n * n, DType::F32);
            probs = (probs * Tensor::from_vec(mask, (b, h, n, n), dev).unwrap()).unwrap();
        }
        let ctx = probs.matmul(&vh).unwrap().transpose(1, 2).unwrap().reshape((b, n, ())).unwrap();
        match &plan.query_mask {
            Some(m) => ctx.broadcast_mul(&Tensor::from_vec(m.clone(), (b, n, 1), dev).unwrap()).unwrap(),
            None => ctx,
        }
    }

    fn check(plan: AttentionPlan, hidden: usize) {
        let (b, n) = (plan.batch, plan.seq_len);
        let dev = &Device::Cpu;
        let var = |seed: f32| {
            let t = Tensor::arange(0u32, (b * n * hidden) as u32, dev).unwrap().to_dtype(DType::F32).unwrap();
            let t = ((t * 0.37).unwrap() + seed as f64).unwrap().sin().unwrap();
            Var::from_tensor(&t.reshape((b, n, hidden)).unwrap()).unwrap()
        };
        let (q, k, v) = (var(0.1), var(1.3), var(2.9));
        let weights = var(4.2);
        let ours = q.as_tensor().apply_op3(k.as_tensor(), v.as_tensor(), BlockAttention::new(plan.clone())).unwrap();
        let expected = reference(&plan, q.as_tensor(), k.as_tensor(), v.as_tensor());
        assert!(max_diff(&ours, &expected) < 1e-5, "output differs by {}", max_diff(&ours, &expected));
        let g_ours = (ours * weights.as_tensor()).unwrap().sum_all().unwrap().backward().unwrap();
        let g_ref = (expected * weights.as_tensor()).unwrap().sum_all().unwrap().backward().unwrap();
        for (name, x) in [("q", &q), ("k", &k), ("v", &v)] {
            let d = max_diff(g_ours.get(x).unwrap(), g_ref.get(x).unwrap());
            assert!(d < 1e-5, "d{name} differs by {d}");
        }
    }

    #[test]
    fn full_attention_with_dropout_and_masked_keys_matches_composed_ops() {
        let (b, h, n) = (2, 2, 10);
        let key_penalty: Vec<f32> = (0..b * n).map(|i| if i % n >= 8 && i / n == 1 { f32::MIN } else { 0.0 }).collect();
        let dropout = DropoutDraw { p: 0.1, seed: 7, offset: 3 };
        let plan = AttentionPlan {
            batch: b,
            heads: h,
            seq_len: n,
            query_blocks: vec![(0, 4), (4, 4), (8, 2)],
            keys: vec![vec![KeyRange { start: 0, len: n, penalty: 0.0 }]; h * 3],
            key_penalty,
            query_mask: None,
            scale: 0.5,
            dropout: Some(dropout),
        };
        check(plan, h * 4);
    }

    #[test]
    fn gathered_key_blocks_absent_slots_and_masked_queries_match_composed_ops() {
        let (b, h, n, w) = (2, 2, 12, 3);
        let range = |block: usize, penalty: f32| KeyRange { start: block * w, len: w, penalty };
        // Per head and query block: global rows see all keys; others see a few blocks, one
        // of them a duplicate marked absent (as BigBird's edge slots are).
        let mut keys = Vec::new();
        for head in 0..h {
            keys.push(vec![KeyRange { start: 0, len: n, penalty: 0.0 }]);
            keys.push(vec![range(0, 0.0), range(0, -1.0e30), range(1, 0.0), range(3 - head, 0.0)]);
            keys.push(vec![range(2, 0.0), range(head, 0.0), range(3, 0.0)]);
            keys.push(vec![KeyRange { start: 0, len: n, penalty: 0.0 }]);
        }
        let key_penalty: Vec<f32> =
            (0..b * n).map(|i| if i / n == 1 && i % n >= 10 { -10_000.0 } else { 0.0 }).collect();
        let query_mask: Vec<f32> = (0..b * n).map(|i| if i / n == 1 && i % n >= 10 { 0.0 } else { 1.0 }).collect();
        let plan = AttentionPlan {
            batch: b,
            heads: h,
            seq_len: n,
            query_blocks: (0..4).map(|j| (j * w, w)).collect(),
            keys,
            key_penalty,
            query_mask: Some(query_mask),
            scale: 0.35,
            dropout: None,
        };
        check(plan, h * 5);
    }

    #[test]
    fn a_plan_that_does_not_fit_is_an_error() {
        let plan = AttentionPlan {
            batch: 1,
            heads: 2,
            seq_len: 4,
            query_blocks: vec![(0, 3)],
            keys: vec![vec![KeyRange { start: 0, len: 4, penalty: 0.0 }]; 2],
            key_penalty: vec![0.0; 4],
            query_mask: None,
            scale: 1.0,
            dropout: None,
        };
        let x = Tensor::zeros((1, 4, 4), DType::F32, &Device::Cpu).unwrap();
        let err = x.apply_op3(&x, &x, BlockAttention::new(plan.clone())).unwrap_err();
        assert!(err.to_string().contains("plan does not fit"), "{err}");
        // Rows covered, but a block with no keys at all.
        let no_keys = AttentionPlan { query_blocks: vec![(0, 4)], keys: vec![vec![], vec![]], ..plan.clone() };
        assert!(x.apply_op3(&x, &x, BlockAttention::new(no_keys)).is_err());
        // Lengths that add up to the rows, but one row twice and one never.
        let overlapping = AttentionPlan {
            query_blocks: vec![(0, 2), (1, 2)],
            keys: vec![vec![KeyRange { start: 0, len: 4, penalty: 0.0 }]; 4],
            ..plan
        };
        let err = x.apply_op3(&x, &x, BlockAttention::new(overlapping)).unwrap_err();
        assert!(err.to_string().contains("plan does not fit"), "{err}");
    }
}
