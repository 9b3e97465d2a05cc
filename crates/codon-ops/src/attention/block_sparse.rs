//! Block-sparse attention: the first and last query blocks attend to every key, and each
//! query block in between to its own set of key blocks (the same number per block, chosen
//! per head), so time and memory grow linearly with the sequence length. One entry,
//! [`block_sparse_attention`], picks the body:
//! - CPU training, and CUDA GPUs where opted in: the [`BlockAttention`] op over the key blocks as
//!   an [`AttentionPlan`];
//! - CPU inference: the chunked kernels of [`super::cpu_inference`], reading key blocks in place;
//! - a part with flash attention: one `aclnnFlashAttentionScore` each way over q, k, v as they
//!   are, the blocks a query block does not see masked at their tokens (`masked_flash`), when
//!   the (1, h, n, n) mask fits its bound and no key block is listed twice;
//! - otherwise on devices: an op with its own backward pass that gathers the key blocks with one
//!   index-select, or on a CUDA GPU one block copy (per chunk of sequences when they are many;
//!   `block_table`). Each part (global rows, middle
//!   blocks) is one `aclnnFlashAttentionScore` where the part has it (the global rows' masked
//!   keys as its UINT8 mask, the middle blocks' penalties as its bias; the heads fold into the
//!   batch for the middle blocks: it takes at most 256 heads), composed matmuls and softmax
//!   elsewhere. The backward pass splits and gathers the keys and values again instead of
//!   keeping copies.

use std::sync::OnceLock;

use candle_core::{DType, Tensor};

use super::block_attention::{AttentionPlan, BlockAttention, KeyRange};
use super::block_table::BlockTable;
use super::flash::{flash_attention_heads, flash_attention_packed, FlashKeys, FlashState};
use super::{block_op_runs, matmul, merge_heads, probabilities, split_heads};
use crate::selection::Body;

/// Penalty of key slots that are not part of a query block's key set. Large enough that exp
/// underflows to exactly 0 in f32 (also beside a masked key's −10⁴), and finite in f16 and bf16
/// with that penalty added (half-precision softmax takes the penalties in its own dtype).
const ABSENT_SLOT_PENALTY: f32 = -3.0e4;

/// Flash attention's bias on a masked key where the block mask runs the attention. It is
/// added before the scale: finite in f16 and bf16, and times any scale of a head of up to
/// 10⁴ dimensions still far enough below every score that exp underflows to exactly 0, as
/// the CPU's −10⁴ after the scale does.
const FLASH_MASKED_KEY_BIAS: f64 = -3.0e4;

/// The largest (1, h, n, n) block mask built by default, 384 MiB: CodonTransformer's 12 heads
/// up to 5,792 tokens (48 MiB at 2048). Each layer keeps its own for the backward pass;
/// longer sequences gather key blocks, whose memory grows linearly.
const FLASH_MASK_BYTES: usize = 384 << 20;

/// The per-pass masks of block-sparse attention, shared by its layers.
pub struct BlockSparseMask {
    /// Key mask (b, n) as 0/1 f32.
    pub mask: Tensor,
    /// Additive penalty of masked keys, (b, 1, 1, n), f32.
    pub key_penalty: Tensor,
    /// The penalty a masked key gets.
    pub penalty: f32,
    /// Query mask (b, 1, n, 1) in the compute dtype: zeroes padded query rows.
    pub query_mask: Tensor,
    /// Block size.
    pub block_size: usize,
    /// The most gathered key bytes a launch of the middle part takes on devices
    /// ([`MIDDLE_CHUNK_BYTES`] unless set).
    middle_chunk_bytes: usize,
    /// The largest (1, h, n, n) block mask that attention builds where the part has flash
    /// attention ([`FLASH_MASK_BYTES`] unless set); larger batches gather key blocks.
    flash_mask_bytes: usize,
    /// The global query rows' flash attention mask, built by the first layer that needs it.
    flash: OnceLock<Tensor>,
    /// The masked keys as flash attention's bias (b, h, 1, n), built by the first layer that
    /// needs it.
    flash_bias: OnceLock<Tensor>,
}

