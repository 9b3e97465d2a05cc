//! The CUDA launches of [`BlockAttention`](super::BlockAttention): flash attention over the
//! plan (kernels `attention_*` in `kernels/attention.cuh`, built from `kernels/codon_ops.cu`).
use std::sync::Arc;

use candle_core::cuda_backend::cudarc::driver::{CudaSlice, LaunchArgs};
use candle_core::op::BackpropOp;
use candle_core::{CudaDevice, DType, Storage, Tensor};

use super::AttentionPlan;
use crate::cuda::prelude::*;

/// Query rows (or keys) per CUDA block, two threads each (the kernels' `ATTN_ROWS`).
const ROWS: usize = 64;
/// Threads per CUDA block (`ATTN_THREADS`).
const THREADS: u32 = 2 * ROWS as u32;
/// The most (sequence, head) pairs a launch takes: the grid's y dimension.
const MAX_BATCH_HEADS: usize = 65_535;

/// The plan on the device (the kernels' `ATTENTION_PARAMS`), the key tiles' inverse lists,
/// and the forward pass's softmax statistics per row, kept for the backward pass.
pub(super) struct Saved {
    n: u32,
    heads: u32,
    d: u32,
    blocks: u32,
    block_start: CudaSlice<u32>,
    block_len: CudaSlice<u32>,
    range_offsets: CudaSlice<u32>,
    range_start: CudaSlice<u32>,
    range_len: CudaSlice<u32>,
    range_penalty: CudaSlice<f32>,
    key_penalty: CudaSlice<f32>,
    query_mask: Option<CudaSlice<f32>>,
    scale: f32,
    dropout: u32,
    seed: u64,
    offset: u64,
    threshold: u64,
    dropout_scale: f32,
    /// Row tiles per query block (the longest block's).
    tiles: u32,
    /// (sequence, head) pairs.
    batch_heads: usize,
    /// Key tiles of ROWS keys per sequence.
    key_tiles: usize,
    /// Per (head, key tile): the (query block, range) pairs whose range overlaps the tile.
    inverse_offsets: CudaSlice<u32>,
    inverse_block: CudaSlice<u32>,
    inverse_range: CudaSlice<u32>,
    /// The softmax's shift and 1/Σ per (sequence, head, row).
    stats: CudaSlice<f32>,
}

fn u32_of(x: usize) -> Result<u32> {
    u32::try_from(x).w_msg("attention")
}

