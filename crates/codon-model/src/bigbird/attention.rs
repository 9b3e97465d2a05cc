//! BigBird's self-attention: `original_full` and `block_sparse` (transformers' `BigBirdSelfAttention` and `BigBirdBlockSparseAttention`). This module
//! holds what is BigBird's: the masks' penalty and which key blocks each query block sees. The
//! attention itself is `codon_ops::attention`'s, with a body per device.
//!
//! Block-sparse attention is computed sparsely: the two global query blocks attend to every
//! key, and each other query block attends to its 5 + r key blocks (global first and last,
//! the sliding window, the random blocks), so time and memory grow linearly with the sequence
//! length.

use candle_core::{DType, Tensor};

use super::random_blocks::RandomBlocks;
use crate::error::{CodonError, Result};
use codon_ops::attention::KeyBlocks;

pub use codon_ops::attention::BlockSparseMask;

/// Penalty that block-sparse attention adds to masked keys (transformers' constant).
pub const BLOCK_SPARSE_MASK_PENALTY: f32 = -10_000.0;

/// The per-pass masks of block-sparse attention from a (b, n) 0/1 attention mask: masked keys
/// get transformers' penalty, padded query rows are zeroed in `dtype`.
pub fn block_sparse_masks(attention_mask: &Tensor, block_size: usize, dtype: DType) -> Result<BlockSparseMask> {
    Ok(BlockSparseMask::new(attention_mask, block_size, BLOCK_SPARSE_MASK_PENALTY, dtype)?)
}

/// The key blocks of query blocks 1..nb−2, per head: [first, previous, self, next, last,
/// random…]; the slots that duplicate a global block next to the edges (previous of block 1,
/// next of block nb−2) are absent.
fn key_blocks(rand: &RandomBlocks, nb: usize) -> KeyBlocks {
    let slots = 5 + rand.r;
    let rows = nb - 2;
    let mut table = Vec::with_capacity(rand.heads * rows * slots);
    for head in 0..rand.heads {
        for row in 0..rows {
            let q = row + 1;
            table.extend([0, q - 1, q, q + 1, nb - 1].map(|b| b as u32));
            table.extend((0..rand.r).map(|j| rand.get(head, row, j)));
        }
    }
    let mut absent = vec![false; rows * slots];
    absent[1] = true; // block 1: its previous block is the global block 0
    absent[(rows - 1) * slots + 3] = true; // block nb−2: its next block is the last block
    KeyBlocks { heads: rand.heads, blocks: nb, slots, table, absent }
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
    let nb = q.dim(1)? / masks.block_size.max(1);
    if nb < 3 {
        return Err(CodonError::Input(format!(
            "block-sparse attention needs at least 3 blocks of {} tokens, got {} tokens",
            masks.block_size,
            q.dim(1)?
        )));
    }
    Ok(codon_ops::attention::block_sparse_attention(q, k, v, masks, &key_blocks(rand, nb))?)
}
