//! The embedding lookup as one op, with torch's `padding_idx`: the rows of a table at integer
//! ids, and a backward pass that sums each output row's gradient into its id's row, leaving the
//! padding row without gradient. Composed from tensor ops (an index_select, a detached copy and
//! a mask to stop the padding row's gradient), it is eight launches forward and a dozen backward;
//! the op is one pass each way on the CPU, `aclnnEmbedding` forward and
//! `aclnnEmbeddingDenseBackward` backward on an Ascend part, and on a CUDA GPU candle's
//! index-select forward and one GEMM backward (the ids' one-hot rows, the padding id's left
//! empty, times the rows' gradient: candle's index-add loops over every id in each thread).
use crate::selection::{Body, FusedOp, OnCpu, OnCuda, Row};
#[cfg(feature = "ascend")]
use candle_ascend::fused;
#[cfg(feature = "ascend")]
use candle_ascend::soc::AclnnOp;
use candle_core::backend::BackendStorage;
#[cfg(feature = "ascend")]
use candle_core::custom_backend::{BoxStorage, DynBackendStorage};
use candle_core::{CpuStorage, CustomOp2, DType, Layout, Shape, Tensor};
use rayon::prelude::*;

use crate::f32_views::{contiguous, f32_vec, store_like};

/// The embedding's row of the support table: the op's own body everywhere it has one, in every
/// dtype on a CUDA GPU (candle's index-select and a GEMM).
pub(crate) const ROW: Row = Row {
    op: FusedOp::Embedding,
    cpu: OnCpu::Kernel,
    cuda: OnCuda::AnyDtype,
    #[cfg(feature = "ascend")]
    ascend: &[AclnnOp::Embedding, AclnnOp::EmbeddingDenseBackward],
};

/// The rows of `weight` (vocab, dim) at `ids` (integers, any shape): shape `ids.dims() + [dim]`,
/// in weight's dtype. With `padding_idx`, the lookup passes no gradient to that row (torch's
/// `nn.Embedding(padding_idx=…)`). An id outside `0..vocab` is an error on the CPU; on an
/// Ascend part it is a kernel fault, as with torch_npu.
pub fn embedding(weight: &Tensor, ids: &Tensor, padding_idx: Option<usize>) -> candle_core::Result<Tensor> {
    let (vocab, dim) = weight.dims2()?;
    if let Some(pad) = padding_idx.filter(|&p| p >= vocab) {
        candle_core::bail!("embedding: padding_idx {pad} is outside the table's {vocab} rows")
    }
    let mut dims = ids.dims().to_vec();
    dims.push(dim);
    let flat = ids.flatten_all()?;
    let body = ROW.select(weight.device(), weight.dtype())?;
    if body.is_native() && ids_fit(body, &flat) {
        return weight.contiguous()?.apply_op2(&flat, Embedding { vocab, padding_idx, body })?.reshape(dims);
    }
    reference(weight, &flat, padding_idx)?.reshape(dims)
}

/// Whether these ids fit `body`: the Ascend body takes U32, I32 and I64 ids; the CPU and CUDA
/// bodies every integer dtype.
fn ids_fit(body: Body, ids: &Tensor) -> bool {
    body != Body::Ascend || matches!(ids.dtype(), DType::U32 | DType::I32 | DType::I64)
}

/// The composed lookup of 1-D `ids`: an index_select whose padding rows come from a detached
/// copy of the table, so they pass no gradient.
pub fn reference(weight: &Tensor, ids: &Tensor, padding_idx: Option<usize>) -> candle_core::Result<Tensor> {
    let rows = weight.index_select(ids, 0)?;
    match padding_idx {
        Some(pad) if weight.track_op() => {
            let keep = ids.ne(pad as f64)?.to_dtype(weight.dtype())?.unsqueeze(1)?;
            let frozen = weight.detach().index_select(ids, 0)?;
            rows.broadcast_mul(&keep)? + frozen.broadcast_mul(&(1.0 - &keep)?)?
        }
        _ => Ok(rows),
    }
}

/// The lookup op over a contiguous table (vocab, dim) and 1-D integer ids; see the module.
struct Embedding {
    vocab: usize,
    padding_idx: Option<usize>,
    /// The body the table chose: the backward pass takes the same one.
    body: Body,
}

/// The ids of a contiguous integer storage, checked against `vocab`.
fn cpu_ids(s: &CpuStorage, l: &Layout, vocab: usize) -> candle_core::Result<Vec<usize>> {
    let op = "embedding";
    let ids: Vec<i64> = match s {
        CpuStorage::U8(v) => contiguous(v, l, op)?.iter().map(|&i| i64::from(i)).collect(),
        CpuStorage::U32(v) => contiguous(v, l, op)?.iter().map(|&i| i64::from(i)).collect(),
        CpuStorage::I64(v) => contiguous(v, l, op)?.to_vec(),
        _ => candle_core::bail!("embedding: ids must be u8, u32 or i64, not {:?}", s.dtype()),
    };
    ids.into_iter()
        .map(|i| match usize::try_from(i) {
            Ok(u) if u < vocab => Ok(u),
            _ => candle_core::bail!("embedding: id {i} is outside the table's {vocab} rows"),
        })
        .collect()
}

