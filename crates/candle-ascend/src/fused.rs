//! The launch API for fused ops that live outside this crate (an op type with a CPU body and an
//! Ascend body, in the style of candle-nn's `ops.rs`). The op asks [`runs_natively`] whether the
//! part has the operator for its dtype (these functions do not check), then calls the function,
//! which takes Ascend storages with their layouts and launches the operator, with the casts,
//! reductions or mask generation its contract needs beside it.
use crate::soc::AclnnOp;
use std::sync::Arc;

use candle_core::custom_backend::{BoxStorage, DynBackendStorage};
use candle_core::{DType, Layout, Shape, Storage, Tensor};

use crate::ops::{acl_dtype, View};
use crate::runtime::device::DeviceInner;
use crate::storage::AscendStorage;

pub use crate::ops::optim::AdamWHyper;

/// Whether `op` runs natively for `dtype` on `device` (false on devices other than Ascend parts).
pub fn runs_natively(device: &candle_core::Device, op: AclnnOp, dtype: DType) -> bool {
    match (crate::ascend_device(device), acl_dtype(dtype)) {
        (Some(dev), Ok(acl)) => dev.soc().runs(op, acl),
        _ => false,
    }
}

/// The device and view of a tensor on an Ascend device. The view points into the tensor's
/// buffer, which the caller's tensor keeps alive.
fn tensor_view(t: &Tensor) -> candle_core::Result<(Arc<DeviceInner>, View)> {
    with_storage(t, |ascend, layout| Ok((ascend.dev().clone(), ascend.view(layout)?)))
}

/// `f` of a tensor's Ascend storage and layout, under the storage's read lock.
fn with_storage<R>(
    t: &Tensor,
    f: impl FnOnce(&AscendStorage, &Layout) -> candle_core::Result<R>,
) -> candle_core::Result<R> {
    let (storage, layout) = t.storage_and_layout();
    let Storage::Custom(custom) = &*storage else {
        candle_core::bail!("expected a tensor on an Ascend device, found one on {}", t.device().location())
    };
    f(ascend_storage(custom.as_ref())?, layout)
}

/// AdamW in place through `aclnnApplyAdamWV2`: `var`, `m` and `v` are overwritten. `step` is a
/// one-element FLOAT tensor holding t − 1. All five tensors live on one Ascend device.
pub fn apply_adamw(
    var: &Tensor,
    m: &Tensor,
    v: &Tensor,
    grad: &Tensor,
    step: &Tensor,
    hyper: AdamWHyper,
) -> candle_core::Result<()> {
    let (dev, var) = tensor_view(var)?;
    let (m, v, grad, step) = (tensor_view(m)?.1, tensor_view(v)?.1, tensor_view(grad)?.1, tensor_view(step)?.1);
    Ok(crate::ops::optim::apply_adamw_v2(&dev, &var, &m, &v, &grad, &step, hyper)?)
}

fn ascend_storage(s: &dyn DynBackendStorage) -> candle_core::Result<&AscendStorage> {
    match s.as_any().downcast_ref::<AscendStorage>() {
        Some(a) => Ok(a),
        None => {
            candle_core::bail!("expected a storage on an Ascend device, found one on {}", s.dyn_device().dyn_location())
        }
    }
}

/// The last dimension of a layout (the normalized one), at least 1.
fn hidden_of(l: &Layout) -> usize {
    l.dims().last().copied().unwrap_or(1).max(1)
}

/// The row statistics of a LayerNorm forward pass (mean and 1/σ, f32, one per row), kept for
/// its backward pass so that it need not run the forward again.
#[derive(Clone)]
pub struct LayerNormStats(Arc<(AscendStorage, AscendStorage)>);

