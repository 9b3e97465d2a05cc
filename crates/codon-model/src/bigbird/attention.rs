//! Self-attention: `original_full` and `block_sparse` (bigbird.md §4–5).
//!
//! Block-sparse attention is computed sparsely: the two global query blocks attend to
//! every key, and each other query block attends to its 5 + r key blocks (global first and
//! last, the sliding window, the random blocks), so time and memory grow linearly with the
//! sequence length. CPU training hands the key blocks to the `BlockAttention` kernel as an
//! `AttentionPlan`; other devices gather them with one index-select.

use std::sync::OnceLock;

use candle_core::{DType, Device, Tensor};

use super::kernels;
use super::random_blocks::RandomBlocks;
use crate::error::Result;
use codon_ops::attention::cpu_training::{AttentionPlan, KeyRange};
use codon_ops::attention::FlashState;
use codon_ops::DropoutStream;

/// Penalty that block-sparse attention adds to masked keys (transformers' constant).
pub const BLOCK_SPARSE_MASK_PENALTY: f32 = -10_000.0;
/// Penalty for key slots that are not part of a query block's key set. Large enough that
/// exp underflows to exactly 0 in f32, finite so no NaN can appear.
const ABSENT_SLOT_PENALTY: f32 = -1.0e30;
/// Query rows per block when full attention trains on the CPU.
const FULL_QUERY_BLOCK: usize = 64;

/// Split (b, n, h·d) into contiguous (b, h, n, d) heads.
fn split_heads(t: &Tensor, heads: usize) -> Result<Tensor> {
    let (b, n, hd) = t.dims3()?;
    Ok(t.reshape((b, n, heads, hd / heads))?.transpose(1, 2)?.contiguous()?)
}

/// Merge (b, h, n, d) heads back into (b, n, h·d).
fn merge_heads(t: &Tensor) -> Result<Tensor> {
    let (b, h, n, d) = t.dims4()?;
    Ok(t.transpose(1, 2)?.reshape((b, n, h * d))?)
}

/// Full attention over q, k, v of shape (b, n, h·d), with an additive key mask (b, 1, 1, n);
/// the result is (b, n, h·d).
pub fn full_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    heads: usize,
    key_bias: &Tensor,
    dropout: Option<(&mut DropoutStream, f64)>,
) -> Result<Tensor> {
    if codon_ops::attention::fused_attention_runs(q) {
        return Ok(codon_ops::attention::flash_attention(q, k, v, heads, key_bias, dropout)?);
    }
    let (b, n, hd) = q.dims3()?;
    let scale = 1.0 / ((hd / heads) as f64).sqrt();
    let mut dropout = dropout;
    let planned = kernels::planned_attention(q, k, v, || {
        let mask = dropout.take().map(|(stream, p)| stream.multipliers(b * heads * n * n, p, q.dtype())).transpose()?;
        Ok(AttentionPlan {
            batch: b,
            heads,
            seq_len: n,
            query_blocks: (0..n).step_by(FULL_QUERY_BLOCK).map(|s| (s, FULL_QUERY_BLOCK.min(n - s))).collect(),
            keys: vec![vec![KeyRange { start: 0, len: n, penalty: 0.0 }]; heads * n.div_ceil(FULL_QUERY_BLOCK)],
            key_penalty: key_bias.flatten_all()?.to_dtype(DType::F32)?.to_vec1()?,
            query_mask: None,
            scale: scale as f32,
            dropout: mask,
        })
    })?;
    if let Some(ctx) = planned {
        return Ok(ctx);
    }
    let (qh, kh, vh) = (split_heads(q, heads)?, split_heads(k, heads)?, split_heads(v, heads)?);
    merge_heads(&kernels::attention(&qh, &kh, &vh, scale, Some(key_bias), dropout)?)
}

