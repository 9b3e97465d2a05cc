//! AdamW with torch's semantics and f32 state.
//!
//! Moments are always f32. When the model computes in bf16 or f16, the optimizer keeps f32
//! master weights, updates them, and writes the rounded values into the model's
//! parameters (candle-nn's AdamW keeps its moments in the parameter dtype instead).

use std::collections::HashMap;
use std::ops::Range;

use candle_core::backprop::GradStore;
use candle_core::{DType, Tensor, Var};

use crate::error::{Result, TrainError};
use codon_ops::optim::{sum_of_squares, AdamWStep};

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

/// Trainable parameters: named variables, in groups that the optimizer updates as one flat
/// buffer each.
///
/// On the CPU every parameter is its own group (the update is one fused pass per parameter
/// there). On other devices each kernel launch costs host time, so [`Parameters::trainable`]
/// puts runs of consecutive parameters into flat buffers of at most [`FLAT_GROUP_ELEMS`]
/// elements, and every variable is a view into its group's buffer: a step then gathers each
/// gradient once and updates a whole group with one launch.
#[derive(Clone)]
pub struct Parameters {
    named: Vec<(String, Var)>,
    groups: Vec<Group>,
}

/// Consecutive parameters and the flat buffer (in their dtype) that holds their values.
#[derive(Clone)]
struct Group {
    slots: Range<usize>,
    values: Tensor,
}

impl From<Vec<(String, Var)>> for Parameters {
    /// Each variable its own group, its values the variable's own storage.
    fn from(named: Vec<(String, Var)>) -> Self {
        let groups = named
            .iter()
            .enumerate()
            .map(|(i, (_, var))| Group { slots: i..i + 1, values: var.as_tensor().detach() })
            .collect();
        Self { named, groups }
    }
}

impl Parameters {
    /// Trainable variables holding `named`'s values in `dtype`; views into flat group buffers
    /// except on the CPU (see the type).
    pub fn trainable(named: Vec<(String, Tensor)>, dtype: DType) -> Result<Self> {
        Self::trainable_grouped(named, dtype, FLAT_GROUP_ELEMS)
    }

    /// [`Parameters::trainable`] with groups of at most `max_group_elems` elements (a larger
    /// parameter alone). The groups are also a data-parallel run's all-reduce buckets: smaller
    /// ones start reducing sooner in the backward pass, at more launches per step.
    pub fn trainable_grouped(named: Vec<(String, Tensor)>, dtype: DType, max_group_elems: usize) -> Result<Self> {
        let on_cpu = named.first().is_none_or(|(_, t)| t.device().is_cpu());
        if on_cpu {
            let vars = named
                .into_iter()
                .map(|(name, t)| Ok((name, Var::from_tensor(&t.to_dtype(dtype)?.detach())?)))
                .collect::<Result<Vec<_>>>()?;
            return Ok(Self::from(vars));
        }
        let sizes: Vec<usize> = named.iter().map(|(_, t)| t.elem_count()).collect();
        let mut vars = Vec::with_capacity(named.len());
        let mut out_groups = Vec::new();
        for slots in groups(&sizes, max_group_elems.max(1)) {
            let parts = named[slots.clone()]
                .iter()
                .map(|(_, t)| t.to_dtype(dtype)?.flatten_all())
                .collect::<candle_core::Result<Vec<_>>>()?;
            // A fresh buffer even for a single part: the optimizer writes it in place.
            let values = Tensor::cat(&parts, 0)?.copy()?;
            let mut offset = 0;
            for (name, t) in &named[slots.clone()] {
                let n = t.elem_count();
                vars.push((name.clone(), Var::from_view(&values.narrow(0, offset, n)?.reshape(t.shape())?)?));
                offset += n;
            }
            out_groups.push(Group { slots, values });
        }
        Ok(Self { named: vars, groups: out_groups })
    }

    /// The variables with their names, in order.
    pub fn named(&self) -> &[(String, Var)] {
        &self.named
    }

