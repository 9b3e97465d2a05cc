//! What the trainer trains and on what: the model's maths ([`TrainableModel`]), its files
//! ([`Checkpointable`], only for models that are saved or resumed) and the data
//! ([`BatchSource`]).

use std::collections::HashMap;
use std::path::Path;

use candle_core::backprop::{GradStore, GradientObserver};
use candle_core::Tensor;

use crate::error::Result;
use crate::optim::Parameters;

/// A loss and the gradients of `loss · scale`, by one backward pass through its graph, telling
/// `observer` of each gradient as soon as it is final.
pub fn backward_scaled(loss: Tensor, scale: f64, observer: &mut dyn GradientObserver) -> Result<(Tensor, GradStore)> {
    let grads = (&loss * scale)?.backward_with(observer)?;
    Ok((loss, grads))
}

/// A model the trainer can train: a batch in, a scalar loss out.
pub trait TrainableModel {
    /// One micro-batch.
    type Batch;
    /// The trainable parameters, by name, in the groups the optimizer updates together.
    fn parameters(&self) -> Parameters;
    /// The loss of a batch in training mode; `seed` drives this pass's randomness (dropout).
    fn loss(&self, batch: &Self::Batch, seed: u64) -> Result<Tensor>;
    /// The loss of a batch and the gradients of `loss · scale`. By default one backward pass
    /// through the graph of [`TrainableModel::loss`]; a model that recomputes activations
    /// (checkpointing) overrides it. `observer` may be told of final gradients during the pass
    /// (a data-parallel step then overlaps their reduction with the rest of it); gradients
    /// it is not told of are taken from the returned store afterwards.
    fn loss_and_gradients(
        &self,
        batch: &Self::Batch,
        seed: u64,
        scale: f64,
        observer: &mut dyn GradientObserver,
    ) -> Result<(Tensor, GradStore)> {
        backward_scaled(self.loss(batch, seed)?, scale, observer)
    }
    /// Tokens in a batch, for throughput.
    fn tokens(&self, batch: &Self::Batch) -> usize;
    /// How the model's weights are written and read, if they can be: a model that only trains
    /// keeps the default (`None`), and a run that asks for checkpoints or a resume is refused.
    fn checkpointable(&self) -> Option<&dyn Checkpointable> {
        None
    }
}

/// How a model's weights reach files: what a checkpoint folder holds besides the optimizer.
pub trait Checkpointable {
    /// Write f32 weights (named as [`TrainableModel::parameters`]) to a folder.
    fn save(&self, weights: &[(String, Tensor)], dir: &Path) -> Result<()>;
    /// Read the f32 weights that [`Checkpointable::save`] wrote.
    fn load(&self, dir: &Path) -> Result<HashMap<String, Tensor>>;
    /// Write the upstream-style state-dict file (`--checkpoint_filename`), if the model has one.
    fn save_state_dict(&self, _weights: &[(String, Tensor)], _path: &Path) -> Result<()> {
        Ok(())
    }
}

/// Batches, epoch by epoch, with a length known up front.
pub trait BatchSource {
    /// One micro-batch.
    type Batch;
    /// Batches in each epoch.
    fn batches_per_epoch(&self) -> usize;
    /// Records per batch, when the source has a fixed batch size (checked on resume).
    fn batch_size(&self) -> Option<usize> {
        None
    }
    /// The batches of epoch `epoch`, deterministic for a given epoch.
    fn epoch(&self, epoch: u64) -> Box<dyn Iterator<Item = Result<Self::Batch>> + '_>;
}

/// A [`BatchSource`] that yields the same batch once per epoch, for benchmarks, timing runs and
/// tests.
pub struct SameBatch<B>(pub B);

impl<B: Clone> BatchSource for SameBatch<B> {
    type Batch = B;
    fn batches_per_epoch(&self) -> usize {
        1
    }
    fn epoch(&self, _: u64) -> Box<dyn Iterator<Item = Result<B>> + '_> {
        Box::new(std::iter::once(Ok(self.0.clone())))
    }
}