/// The Ascend body of a LayerNorm op over the last dimension of `x` (`aclnnLayerNorm`), with
/// weight and bias of that size: the result in x's dtype and shape, and, when asked, the row
/// statistics for [`layer_norm_grads`].
#[allow(clippy::too_many_arguments)]
pub fn layer_norm(
    x: &dyn DynBackendStorage,
    xl: &Layout,
    w: &dyn DynBackendStorage,
    wl: &Layout,
    b: &dyn DynBackendStorage,
    bl: &Layout,
    eps: f64,
    keep_stats: bool,
) -> candle_core::Result<(BoxStorage, Shape, Option<LayerNormStats>)> {
    let xs = ascend_storage(x)?;
    let (ws, bs) = (ascend_storage(w)?, ascend_storage(b)?);
    let hidden = hidden_of(xl);
    let out = AscendStorage::empty(&xs.device, xl.shape().elem_count(), xs.dtype)?;
    let (xv, wv, bv, ov) = (xs.view(xl)?, ws.view(wl)?, bs.view(bl)?, out.contiguous(xl.shape())?);
    let normalized = [hidden as i64];
    if !keep_stats {
        crate::ops::norm::layer_norm(xs.dev(), &xv, &normalized, &wv, &bv, eps, &ov, None)?;
        return Ok((Box::new(out), xl.shape().clone(), None));
    }
    let rows = xl.shape().elem_count() / hidden;
    let rows_shape = Shape::from_dims(&[rows, 1]);
    let (mean, rstd) =
        (AscendStorage::empty(&xs.device, rows, DType::F32)?, AscendStorage::empty(&xs.device, rows, DType::F32)?);
    let (mv, rv) = (mean.contiguous(&rows_shape)?, rstd.contiguous(&rows_shape)?);
    crate::ops::norm::layer_norm(xs.dev(), &xv, &normalized, &wv, &bv, eps, &ov, Some((&mv, &rv)))?;
    Ok((Box::new(out), xl.shape().clone(), Some(LayerNormStats(Arc::new((mean, rstd))))))
}

/// The normalized output of an Ascend [`add_layer_norm`], waiting for the LayerNorm op that
/// takes the sum as its input, with the row statistics for its backward pass.
pub struct AddLayerNormOut {
    out: AscendStorage,
    stats: LayerNormStats,
}

impl AddLayerNormOut {
    /// The normalized output as an op's result, and the statistics.
    pub fn into_parts(self) -> (BoxStorage, LayerNormStats) {
        (Box::new(self.out), self.stats)
    }
}

/// The Ascend body of `LayerNorm(x1 + x2)` over the last dimension (`aclnnAddLayerNorm`): the
/// sum x1 + x2 as the result, and the normalized output with its statistics for the LayerNorm
/// op applied to that sum. x1 and x2 share a shape; w and b are (hidden,).
pub fn add_layer_norm(
    x1: &dyn DynBackendStorage,
    l1: &Layout,
    x2: &dyn DynBackendStorage,
    l2: &Layout,
    w: &Tensor,
    b: &Tensor,
    eps: f64,
) -> candle_core::Result<(BoxStorage, AddLayerNormOut)> {
    let (s1, s2) = (ascend_storage(x1)?, ascend_storage(x2)?);
    let ((_, wv), (_, bv)) = (tensor_view(w)?, tensor_view(b)?);
    let dev = &s1.device;
    let shape = l1.shape();
    let rows = shape.elem_count() / hidden_of(l1);
    let mut stat_dims = l1.dims().to_vec();
    if let Some(last) = stat_dims.last_mut() {
        *last = 1;
    }
    let stat_shape = Shape::from(stat_dims);
    let (mean, rstd) = (AscendStorage::empty(dev, rows, DType::F32)?, AscendStorage::empty(dev, rows, DType::F32)?);
    let (mv, rv) = (mean.contiguous(&stat_shape)?, rstd.contiguous(&stat_shape)?);
    let ((sum, sv), (out, ov)) = (output_like(s1, shape)?, output_like(s1, shape)?);
    crate::ops::norm::add_layer_norm(s1.dev(), &s1.view(l1)?, &s2.view(l2)?, &wv, &bv, eps, &ov, (&mv, &rv), &sv)?;
    let stats = LayerNormStats(Arc::new((mean, rstd)));
    Ok((Box::new(sum), AddLayerNormOut { out, stats }))
}

