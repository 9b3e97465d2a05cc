//! Fused attention: `aclnnFlashAttentionScore` and its gradient (ops-transformer
//! `attention/flash_attention_score[_grad]`), in the BSH or BNSD layout, sparseMode 0 with no
//! band, as torch_npu's `npu_fusion_attention` calls them; the keys are masked by a UINT8 mask, or
//! by a per-key bias (`realShiftOptional`, added to q·kᵀ before the scale).
use crate::soc::AclnnOp;
use std::sync::Arc;

use super::{launch_cube, phase1, View};
use crate::error::Result;
use crate::ffi::types::*;
use crate::runtime::device::DeviceInner;
use crate::runtime::time_model::CubeWork;

type T = AclTensorPtr;
type C = *const std::ffi::c_char;

/// preTokens and nextTokens for "no band" (torch_npu's default, i32::MAX).
const NO_BAND: i64 = 2_147_483_647;

/// The operands' layout: (batch, seq, heads·dim) or (batch, heads, seq, dim).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlashLayout {
    Bsh,
    Bnsd,
}

impl FlashLayout {
    fn name(self) -> &'static std::ffi::CStr {
        match self {
            Self::Bsh => c"BSH",
            Self::Bnsd => c"BNSD",
        }
    }
}

/// What forward and backward share: the mask of masked (1) positions, (B, 1, S1, S2) or
/// (B, N, S1, S2) UINT8, or the bias `pse` added to the scores before the scale, (B, N, 1, S2)
/// or (B, N, S1, S2) in q's dtype (either or both); the dropout bits with their keep
/// probability (1 without); the layout, the head count and the score scale.
#[derive(Clone, Copy)]
pub struct FlashArgs<'a> {
    pub layout: FlashLayout,
    pub atten_mask: Option<&'a View>,
    pub pse: Option<&'a View>,
    pub drop_mask: Option<&'a View>,
    pub keep: f64,
    pub heads: i64,
    pub scale: f64,
}

impl FlashArgs<'_> {
    /// The products of attention over `q` and `k` in this layout: (batch × heads) products of
    /// (S1 × D)·(D × S2), `count` times.
    fn cube(&self, q: &View, k: &View, count: u64) -> CubeWork {
        let heads = self.heads.max(1) as u64;
        let dims = |v: &View| v.dims.iter().map(|&d| d.max(0) as u64).collect::<Vec<u64>>();
        let (q, k) = (dims(q), dims(k));
        let (batch, s1, s2, d) = match (self.layout, q.as_slice(), k.as_slice()) {
            (FlashLayout::Bnsd, [b, n, s1, d], [_, _, s2, _]) => (b * n, *s1, *s2, *d),
            (FlashLayout::Bsh, [b, s1, h], [_, s2, _]) => (b * heads, *s1, *s2, h / heads),
            _ => (0, 0, 0, 0),
        };
        CubeWork { batch, m: s1, n: s2, k: d, count }
    }

    fn drop_ptr(&self, dev: &Arc<DeviceInner>) -> Result<Option<super::AclObject>> {
        self.drop_mask.map(|m| m.acl(dev)).transpose()
    }

    /// The optional operands' aclTensors: (mask, pse).
    fn keys(&self, dev: &Arc<DeviceInner>) -> Result<(Option<super::AclObject>, Option<super::AclObject>)> {
        Ok((self.atten_mask.map(|m| m.acl(dev)).transpose()?, self.pse.map(|p| p.acl(dev)).transpose()?))
    }

    /// The mask and pse among the operands (for the launch's bytes).
    fn key_views(&self) -> impl Iterator<Item = &View> {
        self.atten_mask.into_iter().chain(self.pse)
    }

    /// The batch size when a (1, N, S1, S2) mask with N > 1 serves a batch of several
    /// sequences, which takes a launch per sequence; `None` for one launch. The dropout bits
    /// are not split: a per-sequence mask with dropout is refused.
    fn per_sequence(&self, q: &View) -> Result<Option<i64>> {
        let batch = q.dims.first().copied().unwrap_or(1);
        let split =
            matches!(self.atten_mask, Some(m) if m.dims.len() == 4 && m.dims[0] == 1 && m.dims[1] > 1) && batch > 1;
        if split && self.drop_mask.is_some() {
            return Err(crate::error::AscendError::Unsupported {
                op: "aclnnFlashAttentionScore",
                detail: "a per-head mask of one sequence for a batch, with dropout".into(),
            });
        }
        Ok(split.then_some(batch))
    }

    /// The bias of sequence `i`'s launch: a bias of the whole batch is split with it; one of a
    /// single sequence serves each.
    fn sequence_bias(&self, batch: i64, i: i64) -> Option<View> {
        self.pse.map(|p| if p.dims.first() == Some(&batch) { batch_entry(p, i) } else { p.clone() })
    }
}

