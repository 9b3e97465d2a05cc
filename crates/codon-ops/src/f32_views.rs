//! Float CPU storages as f32 slices and vectors, shared by the fused CPU kernels: they
//! compute in f32 whatever the storage dtype, and return results in the operand's dtype.
use std::borrow::Cow;

use candle_core::{CpuStorage, DType, Device, Layout, Storage, Tensor};
use rayon::prelude::*;

use crate::cpu_bf16::Values;

/// The elements of a contiguous storage.
pub fn contiguous<'a, T>(v: &'a [T], l: &Layout, op: &str) -> candle_core::Result<&'a [T]> {
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&v[a..b]),
        None => candle_core::bail!("{op}: the CPU kernel takes contiguous input"),
    }
}

/// A contiguous f32 storage's elements, borrowed (no other dtype).
pub fn f32_slice<'a>(s: &'a CpuStorage, l: &Layout, op: &str) -> candle_core::Result<&'a [f32]> {
    match s {
        CpuStorage::F32(v) => contiguous(v, l, op),
        other => candle_core::bail!("{op}: expected f32, got {:?}", candle_core::backend::BackendStorage::dtype(other)),
    }
}

/// A contiguous f32 storage's elements, mutably (no other dtype).
pub fn f32_slice_mut<'a>(s: &'a mut CpuStorage, l: &Layout, op: &str) -> candle_core::Result<&'a mut [f32]> {
    match (s, l.contiguous_offsets()) {
        (CpuStorage::F32(v), Some((a, b))) => Ok(&mut v[a..b]),
        _ => candle_core::bail!("{op}: expected a contiguous f32 tensor"),
    }
}

/// An f32 CPU tensor's elements, copied; `None` for another dtype or device.
pub fn f32_values(t: &Tensor) -> Option<Vec<f32>> {
    let t = t.contiguous().ok()?;
    let (storage, layout) = t.storage_and_layout();
    match &*storage {
        Storage::Cpu(s) => f32_slice(s, layout, "f32_values").ok().map(<[f32]>::to_vec),
        _ => None,
    }
}

/// A contiguous float storage as an f32 vector.
pub fn f32_vec(s: &CpuStorage, l: &Layout, op: &str) -> candle_core::Result<Vec<f32>> {
    Ok(match s {
        CpuStorage::F32(v) => contiguous(v, l, op)?.to_vec(),
        CpuStorage::BF16(v) => contiguous(v, l, op)?.par_iter().map(|e| e.to_f32()).collect(),
        CpuStorage::F16(v) => contiguous(v, l, op)?.par_iter().map(|e| e.to_f32()).collect(),
        _ => candle_core::bail!("{op}: unsupported dtype (expected f32, f16 or bf16)"),
    })
}

/// A contiguous float storage as f32: borrowed when it is f32, converted otherwise.
pub fn cow_f32<'a>(s: &'a CpuStorage, l: &Layout, op: &str) -> candle_core::Result<Cow<'a, [f32]>> {
    Ok(match s {
        CpuStorage::F32(v) => Cow::Borrowed(contiguous(v, l, op)?),
        other => Cow::Owned(f32_vec(other, l, op)?),
    })
}

/// Two same-shaped float storages as f32 vectors.
pub fn pair_f32(
    s1: &CpuStorage,
    l1: &Layout,
    s2: &CpuStorage,
    l2: &Layout,
    op: &str,
) -> candle_core::Result<(Vec<f32>, Vec<f32>)> {
    if l1.shape() != l2.shape() {
        candle_core::bail!("{op}: shapes {:?} and {:?} differ", l1.shape(), l2.shape());
    }
    Ok((f32_vec(s1, l1, op)?, f32_vec(s2, l2, op)?))
}

/// f32 results back in the dtype of `like`.
pub fn store_like(like: &CpuStorage, v: Vec<f32>) -> CpuStorage {
    match like {
        CpuStorage::BF16(_) => CpuStorage::BF16(v.into_par_iter().map(half::bf16::from_f32).collect()),
        CpuStorage::F16(_) => CpuStorage::F16(v.into_par_iter().map(half::f16::from_f32).collect()),
        _ => CpuStorage::F32(v),
    }
}

/// Run `f` on a float CPU tensor's elements as f32: borrowed when the tensor is contiguous
/// f32, converted otherwise.
pub fn with_f32<R>(t: &Tensor, op: &str, f: impl FnOnce(&[f32]) -> R) -> candle_core::Result<R> {
    let t = t.contiguous()?;
    let (storage, layout) = t.storage_and_layout();
    match &*storage {
        Storage::Cpu(s) => Ok(f(&cow_f32(s, layout, op)?)),
        _ => candle_core::bail!("{op}: the CPU kernel got a tensor on {}", t.device().location()),
    }
}

/// Run `f` on a float CPU tensor's elements as the kernels read them: f32 and bf16 borrowed
/// (made contiguous first if need be), f16 widened to f32.
pub fn with_values<R>(t: &Tensor, op: &str, f: impl FnOnce(Values) -> R) -> candle_core::Result<R> {
    let t = t.contiguous()?;
    let (storage, layout) = t.storage_and_layout();
    match &*storage {
        Storage::Cpu(CpuStorage::BF16(v)) => Ok(f(Values::Bf16(contiguous(v, layout, op)?))),
        Storage::Cpu(s) => Ok(f(Values::F32(&cow_f32(s, layout, op)?))),
        _ => candle_core::bail!("{op}: the CPU kernel got a tensor on {}", t.device().location()),
    }
}

/// [`with_values`] for an optional tensor.
pub fn with_optional_values<R>(
    t: Option<&Tensor>,
    op: &str,
    f: impl FnOnce(Option<Values>) -> R,
) -> candle_core::Result<R> {
    match t {
        Some(t) => with_values(t, op, |v| f(Some(v))),
        None => Ok(f(None)),
    }
}

/// A CPU tensor of `dtype` from f32 values.
pub fn tensor_from_f32(v: Vec<f32>, shape: &[usize], dtype: DType) -> candle_core::Result<Tensor> {
    Tensor::from_vec(v, shape, &Device::Cpu)?.to_dtype(dtype)
}

/// The largest |a − b| over two same-shaped tensors of any float dtype (for tests and benches).
pub fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    let d = (a.to_dtype(DType::F32).unwrap() - b.to_dtype(DType::F32).unwrap()).unwrap();
    d.abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap()
}
