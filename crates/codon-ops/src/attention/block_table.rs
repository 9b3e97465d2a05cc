//! Block-sparse attention's key and value blocks moved on a device: gathered into each middle
//! query block's key set, and their gradients added back into the blocks they came from. On a
//! CUDA GPU one kernel each ([`BlockGather`], [`BlockScatterAdd`]: whole blocks in 16-byte
//! vectors, and per destination block a fixed-order sum of its copies' gradients, from the
//! table's inverse); elsewhere candle's `index_select` and `index_add`.
use candle_core::{CpuStorage, CustomOp1, CustomOp2, DType, Device, Layout, Shape, Tensor};

use crate::selection::Body;

/// Whether `t`'s device runs the block gather's CUDA body in t's dtype.
fn cuda_body(t: &Tensor) -> bool {
    super::BLOCK_GATHER_ROW.choose(t.device(), t.dtype()).body == Body::Cuda
}

/// Which block each gathered block copies, and on a CUDA GPU the inverse for the gradients.
pub(super) struct BlockTable {
    /// The source block of every gathered block, on the device.
    index: Tensor,
    /// Blocks per sequence of the source, and of the gathered tensor.
    blocks: usize,
    gathered: usize,
    /// CUDA: each source block's gathered copies, as CSR offsets (blocks + 1) and sources.
    inverse: Option<(Tensor, Tensor)>,
}

impl BlockTable {
    /// The table of `index` (every entry below `blocks`) on `device`.
    pub(super) fn new(index: Vec<u32>, blocks: usize, device: &Device) -> candle_core::Result<Self> {
        if index.iter().any(|&i| i as usize >= blocks) {
            candle_core::bail!("block table: an entry points past {blocks} blocks")
        }
        // Only the CUDA body reads the inverse; its column is the same in every dtype it takes.
        let inverse = if super::BLOCK_GATHER_ROW.choose(device, DType::F32).body == Body::Cuda {
            let (offsets, sources) = inverse(&index, blocks);
            let (o, s) = (offsets.len(), sources.len());
            Some((Tensor::from_vec(offsets, o, device)?, Tensor::from_vec(sources, s, device)?))
        } else {
            None
        };
        let gathered = index.len();
        Ok(Self { index: Tensor::from_vec(index, gathered, device)?, blocks, gathered, inverse })
    }

    /// (s, blocks, …) blocks into (s, gathered, …): the table's blocks of each sequence.
    pub(super) fn gather(&self, t: &Tensor) -> candle_core::Result<Tensor> {
        let mut dims = t.dims().to_vec();
        dims[1] = self.gathered;
        let block_bytes = t.dims()[2..].iter().product::<usize>() * t.dtype().size_in_bytes();
        let aligned = block_bytes.is_multiple_of(16)
            && (t.layout().start_offset() * t.dtype().size_in_bytes()).is_multiple_of(16);
        if cuda_body(t) && t.is_contiguous() && aligned && t.elem_count() > 0 && self.gathered > 0 {
            let op = BlockGather { index: self.index.clone(), blocks: self.blocks };
            return t.apply_op1_no_bwd(&op)?.reshape(dims);
        }
        t.index_select(&self.index, 1)
    }

    /// `full` (s, blocks, …) plus each gathered block of `gathered` (s, gathered, …) added into
    /// the block it was copied from.
    pub(super) fn scatter_add(&self, full: &Tensor, gathered: &Tensor) -> candle_core::Result<Tensor> {
        match &self.inverse {
            Some((offsets, sources)) if cuda_body(full) && full.elem_count() > 0 => {
                let op =
                    BlockScatterAdd { offsets: offsets.clone(), sources: sources.clone(), gathered: self.gathered };
                full.contiguous()?.apply_op2_no_bwd(&gathered.contiguous()?, &op)
            }
            _ => full.index_add(&self.index, gathered, 1),
        }
    }
}