impl Saved {
    /// The plan flattened and uploaded for heads of `d` dimensions in `dtype`.
    fn new(dev: &CudaDevice, plan: &AttentionPlan, d: usize, dtype: DType) -> Result<Self> {
        let (nq, n) = (plan.query_blocks.len(), plan.seq_len);
        let batch_heads = plan.batch * plan.heads;
        if batch_heads > MAX_BATCH_HEADS {
            candle_core::bail!("attention: {batch_heads} (sequence, head) pairs, above one launch's {MAX_BATCH_HEADS}")
        }
        let (mut offsets, mut starts, mut lens, mut penalties) = (vec![0u32], Vec::new(), Vec::new(), Vec::new());
        for ranges in &plan.keys {
            for r in ranges {
                starts.push(u32_of(r.start)?);
                lens.push(u32_of(r.len)?);
                penalties.push(r.penalty);
            }
            offsets.push(u32_of(starts.len())?);
        }
        // Each key tile's (query block, range) pairs in a fixed order: by query block, then
        // by the range's place in the block's list.
        let key_tiles = n.div_ceil(ROWS);
        let (mut inverse_offsets, mut inverse_block, mut inverse_range) = (vec![0u32], Vec::new(), Vec::new());
        for head in 0..plan.heads {
            for tile in 0..key_tiles {
                let (lo, hi) = (tile * ROWS, (tile + 1) * ROWS);
                for j in 0..nq {
                    let list = head * nq + j;
                    for (i, r) in plan.keys[list].iter().enumerate() {
                        if r.len > 0 && r.start < hi && r.start + r.len > lo {
                            inverse_block.push(u32_of(j)?);
                            inverse_range.push(offsets[list] + u32_of(i)?);
                        }
                    }
                }
                inverse_offsets.push(u32_of(inverse_block.len())?);
            }
        }
        let (dropout, seed, offset, threshold, dropout_scale) = match plan.dropout {
            Some(draw) => (1, draw.seed, draw.offset, draw.keep_threshold(), draw.kept_multiplier(dtype)),
            None => (0, 0, 0, 0, 1.0),
        };
        let longest = plan.query_blocks.iter().map(|&(_, len)| len).max().unwrap_or(0);
        // cudarc allocates nothing for an empty slice: every list gets at least one element.
        let up_u32 = |v: Vec<u32>| dev.clone_htod(&if v.is_empty() { vec![0] } else { v });
        let up_f32 = |v: &[f32]| dev.clone_htod(&if v.is_empty() { vec![0.0] } else { v.to_vec() });
        Ok(Self {
            n: u32_of(n)?,
            heads: u32_of(plan.heads)?,
            d: u32_of(d)?,
            blocks: u32_of(nq)?,
            block_start: up_u32(plan.query_blocks.iter().map(|&(s, _)| u32_of(s)).collect::<Result<_>>()?)?,
            block_len: up_u32(plan.query_blocks.iter().map(|&(_, l)| u32_of(l)).collect::<Result<_>>()?)?,
            range_offsets: up_u32(offsets)?,
            range_start: up_u32(starts)?,
            range_len: up_u32(lens)?,
            range_penalty: up_f32(&penalties)?,
            key_penalty: up_f32(&plan.key_penalty)?,
            query_mask: plan.query_mask.as_deref().map(up_f32).transpose()?,
            scale: plan.scale,
            dropout,
            seed,
            offset,
            threshold,
            dropout_scale,
            tiles: u32_of(longest.div_ceil(ROWS).max(1))?,
            batch_heads,
            key_tiles,
            inverse_offsets: up_u32(inverse_offsets)?,
            inverse_block: up_u32(inverse_block)?,
            inverse_range: up_u32(inverse_range)?,
            stats: dev.alloc_zeros::<f32>((2 * batch_heads * n).max(1))?,
        })
    }

    /// The kernels' leading `ATTENTION_PARAMS`, in order.
    fn push_plan<'a>(&'a self, b: &mut LaunchArgs<'a>) {
        b.arg(&self.n).arg(&self.heads).arg(&self.d).arg(&self.blocks);
        b.arg(&self.block_start).arg(&self.block_len);
        b.arg(&self.range_offsets).arg(&self.range_start).arg(&self.range_len);
        b.arg(&self.range_penalty).arg(&self.key_penalty);
        match &self.query_mask {
            Some(mask) => b.arg(mask),
            None => b.arg(&0u64),
        };
        b.arg(&self.scale).arg(&self.dropout).arg(&self.seed).arg(&self.offset);
        b.arg(&self.threshold).arg(&self.dropout_scale);
    }

    /// A grid of `x` blocks per (sequence, head).
    fn config(&self, x: usize) -> Result<LaunchConfig> {
        Ok(LaunchConfig {
            grid_dim: (grid(x)?, u32_of(self.batch_heads)?, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        })
    }
}

/// The forward pass over contiguous q, k, v (batch, n, heads·d) of one dtype: the output,
/// and what the backward pass needs.
pub(super) fn forward(
    plan: &AttentionPlan,
    d: usize,
    (qs, ql): (&CudaStorage, &Layout),
    (ks, kl): (&CudaStorage, &Layout),
    (vs, vl): (&CudaStorage, &Layout),
) -> Result<(CudaStorage, Arc<Saved>)> {
    same_dtype(qs, ks, "attention")?;
    same_dtype(qs, vs, "attention")?;
    let dev = &qs.device;
    let saved = Saved::new(dev, plan, d, qs.dtype())?;
    let len = ql.shape().elem_count();
    if len == 0 {
        return Ok((qs.try_clone(ql)?, Arc::new(saved)));
    }
    let func = function!(dev, "attention_fwd", qs.dtype());
    let cfg = saved.config(saved.blocks as usize * saved.tiles as usize)?;
    let out = with_float_type!(qs.dtype(), "attention", T => {
        let (q, k, v) = (view::<T>(qs, ql, "attention")?, view::<T>(ks, kl, "attention")?, view::<T>(vs, vl, "attention")?);
        // SAFETY: every row of every query block is written (the plan covers each row once).
        let out = unsafe { dev.alloc::<T>(len)? };
        let mut b = func.builder();
        saved.push_plan(&mut b);
        b.arg(&saved.tiles).arg(&q).arg(&k).arg(&v).arg(&out).arg(&saved.stats);
        // SAFETY: the arguments match `attention_fwd`'s signature; the sizes were checked
        // against the plan.
        unsafe { b.launch(cfg) }.w()?;
        CudaStorage::wrap_cuda_slice(out, dev.clone())
    });
    Ok((out, Arc::new(saved)))
}