/// Per-forward inputs of block-sparse attention that do not depend on the layer.
pub struct BlockSparseMask {
    /// Key mask (b, n) as 0/1 f32.
    pub mask: Tensor,
    /// Additive penalty for masked keys, (b, 1, 1, n), f32.
    pub key_penalty: Tensor,
    /// Query mask (b, 1, n, 1) in the compute dtype: zeroes padded query rows.
    pub query_mask: Tensor,
    /// Block size.
    pub block_size: usize,
    /// The flash attention masks, built by the first layer that needs them.
    flash: OnceLock<FlashMasks>,
}

/// The UINT8 masks (1 = masked) that flash attention takes in place of penalties.
struct FlashMasks {
    /// The global query rows' keys, (b, 1, 2·wm, n).
    global: Tensor,
    /// Masked keys by block, (b, nb, wm).
    key_blocks: Tensor,
    /// The absent slots of the middle query blocks, (nb − 2, slots·wm).
    absent: Tensor,
}

impl BlockSparseMask {
    /// Build the masks from a (b, n) 0/1 attention mask.
    pub fn new(attention_mask: &Tensor, block_size: usize, dtype: DType) -> Result<Self> {
        let mask = attention_mask.to_dtype(DType::F32)?;
        let (b, n) = mask.dims2()?;
        let key_penalty = ((1.0 - &mask)? * BLOCK_SPARSE_MASK_PENALTY as f64)?.reshape((b, 1, 1, n))?;
        let query_mask = mask.to_dtype(dtype)?.reshape((b, 1, n, 1))?;
        Ok(Self { mask, key_penalty, query_mask, block_size, flash: OnceLock::new() })
    }

    /// The flash attention masks, for key tables of `slots` blocks with `absent` penalties.
    fn flash_masks(&self, slots: usize, absent: &[f32]) -> Result<&FlashMasks> {
        if let Some(masks) = self.flash.get() {
            return Ok(masks);
        }
        let (b, n) = self.mask.dims2()?;
        let wm = self.block_size;
        let masked = self.mask.eq(0.0)?;
        let absent: Vec<u8> = absent.iter().flat_map(|&a| std::iter::repeat_n(u8::from(a != 0.0), wm)).collect();
        let rows = absent.len() / (slots * wm);
        let built = FlashMasks {
            global: masked.reshape((b, 1, 1, n))?.broadcast_as((b, 1, 2 * wm, n))?.contiguous()?,
            key_blocks: masked.reshape((b, n / wm, wm))?,
            absent: Tensor::from_vec(absent, (rows, slots * wm), self.mask.device())?,
        };
        Ok(self.flash.get_or_init(|| built))
    }
}

/// The key blocks of query blocks 1..nb−2, per head: (h, nb−2, 5 + r) block indices
/// [first, previous, self, next, last, random…], and the slots that duplicate a global
/// block next to the edges (previous of block 1, next of block nb−2), which are absent.
fn key_block_table(rand: &RandomBlocks, nb: usize) -> (Vec<u32>, Vec<f32>) {
    let slots = 5 + rand.r;
    let rows = nb - 2;
    let mut index = Vec::with_capacity(rand.heads * rows * slots);
    for head in 0..rand.heads {
        for row in 0..rows {
            let q = row + 1;
            index.extend([0, q - 1, q, q + 1, nb - 1].map(|b| (head * nb + b) as u32));
            index.extend((0..rand.r).map(|j| (head * nb) as u32 + rand.get(head, row, j)));
        }
    }
    let mut absent = vec![0f32; rows * slots];
    absent[1] = ABSENT_SLOT_PENALTY; // block 1: its previous block is the global block 0
    absent[(rows - 1) * slots + 3] = ABSENT_SLOT_PENALTY; // block nb−2: its next block is the last block
    (index, absent)
}