impl BlockSparseMask {
    /// The masks of a (b, n) 0/1 attention mask, masked keys getting `penalty`, padded query
    /// rows zeroed in `dtype`.
    pub fn new(attention_mask: &Tensor, block_size: usize, penalty: f32, dtype: DType) -> candle_core::Result<Self> {
        let mask = attention_mask.to_dtype(DType::F32)?;
        let (b, n) = mask.dims2()?;
        let key_penalty = ((1.0 - &mask)? * penalty as f64)?.reshape((b, 1, 1, n))?;
        let query_mask = mask.to_dtype(dtype)?.reshape((b, 1, n, 1))?;
        Ok(Self {
            mask,
            key_penalty,
            penalty,
            query_mask,
            block_size,
            middle_chunk_bytes: MIDDLE_CHUNK_BYTES,
            flash_mask_bytes: FLASH_MASK_BYTES,
            flash: OnceLock::new(),
            flash_bias: OnceLock::new(),
        })
    }

    /// Bound the (1, h, n, n) UINT8 block mask that attention builds where the part has flash
    /// attention; above it, and at 0, the key blocks are gathered instead.
    pub fn with_flash_mask_bytes(mut self, bytes: usize) -> Self {
        self.flash_mask_bytes = bytes;
        self
    }

    /// The masked keys as flash attention's bias, (b, h, 1, n) in `dtype`:
    /// [`FLASH_MASKED_KEY_BIAS`] where a key is masked, 0 elsewhere.
    fn flash_key_bias(&self, heads: usize, dtype: DType) -> candle_core::Result<Tensor> {
        let fits = |t: &&Tensor| t.dim(1).ok() == Some(heads) && t.dtype() == dtype;
        if let Some(bias) = self.flash_bias.get().filter(fits) {
            return Ok(bias.clone());
        }
        let (b, n) = self.mask.dims2()?;
        let bias = ((1.0 - &self.mask)? * FLASH_MASKED_KEY_BIAS)?
            .to_dtype(dtype)?
            .reshape((b, 1, 1, n))?
            .broadcast_as((b, heads, 1, n))?
            .contiguous()?;
        // The first head count and dtype stay cached (a model has one of each).
        let _ = self.flash_bias.set(bias.clone());
        Ok(bias)
    }

    /// Bound the gathered key (or value) bytes of each launch of the middle query blocks on
    /// devices: smaller chunks lower the peak memory of a step and add launches.
    pub fn with_middle_chunk_bytes(mut self, bytes: usize) -> Self {
        self.middle_chunk_bytes = bytes;
        self
    }

    /// The global query rows' UINT8 mask (1 = masked) for flash attention, (b, 1, 2·wm, n).
    fn flash_masks(&self) -> candle_core::Result<&Tensor> {
        if let Some(mask) = self.flash.get() {
            return Ok(mask);
        }
        let (b, n) = self.mask.dims2()?;
        let masked = self.mask.eq(0.0)?;
        let built = masked.reshape((b, 1, 1, n))?.broadcast_as((b, 1, 2 * self.block_size, n))?.contiguous()?;
        Ok(self.flash.get_or_init(|| built))
    }
}

/// The key blocks of the middle query blocks 1..blocks − 2.
pub struct KeyBlocks {
    /// Heads.
    pub heads: usize,
    /// Blocks per sequence.
    pub blocks: usize,
    /// Key blocks per middle query block.
    pub slots: usize,
    /// (heads, blocks − 2, slots) block indices within the sequence.
    pub table: Vec<u32>,
    /// (blocks − 2, slots): the slots left out of the key set (they repeat a global block).
    pub absent: Vec<bool>,
}

impl KeyBlocks {
    /// The absent slots as penalties, (blocks − 2, slots).
    fn absent_penalties(&self) -> Vec<f32> {
        self.absent.iter().map(|&a| if a { ABSENT_SLOT_PENALTY } else { 0.0 }).collect()
    }

