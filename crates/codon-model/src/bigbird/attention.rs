//! Self-attention: `original_full` and `block_sparse` (bigbird.md §4–5).
//!
//! Block-sparse attention is computed sparsely: the two global query blocks attend to
//! every key, and each other query block attends to its 5 + r key blocks (global first and
//! last, the sliding window, the random blocks), so time and memory grow linearly with the
//! sequence length. CPU training hands the key blocks to the `BlockAttention` kernel as an
//! `AttentionPlan`; other devices gather them with one index-select.

use candle_core::{DType, Device, Tensor};

use super::cpu_block_attention::{AttentionPlan, KeyRange};
use super::kernels::{self, Dropout};
use super::random_blocks::RandomBlocks;
use crate::error::Result;

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
    dropout: Option<(&mut Dropout, f64)>,
) -> Result<Tensor> {
    let (b, n, hd) = q.dims3()?;
    let scale = 1.0 / ((hd / heads) as f64).sqrt();
    let mut dropout = dropout;
    let planned = kernels::planned_attention(q, k, v, || {
        let mask = dropout.take().map(|(rng, p)| rng.mask(b * heads * n * n, p));
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
}

impl BlockSparseMask {
    /// Build the masks from a (b, n) 0/1 attention mask.
    pub fn new(attention_mask: &Tensor, block_size: usize, dtype: DType) -> Result<Self> {
        let mask = attention_mask.to_dtype(DType::F32)?;
        let (b, n) = mask.dims2()?;
        let key_penalty = ((1.0 - &mask)? * BLOCK_SPARSE_MASK_PENALTY as f64)?.reshape((b, 1, 1, n))?;
        let query_mask = mask.to_dtype(dtype)?.reshape((b, 1, n, 1))?;
        Ok(Self { mask, key_penalty, query_mask, block_size })
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
    let (q, k, v) = (&split_heads(q, h)?, &split_heads(k, h)?, &split_heads(v, h)?);

    // Global query blocks 0 and nb−1 attend to every key.
    let q_global = Tensor::cat(&[q.narrow(2, 0, wm)?, q.narrow(2, n - wm, wm)?], 2)?;
    let ctx_global = kernels::attention(&q_global, k, v, scale, Some(&masks.key_penalty), None)?;

    // Key block indices within a sequence (the table's are per head).
    let local: Vec<u32> = index.iter().map(|&i| i % nb as u32).collect();
    let no_grad = ![q, k, v].iter().any(|t| t.track_op());
    if no_grad {
        if let Some(ctx_mid) = super::cpu_attention::fused_block_sparse_middle(
            q,
            k,
            v,
            &masks.mask,
            wm,
            &local,
            slots,
            &absent,
            BLOCK_SPARSE_MASK_PENALTY,
        ) {
            let ctx = Tensor::cat(&[ctx_global.narrow(2, 0, wm)?, ctx_mid, ctx_global.narrow(2, wm, wm)?], 2)?;
            return merge_heads(&ctx.broadcast_mul(&masks.query_mask)?);
        }
    }
    // Query blocks 1..nb−2 gather their key blocks from a (b, h·nb, wm, d) view.
    let index = Tensor::from_vec(index, h * (nb - 2) * slots, device)?;
    let gather = |t: &Tensor| -> Result<Tensor> {
        Ok(t.reshape((b, h * nb, wm, d))?.index_select(&index, 1)?.reshape((b, h * (nb - 2), slots * wm, d))?)
    };
    let (gk, gv) = (gather(k)?, gather(v)?);
    // Penalties per key: the masked keys' (gathered from the per-token penalties) plus the
    // absent slots' (the same for every sequence and head).
    let local = Tensor::from_vec(local, h * (nb - 2) * slots, device)?;
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
    let q_mid = q.narrow(2, wm, n - 2 * wm)?.reshape((b, h * (nb - 2), wm, d))?;
    let ctx_mid = kernels::attention(&q_mid, &gk, &gv, scale, Some(&bias), None)?.reshape((b, h, n - 2 * wm, d))?;

    let ctx = Tensor::cat(&[ctx_global.narrow(2, 0, wm)?, ctx_mid, ctx_global.narrow(2, wm, wm)?], 2)?;
    merge_heads(&ctx.broadcast_mul(&masks.query_mask)?)
}