/// Block-sparse attention over q, k, v of shape (b, n, h·d), n a multiple of the block
/// size; the result is (b, n, h·d).
pub fn block_sparse_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    masks: &BlockSparseMask,
    rand: &RandomBlocks,
) -> Result<Tensor> {
    let (b, n, hd) = q.dims3()?;
    let h = rand.heads;
    let d = hd / h;
    let wm = masks.block_size;
    let nb = n / wm;
    let r = rand.r;
    let slots = 5 + r;
    let scale = 1.0 / (d as f64).sqrt();
    let device: &Device = q.device();
    let (index, absent) = key_block_table(rand, nb);

    let planned = kernels::planned_attention(q, k, v, || {
        // Global blocks 0 and nb−1 see every key; block j in between sees its table row.
        let mut keys = Vec::with_capacity(h * nb);
        for head in 0..h {
            for j in 0..nb {
                if j == 0 || j == nb - 1 {
                    keys.push(vec![KeyRange { start: 0, len: n, penalty: 0.0 }]);
                    continue;
                }
                let row = (head * (nb - 2) + j - 1) * slots;
                keys.push(
                    (0..slots)
                        .map(|slot| KeyRange {
                            start: (index[row + slot] as usize % nb) * wm,
                            len: wm,
                            penalty: absent[(j - 1) * slots + slot],
                        })
                        .collect(),
                );
            }
        }
        Ok(AttentionPlan {
            batch: b,
            heads: h,
            seq_len: n,
            query_blocks: (0..nb).map(|j| (j * wm, wm)).collect(),
            keys,
            key_penalty: masks.key_penalty.flatten_all()?.to_vec1()?,
            query_mask: Some(masks.mask.flatten_all()?.to_vec1()?),
            scale: scale as f32,
            dropout: None,
        })
    })?;
    if let Some(ctx) = planned {
        return Ok(ctx);
    }
    // Key block indices within a sequence (the table's are per head).
    let local: Vec<u32> = index.iter().map(|&i| i % nb as u32).collect();
    let geometry = SparseGeometry { b, h, n, d, wm, nb, slots, scale };
    let needs_grad = [q, k, v].iter().any(|t| t.track_op());
    if !needs_grad && q.device().is_cpu() {
        let (q, k, v) = (&split_heads(q, h)?, &split_heads(k, h)?, &split_heads(v, h)?);
        // Global query blocks 0 and nb−1 attend to every key.
        let ctx_global = kernels::attention(&global_rows(q, wm, n)?, k, v, scale, Some(&masks.key_penalty), None)?;
        if let Some(ctx_mid) = codon_ops::attention::cpu_inference::fused_block_sparse_middle(
            q,
            k,
            v,
            &masks.mask,
            wm,
            &local,
            slots,
            &absent,
            BLOCK_SPARSE_MASK_PENALTY,
        )? {
            return merge_heads(&assemble_rows(&ctx_global, &ctx_mid, geometry)?.broadcast_mul(&masks.query_mask)?);
        }
    }
    let index = Tensor::from_vec(index, h * (nb - 2) * slots, device)?;
    let local = Tensor::from_vec(local, h * (nb - 2) * slots, device)?;
    let (global, middle) = if codon_ops::attention::fused_attention_runs(q) {
        // The middle blocks' masks: the masked keys gathered by block, or-ed with the absent
        // slots, one row per (sequence, head, block), spread over the query rows when used.
        let fm = masks.flash_masks(slots, &absent)?;
        let rows = b * h * (nb - 2);
        let middle = fm
            .key_blocks
            .index_select(&local, 1)?
            .reshape((b, h, nb - 2, slots * wm))?
            .broadcast_maximum(&fm.absent)?
            .reshape((rows, 1, 1, slots * wm))?;
        (KeyMask::Flash(fm.global.clone()), KeyMask::Flash(middle))
    } else {
        // Penalties per key: the masked keys' (gathered from the per-token penalties) plus the
        // absent slots' (the same for every sequence and head).
        let absent: Vec<f32> = absent.iter().flat_map(|&a| std::iter::repeat_n(a, wm)).collect();
        let absent = Tensor::from_vec(absent, (nb - 2, slots * wm), device)?;
        // candle's batched matmul takes at most two batch dimensions: fold (h, nb − 2) into one.
        let bias = masks
            .key_penalty
            .reshape((b, nb, wm))?
            .index_select(&local, 1)?
            .reshape((b, h, nb - 2, slots * wm))?
            .broadcast_add(&absent)?
            .reshape((b, h * (nb - 2), 1, slots * wm))?;
        (KeyMask::Penalty(masks.key_penalty.clone()), KeyMask::Penalty(bias))
    };
    let geometry = SparseGeometry { b, h, n, d, wm, nb, slots, scale };
    let inputs = SparseInputs { index, global, middle, query_mask: masks.query_mask.clone() };
    let heads = if needs_grad {
        let forward = |q: &Tensor, k: &Tensor, v: &Tensor| sparse_forward(q, k, v, geometry, inputs);
        codon_ops::function::function3(q, k, v, forward, sparse_backward)?
    } else {
        sparse_forward(q, k, v, geometry, inputs)?.0
    };
    Ok(heads.reshape((b, n, hd))?)
}