/// The Ascend body of LayerNorm's backward: `[dx | dw | db]` as one buffer of
/// `numel(x) + 2·hidden` elements in x's dtype, which w must share (aclnnLayerNormBackward.md:
/// gradInputOut has the input's dtype, gradWeightOut and gradBiasOut the weight's), from the
/// forward pass's statistics, in one `aclnnLayerNormBackward` launch.
pub fn layer_norm_grads(
    x: &dyn DynBackendStorage,
    xl: &Layout,
    w: &dyn DynBackendStorage,
    wl: &Layout,
    grad: &dyn DynBackendStorage,
    gl: &Layout,
    stats: &LayerNormStats,
) -> candle_core::Result<(BoxStorage, Shape)> {
    let (xs, ws, gs) = (ascend_storage(x)?, ascend_storage(w)?, ascend_storage(grad)?);
    if ws.dtype != xs.dtype {
        candle_core::bail!(
            "layer_norm_grads: a {:?} weight for a {:?} input (they share one buffer)",
            ws.dtype,
            xs.dtype
        )
    }
    let (n, hidden) = (xl.shape().elem_count(), hidden_of(xl));
    let rows_shape = Shape::from_dims(&[n / hidden, 1]);
    let (mean, rstd) = &*stats.0;
    let (mv, rv) = (mean.contiguous(&rows_shape)?, rstd.contiguous(&rows_shape)?);
    let packed = AscendStorage::empty(&xs.device, n + 2 * hidden, xs.dtype)?;
    let piece = |offset: usize, shape: &Shape| -> crate::error::Result<View> {
        let mut v = packed.contiguous(shape)?;
        v.offset = offset as i64;
        Ok(v)
    };
    let (dx, dw, db) = (
        piece(0, xl.shape())?,
        piece(n, &Shape::from_dims(&[hidden]))?,
        piece(n + hidden, &Shape::from_dims(&[hidden]))?,
    );
    let normalized = [hidden as i64];
    let (xv, wv) = (xs.view(xl)?, ws.view(wl)?);
    crate::ops::norm::layer_norm_backward(xs.dev(), &gs.view(gl)?, &xv, &normalized, &mv, &rv, &wv, &dx, &dw, &db)?;
    Ok((Box::new(packed), Shape::from_dims(&[n + 2 * hidden])))
}

/// The Ascend body of a linear layer `x·Wᵀ + b`, x (…, in) contiguous, W (out, in), b (out):
/// one `aclnnAddmm` that reads W transposed through its strides and adds the broadcast bias
/// (torch_npu's op-plugin calls the same operator for `addmm`).
#[allow(clippy::too_many_arguments)]
pub fn linear(
    x: &dyn DynBackendStorage,
    xl: &Layout,
    w: &dyn DynBackendStorage,
    wl: &Layout,
    b: &dyn DynBackendStorage,
    bl: &Layout,
) -> candle_core::Result<(BoxStorage, Shape)> {
    let (xs, ws, bs) = (ascend_storage(x)?, ascend_storage(w)?, ascend_storage(b)?);
    let in_f = hidden_of(xl);
    let rows = xl.shape().elem_count() / in_f;
    let out_f = match (wl.dims(), bl.dims()) {
        ([o, i], [bo]) if *i == in_f && bo == o && wl.is_contiguous() && xl.is_contiguous() => *o,
        _ => candle_core::bail!(
            "linear: input {:?}, weight {:?} and bias {:?} must fit, x and W contiguous",
            xl.dims(),
            wl.dims(),
            bl.dims()
        ),
    };
    let mut a = xs.view(xl)?;
    (a.dims, a.strides) = (vec![rows as i64, in_f as i64], vec![in_f as i64, 1]);
    let mut wt = ws.view(wl)?;
    (wt.dims, wt.strides) = (vec![in_f as i64, out_f as i64], vec![1, in_f as i64]);
    let (out, ov) = output_like(xs, &Shape::from_dims(&[rows, out_f]))?;
    crate::ops::matmul::addmm(xs.dev(), &bs.view(bl)?, &a, &wt, 1.0, 1.0, &ov)?;
    let mut dims = xl.dims().to_vec();
    if let Some(last) = dims.last_mut() {
        *last = out_f;
    }
    Ok((Box::new(out), Shape::from(dims)))
}

/// The Ascend body of `acc + a·b` for acc (rows, n), a (rows, k) and b (k, n), all
/// contiguous: one `aclnnAddmm` with acc as its self, so that a product adds into a sum (a
/// gradient into the one already accumulated) without a pass of its own.
pub fn matmul_add(
    acc: &dyn DynBackendStorage,
    accl: &Layout,
    a: &dyn DynBackendStorage,
    al: &Layout,
    b: &dyn DynBackendStorage,
    bl: &Layout,
) -> candle_core::Result<(BoxStorage, Shape)> {
    let (cs, as_, bs) = (ascend_storage(acc)?, ascend_storage(a)?, ascend_storage(b)?);
    match (accl.dims(), al.dims(), bl.dims()) {
        ([r, n], [ra, k], [kb, nb])
            if r == ra && k == kb && n == nb && [accl, al, bl].iter().all(|l| l.is_contiguous()) => {}
        (c, a, b) => candle_core::bail!("matmul_add: {c:?} + {a:?}·{b:?} do not fit, or are not contiguous"),
    }
    let (out, ov) = output_like(cs, accl.shape())?;
    crate::ops::matmul::addmm(cs.dev(), &cs.view(accl)?, &as_.view(al)?, &bs.view(bl)?, 1.0, 1.0, &ov)?;
    Ok((Box::new(out), accl.shape().clone()))
}