/// Each block's gathered copies, ascending: CSR offsets (blocks + 1) into the sources.
fn inverse(index: &[u32], blocks: usize) -> (Vec<u32>, Vec<u32>) {
    let mut offsets = vec![0u32; blocks + 1];
    for &i in index {
        offsets[i as usize + 1] += 1;
    }
    for b in 0..blocks {
        offsets[b + 1] += offsets[b];
    }
    let mut next = offsets.clone();
    let mut sources = vec![0u32; index.len()];
    for (j, &i) in index.iter().enumerate() {
        sources[next[i as usize] as usize] = j as u32;
        next[i as usize] += 1;
    }
    (offsets, sources)
}

/// [`BlockTable::gather`]'s CUDA body.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
struct BlockGather {
    index: Tensor,
    blocks: usize,
}

impl CustomOp1 for BlockGather {
    fn name(&self) -> &'static str {
        "gather_blocks"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        // BlockTable takes index_select on the CPU; this body serves CPU operands given to the op.
        let index = self.index.to_vec1::<u32>()?;
        let (mut dims, block) = block_dims(l, self.blocks, "gather_blocks")?;
        let v = crate::f32_views::f32_vec(s, l, "gather_blocks")?;
        let mut out = Vec::with_capacity(dims[0] * index.len() * block);
        for sequence in v.chunks(self.blocks * block.max(1)).take(dims[0]) {
            for &i in &index {
                out.extend_from_slice(&sequence[i as usize * block..(i as usize + 1) * block]);
            }
        }
        dims[1] = index.len();
        Ok((crate::f32_views::store_like(s, out), Shape::from(dims)))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s: &candle_core::CudaStorage,
        l: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let (index, il) = self.index.storage_and_layout();
        let candle_core::Storage::Cuda(index) = &*index else {
            candle_core::bail!("gather_blocks: the table is not on the GPU")
        };
        let block_elems = l.dims()[2..].iter().product::<usize>();
        let out = cuda_launch::gather_blocks(s, l, index, il, block_elems, self.blocks)?
            .ok_or_else(|| candle_core::Error::msg("gather_blocks: blocks are not whole aligned 16-byte vectors"))?;
        let mut dims = l.dims().to_vec();
        dims[1] = il.shape().elem_count();
        Ok((out, Shape::from(dims)))
    }
}

/// [`BlockTable::scatter_add`]'s CUDA body.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
struct BlockScatterAdd {
    offsets: Tensor,
    sources: Tensor,
    gathered: usize,
}

impl CustomOp2 for BlockScatterAdd {
    fn name(&self) -> &'static str {
        "scatter_add_blocks"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        // The same fixed order as the CUDA kernel: each block's copies in ascending order.
        let (offsets, sources) = (self.offsets.to_vec1::<u32>()?, self.sources.to_vec1::<u32>()?);
        let blocks = offsets.len().saturating_sub(1);
        let (dims, block) = block_dims(l1, blocks, "scatter_add_blocks")?;
        let (gathered_dims, _) = block_dims(l2, self.gathered, "scatter_add_blocks")?;
        if gathered_dims[0] != dims[0] || gathered_dims[2..] != dims[2..] {
            candle_core::bail!("scatter_add_blocks: gathered {:?} for blocks {:?}", l2.dims(), l1.dims())
        }
        let mut out = crate::f32_views::f32_vec(s1, l1, "scatter_add_blocks")?;
        let g = crate::f32_views::f32_vec(s2, l2, "scatter_add_blocks")?;
        for q in 0..dims[0] {
            for b in 0..blocks {
                let dst = (q * blocks + b) * block;
                for &j in &sources[offsets[b] as usize..offsets[b + 1] as usize] {
                    let src = (q * self.gathered + j as usize) * block;
                    out[dst..dst + block].iter_mut().zip(&g[src..src + block]).for_each(|(o, g)| *o += g);
                }
            }
        }
        Ok((crate::f32_views::store_like(s1, out), l1.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let (offsets, ol) = self.offsets.storage_and_layout();
        let (sources, sl) = self.sources.storage_and_layout();
        let (candle_core::Storage::Cuda(offsets), candle_core::Storage::Cuda(sources)) = (&*offsets, &*sources) else {
            candle_core::bail!("scatter_add_blocks: the table is not on the GPU")
        };
        let block_elems = l1.dims()[2..].iter().product::<usize>();
        let out =
            cuda_launch::scatter_add_blocks(s1, l1, s2, l2, (offsets, ol), (sources, sl), block_elems, self.gathered)?;
        Ok((out, l1.shape().clone()))
    }
}

/// The dims of (sequences, `blocks`, …) operands and the elements per block; an error naming
/// `op` when the operand is not so shaped.
fn block_dims(l: &Layout, blocks: usize, op: &str) -> candle_core::Result<(Vec<usize>, usize)> {
    let dims = l.dims().to_vec();
    if dims.len() < 2 || dims[1] != blocks {
        candle_core::bail!("{op}: expected (sequences, {blocks}, …) blocks, got {dims:?}")
    }
    Ok((dims.clone(), dims[2..].iter().product()))
}

/// The CUDA launches of the block gather and scatter-add (kernels in `kernels/codon_ops.cu`).
#[cfg(feature = "cuda")]
pub(crate) mod cuda_launch {
    use crate::cuda::prelude::*;