/// The sizes of one block-sparse attention.
#[derive(Clone, Copy)]
struct SparseGeometry {
    b: usize,
    h: usize,
    n: usize,
    d: usize,
    wm: usize,
    nb: usize,
    slots: usize,
    scale: f64,
}

impl SparseGeometry {
    /// The middle query blocks' gathered key or value blocks, (b, h·(nb − 2), slots·wm, d),
    /// from (b, h, n, d) heads.
    fn gather(&self, t: &Tensor, index: &Tensor) -> Result<Tensor> {
        Ok(t.reshape((self.b, self.h * self.nb, self.wm, self.d))?.index_select(index, 1)?.reshape((
            self.b,
            self.h * (self.nb - 2),
            self.slots * self.wm,
            self.d,
        ))?)
    }
}

/// The per-layer tables of block-sparse attention on devices.
struct SparseInputs {
    /// The key block of every (head, query block, slot), into (b, h·nb, wm, d).
    index: Tensor,
    /// The global query rows' masked keys: penalties (b, 1, 1, n) or a mask (b, 1, 2·wm, n).
    global: KeyMask,
    /// The middle query blocks' masked keys among their gathered ones: penalties
    /// (b, h·(nb − 2), 1, slots·wm) or a mask (b·h·(nb − 2), 1, 1, slots·wm).
    middle: KeyMask,
    /// Zeroes padded query rows, (b, 1, n, 1).
    query_mask: Tensor,
}

/// How a part's keys are masked: additive penalties for the composed softmax, or flash
/// attention's UINT8 mask (1 = masked; one row per query row or one for all). They agree: every penalty here underflows exp to
/// exactly 0, as masking does, and no query row that reaches the output has all its keys
/// masked (a real token sees its own block).
enum KeyMask {
    Penalty(Tensor),
    Flash(Tensor),
}

/// What the backward pass of block-sparse attention keeps: each part's query rows and softmax
/// state. The key and value heads are split again from the op's inputs, and the middle blocks'
/// gathered again, rather than kept (the gathered ones are 5 + r times the size).
struct SparseSaved {
    geometry: SparseGeometry,
    inputs: SparseInputs,
    global: AttentionPart,
    middle: AttentionPart,
}

/// One softmax(q·kᵀ·scale + bias)·v: its query rows and what its backward pass needs.
struct AttentionPart {
    q: Tensor,
    softmax: PartSoftmax,
}

/// A part's softmax state for its backward pass.
enum PartSoftmax {
    /// Composed: the probabilities in f32 (cast to the compute dtype again for the matmuls).
    Composed(Tensor),
    /// One flash attention launch: its output, row statistics and mask (before it is spread
    /// over the query rows); no probabilities.
    Flash { out: Tensor, state: FlashState, mask: Tensor },
}