/// The Ascend body of an embedding lookup: the rows of the table `w` (vocab, dim) at the 1-D
/// integer ids, (ids, dim) in the table's dtype (`aclnnEmbedding`).
pub fn embedding(
    w: &dyn DynBackendStorage,
    wl: &Layout,
    ids: &dyn DynBackendStorage,
    il: &Layout,
) -> candle_core::Result<BoxStorage> {
    let (ws, is) = (ascend_storage(w)?, ascend_storage(ids)?);
    let (iv, _cast) = is.index_view(il)?;
    let (out, ov) = output_like(ws, &Shape::from_dims(&[il.shape().elem_count(), hidden_of(wl)]))?;
    crate::ops::index::embedding(ws.dev(), &ws.view(wl)?, &iv, &ov)?;
    Ok(Box::new(out))
}

/// The Ascend body of the embedding's backward: the table's gradient (`vocab`, dim) in the
/// dtype of `grad` (ids, dim), with no gradient for the row `padding_idx`
/// (`aclnnEmbeddingDenseBackward`).
pub fn embedding_grad(
    grad: &dyn DynBackendStorage,
    gl: &Layout,
    ids: &dyn DynBackendStorage,
    il: &Layout,
    vocab: usize,
    padding_idx: Option<usize>,
) -> candle_core::Result<BoxStorage> {
    let (gs, is) = (ascend_storage(grad)?, ascend_storage(ids)?);
    let (iv, _cast) = is.index_view(il)?;
    let (out, ov) = output_like(gs, &Shape::from_dims(&[vocab, hidden_of(gl)]))?;
    let padding = padding_idx.map_or(crate::ops::index::NO_PADDING, |p| p as u64);
    crate::ops::index::embedding_dense_backward(gs.dev(), &gs.view(gl)?, &iv, vocab as u64, padding, &ov)?;
    Ok(Box::new(out))
}

/// The bit mask of an Ascend dropout forward pass, kept for its backward pass.
#[derive(Clone)]
pub struct DropoutMask(Arc<AscendStorage>);

/// The Ascend body of dropout with drop probability `p`: `aclnnDropoutGenMaskV2` draws the bit
/// mask keyed by (seed, offset), `aclnnDropoutDoMask` applies it (as torch_npu's `_npu_dropout`).
/// The result in x's dtype and shape, and the mask for [`dropout_grad`].
pub fn dropout(
    x: &dyn DynBackendStorage,
    xl: &Layout,
    p: f64,
    seed: u64,
    offset: u64,
) -> candle_core::Result<(BoxStorage, DropoutMask)> {
    let xs = ascend_storage(x)?;
    let bytes = crate::ops::random::dropout_mask_bytes(xl.shape().elem_count());
    let mask = AscendStorage::empty(&xs.device, bytes, DType::U8)?;
    let mv = mask.contiguous(&Shape::from_dims(&[bytes]))?;
    crate::ops::random::dropout_gen_mask(xs.dev(), xl.dims(), p, seed, offset, acl_dtype(xs.dtype)?, &mv)?;
    let (out, ov) = output_like(xs, xl.shape())?;
    crate::ops::random::dropout_do_mask(xs.dev(), &xs.view(xl)?, &mv, p, &ov)?;
    Ok((Box::new(out), DropoutMask(Arc::new(mask))))
}

/// The Ascend body of dropout's backward: the incoming gradient through the forward pass's mask
/// (`aclnnDropoutDoMask`, as torch_npu's `npu_dropout_backward`), in g's dtype.
pub fn dropout_grad(
    g: &dyn DynBackendStorage,
    gl: &Layout,
    mask: &DropoutMask,
    p: f64,
) -> candle_core::Result<BoxStorage> {
    let gs = ascend_storage(g)?;
    let mv = mask.0.contiguous(&Shape::from_dims(&[mask.0.len]))?;
    let (out, ov) = output_like(gs, gl.shape())?;
    crate::ops::random::dropout_do_mask(gs.dev(), &gs.view(gl)?, &mv, p, &ov)?;
    Ok(Box::new(out))
}