    /// The variables' tensors with their names, in order (to build a model over them).
    pub fn named_tensors(&self) -> impl Iterator<Item = (String, Tensor)> + '_ {
        self.named.iter().map(|(name, var)| (name.clone(), var.as_tensor().clone()))
    }

    /// The gradients of a backward pass as one flat f32 tensor per group (zeros for a
    /// parameter that got none): a copy per parameter into its group, one cast per group.
    pub fn gradients(&self, store: &GradStore) -> candle_core::Result<Vec<Tensor>> {
        (0..self.groups.len()).map(|g| self.group_gradient(g, |var| store.get(var.as_tensor()).cloned())).collect()
    }

    /// How many flat groups there are.
    pub fn group_count(&self) -> usize {
        self.groups.len()
    }

    /// The group of each parameter, in parameter order.
    pub fn group_of_each(&self) -> Vec<usize> {
        self.groups.iter().enumerate().flat_map(|(g, group)| group.slots.clone().map(move |_| g)).collect()
    }

    /// Group `group`'s gradient as one flat f32 tensor, from each of its parameters' gradient
    /// (`gradient_of`; zeros where it has none).
    pub fn group_gradient(
        &self,
        group: usize,
        mut gradient_of: impl FnMut(&Var) -> Option<Tensor>,
    ) -> candle_core::Result<Tensor> {
        let parts = self.named[self.groups[group].slots.clone()]
            .iter()
            .map(|(_, var)| match gradient_of(var) {
                Some(g) => g.flatten_all(),
                None => var.as_tensor().zeros_like()?.flatten_all(),
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        Tensor::cat(&parts, 0)?.to_dtype(DType::F32)
    }

    /// Zero gradients in the layout of [`Parameters::gradients`] (a data-parallel rank without
    /// a micro-batch in a step contributes these).
    pub fn zero_gradients(&self) -> candle_core::Result<Vec<Tensor>> {
        self.groups.iter().map(|g| Tensor::zeros(g.values.elem_count(), DType::F32, g.values.device())).collect()
    }

    /// Per-group tensors (as [`Parameters::gradients`] returns) cut back into one view per
    /// parameter, with its name and shape.
    pub fn split(&self, flat: &[Tensor]) -> candle_core::Result<Vec<(String, Tensor)>> {
        let mut out = Vec::with_capacity(self.named.len());
        for (group, t) in self.groups.iter().zip(flat) {
            let t = t.flatten_all()?;
            let mut offset = 0;
            for (name, var) in &self.named[group.slots.clone()] {
                let n = var.elem_count();
                out.push((name.clone(), t.narrow(0, offset, n)?.reshape(var.shape())?));
                offset += n;
            }
        }
        Ok(out)
    }
}

/// The optimizer state of one group: flat f32 buffers.
struct GroupState {
    /// f32 master weights when the parameters are not f32 (else θ is the group's buffer).
    master: Option<Tensor>,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
}

/// Elements per flat group: enough that a step is a few launches per group, few enough that the
/// composed update's temporaries (a handful of group-sized buffers) stay small next to the model.
pub const FLAT_GROUP_ELEMS: usize = 16 << 20;

/// Consecutive runs of `sizes` holding at most `max` elements each (a larger item alone).
fn groups(sizes: &[usize], max: usize) -> Vec<Range<usize>> {
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

/// The optimizer.
pub struct AdamW {
    params: Parameters,
    states: Vec<GroupState>,
    config: AdamWConfig,
    step: usize,
}

impl AdamW {
    /// An optimizer over the parameters, with zero moments.
    pub fn new(params: impl Into<Parameters>, config: AdamWConfig) -> Result<Self> {
        let params = params.into();
        let mut states = Vec::with_capacity(params.groups.len());
        for group in &params.groups {
            // Every state tensor owns its storage: the in-place updates write it.
            let values = group.values.flatten_all()?;
            let master = match values.dtype() {
                DType::F32 => None,
                _ => Some(values.to_dtype(DType::F32)?.copy()?),
            };
            let zeros = || Tensor::zeros(values.elem_count(), DType::F32, values.device());
            states.push(GroupState { master, exp_avg: zeros()?, exp_avg_sq: zeros()? });
        }
        Ok(Self { params, states, config, step: 0 })
    }

    /// Optimizer steps taken.
    pub fn step_count(&self) -> usize {
        self.step
    }

    /// θ of a group, flat f32: the master copy, or the parameters' own buffer.
    fn theta(&self, i: usize) -> candle_core::Result<Tensor> {
        match &self.states[i].master {
            Some(m) => Ok(m.clone()),
            None => self.params.groups[i].values.flatten_all(),
        }
    }

    /// The f32 value of every parameter (the master copy when there is one).
    pub fn master_weights(&self) -> candle_core::Result<Vec<(String, Tensor)>> {
        let thetas = (0..self.states.len()).map(|i| self.theta(i)).collect::<candle_core::Result<Vec<_>>>()?;
        Ok(self.params.split(&thetas)?.into_iter().map(|(n, t)| (n, t.detach())).collect())
    }

    /// One update with f32 gradients, one per group as [`Parameters::gradients`] gives them (of
    /// any shape with the group's element count), at learning rate `lr` and, when given, this
    /// step's β1 (torch uses the current β1 in the bias correction).
    pub fn step(&mut self, grads: &[Tensor], lr: f64, beta1: Option<f64>) -> Result<()> {
        if grads.len() != self.states.len() {
            return Err(TrainError::Config(format!("{} gradients for {} groups", grads.len(), self.states.len())));
        }
        let step = i32::try_from(self.step + 1)
            .map_err(|_| TrainError::Config(format!("AdamW step {} is past its counter's range", self.step + 1)))?;
        self.step += 1;
        let c = self.config;
        let adamw = AdamWStep::new(step, lr, beta1.unwrap_or(c.beta1), c.beta2, c.weight_decay, c.eps);
        for (i, g) in grads.iter().enumerate() {
            let group = self.params.groups[i].clone();
            let first = self.params.named[group.slots.start].0.clone();
            let op =
                |e: candle_core::Error| TrainError::Tensor { op: format!("AdamW update of {first}…"), source: e };
            let mut update = || -> candle_core::Result<()> {
                let g = g.flatten_all()?;
                if g.elem_count() != group.values.elem_count() {
                    candle_core::bail!(
                        "{} gradient values for {} parameters",
                        g.elem_count(),
                        group.values.elem_count()
                    );
                }
                let theta = self.theta(i)?;
                let state = &mut self.states[i];
                if let Some(updated) = adamw.apply(&theta, &mut state.exp_avg, &mut state.exp_avg_sq, &g)? {
                    match &mut state.master {
                        Some(master) => *master = updated,
                        None => codon_ops::optim::assign(&theta, &updated)?,
                    }
                }
                if let Some(master) = &self.states[i].master {
                    self.write_params(&group, master)?;
                }
                Ok(())
            };
            update().map_err(op)?;
        }
        Ok(())
    }

    /// f32 θ of a group into its parameters, in their dtype: on an Ascend device one cast
    /// straight into the group's buffer, elsewhere `Var::set` of each converted value.
    fn write_params(&self, group: &Group, theta: &Tensor) -> candle_core::Result<()> {
        if codon_ops::optim::assigns_in_one_launch(theta) {
            return codon_ops::optim::assign(&group.values.flatten_all()?, theta);
        }
        let mut offset = 0;
        for (_, var) in &self.params.named[group.slots.clone()] {
            let n = var.elem_count();
            var.set(&theta.narrow(0, offset, n)?.reshape(var.shape())?.to_dtype(var.dtype())?)?;
            offset += n;
        }
        Ok(())
    }

    /// The moments, for checkpoints: `exp_avg.<name>`, `exp_avg_sq.<name>`.
    pub fn state(&self) -> candle_core::Result<HashMap<String, Tensor>> {
        let mut out = HashMap::new();
        let m: Vec<Tensor> = self.states.iter().map(|s| s.exp_avg.clone()).collect();
        let v: Vec<Tensor> = self.states.iter().map(|s| s.exp_avg_sq.clone()).collect();
        for (prefix, flat) in [("exp_avg", m), ("exp_avg_sq", v)] {
            for (name, t) in self.params.split(&flat)? {
                out.insert(format!("{prefix}.{name}"), t);
            }
        }
        Ok(out)
    }

    /// Restore moments, master weights and the step count.
    pub fn load_state(
        &mut self,
        state: &HashMap<String, Tensor>,
        masters: &HashMap<String, Tensor>,
        step: usize,
    ) -> std::result::Result<(), String> {
        for (i, group) in self.params.groups.iter().enumerate() {
            let named = &self.params.named[group.slots.clone()];
            // One f32 buffer (a fresh copy: the updates write it in place) from the per-parameter
            // tensors of `source` named `prefix<name>`.
            let flat = |source: &HashMap<String, Tensor>, prefix: &str| -> std::result::Result<Tensor, String> {
                let parts = named
                    .iter()
                    .map(|(name, var)| {
                        let key = format!("{prefix}{name}");
                        let t = source.get(&key).ok_or_else(|| format!("missing tensor {key}"))?;
                        if t.dims() != var.dims() {
                            return Err(format!("{key} has shape {:?}, parameter {:?}", t.dims(), var.dims()));
                        }
                        t.to_dtype(DType::F32)
                            .and_then(|t| t.to_device(var.device())?.flatten_all())
                            .map_err(|e| e.to_string())
                    })
                    .collect::<std::result::Result<Vec<_>, String>>()?;
                Tensor::cat(&parts, 0).and_then(|t| t.copy()).map_err(|e| e.to_string())
            };
            let (m, v, theta) = (flat(state, "exp_avg.")?, flat(state, "exp_avg_sq.")?, flat(masters, "")?);
            let s = &mut self.states[i];
            (s.exp_avg, s.exp_avg_sq) = (m, v);
            if s.master.is_some() {
                s.master = Some(theta.clone());
            }
            let mut offset = 0;
            for (_, var) in named {
                let n = var.elem_count();
                let value = theta.narrow(0, offset, n).and_then(|t| t.reshape(var.shape())?.to_dtype(var.dtype()));
                value.and_then(|value| var.set(&value)).map_err(|e| e.to_string())?;
                offset += n;
            }
        }
        self.step = step;
        Ok(())
    }
}

/// Global 2-norm of gradients, sqrt(Σ‖g‖²), as an f32 scalar tensor on their device: one
/// square-and-sum per tensor (a fused pass on the CPU), so per-group gradients cost a few
/// launches in all.
pub fn global_norm(grads: &[Tensor]) -> candle_core::Result<Tensor> {
    let mut total: Option<Tensor> = None;
    for g in grads {
        let s = sum_of_squares(g)?;
        total = Some(match total.take() {
            Some(t) => (t + s)?,
            None => s,
        });
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