/// dq, dk and dv of [q, k, v, output, output gradient], all contiguous on the GPU.
pub(super) fn backward(saved: &Saved, tensors: [&Tensor; 5]) -> Result<[Tensor; 3]> {
    let (q, dtype) = (tensors[0], tensors[0].dtype());
    if q.elem_count() == 0 {
        return Ok([q.zeros_like()?, tensors[1].zeros_like()?, tensors[2].zeros_like()?]);
    }
    let held = tensors.map(|t| t.storage_and_layout());
    let mut parts = Vec::with_capacity(5);
    for (storage, layout) in &held {
        let Storage::Cuda(s) = &**storage else {
            candle_core::bail!("attention backward: an operand is not on the GPU")
        };
        if s.dtype() != dtype || layout.shape().elem_count() != q.elem_count() {
            candle_core::bail!("attention backward: operands of {:?} and {:?}", q.shape(), layout.shape())
        }
        parts.push((s, *layout));
    }
    let dev = &parts[0].0.device;
    let len = q.elem_count();
    let (dq_func, dkv_func) = (function!(dev, "attention_bwd_dq", dtype), function!(dev, "attention_bwd_dkv", dtype));
    let rows_cfg = saved.config(saved.blocks as usize * saved.tiles as usize)?;
    let keys_cfg = saved.config(saved.key_tiles)?;
    let wrap =
        |s: CudaStorage, like: &Tensor| Tensor::from_storage(Storage::Cuda(s), like.shape(), BackpropOp::none(), false);
    with_float_type!(dtype, "attention backward", T => {
        let view_of = |i: usize| view::<T>(parts[i].0, parts[i].1, "attention backward");
        let (q, k, v, out, grad) = (view_of(0)?, view_of(1)?, view_of(2)?, view_of(3)?, view_of(4)?);
        let delta = dev.alloc_zeros::<f32>(saved.batch_heads * saved.n as usize)?;
        // SAFETY: each kernel writes every row of its output (the plan covers each row once;
        // the key tiles cover every key).
        let (dq, dk, dv) = unsafe { (dev.alloc::<T>(len)?, dev.alloc::<T>(len)?, dev.alloc::<T>(len)?) };
        let mut b = dq_func.builder();
        saved.push_plan(&mut b);
        b.arg(&saved.tiles).arg(&q).arg(&k).arg(&v).arg(&out).arg(&grad).arg(&saved.stats).arg(&delta).arg(&dq);
        // SAFETY: the arguments match `attention_bwd_dq`'s signature.
        unsafe { b.launch(rows_cfg) }.w()?;
        let mut b = dkv_func.builder();
        saved.push_plan(&mut b);
        b.arg(&saved.inverse_offsets).arg(&saved.inverse_block).arg(&saved.inverse_range);
        b.arg(&q).arg(&k).arg(&v).arg(&grad).arg(&saved.stats).arg(&delta).arg(&dk).arg(&dv);
        // SAFETY: the arguments match `attention_bwd_dkv`'s signature; it reads `delta` after
        // the query-gradient kernel wrote it (one stream).
        unsafe { b.launch(keys_cfg) }.w()?;
        Ok([
            wrap(CudaStorage::wrap_cuda_slice(dq, dev.clone()), tensors[0]),
            wrap(CudaStorage::wrap_cuda_slice(dk, dev.clone()), tensors[1]),
            wrap(CudaStorage::wrap_cuda_slice(dv, dev.clone()), tensors[2]),
        ])
    })
}