    /// Blocks of (sequences × src_blocks) blocks of `block_elems` elements: out block (s, j) is src
    /// block (s, index[j]). `None` when the blocks are not whole 16-byte vectors (the caller gathers
    /// another way).
    pub(crate) fn gather_blocks(
        src: &CudaStorage,
        sl: &Layout,
        index: &CudaStorage,
        il: &Layout,
        block_elems: usize,
        src_blocks: usize,
    ) -> Result<Option<CudaStorage>> {
        let dev = &src.device;
        let size = src.dtype().size_in_bytes();
        let Some((start, end)) = sl.contiguous_offsets() else { return Ok(None) };
        if !(block_elems * size).is_multiple_of(16)
            || !(start * size).is_multiple_of(16)
            || block_elems == 0
            || src_blocks == 0
        {
            return Ok(None);
        }
        let sequences = (end - start) / (block_elems * src_blocks);
        let out_blocks = il.shape().elem_count();
        let grid = grid(sequences * out_blocks)?;
        let (vecs, src32, out32) = (
            u32::try_from(block_elems * size / 16).w_msg("gather_blocks")?,
            u32::try_from(src_blocks).w_msg("gather_blocks")?,
            u32::try_from(out_blocks).w_msg("gather_blocks")?,
        );
        let func = dev.get_or_load_custom_func("gather_blocks", MODULE, PTX)?;
        let iv = view::<u32>(index, il, "gather_blocks")?;
        let out = with_float_type!(src.dtype(), "gather_blocks", T => {
            let sv = view::<T>(src, sl, "gather_blocks")?;
            // SAFETY: the view's bytes are whole 16-byte vectors at a 16-byte aligned address (checked
            // above); the kernel copies them without reading their values.
            let sv = unsafe { sv.transmute::<u128>((end - start) * size / 16) }
                .ok_or_else(|| candle_core::Error::msg("gather_blocks: the source is shorter than its layout"))?;
            let cfg = LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (ROW_THREADS, 1, 1), shared_mem_bytes: 0 };
            // SAFETY: the arguments match the kernel's signature, and it writes every output block;
            // every index is below src_blocks (the caller's table is checked when the op is built).
            unsafe {
                launch_into_fresh!(dev, func, cfg, T, sequences * out_blocks * block_elems; &vecs, &src32, &out32, &iv, &sv, out)
            }
        });
        Ok(Some(out))
    }

