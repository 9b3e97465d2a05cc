//! BigBirdForMaskedLM as a [`TrainableModel`], fed by codon-data's masked-LM loader.

use std::collections::HashMap;
use std::path::Path;

use crate::bigbird::{
    load_model, masked_lm_loss, save_model, AttentionType, BigBirdConfig, BigBirdForMaskedLM, ForwardMode, ModelInput,
};
use candle_core::backprop::{GradStore, GradientObserver};
use candle_core::{DType, Device, Tensor};
use codon_data::{DataLoader, MlmBatch};

use codon_train::Parameters;
use codon_train::Precision;
use codon_train::{backward_scaled, BatchSource, Checkpointable, TrainableModel};
use codon_train::{Result, TrainError};

/// A BigBird model whose parameters are trainable `Var`s in the compute dtype.
pub struct MaskedLmModel {
    model: BigBirdForMaskedLM,
    params: Parameters,
    attention: AttentionType,
    gradient_checkpointing: bool,
}

impl MaskedLmModel {
    /// Make a model trainable in `precision` (its weights are cast to the compute dtype; the
    /// optimizer keeps f32 masters of the original values).
    pub fn new(model: BigBirdForMaskedLM, precision: Precision, attention: AttentionType) -> Result<Self> {
        precision.check_device(model.device())?;
        let params = Parameters::trainable(model.named_parameters(), precision.dtype())?;
        let model = model.with_parameters(params.named_tensors())?;
        Ok(Self { model, params, attention, gradient_checkpointing: false })
    }

    /// Regroup the parameters into flat groups of at most `max_group_elems` elements (see
    /// [`Parameters::trainable_grouped`]; the default is [`codon_train::optim::FLAT_GROUP_ELEMS`]).
    pub fn with_group_elements(self, max_group_elems: usize) -> Result<Self> {
        let named = self.model.named_parameters();
        let dtype = named.first().map_or(DType::F32, |(_, t)| t.dtype());
        let params = Parameters::trainable_grouped(named, dtype, max_group_elems)?;
        let model = self.model.with_parameters(params.named_tensors())?;
        Ok(Self { model, params, ..self })
    }

    /// Recompute each encoder layer's activations in the backward pass instead of keeping them
    /// (transformers' `gradient_checkpointing`): activation memory of one layer instead of all
    /// of them, for about a third more arithmetic. The gradients are the same.
    pub fn with_gradient_checkpointing(mut self, enabled: bool) -> Self {
        self.gradient_checkpointing = enabled;
        self
    }

    /// The model (sharing the trainable parameters).
    pub fn model(&self) -> &BigBirdForMaskedLM {
        &self.model
    }
}

impl TrainableModel for MaskedLmModel {
    type Batch = MlmBatch;

    fn parameters(&self) -> Parameters {
        self.params.clone()
    }

    fn loss(&self, batch: &MlmBatch, seed: u64) -> Result<Tensor> {
        let (input, labels) = upload(batch, self.model.config(), self.model.device())?;
        let logits = self.model.forward(&input, ForwardMode::train(self.attention, seed))?;
        Ok(masked_lm_loss(&logits, &labels)?)
    }

    fn loss_and_gradients(
        &self,
        batch: &MlmBatch,
        seed: u64,
        scale: f64,
        observer: &mut dyn GradientObserver,
    ) -> Result<(Tensor, GradStore)> {
        // The checkpointed pass differentiates layer by layer and tells `observer` of nothing.
        if !self.gradient_checkpointing {
            return backward_scaled(self.loss(batch, seed)?, scale, observer);
        }
        let (input, labels) = upload(batch, self.model.config(), self.model.device())?;
        let mut loss = None;
        let (_, grads) =
            self.model.backward_checkpointed(&input, ForwardMode::train(self.attention, seed), |logits| {
                let l = loss.insert(masked_lm_loss(logits, &labels)?);
                Ok((&*l * scale)?)
            })?;
        let loss = loss.ok_or_else(|| TrainError::Config("the checkpointed pass computed no loss".into()))?;
        Ok((loss, grads))
    }

    fn tokens(&self, batch: &MlmBatch) -> usize {
        batch.encoding.num_tokens()
    }

    fn checkpointable(&self) -> Option<&dyn Checkpointable> {
        Some(self)
    }
}

impl Checkpointable for MaskedLmModel {
    fn save(&self, weights: &[(String, Tensor)], dir: &Path) -> Result<()> {
        let named = weights.iter().cloned().collect();
        let model = BigBirdForMaskedLM::from_named(self.model.config().clone(), named)?;
        Ok(save_model(&model, dir)?)
    }

    fn load(&self, dir: &Path) -> Result<HashMap<String, Tensor>> {
        let model = load_model(dir, Some(self.model.config().clone()), &Device::Cpu, DType::F32)?;
        Ok(model.named_parameters().into_iter().collect())
    }

    fn save_state_dict(&self, weights: &[(String, Tensor)], path: &Path) -> Result<()> {
        crate::bigbird::weights::save_torch_state_dict(weights, path).map_err(TrainError::from)
    }
}

/// A batch's model inputs (ids checked against `config`) and labels on `device`.
pub(crate) fn upload(batch: &MlmBatch, config: &BigBirdConfig, device: &Device) -> Result<(ModelInput, Tensor)> {
    let e = &batch.encoding;
    let input = ModelInput::from_encoding(e, config, device)?;
    Ok((input, Tensor::from_slice(&batch.labels, (e.batch_size, e.seq_len), device)?))
}

/// codon-data's loader as a [`BatchSource`].
pub struct MaskedLmData {
    loader: DataLoader,
}

impl MaskedLmData {
    /// Wrap a loader; batches are uploaded to the model's device in `loss`.
    pub fn new(loader: DataLoader) -> Self {
        Self { loader }
    }
}

impl BatchSource for MaskedLmData {
    type Batch = MlmBatch;
    fn batches_per_epoch(&self) -> usize {
        self.loader.batches_per_epoch()
    }
    fn batch_size(&self) -> Option<usize> {
        Some(self.loader.config().batch_size)
    }
    fn epoch(&self, epoch: u64) -> Box<dyn Iterator<Item = Result<MlmBatch>> + '_> {
        Box::new(self.loader.epoch(epoch).map(|b| b.map_err(|e| TrainError::Data(Box::new(e)))))
    }
}

#[cfg(test)]
mod tests {
    /// The collator's "not a target" label is the one the loss skips.
    #[test]
    fn the_collators_ignored_label_is_the_losss() {
        assert_eq!(codon_data::IGNORE_INDEX, crate::bigbird::IGNORE_INDEX);
    }
}
