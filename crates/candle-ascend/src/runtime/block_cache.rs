//! The bookkeeping of the caching allocator, in the manner of torch's (and torch_npu's): device
//! memory comes from the driver in segments; a request takes the smallest free block that fits,
//! split when the rest is worth keeping, and a freed block merges with its free neighbours, so
//! steady-state training makes no `aclrtMalloc`/`aclrtFree` calls and the memory held stays close
//! to the memory in use. Small requests live in segments of their own so that they do not pin
//! large ones. Addresses only: nothing here calls the driver ([`super::allocator`] does).
use std::collections::{BTreeMap, BTreeSet};

/// Block sizes are rounded up to this granularity (bytes).
const GRANULE: usize = 512;
/// Requests up to this size are small: they share [`SMALL_SEGMENT`]-byte segments.
const SMALL_REQUEST: usize = 1 << 20;
const SMALL_SEGMENT: usize = 2 << 20;
/// Requests up to this size share [`MEDIUM_SEGMENT`]-byte segments.
const MEDIUM_REQUEST: usize = 10 << 20;
const MEDIUM_SEGMENT: usize = 20 << 20;
/// Larger requests get a segment of their own, rounded to this.
const LARGE_ROUND: usize = 2 << 20;
/// A large block is split only when the rest is at least this big (smaller rests would be
/// slivers no large request can use).
const MIN_LARGE_REST: usize = SMALL_REQUEST;

pub(crate) fn rounded(bytes: usize) -> usize {
    bytes.max(1).div_ceil(GRANULE) * GRANULE
}

/// The driver allocation that serves a request of `size` bytes when no cached block fits.
pub(crate) fn segment_size(size: usize) -> usize {
    match size {
        s if s <= SMALL_REQUEST => SMALL_SEGMENT,
        s if s <= MEDIUM_REQUEST => MEDIUM_SEGMENT,
        s => s.div_ceil(LARGE_ROUND) * LARGE_ROUND,
    }
}

/// One block of a segment.
#[derive(Debug, Clone, Copy)]
struct Block {
    size: usize,
    free: bool,
    small: bool,
    /// The segment's start.
    segment: usize,
}

/// The blocks of every segment, by address, and the free ones by size in two pools.
#[derive(Debug, Default)]
pub struct BlockCache {
    blocks: BTreeMap<usize, Block>,
    free_small: BTreeSet<(usize, usize)>,
    free_large: BTreeSet<(usize, usize)>,
    /// Segment start → size.
    segments: BTreeMap<usize, usize>,
}

impl BlockCache {
    fn pool(&mut self, small: bool) -> &mut BTreeSet<(usize, usize)> {
        if small {
            &mut self.free_small
        } else {
            &mut self.free_large
        }
    }

    /// The smallest free block of the request's pool that holds `size` bytes, taken.
    pub(crate) fn take(&mut self, size: usize) -> Option<usize> {
        let small = size <= SMALL_REQUEST;
        let &(block_size, ptr) = self.pool(small).range((size, 0)..).next()?;
        self.use_block(ptr, block_size, size, small);
        Some(ptr)
    }

    /// A fresh segment from the driver, its first `size` bytes taken.
    pub(crate) fn add_segment(&mut self, base: usize, segment: usize, size: usize) {
        let small = size <= SMALL_REQUEST;
        self.segments.insert(base, segment);
        self.blocks.insert(base, Block { size: segment, free: true, small, segment: base });
        self.pool(small).insert((segment, base));
        self.use_block(base, segment, size, small);
    }

    /// Mark the free block at `ptr` used for `size` bytes, the rest split off as a free block
    /// when it is worth keeping.
    fn use_block(&mut self, ptr: usize, block_size: usize, size: usize, small: bool) {
        self.pool(small).remove(&(block_size, ptr));
        let rest = block_size - size;
        let Some(block) = self.blocks.get_mut(&ptr) else { return };
        block.free = false;
        if rest >= if small { GRANULE } else { MIN_LARGE_REST } {
            block.size = size;
            let tail = Block { size: rest, free: true, small, segment: block.segment };
            self.blocks.insert(ptr + size, tail);
            self.pool(small).insert((rest, ptr + size));
        }
    }

