//! AdamW with torch's semantics and f32 state.
//!
//! Moments are always f32. When the model computes in bf16 or f16, the optimizer keeps f32
//! master weights, updates them, and writes the rounded values into the model's
//! parameters (candle-nn's AdamW keeps its moments in the parameter dtype instead).

use std::collections::HashMap;

use candle_core::{DType, Tensor, Var};

use candle_ascend::fused::{self, AdamWHyper};

use crate::cpu_adamw::{MomentUpdate, ParameterUpdate, SumOfSquares};

/// The Ascend fused operator of the update, used where the part has it (A2 and later; the
/// Atlas training series runs the composed update).
const FUSED_ADAMW: &str = "aclnnApplyAdamWV2";
use crate::error::{Result, TrainError};

/// AdamW hyper-parameters other than the learning rate; the defaults are torch's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamWConfig {
    /// β1, used when the schedule does not cycle it.
    pub beta1: f64,
    /// β2.
    pub beta2: f64,
    /// ε.
    pub eps: f64,
    /// Decoupled weight decay.
    pub weight_decay: f64,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        Self { beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01 }
    }
}

struct Slot {
    name: String,
    param: Var,
    /// f32 master copy when the parameter is not f32.
    master: Option<Tensor>,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
}

/// θ, m and v of a run of consecutive parameters, each one f32 buffer (the flat path).
struct FlatState {
    /// The parameters (slot indices) it holds.
    slots: std::ops::Range<usize>,
    theta: Tensor,
    m: Tensor,
    v: Tensor,
}

/// Elements per flat group: enough that a step is a few dozen launches, few enough that the
/// update's temporaries (a handful of group-sized buffers) stay small next to the model.
const FLAT_GROUP_ELEMS: usize = 16 << 20;

/// θ into the parameter, in the parameter's dtype: on an Ascend device one cast (or copy)
/// straight into its storage, elsewhere `Var::set` of the converted value.
fn write_param(param: &Var, theta: &Tensor) -> candle_core::Result<()> {
    if fused::runs_natively(theta, "aclnnCast", theta.dtype()) {
        return fused::assign(param.as_tensor(), theta);
    }
    param.set(&theta.to_dtype(param.dtype())?)
}

/// Consecutive runs of `sizes` holding at most `max` elements each (a larger item alone).
fn groups(sizes: &[usize], max: usize) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut total) = (0, 0);
    for (i, &n) in sizes.iter().enumerate() {
        if i > start && total + n > max {
            out.push(start..i);
            (start, total) = (i, 0);
        }
        total += n;
    }
    if start < sizes.len() {
        out.push(start..sizes.len());
    }
    out
}

/// The tensors flattened to f32 and concatenated.
fn flat_f32(ts: &[Tensor]) -> candle_core::Result<Tensor> {
    let flat: Vec<Tensor> =
        ts.iter().map(|t| t.to_dtype(DType::F32)?.flatten_all()).collect::<candle_core::Result<_>>()?;
    Tensor::cat(&flat, 0)
}

/// The optimizer.
pub struct AdamW {
    slots: Vec<Slot>,
    config: AdamWConfig,
    step: usize,
    /// The flat buffers, on devices that take the flat path; the slots hold views into them.
    flat: Option<Vec<FlatState>>,
}

impl AdamW {
    /// An optimizer over named parameters, with zero moments.
    pub fn new(params: Vec<(String, Var)>, config: AdamWConfig) -> Result<Self> {
        let mut slots = Vec::with_capacity(params.len());
        for (name, param) in params {
            // Every state tensor owns its storage: the CPU update writes it in place.
            let master = match param.dtype() {
                DType::F32 => None,
                _ => Some(param.as_tensor().to_dtype(DType::F32)?.copy()?.detach()),
            };
            let zeros = || Tensor::zeros(param.shape(), DType::F32, param.device());
            let (exp_avg, exp_avg_sq) = (zeros()?, zeros()?);
            slots.push(Slot { name, param, master, exp_avg, exp_avg_sq });
        }
        Ok(Self { slots, config, step: 0, flat: None })
    }

    /// Optimizer steps taken.
    pub fn step_count(&self) -> usize {
        self.step
    }

    /// Parameter names, in order.
    pub fn names(&self) -> Vec<String> {
        self.slots.iter().map(|s| s.name.clone()).collect()
    }

    /// The f32 value of every parameter (the master copy when there is one).
    pub fn master_weights(&self) -> Vec<(String, Tensor)> {
        self.slots
            .iter()
            .map(|s| (s.name.clone(), s.master.clone().unwrap_or_else(|| s.param.as_tensor().detach())))
            .collect()
    }