    /// Which key blocks each query block leaves out, (heads, blocks, blocks), 1 where left
    /// out: the global query blocks see every block. `None` when a row lists a block twice
    /// (the eval table repeats block 0), which counts its keys twice in the softmax and a mask
    /// cannot.
    fn block_mask(&self) -> Option<Vec<u8>> {
        let (nb, slots) = (self.blocks, self.slots);
        let mut mask = vec![1u8; self.heads * nb * nb];
        for (head, rows) in mask.chunks_mut(nb * nb).enumerate() {
            for (j, row) in rows.chunks_mut(nb).enumerate() {
                if j == 0 || j == nb - 1 {
                    row.fill(0);
                    continue;
                }
                let listed = &self.table[(head * (nb - 2) + j - 1) * slots..][..slots];
                let absent = &self.absent[(j - 1) * slots..][..slots];
                for (&blk, _) in listed.iter().zip(absent).filter(|(_, &a)| !a) {
                    let seen = row.get_mut(blk as usize)?;
                    if *seen == 0 {
                        return None;
                    }
                    *seen = 0;
                }
            }
        }
        Some(mask)
    }
}

/// Block-sparse attention over q, k, v of shape (b, n, heads·d), n = blocks · block size;
/// the result is (b, n, heads·d). See the module for the bodies.
pub fn block_sparse_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    masks: &BlockSparseMask,
    keys: &KeyBlocks,
) -> candle_core::Result<Tensor> {
    let (b, n, hd) = q.dims3()?;
    let (h, nb, slots, wm) = (keys.heads, keys.blocks, keys.slots, masks.block_size);
    let d = super::head_dim("block_sparse_attention", hd, h)?;
    if nb < 3
        || n != nb * wm
        || keys.table.len() != h * (nb - 2) * slots
        || keys.absent.len() != (nb - 2) * slots
        || keys.table.iter().any(|&blk| blk as usize >= nb)
    {
        candle_core::bail!(
            "block_sparse_attention: {n} tokens of {hd} features do not fit {h} heads, {nb} blocks of {wm} and a \
             table of {} entries for {slots} slots",
            keys.table.len()
        )
    }
    let scale = 1.0 / (d as f64).sqrt();
    let needs_grad = [q, k, v].iter().any(|t| t.track_op());
    let body = super::ROW.select(q.device(), q.dtype())?;
    let absent = keys.absent_penalties();
    if block_op_runs(body, needs_grad, d) {
        let op = BlockAttention::new(plan(b, n, masks, keys, &absent, scale)?);
        return q.contiguous()?.apply_op3(&k.contiguous()?, &v.contiguous()?, op);
    }
    let geometry = SparseGeometry { b, h, n, d, wm, nb, slots, scale, chunk_bytes: masks.middle_chunk_bytes };
    if body == Body::Cpu {
        // The CPU kernels compute in f32: other float dtypes are widened for them, and the
        // result rounded back.
        let dtype = q.dtype();
        let heads_f32 = |t: &Tensor| split_heads(t, h)?.to_dtype(DType::F32);
        let (q, k, v) = (&heads_f32(q)?, &heads_f32(k)?, &heads_f32(v)?);
        // Global query blocks 0 and nb−1 attend to every key.
        let global = super::composed(&global_rows(q, wm, n)?, k, v, scale, Some(&masks.key_penalty), None)?;
        if let Some(middle) = super::cpu_inference::fused_block_sparse_middle(
            q,
            k,
            v,
            &masks.mask,
            wm,
            &keys.table,
            slots,
            &absent,
            masks.penalty,
        )? {
            let rows = assemble_rows(&global, &middle, geometry)?.to_dtype(dtype)?;
            return merge_heads(&rows.broadcast_mul(&masks.query_mask)?);
        }
    }
    if body == Body::Ascend && h * n * n <= masks.flash_mask_bytes {
        if let Some(blocks) = keys.block_mask() {
            return masked_flash(q, k, v, masks, blocks, geometry);
        }
    }
    let device = q.device();
    // The table's blocks into (b, h·nb, wm, d) heads, and within a sequence.
    let index: Vec<u32> = keys
        .table
        .chunks(slots * (nb - 2))
        .enumerate()
        .flat_map(|(head, rows)| rows.iter().map(move |&blk| (head * nb) as u32 + blk))
        .collect();
    let index = BlockTable::new(index, h * nb, device)?;
    let local = Tensor::from_vec(keys.table.clone(), h * (nb - 2) * slots, device)?;
    // Penalties per key of the middle blocks: the masked keys' (gathered from the per-token
    // penalties) plus the absent slots' (the same for every sequence and head).
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
    let (global, middle) = if body == Body::Ascend {
        // Flash attention takes the middle blocks' penalties as its bias (realShiftOptional),
        // one row per (sequence, head, block): it adds them to q·kᵀ before the scale, so they
        // go in divided by it. The global rows take the key mask, spread over their rows.
        let middle = (bias.reshape((b * h * (nb - 2), 1, 1, slots * wm))? / scale)?.to_dtype(q.dtype())?;
        (KeyMask::Flash(masks.flash_masks()?.clone()), KeyMask::FlashBias(middle))
    } else {
        (KeyMask::Penalty(masks.key_penalty.clone()), KeyMask::Penalty(bias))
    };
    let inputs = SparseInputs { table: index, global, middle, query_mask: masks.query_mask.clone() };
    let heads = if needs_grad {
        let forward = |q: &Tensor, k: &Tensor, v: &Tensor| sparse_forward(q, k, v, geometry, inputs);
        crate::function::function3(q, k, v, forward, sparse_backward)?
    } else {
        sparse_forward(q, k, v, geometry, inputs)?.0
    };
    heads.reshape((b, n, hd))
}

