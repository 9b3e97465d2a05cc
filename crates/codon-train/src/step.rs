//! One optimizer step: micro-batches, gradients (reduced across ranks), loss scaling, anomaly
//! checks, clipping and the update.

use candle_core::{DType, Tensor};

use crate::buckets::Buckets;
use crate::checkpoint::TrainerState;
use crate::collective::Collective;
use crate::config::{AnomalyPolicy, TrainerConfig};
use crate::error::{Result, TrainError};
use crate::model::TrainableModel;
use crate::optim::{clip_by_norm, global_norm, AdamW, Parameters};
use crate::precision::LossScaler;
use crate::schedule::Scheduler;

/// What an optimizer step updates: AdamW and, in f16, the loss scaler.
pub(crate) struct Optimization<'a> {
    pub optimizer: AdamW,
    pub scaler: Option<LossScaler>,
    pub scheduler: &'a dyn Scheduler,
}

/// Run one optimizer step over `batches` (see [`StepBatches`]) at `state`.
pub(crate) fn optimizer_step<M: TrainableModel>(
    c: &TrainerConfig,
    model: &M,
    params: &Parameters,
    batches: StepBatches<'_, M::Batch>,
    opt: &mut Optimization<'_>,
    state: &TrainerState,
) -> Result<StepOutcome> {
    let scale = opt.scaler.map_or(1.0, |s| s.scale);
    let mut grads: Option<Vec<Tensor>> = None;
    let mut loss_sum: Option<Tensor> = None;
    let ranks = batches.comm.map_or(1, |m| m.ranks());
    let mut reduced = None;
    let mut overlapped_buckets = batches.comm.map(|_| 0);
    for (n, (i, batch)) in batches.micro.iter().enumerate() {
        // Keyed by the micro-batch's number across ranks, so N ranks draw the masks of one
        // device with N times the accumulation (wrapping: a seed, not a count).
        let index = state.step.wrapping_mul(c.accumulate_grad_batches).wrapping_mul(ranks).wrapping_add(*i);
        let seed = micro_batch_seed(state.seed, index as u64);
        let scale = scale / batches.total as f64;
        let last = n + 1 == batches.micro.len();
        let loss = match batches.comm.filter(|_| last) {
            // The step's last backward pass starts each bucket's all-reduce as it finishes.
            Some(comm) => {
                let mut buckets = Buckets::new(params, comm, grads.take());
                let (loss, store) = model.loss_and_gradients(batch, seed, scale, &mut buckets)?;
                let (sum, overlapped) = buckets.finish_with(|var| store.get(var.as_tensor()).cloned())?;
                reduced = Some((sum, overlapped));
                loss
            }
            None => {
                let (loss, store) = model.loss_and_gradients(batch, seed, scale, &mut ())?;
                let step_grads = params.gradients(&store)?;
                grads = Some(match grads {
                    Some(acc) => acc.iter().zip(&step_grads).map(|(a, b)| a + b).collect::<candle_core::Result<_>>()?,
                    None => step_grads,
                });
                loss
            }
        };
        let l = loss.detach().to_dtype(DType::F32)?;
        loss_sum = Some(match loss_sum {
            Some(s) => (s + l)?,
            None => l,
        });
    }
    let device = params.named().first().map(|(_, v)| v.device().clone());
    let Some(device) = device else {
        return Err(TrainError::Config("a model without parameters".into()));
    };
    let loss_sum = match loss_sum {
        Some(l) => l,
        None => Tensor::zeros((), DType::F32, &device)?,
    };
    let mut grads = match (batches.comm, reduced) {
        (_, Some((sum, overlapped))) => {
            overlapped_buckets = Some(overlapped);
            sum
        }
        // A rank without a micro-batch (at an epoch's end) still takes part in every
        // all-reduce, with zeros.
        (Some(comm), None) => Buckets::new(params, comm, grads.take()).finish_with(|_| None)?.0,
        (None, _) => match grads {
            Some(g) => g,
            None => params.zero_gradients()?,
        },
    };
    // The loss travels with one flag per rank, set by a rank that has failed.
    let mut flags = vec![0f32; ranks];
    flags[batches.comm.map_or(0, |m| m.rank())] = f32::from(u8::from(batches.failed));
    let status = Tensor::cat(&[loss_sum.reshape(1)?, Tensor::new(flags, &device)?], 0)?;
    if let Some(comm) = batches.comm {
        comm.all_reduce_sum(&status)?;
    }
    if scale != 1.0 {
        grads = grads.iter().map(|g| g * (1.0 / scale)).collect::<candle_core::Result<_>>()?;
    }
    let norm = global_norm(&grads)?;
    let loss_mean = (status.narrow(0, 0, 1)? / batches.total as f64)?;
    // The one host read of the step: loss, gradient norm and the ranks' flags together.
    let host: Vec<f32> = Tensor::cat(&[loss_mean, norm.reshape(1)?, status.narrow(0, 1, ranks)?], 0)?.to_vec1()?;
    // The bucket reductions are done by now (the read followed them); did they succeed?
    if let Some(comm) = batches.comm {
        comm.synchronize()?;
    }
    let (loss, grad_norm) = (host[0] as f64, host[1] as f64);
    let failed: Vec<usize> = (0..ranks).filter(|&r| host[2 + r] > 0.5).collect();
    if !failed.is_empty() && !batches.failed {
        return Err(TrainError::PeersFailed { failed, step: state.step + 1 });
    }
    let lr = opt.scheduler.lr(state.step);
    let finite = loss.is_finite() && grad_norm.is_finite();
    if let Some(s) = opt.scaler.as_mut() {
        s.update(grad_norm.is_finite());
        if !grad_norm.is_finite() {
            let anomalous = s.scale < 1.0;
            return Ok(StepOutcome {
                loss,
                lr,
                grad_norm,
                skipped: true,
                anomalous,
                overlapped_buckets,
                warning: None,
            });
        }
    }
    if !finite {
        if c.anomaly == AnomalyPolicy::Abort {
            let mut bad = Vec::new();
            for (name, g) in params.split(&grads)? {
                let s = g.sum_all()?.to_scalar::<f32>()?;
                if !s.is_finite() {
                    bad.push(name);
                }
            }
            let what = if loss.is_finite() { "gradients" } else { "loss" };
            return Err(TrainError::NonFinite { step: state.step + 1, what: what.into(), parameters: bad });
        }
        let warning = Some(format!("non-finite loss or gradients at step {}; update skipped", state.step + 1));
        return Ok(StepOutcome { loss, lr, grad_norm, skipped: true, anomalous: true, overlapped_buckets, warning });
    }
    if let Some(max_norm) = c.gradient_clip {
        clip_by_norm(&mut grads, &norm, max_norm)?;
    }
    opt.optimizer.step(&grads, lr, opt.scheduler.beta1(state.step))?;
    Ok(StepOutcome { loss, lr, grad_norm, skipped: false, anomalous: false, overlapped_buckets, warning: None })
}