    /// One update with f32 gradients (one per parameter, in order), at learning rate `lr`
    /// and, when given, this step's β1 (torch uses the current β1 in the bias correction).
    pub fn step(&mut self, grads: &[Tensor], lr: f64, beta1: Option<f64>) -> Result<()> {
        if grads.len() != self.slots.len() {
            return Err(TrainError::Config(format!("{} gradients for {} parameters", grads.len(), self.slots.len())));
        }
        self.step += 1;
        let t = self.step as i32;
        let c = self.config;
        let beta1 = beta1.unwrap_or(c.beta1);
        let step_size = lr / (1.0 - beta1.powi(t));
        let bias2_sqrt = (1.0 - c.beta2.powi(t)).sqrt();
        // t − 1 on the device, for the fused Ascend update: one upload per step, shared.
        let mut fused_step: Option<Tensor> = None;
        let hyper = AdamWHyper {
            lr: lr as f32,
            beta1: beta1 as f32,
            beta2: c.beta2 as f32,
            weight_decay: c.weight_decay as f32,
            eps: c.eps as f32,
        };
        if let Some(first) = self.slots.first() {
            let theta = first.master.clone().unwrap_or_else(|| first.param.as_tensor().clone());
            if !theta.device().is_cpu() && !fused::runs_natively(&theta, FUSED_ADAMW, DType::F32) {
                return self.step_flat(grads, lr, beta1, step_size, bias2_sqrt);
            }
        }
        for (slot, g) in self.slots.iter_mut().zip(grads) {
            let op =
                |e: candle_core::Error| TrainError::Tensor { op: format!("AdamW update of {}", slot.name), source: e };
            let g = g.to_dtype(DType::F32).map_err(op)?;
            let theta = match &slot.master {
                Some(m) => m.clone(),
                None => slot.param.as_tensor().detach(),
            };
            let decay = 1.0 - lr * c.weight_decay;
            if theta.device().is_cpu() {
                // In place: θ (the parameter or its master copy) and the moments are storage
                // that only this optimizer writes.
                let fused = || -> candle_core::Result<()> {
                    let g = g.contiguous()?;
                    slot.exp_avg.inplace_op2(&g, &MomentUpdate { beta: beta1, squared: false })?;
                    slot.exp_avg_sq.inplace_op2(&g, &MomentUpdate { beta: c.beta2, squared: true })?;
                    let update = ParameterUpdate { decay, step_size, bias2_sqrt, eps: c.eps };
                    theta.inplace_op3(&slot.exp_avg, &slot.exp_avg_sq, &update)?;
                    if slot.master.is_some() {
                        slot.param.set(&theta.to_dtype(slot.param.dtype())?)?;
                    }
                    Ok(())
                };
                fused().map_err(op)?;
                continue;
            }
            // In place, one launch: the parts that reach here have the fused operator (the others
            // took the flat path above).
            let mut fused_update = || -> candle_core::Result<()> {
                let step = match &fused_step {
                    Some(s) => s.clone(),
                    None => fused_step.insert(Tensor::new(&[(t - 1) as f32], theta.device())?).clone(),
                };
                fused::apply_adamw(&theta, &slot.exp_avg, &slot.exp_avg_sq, &g, &step, hyper)?;
                if slot.master.is_some() {
                    write_param(&slot.param, &theta)?;
                }
                Ok(())
            };
            fused_update().map_err(op)?;
        }
        Ok(())
    }

    /// The composed update for devices without a fused body, over flat buffers: θ, m and v of
    /// runs of consecutive parameters live in one f32 buffer each ([`FLAT_GROUP_ELEMS`]), so the
    /// update is a dozen launches per group whatever the parameter count, plus one copy per
    /// parameter in and out.
    fn step_flat(&mut self, grads: &[Tensor], lr: f64, beta1: f64, step_size: f64, bias2_sqrt: f64) -> Result<()> {
        let c = self.config;
        let op = |e: candle_core::Error| TrainError::Tensor { op: "flat AdamW update".into(), source: e };
        let states = match self.flat.take() {
            Some(s) => s,
            None => {
                let sizes: Vec<usize> = self.slots.iter().map(|s| s.param.elem_count()).collect();
                let masters: Vec<Tensor> = self.master_weights().into_iter().map(|(_, t)| t).collect();
                let mut states = Vec::new();
                for range in groups(&sizes, FLAT_GROUP_ELEMS) {
                    let slots = &self.slots[range.clone()];
                    let m: Vec<Tensor> = slots.iter().map(|s| s.exp_avg.clone()).collect();
                    let v: Vec<Tensor> = slots.iter().map(|s| s.exp_avg_sq.clone()).collect();
                    states.push(FlatState {
                        theta: flat_f32(&masters[range.clone()]).map_err(op)?,
                        m: flat_f32(&m).map_err(op)?,
                        v: flat_f32(&v).map_err(op)?,
                        slots: range,
                    });
                }
                states
            }
        };
        let mut updated = Vec::with_capacity(states.len());
        for state in states {
            let update = || -> candle_core::Result<FlatState> {
                let g = flat_f32(&grads[state.slots.clone()])?;
                let theta = (&state.theta * (1.0 - lr * c.weight_decay))?;
                let m = (&state.m + ((&g - &state.m)? * (1.0 - beta1))?)?;
                let v = ((&state.v * c.beta2)? + (g.sqr()? * (1.0 - c.beta2))?)?;
                let denom = ((v.sqrt()? / bias2_sqrt)? + c.eps)?;
                let theta = (theta - ((&m / denom)? * step_size)?)?;
                Ok(FlatState { slots: state.slots.clone(), theta, m, v })
            };
            let state = update().map_err(op)?;
            let mut offset = 0;
            for slot in &mut self.slots[state.slots.clone()] {
                let n = slot.param.elem_count();
                let view = |t: &Tensor| t.narrow(0, offset, n)?.reshape(slot.param.shape());
                let mut write = || -> candle_core::Result<()> {
                    slot.exp_avg = view(&state.m)?;
                    slot.exp_avg_sq = view(&state.v)?;
                    let theta = view(&state.theta)?;
                    write_param(&slot.param, &theta)?;
                    if slot.master.is_some() {
                        slot.master = Some(theta);
                    }
                    Ok(())
                };
                write().map_err(op)?;
                offset += n;
            }
            updated.push(state);
        }
        self.flat = Some(updated);
        Ok(())
    }