    /// Return the block at `ptr`, merged with its free neighbours in the same segment.
    pub(crate) fn give_back(&mut self, ptr: usize) {
        let Some(mut block) = self.blocks.remove(&ptr) else { return };
        let mut start = ptr;
        let next = ptr + block.size;
        if let Some(&n) = self.blocks.get(&next).filter(|n| n.free && n.segment == block.segment) {
            self.blocks.remove(&next);
            self.pool(n.small).remove(&(n.size, next));
            block.size += n.size;
        }
        if let Some((&p_ptr, &p)) = self.blocks.range(..ptr).next_back() {
            if p.free && p.segment == block.segment && p_ptr + p.size == ptr {
                self.blocks.remove(&p_ptr);
                self.pool(p.small).remove(&(p.size, p_ptr));
                block.size += p.size;
                start = p_ptr;
            }
        }
        block.free = true;
        self.blocks.insert(start, block);
        self.pool(block.small).insert((block.size, start));
    }

    /// Remove and list the segments that are wholly free: (start, size).
    pub(crate) fn drain_free_segments(&mut self) -> Vec<(usize, usize)> {
        let free: Vec<(usize, usize)> = self
            .segments
            .iter()
            .filter(|(base, size)| self.blocks.get(base).is_some_and(|b| b.free && b.size == **size))
            .map(|(&base, &size)| (base, size))
            .collect();
        for &(base, size) in &free {
            self.segments.remove(&base);
            if let Some(b) = self.blocks.remove(&base) {
                self.pool(b.small).remove(&(size, base));
            }
        }
        free
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    /// A cache with one fresh segment of `segment` bytes at `base`, `size` bytes taken.
    fn with_segment(base: usize, segment: usize, size: usize) -> BlockCache {
        let mut cache = BlockCache::default();
        cache.add_segment(base, segment, size);
        cache
    }

    #[test]
    fn a_segment_serves_several_requests_and_merges_back_whole() {
        let base = 1 << 40;
        let mut cache = with_segment(base, MEDIUM_SEGMENT, 4 * MIB);
        // The rest (16 MiB) serves two more medium requests, in address order.
        assert_eq!(cache.take(6 * MIB), Some(base + 4 * MIB));
        assert_eq!(cache.take(6 * MIB), Some(base + 10 * MIB));
        assert_eq!(cache.take(6 * MIB), None, "4 MiB left");
        assert!(cache.drain_free_segments().is_empty(), "blocks in use");
        // Freed out of order, the blocks merge with their free neighbours into the segment.
        for ptr in [base + 4 * MIB, base, base + 10 * MIB] {
            cache.give_back(ptr);
        }
        assert_eq!(cache.drain_free_segments(), vec![(base, MEDIUM_SEGMENT)]);
        assert!(cache.blocks.is_empty() && cache.free_large.is_empty());
    }

    #[test]
    fn the_smallest_fitting_block_is_taken_and_small_requests_keep_to_their_pool() {
        let (a, b) = (1 << 40, 1 << 41);
        let mut cache = with_segment(a, 64 * MIB, 64 * MIB);
        cache.add_segment(b, 32 * MIB, 32 * MIB);
        cache.give_back(a);
        cache.give_back(b);
        // 30 MiB fits both free segments: the 32 MiB one is taken; its 2 MiB rest is split off.
        assert_eq!(cache.take(30 * MIB), Some(b));
        assert!(cache.free_large.contains(&(2 * MIB, b + 30 * MIB)));
        // A rest under 1 MiB stays with the block instead.
        assert_eq!(cache.take(63 * MIB + MIB / 2), Some(a));
        assert_eq!(cache.blocks[&a].size, 64 * MIB);
        // Small requests never take from the large pool.
        assert_eq!(cache.take(4096), None);
        cache.add_segment(1 << 42, SMALL_SEGMENT, 4096);
        assert_eq!(cache.take(4096), Some((1 << 42) + 4096));
    }

    #[test]
    fn segment_sizes_follow_the_request() {
        assert_eq!(segment_size(512), SMALL_SEGMENT);
        assert_eq!(segment_size(MIB + 512), MEDIUM_SEGMENT);
        assert_eq!(segment_size(10 * MIB + 512), 12 * MIB);
    }
}