    /// The gathered blocks' sums added back into their source blocks: out block (s, t) = base block
    /// (s, t) + the gathered blocks (s, sources[offsets[t]..offsets[t + 1]]), in f32 in that order.
    /// Base is (sequences × blocks) blocks and gathered (sequences × gathered_blocks) blocks of
    /// `block_elems` elements.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn scatter_add_blocks(
        base: &CudaStorage,
        bl: &Layout,
        gathered: &CudaStorage,
        gl: &Layout,
        (offsets, ol): (&CudaStorage, &Layout),
        (sources, srcl): (&CudaStorage, &Layout),
        block_elems: usize,
        gathered_blocks: usize,
    ) -> Result<CudaStorage> {
        let dev = &base.device;
        same_dtype(base, gathered, "scatter_add_blocks")?;
        let n = bl.shape().elem_count();
        let blocks = ol.shape().elem_count().saturating_sub(1);
        if block_elems == 0 || blocks == 0 || !n.is_multiple_of(block_elems * blocks) {
            candle_core::bail!(
                "scatter_add_blocks: {n} elements are not whole sequences of {blocks} blocks of {block_elems}"
            )
        }
        let sequences = n / (block_elems * blocks);
        if gl.shape().elem_count() != sequences * gathered_blocks * block_elems {
            candle_core::bail!("scatter_add_blocks: the gathered blocks do not match {sequences} sequences")
        }
        let grid = grid(sequences * blocks)?;
        let (elems32, blocks32, gathered32) = (
            u32::try_from(block_elems).w_msg("scatter_add_blocks")?,
            u32::try_from(blocks).w_msg("scatter_add_blocks")?,
            u32::try_from(gathered_blocks).w_msg("scatter_add_blocks")?,
        );
        let func = function!(dev, "scatter_add_blocks", base.dtype());
        let (ov, sv) =
            (view::<u32>(offsets, ol, "scatter_add_blocks")?, view::<u32>(sources, srcl, "scatter_add_blocks")?);
        with_float_type!(base.dtype(), "scatter_add_blocks", T => {
            let (bv, gv) = (view::<T>(base, bl, "scatter_add_blocks")?, view::<T>(gathered, gl, "scatter_add_blocks")?);
            let cfg = LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (ROW_THREADS, 1, 1), shared_mem_bytes: 0 };
            // SAFETY: the arguments match the kernel's signature, and it writes every element; the
            // offsets and sources come from a checked inverse of the gather table.
            Ok(unsafe { launch_into_fresh!(dev, func, cfg, T, n; &elems32, &blocks32, &gathered32, &ov, &sv, &bv, &gv, out) })
        })
    }
}

#[cfg(test)]
mod tests {
    use candle_core::{Device, Tensor};

    use super::{inverse, BlockGather, BlockScatterAdd};

    /// The CUDA-shaped block ops on the CPU give index_select's and index_add's results.
    #[test]
    fn the_block_ops_run_on_the_cpu_as_index_select_and_index_add() {
        let dev = Device::Cpu;
        let index = vec![3u32, 0, 3, 1, 3, 0];
        let full = Tensor::randn(0f32, 1.0, (2, 5, 4, 3), &dev).unwrap();
        let table = Tensor::new(index.as_slice(), &dev).unwrap();
        let gathered = full.apply_op1_no_bwd(&BlockGather { index: table.clone(), blocks: 5 }).unwrap();
        let selected = full.index_select(&table, 1).unwrap();
        assert_eq!(
            gathered.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            selected.flatten_all().unwrap().to_vec1::<f32>().unwrap()
        );
        let grads = Tensor::randn(0f32, 1.0, (2, 6, 4, 3), &dev).unwrap();
        let (offsets, sources) = inverse(&index, 5);
        let op = BlockScatterAdd {
            offsets: Tensor::new(offsets.as_slice(), &dev).unwrap(),
            sources: Tensor::new(sources.as_slice(), &dev).unwrap(),
            gathered: 6,
        };
        let summed = full.apply_op2_no_bwd(&grads, &op).unwrap();
        let expected = full.index_add(&table, &grads, 1).unwrap();
        assert!(crate::f32_views::max_abs_diff(&summed, &expected) < 1e-5);
    }

    #[test]
    fn the_inverse_lists_every_copy_of_each_block_in_order() {
        let index = [3u32, 0, 3, 1, 3, 0];
        let (offsets, sources) = super::inverse(&index, 5);
        assert_eq!(offsets, [0, 2, 3, 3, 6, 6]);
        assert_eq!(sources, [1, 5, 3, 0, 2, 4]);
        for b in 0..5 {
            for &j in &sources[offsets[b] as usize..offsets[b + 1] as usize] {
                assert_eq!(index[j as usize] as usize, b);
            }
        }
    }
}