/// Batch entry `i` of `view`: its first dimension narrowed to one.
fn batch_entry(view: &View, i: i64) -> View {
    let mut entry = view.clone();
    entry.offset += i * entry.strides[0];
    entry.dims[0] = 1;
    entry
}

fn ptr_or_null(t: &Option<super::AclObject>) -> T {
    t.as_ref().map_or(std::ptr::null_mut(), |t| t.ptr())
}

/// `out = softmax(scale·q·kᵀ, masked)·(dropout / keep)·v`, with the row maxima and sums
/// (B, N, S1, 8) FLOAT for the backward pass. A per-head mask of one sequence, (1, N, S1, S2),
/// serves every sequence: the documented mask shapes broadcast over the batch only without the
/// heads ([1,1,S1,S2]), so each sequence gets its own launch with it.
pub fn flash_attention(
    dev: &Arc<DeviceInner>,
    (q, k, v): (&View, &View, &View),
    args: &FlashArgs,
    (softmax_max, softmax_sum): (&View, &View),
    out: &View,
) -> Result<()> {
    let Some(batch) = args.per_sequence(q)? else {
        return flash_attention_launch(dev, (q, k, v), args, (softmax_max, softmax_sum), out);
    };
    for i in 0..batch {
        let e = |v: &View| batch_entry(v, i);
        let pse = args.sequence_bias(batch, i);
        let entry = FlashArgs { pse: pse.as_ref(), ..*args };
        flash_attention_launch(dev, (&e(q), &e(k), &e(v)), &entry, (&e(softmax_max), &e(softmax_sum)), &e(out))?;
    }
    Ok(())
}

fn flash_attention_launch(
    dev: &Arc<DeviceInner>,
    (q, k, v): (&View, &View, &View),
    args: &FlashArgs,
    (softmax_max, softmax_sum): (&View, &View),
    out: &View,
) -> Result<()> {
    let (tq, tk, tv) = (q.acl(dev)?, k.acl(dev)?, v.acl(dev)?);
    let (tm, tp) = args.keys(dev)?;
    let (tmax, tsum, to) = (softmax_max.acl(dev)?, softmax_sum.acl(dev)?, out.acl(dev)?);
    let drop = args.drop_ptr(dev)?;
    let td = drop.as_ref().map_or(std::ptr::null_mut(), |d| d.ptr());
    let null: T = std::ptr::null_mut();
    let layout = args.layout.name();
    // q·kᵀ and p·v.
    let work = args.cube(q, k, 2);
    let views: Vec<&View> =
        [q, k, v].into_iter().chain(args.key_views()).chain([softmax_max, softmax_sum, out]).collect();
    launch_cube(dev, AclnnOp::FlashAttentionScore, &views, work, |addr, ws, ex| {
        phase1!(
            addr,
            ws,
            ex,
            fn(T, T, T, T, T, T, T, AclIntArrayPtr, f64, f64, i64, i64, i64, C, i64, i64, T, T, T, T),
            tq.ptr(),
            tk.ptr(),
            tv.ptr(),
            ptr_or_null(&tp),
            td,
            null,
            ptr_or_null(&tm),
            std::ptr::null_mut(),
            args.scale,
            args.keep,
            NO_BAND,
            NO_BAND,
            args.heads,
            layout.as_ptr(),
            0i64,
            0i64,
            tmax.ptr(),
            tsum.ptr(),
            null,
            to.ptr()
        )
    })
}