use crate::ops::attention::FlashLayout;

/// What an Ascend flash attention forward pass keeps for its backward pass: the row maxima and
/// sums (B, N, S1, 8) FLOAT, the dropout bits if any, the layout and (B, N, S1).
pub struct FlashSaved {
    softmax_max: AscendStorage,
    softmax_sum: AscendStorage,
    drop_mask: Option<AscendStorage>,
    layout: FlashLayout,
    dims: [usize; 3],
}

impl FlashSaved {
    fn stats(&self) -> crate::error::Result<(View, View)> {
        let [b, n, s] = self.dims;
        let shape = Shape::from_dims(&[b, n, s, 8]);
        Ok((self.softmax_max.contiguous(&shape)?, self.softmax_sum.contiguous(&shape)?))
    }

    fn drop_view(&self) -> crate::error::Result<Option<View>> {
        self.drop_mask.as_ref().map(|m| m.contiguous(&Shape::from_dims(&[m.len]))).transpose()
    }
}

/// (B, N, S1, S2) of a flash attention call: BSH operands are (batch, seq, heads·dim) with
/// `heads` given, BNSD operands (batch, heads, seq, dim).
fn flash_geometry(layout: FlashLayout, heads: usize, ql: &Layout, kl: &Layout) -> candle_core::Result<[usize; 4]> {
    match (layout, ql.dims(), kl.dims()) {
        (FlashLayout::Bsh, [b, s1, _], [_, s2, _]) => Ok([*b, heads, *s1, *s2]),
        (FlashLayout::Bnsd, [b, n, s1, _], [_, _, s2, _]) => Ok([*b, *n, *s1, *s2]),
        (layout, q, k) => candle_core::bail!("flash attention: {layout:?} operands, got query {q:?} and key {k:?}"),
    }
}

/// (mask, pse) views of flash attention's key operands.
fn key_views(mask: Option<&Tensor>, bias: Option<&Tensor>) -> candle_core::Result<(Option<View>, Option<View>)> {
    let view = |t: Option<&Tensor>| t.map(|t| tensor_view(t).map(|(_, v)| v)).transpose();
    Ok((view(mask)?, view(bias)?))
}

/// The layout of flash attention's operands, from the query's rank: (batch, seq, heads·dim)
/// is BSH, (batch, heads, seq, dim) BNSD.
fn flash_layout(ql: &Layout) -> candle_core::Result<FlashLayout> {
    match ql.dims().len() {
        3 => Ok(FlashLayout::Bsh),
        4 => Ok(FlashLayout::Bnsd),
        rank => candle_core::bail!("flash attention: a rank-3 (BSH) or rank-4 (BNSD) query, got rank {rank}"),
    }
}