impl AttentionPart {
    /// The part over (batch, heads, rows, d) q and (batch, heads, keys, d) k, v. A flash mask
    /// of one row per (sequence, head) folds the heads into the batch: flash attention takes
    /// at most 256 heads, and a mask per batch row but not per head and batch row at once.
    fn forward(q: Tensor, k: &Tensor, v: &Tensor, scale: f64, keys: &KeyMask) -> Result<(Tensor, Self)> {
        let bias = match keys {
            KeyMask::Flash(mask) => {
                let (b, h, _, _) = q.dims4()?;
                let outer = (mask.dim(0)?, b * h / mask.dim(0)?);
                let fold = |t: &Tensor| fold_heads(t, outer);
                let spread = spread_rows(mask, q.dim(2)?)?;
                let (out, state) =
                    codon_ops::attention::flash_attention_heads(&fold(&q)?, &fold(k)?, &fold(v)?, &spread, scale)?;
                let ctx = out.reshape(q.shape())?;
                return Ok((ctx, Self { q, softmax: PartSoftmax::Flash { out, state, mask: mask.clone() } }));
            }
            KeyMask::Penalty(bias) => bias,
        };
        let scores = (kernels::matmul(&q, &k.t()?)? * scale)?.to_dtype(DType::F32)?.broadcast_add(bias)?;
        let probs_f32 = kernels::softmax_f32(&scores)?;
        let out = kernels::matmul(&probs_f32.to_dtype(v.dtype())?, v)?;
        Ok((out, Self { q, softmax: PartSoftmax::Composed(probs_f32) }))
    }

    /// (dq, dk, dv) from the output's gradient, with the forward's keys and values.
    fn backward(&self, k: &Tensor, v: &Tensor, grad: &Tensor, scale: f64) -> Result<(Tensor, Tensor, Tensor)> {
        let q = &self.q;
        match &self.softmax {
            PartSoftmax::Flash { out, state, mask } => {
                let (b, h, _, _) = out.dims4()?;
                let fold = |t: &Tensor| fold_heads(t, (b, h));
                let mask = spread_rows(mask, q.dim(2)?)?;
                let (dq, dk, dv) = state.backward(&fold(q)?, &fold(k)?, &fold(v)?, &mask, out, &fold(grad)?)?;
                Ok((dq.reshape(q.shape())?, dk.reshape(k.shape())?, dv.reshape(v.shape())?))
            }
            PartSoftmax::Composed(probs_f32) => {
                let d_probs = kernels::matmul(grad, &v.t()?)?;
                let dv = kernels::matmul(&probs_f32.to_dtype(v.dtype())?.t()?, grad)?;
                let d_scores = codon_ops::activation::softmax_last_dim_grad(probs_f32, &d_probs)?;
                let d_scores = (d_scores.to_dtype(q.dtype())? * scale)?;
                let dq = kernels::matmul(&d_scores, k)?;
                let dk = kernels::matmul(&d_scores.t()?, q)?;
                Ok((dq, dk, dv))
            }
        }
    }
}

/// A (batch, heads, 1 or rows, keys) mask as (batch, heads, rows, keys): flash attention takes
/// no mask broadcast over the query rows.
fn spread_rows(mask: &Tensor, rows: usize) -> Result<Tensor> {
    let (b, h, _, keys) = mask.dims4()?;
    Ok(mask.broadcast_as((b, h, rows, keys))?.contiguous()?)
}

/// (batch, heads, rows, d) viewed as (outer.0, outer.1, rows', d), the same elements.
fn fold_heads(t: &Tensor, (b, h): (usize, usize)) -> Result<Tensor> {
    let d = t.dim(3)?;
    Ok(t.reshape((b, h, t.elem_count() / (b * h * d), d))?)
}

/// The global query blocks (first and last) of (b, h, n, d) heads, as (b, h, 2·wm, d).
fn global_rows(t: &Tensor, wm: usize, n: usize) -> Result<Tensor> {
    Ok(Tensor::cat(&[t.narrow(2, 0, wm)?, t.narrow(2, n - wm, wm)?], 2)?)
}

/// Global rows (b, h, 2·wm, d) and middle rows (b, h·(nb − 2), wm, d) back into (b, h, n, d).
fn assemble_rows(global: &Tensor, middle: &Tensor, g: SparseGeometry) -> Result<Tensor> {
    let middle = middle.reshape((g.b, g.h, g.n - 2 * g.wm, g.d))?;
    Ok(Tensor::cat(&[global.narrow(2, 0, g.wm)?, middle, global.narrow(2, g.wm, g.wm)?], 2)?)
}