/// The seed of micro-batch `index` of a run seeded by `seed`: SplitMix64's finaliser over the
/// pair, so neighbouring micro-batches draw unrelated dropout masks. A resumed run must draw the
/// masks the uninterrupted run would have, so the mixing never changes (the test pins it).
fn micro_batch_seed(seed: u64, index: u64) -> u64 {
    let mut z = seed ^ index.wrapping_add(0x9E37_79B9_7F4A_7C15).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One optimizer step's micro-batches on this rank, each with its number across ranks; how many
/// there are across ranks; and the communicator of a data-parallel run.
pub(crate) struct StepBatches<'a, B> {
    pub micro: &'a [(usize, B)],
    pub total: usize,
    pub comm: Option<&'a dyn Collective>,
    /// This rank has failed and takes part only to tell the others.
    pub failed: bool,
}

impl<B> Clone for StepBatches<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B> Copy for StepBatches<'_, B> {}

/// What a step did.
pub(crate) struct StepOutcome {
    pub loss: f64,
    pub lr: f64,
    pub grad_norm: f64,
    pub skipped: bool,
    /// Skipped for values that are not finite, as opposed to an ordinary f16 overflow.
    pub anomalous: bool,
    /// Data-parallel gradient buckets whose all-reduce started during the backward pass.
    pub overlapped_buckets: Option<usize>,
    /// Why the update was skipped, for the run's warnings.
    pub warning: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::micro_batch_seed;

    #[test]
    fn micro_batch_seeds_are_pinned() {
        // The seeds every run so far has drawn its masks from: a checkpoint resumes on them.
        assert_eq!(micro_batch_seed(0, 0), 0x5c47_22af_355e_9512);
        assert_eq!(micro_batch_seed(42, 0), 0x0618_ac11_13c9_2aff);
        assert_eq!(micro_batch_seed(42, 1), 0x6caf_bfe4_d4f5_f4e3);
        assert_eq!(micro_batch_seed(123, 7), 0xc3b2_036f_52dc_7268);
    }
}
