//! Data-parallel gradient buckets: each flat parameter group is one bucket, all-reduced as soon
//! as the backward pass has finished its gradients, while the pass goes on with earlier layers
//! (torch DDP's overlap, on HCCL's own stream).
//!
//! Every rank must start the same collectives in the same order, whatever order its backward
//! pass finishes the buckets in, so buckets start strictly from the last group down: a bucket
//! that is finished early waits for the ones after it. The last groups hold the last layers,
//! which backward reaches first, so in practice each bucket starts the moment it is finished.

use std::collections::HashMap;

use candle_core::backprop::GradientObserver;
use candle_core::{Tensor, TensorId, Var};

use crate::collective::Collective;
use crate::optim::Parameters;

/// One rank's buckets for the last micro-batch of an optimizer step.
pub(crate) struct Buckets<'a> {
    params: &'a Parameters,
    comm: &'a dyn Collective,
    /// Gradients summed over the step's earlier micro-batches, one flat tensor per group.
    earlier: Option<Vec<Tensor>>,
    /// Parameter index by variable.
    index: HashMap<TensorId, usize>,
    group_of: Vec<usize>,
    /// Final gradients that have arrived, by parameter index.
    arrived: Vec<Option<Tensor>>,
    /// Parameters whose gradient is known: arrived, or none to come.
    settled: Vec<bool>,
    /// Per group, parameters whose gradient has not arrived.
    waiting: Vec<usize>,
    /// Parameters whose gradient has not arrived, over all groups.
    to_come: usize,
    /// Started reductions, by group; groups `next..` have started.
    reduced: Vec<Option<Tensor>>,
    next: usize,
    /// Buckets started while gradients of other parameters were still to come.
    pub(crate) overlapped: usize,
}

impl<'a> Buckets<'a> {
    pub(crate) fn new(params: &'a Parameters, comm: &'a dyn Collective, earlier: Option<Vec<Tensor>>) -> Self {
        let group_of = params.group_of_each();
        let mut waiting = vec![0; params.group_count()];
        for &g in &group_of {
            waiting[g] += 1;
        }
        let index = params.named().iter().enumerate().map(|(i, (_, var))| (var.as_tensor().id(), i)).collect();
        Self {
            params,
            comm,
            earlier,
            index,
            arrived: vec![None; group_of.len()],
            settled: vec![false; group_of.len()],
            to_come: group_of.len(),
            group_of,
            waiting,
            reduced: vec![None; params.group_count()],
            next: params.group_count(),
            overlapped: 0,
        }
    }

    /// One parameter's gradient is final (`None`: it has none); starts every bucket that the
    /// order allows.
    fn arrive(&mut self, i: usize, grad: Option<&Tensor>) -> candle_core::Result<()> {
        if self.settled[i] {
            return Ok(());
        }
        self.settled[i] = true;
        self.arrived[i] = grad.cloned();
        self.waiting[self.group_of[i]] -= 1;
        self.to_come -= 1;
        while self.next > 0 && self.waiting[self.next - 1] == 0 {
            self.start(self.next - 1, &mut |_| None)?;
            if self.to_come > 0 {
                self.overlapped += 1;
            }
        }
        Ok(())
    }

    /// After the backward pass: starts the remaining buckets, with the gradients the observer
    /// was not told of from `gradient_of` (zeros where it has none), orders the device stream
    /// after every bucket (the host does not wait: [`Collective::synchronize`] reports), and
    /// returns the summed gradients, one per group, and how many buckets started while
    /// other gradients were still to come.
    pub(crate) fn finish_with(
        mut self,
        mut gradient_of: impl FnMut(&Var) -> Option<Tensor>,
    ) -> candle_core::Result<(Vec<Tensor>, usize)> {
        while self.next > 0 {
            self.start(self.next - 1, &mut gradient_of)?;
        }
        self.comm.finish_started()?;
        let reduced = self.reduced.into_iter().collect::<Option<Vec<_>>>();
        let reduced = reduced.ok_or_else(|| candle_core::Error::Msg("a gradient bucket was never started".into()))?;
        Ok((reduced, self.overlapped))
    }

    fn start(&mut self, group: usize, fallback: &mut dyn FnMut(&Var) -> Option<Tensor>) -> candle_core::Result<()> {
        let (index, arrived) = (&self.index, &mut self.arrived);
        let mut flat = self.params.group_gradient(group, |var| {
            index.get(&var.as_tensor().id()).and_then(|&i| arrived[i].take()).or_else(|| fallback(var))
        })?;
        if let Some(earlier) = &self.earlier {
            flat = (flat + &earlier[group])?;
        }
        self.comm.start_all_reduce_sum(&flat)?;
        self.reduced[group] = Some(flat);
        self.next = group;
        Ok(())
    }
}

impl GradientObserver for Buckets<'_> {
    /// Parameters the graph does not reach get no gradient (the pooler of a masked-LM loss):
    /// their buckets need not wait for them.
    fn variables(&mut self, variables: &[&Tensor]) -> candle_core::Result<()> {
        let reached: std::collections::HashSet<TensorId> = variables.iter().map(|v| v.id()).collect();
        let unreached: Vec<usize> =
            self.index.iter().filter(|(id, _)| !reached.contains(*id)).map(|(_, &i)| i).collect();
        for i in unreached {
            self.arrive(i, None)?;
        }
        Ok(())
    }

    fn ready(&mut self, variable: &Tensor, gradient: Option<&Tensor>) -> candle_core::Result<()> {
        match self.index.get(&variable.id()) {
            Some(&i) => self.arrive(i, gradient),
            None => Ok(()),
        }
    }
}
