//! BigBird's random-block tables (`rand_attn`), reproduced exactly from transformers.
//!
//! A table has shape (heads, nb − 2, r): row `i` lists the random key blocks of query
//! block `i + 1`. In training mode it is drawn from numpy's legacy MT19937 reseeded with
//! the layer index at every forward, so it is a fixed function of
//! (layer, n, block, r, heads, max_position_embeddings). In eval mode it is all zeros.

use super::numpy_rng::LegacyRandomState;

/// Padded lengths that use the legacy plan (`_bigbird_block_rand_mask`).
const LEGACY_LENGTHS: [usize; 3] = [1024, 3072, 4096];

/// Geometry of one block-sparse attention call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockGeometry {
    /// Padded sequence length (a multiple of `block_size`).
    pub seq_len: usize,
    /// Tokens per block.
    pub block_size: usize,
    /// Random blocks per query block.
    pub num_random_blocks: usize,
    /// Attention heads.
    pub num_heads: usize,
    /// The model's `max_position_embeddings` (the legacy plan's RNG stream depends on it).
    pub max_position_embeddings: usize,
}

impl BlockGeometry {
    /// Number of blocks.
    pub fn num_blocks(&self) -> usize {
        self.seq_len / self.block_size
    }
}

/// A random-block table, row-major (heads, num_blocks − 2, r).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RandomBlocks {
    /// Heads.
    pub heads: usize,
    /// Rows per head (num_blocks − 2).
    pub rows: usize,
    /// Random blocks per row.
    pub r: usize,
    /// Key-block indices.
    pub blocks: Vec<u32>,
}

impl RandomBlocks {
    /// The eval-mode table: every random block is block 0.
    pub fn zeros(g: &BlockGeometry) -> Self {
        let rows = g.num_blocks().saturating_sub(2);
        Self {
            heads: g.num_heads,
            rows,
            r: g.num_random_blocks,
            blocks: vec![0; g.num_heads * rows * g.num_random_blocks],
        }
    }

    /// The training-mode table of layer `layer`.
    pub fn training(g: &BlockGeometry, layer: usize) -> Self {
        let mut rng = LegacyRandomState::new(layer as u32);
        if LEGACY_LENGTHS.contains(&g.seq_len) {
            legacy_plan(g, &mut rng)
        } else {
            general_plan(g, &mut rng)
        }
    }

    /// Entry (head, row, j).
    pub fn get(&self, head: usize, row: usize, j: usize) -> u32 {
        self.blocks[(head * self.rows + row) * self.r + j]
    }
}

/// `_get_single_block_row_attention`: the first `r` blocks of a permutation of `start..end`
/// that are not the row's window, the global blocks, or the plan's edge blocks.
fn single_row(rng: &mut LegacyRandomState, block: usize, start: usize, end: usize, r: usize) -> Vec<u32> {
    let perm = rng.permutation(&(start..end).collect::<Vec<usize>>());
    let mut illegal = vec![block.wrapping_sub(1), block, block + 1, 0, end - 1];
    if block == 1 {
        illegal.push(end - 2);
    }
    if block == end - 2 {
        illegal.push(1);
    }
    perm.into_iter().filter(|b| !illegal.contains(b)).take(r).map(|b| b as u32).collect()
}

/// `_bigbird_block_rand_mask_with_head` with `_get_rand_attn_plan`'s reachable branch.
fn general_plan(g: &BlockGeometry, rng: &mut LegacyRandomState) -> RandomBlocks {
    let nb = g.num_blocks();
    let r = g.num_random_blocks;
    let mut table = RandomBlocks::zeros(g);
    // The plan: random blocks come from the first (2r + 5) blocks when nb allows it.
    let plan_end = if 2 * r + 5 < nb {
        2 * r + 5
    } else if r + 5 < nb {
        r + 5
    } else {
        nb
    };
    for block in 1..nb {
        for head in 0..g.num_heads {
            let row = single_row(rng, block, 0, plan_end, r);
            // Row nb−1 is drawn (consuming the RNG) and discarded, as upstream.
            if block <= nb - 2 {
                for (j, &b) in row.iter().enumerate().take(r) {
                    table.blocks[(head * table.rows + block - 1) * r + j] = b;
                }
            }
        }
    }
    table
}

/// `_bigbird_block_rand_mask(max_pos, max_pos, wm, wm, r, last_idx=1024)` per head,
/// truncated to the first nb − 2 rows.
fn legacy_plan(g: &BlockGeometry, rng: &mut LegacyRandomState) -> RandomBlocks {
    let wm = g.block_size;
    let r = g.num_random_blocks;
    let full_nb = g.max_position_embeddings / wm;
    let last = 1024 / wm - 1;
    let mid: Vec<u32> = (1..full_nb.saturating_sub(1)).map(|b| b as u32).collect();
    // Python slicing: clamped, empty when start >= end.
    let slice = |a: usize, b: usize| -> &[u32] {
        let b = b.min(mid.len());
        &mid[a.min(b)..b]
    };
    let mut table = RandomBlocks::zeros(g);
    for head in 0..g.num_heads {
        for i in 1..full_nb.saturating_sub(1) {
            let candidates: Vec<u32> = if i == 1 {
                slice(2, last).to_vec()
            } else if i == 2 {
                slice(3, last).to_vec()
            } else if i + 3 == full_nb || i + 2 == full_nb {
                slice(0, last).to_vec()
            } else {
                let (start, end) = (i - 2, i);
                if start > last {
                    slice(0, last).to_vec()
                } else if end + 1 == last {
                    slice(0, start).to_vec()
                } else {
                    slice(0, start).iter().chain(slice(end + 1, last)).copied().collect()
                }
            };
            let picked = rng.permutation(&candidates);
            if i - 1 < table.rows {
                let at = (head * table.rows + i - 1) * r;
                for (slot, &b) in table.blocks[at..at + r].iter_mut().zip(&picked) {
                    *slot = b;
                }
            }
        }
    }
    table
}