/// The [`BlockAttention`] plan: global blocks 0 and nb−1 see every key; block j in between sees
/// its table row.
fn plan(
    b: usize,
    n: usize,
    masks: &BlockSparseMask,
    keys: &KeyBlocks,
    absent: &[f32],
    scale: f64,
) -> candle_core::Result<AttentionPlan> {
    let (h, nb, slots, wm) = (keys.heads, keys.blocks, keys.slots, masks.block_size);
    let mut ranges = Vec::with_capacity(h * nb);
    for head in 0..h {
        for j in 0..nb {
            if j == 0 || j == nb - 1 {
                ranges.push(vec![KeyRange { start: 0, len: n, penalty: 0.0 }]);
                continue;
            }
            let row = (head * (nb - 2) + j - 1) * slots;
            ranges.push(
                (0..slots)
                    .map(|slot| KeyRange {
                        start: keys.table[row + slot] as usize * wm,
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
        keys: ranges,
        key_penalty: masks.key_penalty.flatten_all()?.to_vec1()?,
        query_mask: Some(masks.mask.flatten_all()?.to_vec1()?),
        scale: scale as f32,
        dropout: None,
    })
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
    chunk_bytes: usize,
}

impl SparseGeometry {
    /// The middle query blocks' gathered key or value blocks, (s, h·(nb − 2), slots·wm, d),
    /// from (s, h, n, d) heads of s sequences.
    fn gather(&self, t: &Tensor, table: &BlockTable) -> candle_core::Result<Tensor> {
        let s = t.dim(0)?;
        table.gather(&t.reshape((s, self.h * self.nb, self.wm, self.d))?)?.reshape((
            s,
            self.h * (self.nb - 2),
            self.slots * self.wm,
            self.d,
        ))
    }

    /// The middle part's chunks of sequences, (first, count): its gathered keys and values
    /// (and, in the backward pass, their gradients) are 5 + r times the size of k, so each
    /// launch takes at most `chunk_bytes` of them (one sequence at the least).
    fn middle_chunks(&self, dtype: DType) -> Vec<(usize, usize)> {
        let per_sequence = self.h * (self.nb - 2) * self.slots * self.wm * self.d * dtype.size_in_bytes();
        let per_chunk = (self.chunk_bytes / per_sequence.max(1)).max(1);
        (0..self.b).step_by(per_chunk).map(|first| (first, per_chunk.min(self.b - first))).collect()
    }
}

/// The most gathered key (or value) bytes one launch of the middle part takes by default. A
/// sequence's are 24 MB at 2048 tokens in bf16 and f16 (CodonTransformer's 12 heads, 8 key
/// blocks of 64): batches up to 6 × 2048, the published configuration, run in one chunk (the
/// step's peak then stays under 7,936 MiB on the emulated 910B3 and 910A, `tests/npu_budgets.rs`);
/// larger ones in chunks of this size, which bound the backward pass's gathered keys, values and
/// their gradients (each 5 + r times the size of k) for a few more launches.
const MIDDLE_CHUNK_BYTES: usize = 160 << 20;

/// The per-layer tables of block-sparse attention on devices.
struct SparseInputs {
    /// The key block of every (head, query block, slot), into (b, h·nb, wm, d).
    table: BlockTable,
    /// The global query rows' masked keys: penalties (b, 1, 1, n) or a mask (b, 1, 2·wm, n).
    global: KeyMask,
    /// The middle query blocks' masked keys among their gathered ones: penalties
    /// (b, h·(nb − 2), 1, slots·wm) or flash attention's bias (b·h·(nb − 2), 1, 1, slots·wm).
    middle: KeyMask,
    /// Zeroes padded query rows, (b, 1, n, 1).
    query_mask: Tensor,
}

/// How a part's keys are masked: additive penalties for the composed softmax; flash
/// attention's UINT8 mask (1 = masked; one row per query row or one for all, spread over the
/// rows when used); or flash attention's bias, the penalties over the scale in q's dtype, one
/// row per (sequence, head, block). They agree: every penalty here underflows exp to exactly 0,
/// as masking does, and no query row that reaches the output has all its keys masked (a real
/// token sees its own block).
enum KeyMask {
    Penalty(Tensor),
    Flash(Tensor),
    FlashBias(Tensor),
}

impl KeyMask {
    /// The middle part's mask of `count` sequences from `first`, of `rows` (head, block)
    /// rows each.
    fn sequences(&self, first: usize, count: usize, rows: usize) -> candle_core::Result<Self> {
        Ok(match self {
            Self::Penalty(bias) => Self::Penalty(bias.narrow(0, first, count)?),
            Self::Flash(mask) => Self::Flash(mask.narrow(0, first * rows, count * rows)?),
            Self::FlashBias(bias) => Self::FlashBias(bias.narrow(0, first * rows, count * rows)?),
        })
    }
}

/// What the backward pass of block-sparse attention keeps: each part's query rows and softmax
/// state. The key and value heads are split again from the op's inputs, and the middle blocks'
/// gathered again, rather than kept (the gathered ones are 5 + r times the size).
struct SparseSaved {
    geometry: SparseGeometry,
    inputs: SparseInputs,
    global: AttentionPart,
    /// The middle part by chunk of sequences ([`SparseGeometry::middle_chunks`]).
    middle: Vec<((usize, usize), AttentionPart)>,
}

/// One softmax(q·kᵀ·scale + bias)·v: its query rows and what its backward pass needs.
struct AttentionPart {
    q: Tensor,
    softmax: PartSoftmax,
}

/// A part's softmax state for its backward pass.
enum PartSoftmax {
    /// Composed: the penalties. The backward pass computes the probabilities again
    /// (five launches) rather than keep them: they are the largest activation of a layer.
    Composed(Tensor),
    /// One flash attention launch: its output, row statistics and keys (a mask before it is
    /// spread over the query rows, or the bias); no probabilities.
    Flash { out: Tensor, state: Box<FlashState>, keys: FlashParts },
}

/// A flash part's keys as kept for its backward pass.
enum FlashParts {
    /// (batch, 1, 1 or rows, keys) UINT8, spread over the rows at each launch.
    Mask(Tensor),
    /// (batch, 1, 1, keys) in q's dtype.
    Bias(Tensor),
}

impl FlashParts {
    /// The launch's keys for `rows` query rows.
    fn keys(&self, rows: usize) -> candle_core::Result<FlashKeys> {
        Ok(match self {
            Self::Mask(mask) => FlashKeys::Mask(spread_rows(mask, rows)?),
            Self::Bias(bias) => FlashKeys::Bias(bias.clone()),
        })
    }
}

impl AttentionPart {
    /// The part over (batch, heads, rows, d) q and (batch, heads, keys, d) k, v. Flash keys of
    /// one row per (sequence, head) fold the heads into the batch: flash attention takes at
    /// most 256 heads, and a mask or bias per batch row but not per head and batch row at once.
    fn forward(q: Tensor, k: &Tensor, v: &Tensor, scale: f64, keys: &KeyMask) -> candle_core::Result<(Tensor, Self)> {
        let bias = match keys {
            KeyMask::Penalty(bias) => bias,
            KeyMask::Flash(mask) => return Self::flash(q, k, v, scale, FlashParts::Mask(mask.clone())),
            KeyMask::FlashBias(bias) => return Self::flash(q, k, v, scale, FlashParts::Bias(bias.clone())),
        };
        let mut probs = probabilities(&q, k, Some(bias), scale)?;
        probs = probs.to_dtype(v.dtype())?;
        let out = matmul(&probs, v)?;
        Ok((out, Self { q, softmax: PartSoftmax::Composed(bias.clone()) }))
    }

    /// The part in one flash attention launch, its heads folded into the batch as its keys'
    /// rows say.
    fn flash(q: Tensor, k: &Tensor, v: &Tensor, scale: f64, parts: FlashParts) -> candle_core::Result<(Tensor, Self)> {
        let (b, h, rows, _) = q.dims4()?;
        let batch = match &parts {
            FlashParts::Mask(t) | FlashParts::Bias(t) => t.dim(0)?,
        };
        let fold = |t: &Tensor| fold_heads(t, (batch, b * h / batch));
        let (out, state) = flash_attention_heads(&fold(&q)?, &fold(k)?, &fold(v)?, &parts.keys(rows)?, scale)?;
        let ctx = out.reshape(q.shape())?;
        Ok((ctx, Self { q, softmax: PartSoftmax::Flash { out, state: Box::new(state), keys: parts } }))
    }

    /// (dq, dk, dv) from the output's gradient, with the forward's keys and values (taken, so
    /// that they can be dropped as soon as they have been used).
    fn backward(
        &self,
        k: Tensor,
        v: Tensor,
        grad: &Tensor,
        scale: f64,
    ) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
        let q = &self.q;
        let (k, v) = (&k, v);
        match &self.softmax {
            PartSoftmax::Flash { out, state, keys } => {
                let (b, h, _, _) = out.dims4()?;
                let fold = |t: &Tensor| fold_heads(t, (b, h));
                let keys = keys.keys(q.dim(2)?)?;
                let (dq, dk, dv) = state.backward(&fold(q)?, &fold(k)?, &fold(&v)?, &keys, out, &fold(grad)?)?;
                Ok((dq.reshape(q.shape())?, dk.reshape(k.shape())?, dv.reshape(v.shape())?))
            }
            PartSoftmax::Composed(bias) => {
                // Each (rows × keys) temporary, and v, is dropped as soon as it has been used:
                // at most three such temporaries are alive at once.
                let dtype = v.dtype();
                let mut d_probs = matmul(grad, &v.t()?)?;
                drop(v);
                // In f32, or in the half dtype where the part's softmax kernels take it.
                let probs = probabilities(q, k, Some(bias), scale)?;
                d_probs = d_probs.to_dtype(probs.dtype())?;
                let mut d_scores = crate::activation::softmax_last_dim_grad(&probs, &d_probs)?;
                drop(d_probs);
                let probs = probs.to_dtype(dtype)?;
                let dv = matmul(&probs.t()?, grad)?;
                drop(probs);
                d_scores = d_scores.to_dtype(q.dtype())?;
                // The scale goes onto the small operands, not onto the (rows × keys) scores.
                let dq = (matmul(&d_scores, k)? * scale)?;
                let dk = matmul(&d_scores.t()?, &(q * scale)?)?;
                Ok((dq, dk, dv))
            }
        }
    }
}

/// A (batch, heads, 1 or rows, keys) mask as (batch, heads, rows, keys): flash attention takes
/// no mask broadcast over the query rows.
fn spread_rows(mask: &Tensor, rows: usize) -> candle_core::Result<Tensor> {
    let (b, h, _, keys) = mask.dims4()?;
    mask.broadcast_as((b, h, rows, keys))?.contiguous()
}

/// (batch, heads, rows, d) viewed as (outer.0, outer.1, rows', d), the same elements.
fn fold_heads(t: &Tensor, (b, h): (usize, usize)) -> candle_core::Result<Tensor> {
    let d = t.dim(3)?;
    t.reshape((b, h, t.elem_count() / (b * h * d), d))
}

/// The global query blocks (first and last) of (b, h, n, d) heads, as (b, h, 2·wm, d).
fn global_rows(t: &Tensor, wm: usize, n: usize) -> candle_core::Result<Tensor> {
    Tensor::cat(&[t.narrow(2, 0, wm)?, t.narrow(2, n - wm, wm)?], 2)
}

/// Global rows (b, h, 2·wm, d) and middle rows (b, h·(nb − 2), wm, d) back into (b, h, n, d).
fn assemble_rows(global: &Tensor, middle: &Tensor, g: SparseGeometry) -> candle_core::Result<Tensor> {
    let middle = middle.reshape((g.b, g.h, g.n - 2 * g.wm, g.d))?;
    Tensor::cat(&[global.narrow(2, 0, g.wm)?, middle, global.narrow(2, g.wm, g.wm)?], 2)
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
    let (q, k, v) = (split_heads(q, g.h)?, split_heads(k, g.h)?, split_heads(v, g.h)?);
    // Global query blocks 0 and nb−1 attend to every key.
    let (ctx_global, global) = AttentionPart::forward(global_rows(&q, g.wm, g.n)?, &k, &v, g.scale, &inputs.global)?;
    // Query blocks 1..nb−2 attend to their gathered key blocks.
    let q_mid = q.narrow(2, g.wm, g.n - 2 * g.wm)?.reshape((g.b, g.h * (g.nb - 2), g.wm, g.d))?;
    let rows = g.h * (g.nb - 2);
    let mut middle = Vec::new();
    let mut ctx_mid = Vec::new();
    for (first, count) in g.middle_chunks(q.dtype()) {
        let chunk = |t: &Tensor| t.narrow(0, first, count);
        let (k_mid, v_mid) = (g.gather(&chunk(&k)?, &inputs.table)?, g.gather(&chunk(&v)?, &inputs.table)?);
        let keys = inputs.middle.sequences(first, count, rows)?;
        let (ctx, part) = AttentionPart::forward(chunk(&q_mid)?, &k_mid, &v_mid, g.scale, &keys)?;
        ctx_mid.push(ctx);
        middle.push(((first, count), part));
    }
    let ctx_mid = if ctx_mid.len() == 1 { ctx_mid.remove(0) } else { Tensor::cat(&ctx_mid, 0)? };
    let ctx = assemble_rows(&ctx_global, &ctx_mid, g)?.broadcast_mul(&inputs.query_mask)?;
    Ok((ctx.transpose(1, 2)?, SparseSaved { geometry: g, inputs, global, middle }))
}

/// The gradients of q, k and v from the context's gradient (b, n, h, d): the two parts'
/// backward passes (the middle one over its key blocks gathered again), the gathered keys'
/// and values' gradients added back into their blocks with one index-add each.
fn sparse_backward(
    s: &SparseSaved,
    [_, k, v]: [&Tensor; 3],
    grad: &Tensor,
) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
    let g = s.geometry;
    let (k, v) = (split_heads(k, g.h)?, split_heads(v, g.h)?);
    let grad = grad.transpose(1, 2)?.contiguous()?.broadcast_mul(&s.inputs.query_mask)?;
    let (dq_global, dk, dv) = s.global.backward(k.clone(), v.clone(), &global_rows(&grad, g.wm, g.n)?, g.scale)?;
    let grad_mid = grad.narrow(2, g.wm, g.n - 2 * g.wm)?.reshape((g.b, g.h * (g.nb - 2), g.wm, g.d))?;
    // Each chunk's gathered gradients are added back into its sequences' key and value blocks.
    let scatter = |full: &Tensor, gathered: Tensor| -> candle_core::Result<Tensor> {
        let count = full.dim(0)?;
        let gathered = gathered.reshape((count, g.h * (g.nb - 2) * g.slots, g.wm, g.d))?;
        s.inputs.table.scatter_add(&full.reshape((count, g.h * g.nb, g.wm, g.d))?, &gathered)
    };
    let (mut dq_mid, mut dk_chunks, mut dv_chunks) = (Vec::new(), Vec::new(), Vec::new());
    for ((first, count), part) in &s.middle {
        let chunk = |t: &Tensor| t.narrow(0, *first, *count);
        let (k_mid, v_mid) = (g.gather(&chunk(&k)?, &s.inputs.table)?, g.gather(&chunk(&v)?, &s.inputs.table)?);
        let (dq, dk_gathered, dv_gathered) = part.backward(k_mid, v_mid, &chunk(&grad_mid)?, g.scale)?;
        dq_mid.push(dq);
        dk_chunks.push(scatter(&chunk(&dk)?, dk_gathered)?);
        dv_chunks.push(scatter(&chunk(&dv)?, dv_gathered)?);
    }
    let joined = |parts: Vec<Tensor>| if parts.len() == 1 { Ok(parts[0].clone()) } else { Tensor::cat(&parts, 0) };
    let (dk, dv, dq_mid) = (joined(dk_chunks)?, joined(dv_chunks)?, joined(dq_mid)?);
    let dq = assemble_rows(&dq_global, &dq_mid, g)?;
    let hd = g.h * g.d;
    let merge = |t: Tensor| -> candle_core::Result<Tensor> {
        t.reshape((g.b, g.h, g.n, g.d))?.transpose(1, 2)?.reshape((g.b, g.n, hd))
    };
    Ok((Some(merge(dq)?), Some(merge(dk)?), Some(merge(dv)?)))
}

/// What the backward pass of [`masked_flash`] keeps: the mask with the bias, and the launch's
/// output and statistics.
struct MaskedSaved {
    keys: FlashKeys,
    /// Zeroes padded query rows, (b, n, 1).
    query_mask: Tensor,
    out: Tensor,
    state: FlashState,
}

/// The (1, h, nb, 1, nb, 1) block mask spread over the tokens, (1, h, n, n): one sequence's,
/// which flash attention applies to each sequence in turn.
fn expand_blocks(blocks: &Tensor, g: SparseGeometry) -> candle_core::Result<Tensor> {
    blocks.broadcast_as((1, g.h, g.nb, g.wm, g.nb, g.wm))?.contiguous()?.reshape((1, g.h, g.n, g.n))
}

/// Block-sparse attention as flash attention over q, k, v as they are (b, n, h·d): the key
/// blocks a query block does not see are masked at their tokens, the masked keys get a bias.
/// Nothing is gathered, split or merged; the cube does the (n × n) products of full attention.
/// The mask is one sequence's, h·n² bytes (48 MiB at 2048 tokens with 12 heads), applied to
/// each sequence by a launch of its own, and kept for the backward pass (spreading it again
/// would cost a pass over it).
fn masked_flash(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    masks: &BlockSparseMask,
    blocks: Vec<u8>,
    g: SparseGeometry,
) -> candle_core::Result<Tensor> {
    let blocks = Tensor::from_vec(blocks, (1, g.h, g.nb, 1, g.nb, 1), q.device())?;
    let keys = FlashKeys::MaskAndBias { mask: expand_blocks(&blocks, g)?, bias: masks.flash_key_bias(g.h, q.dtype())? };
    let query_mask = masks.query_mask.reshape((g.b, g.n, 1))?;
    let forward = |q: &Tensor, k: &Tensor, v: &Tensor| -> candle_core::Result<(Tensor, MaskedSaved)> {
        let (out, state) = flash_attention_packed(q, k, v, g.h, &keys, g.scale)?;
        let ctx = out.broadcast_mul(&query_mask)?;
        Ok((ctx, MaskedSaved { keys, query_mask, out, state }))
    };
    if ![q, k, v].iter().any(|t| t.track_op()) {
        return Ok(forward(q, k, v)?.0);
    }
    crate::function::function3(q, k, v, forward, masked_flash_backward)
}

/// (dq, dk, dv) of [`masked_flash`]: a flash attention gradient launch per sequence.
fn masked_flash_backward(
    s: &MaskedSaved,
    [q, k, v]: [&Tensor; 3],
    grad: &Tensor,
) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
    let grad = grad.broadcast_mul(&s.query_mask)?;
    let (q, k, v) = (q.contiguous()?, k.contiguous()?, v.contiguous()?);
    let (dq, dk, dv) = s.state.backward(&q, &k, &v, &s.keys, &s.out, &grad)?;
    Ok((Some(dq), Some(dk), Some(dv)))
}