    /// Moments and step count, for checkpoints: `exp_avg.<name>`, `exp_avg_sq.<name>`.
    pub fn state(&self) -> HashMap<String, Tensor> {
        let mut out = HashMap::new();
        for s in &self.slots {
            out.insert(format!("exp_avg.{}", s.name), s.exp_avg.clone());
            out.insert(format!("exp_avg_sq.{}", s.name), s.exp_avg_sq.clone());
        }
        out
    }

    /// Restore moments, master weights and the step count.
    pub fn load_state(
        &mut self,
        state: &HashMap<String, Tensor>,
        masters: &HashMap<String, Tensor>,
        step: usize,
    ) -> std::result::Result<(), String> {
        for s in &mut self.slots {
            let get = |key: String| -> std::result::Result<Tensor, String> {
                let t = state.get(&key).ok_or_else(|| format!("missing optimizer tensor {key}"))?;
                if t.dims() != s.param.dims() {
                    return Err(format!("{key} has shape {:?}, parameter {:?}", t.dims(), s.param.dims()));
                }
                // A copy: the CPU update writes the moments in place.
                t.to_dtype(DType::F32).and_then(|t| t.to_device(s.param.device())?.copy()).map_err(|e| e.to_string())
            };
            s.exp_avg = get(format!("exp_avg.{}", s.name))?;
            s.exp_avg_sq = get(format!("exp_avg_sq.{}", s.name))?;
            let master = masters.get(&s.name).ok_or_else(|| format!("missing weight {}", s.name))?;
            let master = master
                .to_dtype(DType::F32)
                .and_then(|t| t.to_device(s.param.device())?.copy())
                .map_err(|e| e.to_string())?;
            if s.master.is_some() {
                s.master = Some(master.clone());
            }
            let value = master.to_dtype(s.param.dtype()).map_err(|e| e.to_string())?;
            s.param.set(&value).map_err(|e| e.to_string())?;
        }
        self.step = step;
        self.flat = None;
        Ok(())
    }
}

/// Global 2-norm of gradients, sqrt(Σ‖g‖²), as an f32 scalar tensor on their device: on the
/// CPU one fused pass per gradient; elsewhere one square-and-sum per flat group of gradients (a
/// copy per gradient), instead of three launches per gradient.
pub fn global_norm(grads: &[Tensor]) -> candle_core::Result<Tensor> {
    let Some(first) = grads.first() else { candle_core::bail!("no gradients") };
    let mut total: Option<Tensor> = None;
    let mut add = |s: Tensor| -> candle_core::Result<()> {
        total = Some(match total.take() {
            Some(t) => (t + s)?,
            None => s,
        });
        Ok(())
    };
    if first.device().is_cpu() {
        for g in grads {
            add(g.to_dtype(DType::F32)?.contiguous()?.apply_op1_no_bwd(&SumOfSquares)?)?;
        }
    } else {
        let sizes: Vec<usize> = grads.iter().map(Tensor::elem_count).collect();
        for range in groups(&sizes, FLAT_GROUP_ELEMS) {
            add(flat_f32(&grads[range])?.sqr()?.sum_all()?)?;
        }
    }
    match total {
        Some(t) => t.sqrt(),
        None => candle_core::bail!("no gradients"),
    }
}

/// `clip_grad_norm_`: multiply every gradient by min(1, max_norm / (norm + 1e-6)).
pub fn clip_by_norm(grads: &mut [Tensor], norm: &Tensor, max_norm: f64) -> candle_core::Result<()> {
    let coef = (norm.affine(1.0, 1e-6)?.recip()? * max_norm)?.clamp(0.0, 1.0)?;
    for g in grads.iter_mut() {
        *g = g.broadcast_mul(&coef.to_dtype(g.dtype())?)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::groups;

    #[test]
    fn flat_groups_are_consecutive_and_bounded() {
        assert_eq!(groups(&[4, 4, 4, 4], 8), [0..2, 2..4]);
        assert_eq!(groups(&[3, 10, 2, 2], 8), [0..1, 1..2, 2..4]);
        assert_eq!(groups(&[1], 8), vec![std::ops::Range { start: 0, end: 1 }]);
        assert!(groups(&[], 8).is_empty());
    }
}