/// Block-sparse attention over detached q, k, v (b, n, h·d): the context as a (b, n, h, d)
/// view, and what the backward pass needs.
fn sparse_forward(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    g: SparseGeometry,
    inputs: SparseInputs,
) -> candle_core::Result<(Tensor, SparseSaved)> {
    let run = || -> Result<(Tensor, SparseSaved)> {
        let (q, k, v) = (split_heads(q, g.h)?, split_heads(k, g.h)?, split_heads(v, g.h)?);
        // Global query blocks 0 and nb−1 attend to every key.
        let (ctx_global, global) =
            AttentionPart::forward(global_rows(&q, g.wm, g.n)?, &k, &v, g.scale, &inputs.global)?;
        // Query blocks 1..nb−2 attend to their gathered key blocks.
        let q_mid = q.narrow(2, g.wm, g.n - 2 * g.wm)?.reshape((g.b, g.h * (g.nb - 2), g.wm, g.d))?;
        let (k_mid, v_mid) = (g.gather(&k, &inputs.index)?, g.gather(&v, &inputs.index)?);
        let (ctx_mid, middle) = AttentionPart::forward(q_mid, &k_mid, &v_mid, g.scale, &inputs.middle)?;
        let ctx = assemble_rows(&ctx_global, &ctx_mid, g)?.broadcast_mul(&inputs.query_mask)?;
        Ok((ctx.transpose(1, 2)?, SparseSaved { geometry: g, inputs, global, middle }))
    };
    run().map_err(candle_core::Error::wrap)
}

/// The gradients of q, k and v from the context's gradient (b, n, h, d): the two parts'
/// backward passes (the middle one over its key blocks gathered again), the gathered keys'
/// and values' gradients added back into their blocks with one index-add each.
fn sparse_backward(
    s: &SparseSaved,
    [_, k, v]: [&Tensor; 3],
    grad: &Tensor,
) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
    let run = || -> Result<(Tensor, Tensor, Tensor)> {
        let g = s.geometry;
        let (k, v) = (split_heads(k, g.h)?, split_heads(v, g.h)?);
        let grad = grad.transpose(1, 2)?.contiguous()?.broadcast_mul(&s.inputs.query_mask)?;
        let (dq_global, dk, dv) = s.global.backward(&k, &v, &global_rows(&grad, g.wm, g.n)?, g.scale)?;
        let grad_mid = grad.narrow(2, g.wm, g.n - 2 * g.wm)?.reshape((g.b, g.h * (g.nb - 2), g.wm, g.d))?;
        let (k_mid, v_mid) = (g.gather(&k, &s.inputs.index)?, g.gather(&v, &s.inputs.index)?);
        let (dq_mid, dk_gathered, dv_gathered) = s.middle.backward(&k_mid, &v_mid, &grad_mid, g.scale)?;
        let scatter = |full: Tensor, gathered: Tensor| -> Result<Tensor> {
            let blocks = (g.b, g.h * g.nb, g.wm, g.d);
            let gathered = gathered.reshape((g.b, g.h * (g.nb - 2) * g.slots, g.wm, g.d))?;
            Ok(full.reshape(blocks)?.index_add(&s.inputs.index, &gathered, 1)?)
        };
        let (dk, dv) = (scatter(dk, dk_gathered)?, scatter(dv, dv_gathered)?);
        let dq = assemble_rows(&dq_global, &dq_mid, g)?;
        let hd = g.h * g.d;
        let merge = |t: Tensor| -> Result<Tensor> {
            Ok(t.reshape((g.b, g.h, g.n, g.d))?.transpose(1, 2)?.reshape((g.b, g.n, hd))?)
        };
        Ok((merge(dq)?, merge(dk)?, merge(dv)?))
    };
    let (dq, dk, dv) = run().map_err(candle_core::Error::wrap)?;
    Ok((Some(dq), Some(dk), Some(dv)))
}