/// The gathered rows of a contiguous table.
fn gather<T: Copy + Send + Sync>(table: &[T], dim: usize, ids: &[usize]) -> Vec<T> {
    let mut out = Vec::with_capacity(ids.len() * dim);
    ids.iter().for_each(|&i| out.extend_from_slice(&table[i * dim..(i + 1) * dim]));
    out
}

impl CustomOp2 for Embedding {
    fn name(&self) -> &'static str {
        "embedding"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let dim = l1.dims()[1];
        let ids = cpu_ids(s2, l2, self.vocab)?;
        let out = match s1 {
            CpuStorage::F32(v) => CpuStorage::F32(gather(contiguous(v, l1, "embedding")?, dim, &ids)),
            CpuStorage::F16(v) => CpuStorage::F16(gather(contiguous(v, l1, "embedding")?, dim, &ids)),
            CpuStorage::BF16(v) => CpuStorage::BF16(gather(contiguous(v, l1, "embedding")?, dim, &ids)),
            other => candle_core::bail!("embedding: the table must be f32, f16 or bf16, not {:?}", other.dtype()),
        };
        Ok((out, Shape::from_dims(&[ids.len(), dim])))
    }

    #[cfg(feature = "ascend")]
    fn custom_fwd(
        &self,
        s1: &dyn DynBackendStorage,
        l1: &Layout,
        s2: &dyn DynBackendStorage,
        l2: &Layout,
    ) -> candle_core::Result<(BoxStorage, Shape)> {
        let out = fused::embedding(s1, l1, s2, l2)?;
        Ok((out, Shape::from_dims(&[l2.shape().elem_count(), l1.dims()[1]])))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let out = s1.index_select(s2, l1, l2, 0)?;
        Ok((out, Shape::from_dims(&[l2.shape().elem_count(), l1.dims()[1]])))
    }

    fn bwd(
        &self,
        weight: &Tensor,
        ids: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        if self.body == Body::Cuda {
            // One-hot rows (tokens, vocab) against targets where the padding id matches nothing.
            let targets: Vec<u32> =
                (0..self.vocab).map(|v| if Some(v) == self.padding_idx { u32::MAX } else { v as u32 }).collect();
            let targets = Tensor::from_vec(targets, (1, self.vocab), weight.device())?;
            let one_hot = ids.to_dtype(DType::U32)?.unsqueeze(1)?.broadcast_eq(&targets)?.to_dtype(grad.dtype())?;
            return Ok((Some(one_hot.t()?.matmul(&grad.contiguous()?)?.to_dtype(weight.dtype())?), None));
        }
        let op = EmbeddingGrad { vocab: self.vocab, padding_idx: self.padding_idx };
        Ok((Some(ids.apply_op2_no_bwd(&grad.contiguous()?, &op)?), None))
    }
}

/// The table's gradient (vocab, dim) from the ids (first operand) and the rows' gradient.
struct EmbeddingGrad {
    vocab: usize,
    padding_idx: Option<usize>,
}

impl CustomOp2 for EmbeddingGrad {
    fn name(&self) -> &'static str {
        "embedding_grad"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let ids = cpu_ids(s1, l1, self.vocab)?;
        let dim = l2.dims()[1];
        let g = f32_vec(s2, l2, "embedding_grad")?;
        // Bucket the rows by id, then each table row sums its own bucket: parallel, no races.
        let mut buckets = vec![Vec::new(); self.vocab];
        ids.iter().enumerate().for_each(|(r, &i)| buckets[i].push(r));
        if let Some(pad) = self.padding_idx {
            buckets[pad].clear();
        }
        let mut out = vec![0f32; self.vocab * dim];
        out.par_chunks_mut(dim).zip(&buckets).for_each(|(row, rows)| {
            for &r in rows {
                row.iter_mut().zip(&g[r * dim..(r + 1) * dim]).for_each(|(o, v)| *o += v);
            }
        });
        Ok((store_like(s2, out), Shape::from_dims(&[self.vocab, dim])))
    }

    #[cfg(feature = "ascend")]
    fn custom_fwd(
        &self,
        s1: &dyn DynBackendStorage,
        l1: &Layout,
        s2: &dyn DynBackendStorage,
        l2: &Layout,
    ) -> candle_core::Result<(BoxStorage, Shape)> {
        let out = fused::embedding_grad(s2, l2, s1, l1, self.vocab, self.padding_idx)?;
        Ok((out, Shape::from_dims(&[self.vocab, l2.dims()[1]])))
    }
}

#[cfg(test)]
mod tests;