/// The Ascend body of attention over q, k, v, (batch, seq, heads·dim) with `heads` heads or
/// (batch, heads, seq, dim): `softmax(scale·(q·kᵀ + bias), masked)·v` in one
/// `aclnnFlashAttentionScore`. `mask` (`attenMask`: (B, 1, S1, S2) or (B, N, S1, S2) UINT8, 1
/// where a key is masked; or (1, N, S1, S2) for every sequence, a launch per sequence) leaves
/// keys out; `bias` (`realShiftOptional`: (B, N, 1, S2) or (B, N, S1, S2) in q's dtype) adds
/// to q·kᵀ before the scale, and the documented formula adds it before masking. With
/// `dropout` = (p, seed, offset), one `aclnnDropoutGenMaskV2` draws the (B, N, S1, S2) bits
/// first, as torch_npu's `npu_fusion_attention` does.
#[allow(clippy::too_many_arguments)]
pub fn flash_attention(
    q: &dyn DynBackendStorage,
    ql: &Layout,
    k: &dyn DynBackendStorage,
    kl: &Layout,
    v: &dyn DynBackendStorage,
    vl: &Layout,
    (mask, bias): (Option<&Tensor>, Option<&Tensor>),
    heads: usize,
    scale: f64,
    dropout: Option<(f64, u64, u64)>,
) -> candle_core::Result<(BoxStorage, FlashSaved)> {
    let (qs, ks, vs) = (ascend_storage(q)?, ascend_storage(k)?, ascend_storage(v)?);
    let layout = flash_layout(ql)?;
    let [b, heads, s1, s2] = flash_geometry(layout, heads, ql, kl)?;
    let dev = &qs.device;
    let (mask, pse) = key_views(mask, bias)?;
    let drop_mask = match dropout {
        Some((p, seed, offset)) => {
            let bytes = crate::ops::random::dropout_mask_bytes(b * heads * s1 * s2);
            let mask = AscendStorage::empty(dev, bytes, DType::U8)?;
            let view = mask.contiguous(&Shape::from_dims(&[bytes]))?;
            crate::ops::random::dropout_gen_mask(
                qs.dev(),
                &[b, heads, s1, s2],
                p,
                seed,
                offset,
                acl_dtype(qs.dtype)?,
                &view,
            )?;
            Some(mask)
        }
        None => None,
    };
    let stats = b * heads * s1 * 8;
    let saved = FlashSaved {
        softmax_max: AscendStorage::empty(dev, stats, DType::F32)?,
        softmax_sum: AscendStorage::empty(dev, stats, DType::F32)?,
        drop_mask,
        layout,
        dims: [b, heads, s1],
    };
    let drop = saved.drop_view()?;
    let keep = dropout.map_or(1.0, |(p, _, _)| 1.0 - p);
    let args = crate::ops::attention::FlashArgs {
        layout,
        atten_mask: mask.as_ref(),
        pse: pse.as_ref(),
        drop_mask: drop.as_ref(),
        keep,
        heads: heads as i64,
        scale,
    };
    let (out, ov) = output_like(qs, ql.shape())?;
    let (smax, ssum) = saved.stats()?;
    let qkv = (&qs.view(ql)?, &ks.view(kl)?, &vs.view(vl)?);
    crate::ops::attention::flash_attention(qs.dev(), qkv, &args, (&smax, &ssum), &ov)?;
    Ok((Box::new(out), saved))
}

/// The Ascend body of flash attention's backward: `[dq | dk | dv]` packed in one buffer of q's
/// dtype, from the output's gradient `dy` and the forward's output `out`
/// (`aclnnFlashAttentionScoreGrad`); `mask` and `bias` as the forward's.
#[allow(clippy::too_many_arguments)]
pub fn flash_attention_grad(
    q: &dyn DynBackendStorage,
    ql: &Layout,
    k: &dyn DynBackendStorage,
    kl: &Layout,
    v: &dyn DynBackendStorage,
    vl: &Layout,
    dy: &Tensor,
    out: &Tensor,
    (mask, bias): (Option<&Tensor>, Option<&Tensor>),
    saved: &FlashSaved,
    scale: f64,
    keep: f64,
) -> candle_core::Result<(BoxStorage, Shape)> {
    let (qs, ks, vs) = (ascend_storage(q)?, ascend_storage(k)?, ascend_storage(v)?);
    let ((_, dyv), (_, ov)) = (tensor_view(dy)?, tensor_view(out)?);
    let (mask, pse) = key_views(mask, bias)?;
    let (nq, nk, nv) = (ql.shape().elem_count(), kl.shape().elem_count(), vl.shape().elem_count());
    let packed = AscendStorage::empty(&qs.device, nq + nk + nv, qs.dtype)?;
    let piece = |offset: usize, shape: &Shape| -> crate::error::Result<View> {
        let mut v = packed.contiguous(shape)?;
        v.offset = offset as i64;
        Ok(v)
    };
    let (dq, dk, dv) = (piece(0, ql.shape())?, piece(nq, kl.shape())?, piece(nq + nk, vl.shape())?);
    let drop = saved.drop_view()?;
    let args = crate::ops::attention::FlashArgs {
        layout: saved.layout,
        atten_mask: mask.as_ref(),
        pse: pse.as_ref(),
        drop_mask: drop.as_ref(),
        keep,
        heads: saved.dims[1] as i64,
        scale,
    };
    let (smax, ssum) = saved.stats()?;
    let qkv = (&qs.view(ql)?, &ks.view(kl)?, &vs.view(vl)?);
    crate::ops::attention::flash_attention_grad(qs.dev(), qkv, &dyv, &ov, &args, (&smax, &ssum), (&dq, &dk, &dv))?;
    Ok((Box::new(packed), Shape::from_dims(&[nq + nk + nv])))
}