/// dq, dk, dv of [`flash_attention`] from the output's gradient `dy`, the forward's output and
/// its row statistics (a launch per sequence as there).
pub fn flash_attention_grad(
    dev: &Arc<DeviceInner>,
    (q, k, v): (&View, &View, &View),
    dy: &View,
    out: &View,
    args: &FlashArgs,
    (softmax_max, softmax_sum): (&View, &View),
    (dq, dk, dv): (&View, &View, &View),
) -> Result<()> {
    let Some(batch) = args.per_sequence(q)? else {
        return flash_attention_grad_launch(dev, (q, k, v), dy, out, args, (softmax_max, softmax_sum), (dq, dk, dv));
    };
    for i in 0..batch {
        let e = |v: &View| batch_entry(v, i);
        let pse = args.sequence_bias(batch, i);
        let entry = FlashArgs { pse: pse.as_ref(), ..*args };
        flash_attention_grad_launch(
            dev,
            (&e(q), &e(k), &e(v)),
            &e(dy),
            &e(out),
            &entry,
            (&e(softmax_max), &e(softmax_sum)),
            (&e(dq), &e(dk), &e(dv)),
        )?;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn flash_attention_grad_launch(
    dev: &Arc<DeviceInner>,
    (q, k, v): (&View, &View, &View),
    dy: &View,
    out: &View,
    args: &FlashArgs,
    (softmax_max, softmax_sum): (&View, &View),
    (dq, dk, dv): (&View, &View, &View),
) -> Result<()> {
    let (tq, tk, tv, tdy, to) = (q.acl(dev)?, k.acl(dev)?, v.acl(dev)?, dy.acl(dev)?, out.acl(dev)?);
    let (tm, tp) = args.keys(dev)?;
    let (tmax, tsum) = (softmax_max.acl(dev)?, softmax_sum.acl(dev)?);
    let (tdq, tdk, tdv) = (dq.acl(dev)?, dk.acl(dev)?, dv.acl(dev)?);
    let drop = args.drop_ptr(dev)?;
    let td = drop.as_ref().map_or(std::ptr::null_mut(), |d| d.ptr());
    let null: T = std::ptr::null_mut();
    let layout = args.layout.name();
    let views: Vec<&View> =
        [q, k, v, dy, out].into_iter().chain(args.key_views()).chain([softmax_max, softmax_sum, dq, dk, dv]).collect();
    // q·kᵀ recomputed, then dv, dp, dq and dk.
    let work = args.cube(q, k, 5);
    launch_cube(dev, AclnnOp::FlashAttentionScoreGrad, &views, work, |addr, ws, ex| {
        phase1!(
            addr,
            ws,
            ex,
            fn(T, T, T, T, T, T, T, T, T, T, T, T, AclIntArrayPtr, f64, f64, i64, i64, i64, C, i64, i64, T, T, T, T),
            tq.ptr(),
            tk.ptr(),
            tv.ptr(),
            tdy.ptr(),
            ptr_or_null(&tp),
            td,
            null,
            ptr_or_null(&tm),
            tmax.ptr(),
            tsum.ptr(),
            null,
            to.ptr(),
            std::ptr::null_mut(),
            args.scale,
            args.keep,
            NO_BAND,
            NO_BAND,
            args.heads,
            layout.as_ptr(),
            0i64,
            0i64,
            tdq.ptr(),
            tdk.ptr(),
            tdv.ptr(),
            null
        )
    })
}

/// The fused bodies built on these launches, for op types outside this crate (re-exported as
/// `candle_ascend::fused`).
pub mod fused {
    use crate::fused::prelude::*;

    /// What an Ascend flash attention forward pass keeps for its backward pass: the row maxima and
    /// sums (B, N, S1, 8) FLOAT, the dropout bits if any, the layout and (B, N, S1).
    pub struct FlashSaved {
        softmax_max: AscendStorage,
        softmax_sum: AscendStorage,
        drop_mask: Option<AscendStorage>,
        layout: super::FlashLayout,
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
    fn flash_geometry(
        layout: super::FlashLayout,
        heads: usize,
        ql: &Layout,
        kl: &Layout,
    ) -> candle_core::Result<[usize; 4]> {
        match (layout, ql.dims(), kl.dims()) {
            (super::FlashLayout::Bsh, [b, s1, _], [_, s2, _]) => Ok([*b, heads, *s1, *s2]),
            (super::FlashLayout::Bnsd, [b, n, s1, _], [_, _, s2, _]) => Ok([*b, *n, *s1, *s2]),
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
    fn flash_layout(ql: &Layout) -> candle_core::Result<super::FlashLayout> {
        match ql.dims().len() {
            3 => Ok(super::FlashLayout::Bsh),
            4 => Ok(super::FlashLayout::Bnsd),
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
}