/// What the Ascend body of the cross-entropy loss keeps for its backward pass: the
/// log-probabilities, the class weights (ones) and the labelled rows' total weight.
#[derive(Clone)]
pub struct CrossEntropySaved(Arc<(AscendStorage, AscendStorage, AscendStorage, Shape)>);

/// The Ascend body of the mean cross-entropy of f32 `logits` (rows, classes) against integer
/// `labels` (rows), rows labelled `ignore_index` left out: `aclnnLogSoftmax`, then
/// `aclnnNLLLoss` (mean) with unit class weights, as torch_npu passes them when the user gives
/// none. The f32 scalar loss, and what [`cross_entropy_grad`] needs.
pub fn cross_entropy(
    logits: &dyn DynBackendStorage,
    ll: &Layout,
    labels: &dyn DynBackendStorage,
    tl: &Layout,
    ignore_index: i64,
) -> candle_core::Result<(BoxStorage, CrossEntropySaved)> {
    let (xs, ts) = (ascend_storage(logits)?, ascend_storage(labels)?);
    let dev = xs.dev();
    let classes = hidden_of(ll);
    let (log_probs, lv) = output_like(xs, ll.shape())?;
    crate::ops::loss::log_softmax(dev, &xs.view(ll)?, -1, &lv)?;
    let (weight, wv) = output_like(xs, &Shape::from_dims(&[classes]))?;
    crate::ops::copy::fill(dev, &wv, 1.0)?;
    let scalar = Shape::from(());
    let ((loss, ov), (total, twv)) = (output_like(xs, &scalar)?, output_like(xs, &scalar)?);
    let mean = crate::ops::loss::REDUCTION_MEAN;
    crate::ops::loss::nll_loss(dev, &lv, &ts.view(tl)?, &wv, mean, ignore_index, &ov, &twv)?;
    Ok((Box::new(loss), CrossEntropySaved(Arc::new((log_probs, weight, total, ll.shape().clone())))))
}

/// The Ascend body of the cross-entropy's gradient with respect to the logits, from the
/// integer `labels` and the incoming scalar gradient `grad`: `aclnnNLLLossBackward`, then
/// `aclnnLogSoftmaxBackward`; f32, of the logits' shape.
pub fn cross_entropy_grad(
    labels: &dyn DynBackendStorage,
    tl: &Layout,
    grad: &dyn DynBackendStorage,
    gl: &Layout,
    saved: &CrossEntropySaved,
    ignore_index: i64,
) -> candle_core::Result<BoxStorage> {
    let (ts, gs) = (ascend_storage(labels)?, ascend_storage(grad)?);
    let (log_probs, weight, total, shape) = &*saved.0;
    let dev = log_probs.dev();
    let classes = Shape::from_dims(&[shape.dims().last().copied().unwrap_or(1)]);
    let (lv, wv, twv) =
        (log_probs.contiguous(shape)?, weight.contiguous(&classes)?, total.contiguous(&Shape::from(()))?);
    let (_d_log_probs, dv) = output_like(log_probs, shape)?;
    let mean = crate::ops::loss::REDUCTION_MEAN;
    crate::ops::loss::nll_loss_backward(dev, &gs.view(gl)?, &lv, &ts.view(tl)?, &wv, mean, ignore_index, &twv, &dv)?;
    let (out, ov) = output_like(log_probs, shape)?;
    crate::ops::loss::log_softmax_backward(dev, &dv, &lv, -1, &ov)?;
    Ok(Box::new(out))
}

/// A fresh storage like `like` (same device and dtype) for `shape`, with its contiguous view.
fn output_like(like: &AscendStorage, shape: &Shape) -> candle_core::Result<(AscendStorage, View)> {
    let out = AscendStorage::empty(&like.device, shape.elem_count(), like.dtype)?;
    let view = out.contiguous(shape)?;
    Ok((out, view))
}

/// The Ascend body of an element-wise op of one operand: a fresh output shaped and typed as `x`,
/// written by one `launch` (device, x's view, the output's view).
fn unary_body(
    x: &dyn DynBackendStorage,
    xl: &Layout,
    launch: impl FnOnce(&Arc<DeviceInner>, &View, &View) -> crate::error::Result<()>,
) -> candle_core::Result<(BoxStorage, Shape)> {
    let xs = ascend_storage(x)?;
    let (out, ov) = output_like(xs, xl.shape())?;
    launch(xs.dev(), &xs.view(xl)?, &ov)?;
    Ok((Box::new(out), xl.shape().clone()))
}

/// The Ascend body of a gradient from what the forward pass saved (`saved`: its input or its
/// output) and the incoming gradient `g`: a fresh output shaped and typed as `g`, written by one
/// `launch` (device, g's view, saved's view, the output's view).
fn grad_body(
    saved: &dyn DynBackendStorage,
    sl: &Layout,
    g: &dyn DynBackendStorage,
    gl: &Layout,
    launch: impl FnOnce(&Arc<DeviceInner>, &View, &View, &View) -> crate::error::Result<()>,
) -> candle_core::Result<(BoxStorage, Shape)> {
    let (ss, gs) = (ascend_storage(saved)?, ascend_storage(g)?);
    let (out, ov) = output_like(gs, gl.shape())?;
    launch(gs.dev(), &gs.view(gl)?, &ss.view(sl)?, &ov)?;
    Ok((Box::new(out), gl.shape().clone()))
}

/// The Ascend body of a softmax over the last dimension (`aclnnSoftmax`).
pub fn softmax_last_dim(x: &dyn DynBackendStorage, xl: &Layout) -> candle_core::Result<(BoxStorage, Shape)> {
    unary_body(x, xl, |dev, x, out| crate::ops::activation::softmax(dev, x, -1, out))
}

/// The Ascend body of the softmax gradient from its output `y` and the incoming gradient `g`
/// (`aclnnSoftmaxBackward`), in g's dtype.
pub fn softmax_last_dim_grad(
    y: &dyn DynBackendStorage,
    yl: &Layout,
    g: &dyn DynBackendStorage,
    gl: &Layout,
) -> candle_core::Result<(BoxStorage, Shape)> {
    grad_body(y, yl, g, gl, |dev, g, y, out| crate::ops::activation::softmax_backward(dev, g, y, -1, out))
}

/// The Ascend body of GELU's tanh approximation (`aclnnGeluV2`, approximate = 1).
pub fn gelu_tanh(x: &dyn DynBackendStorage, xl: &Layout) -> candle_core::Result<(BoxStorage, Shape)> {
    unary_body(x, xl, |dev, x, out| crate::ops::elementwise::gelu(dev, true, x, out))
}

/// The Ascend body of its gradient from the input `x` and the incoming gradient `g`
/// (`aclnnGeluBackwardV2`, approximate "tanh"), in g's dtype.
pub fn gelu_tanh_grad(
    x: &dyn DynBackendStorage,
    xl: &Layout,
    g: &dyn DynBackendStorage,
    gl: &Layout,
) -> candle_core::Result<(BoxStorage, Shape)> {
    grad_body(x, xl, g, gl, crate::ops::activation::gelu_tanh_backward)
}

/// A contiguous copy of `t` (any layout) in a fresh storage: the output of an op whose value
/// was computed by tensor ops before the op took it over (one `aclnnInplaceCopy`).
pub fn materialize(t: &Tensor) -> candle_core::Result<(BoxStorage, Shape)> {
    with_storage(t, |ascend, layout| {
        let (out, ov) = output_like(ascend, layout.shape())?;
        crate::ops::copy::copy_into(ascend.dev(), &ov, &ascend.view(layout)?)?;
        Ok((Box::new(out) as BoxStorage, layout.shape().clone()))
    })
}

/// `dst ← src` in dst's dtype, straight into dst's storage: one `aclnnCast` (or
/// `aclnnInplaceCopy` for equal dtypes), where `Var::set` of a cast value costs a cast and a copy.
/// Both tensors live on one Ascend device and have one shape.
pub fn assign(dst: &Tensor, src: &Tensor) -> candle_core::Result<()> {
    if dst.shape() != src.shape() {
        candle_core::bail!("assign: shapes {:?} and {:?} differ", dst.shape(), src.shape())
    }
    let ((dev, d), (_, s)) = (tensor_view(dst)?, tensor_view(src)?);
    if dst.dtype() == src.dtype() {
        Ok(crate::ops::copy::copy_into(&dev, &d, &s)?)
    } else {
        Ok(crate::ops::copy::cast(&dev, &s, &d)?)
    }
}
