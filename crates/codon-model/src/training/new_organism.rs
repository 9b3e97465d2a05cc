//! Teaching a trained model one more organism, as CodonTransformer's maintainer suggests
//! (upstream issues #2 and #37): one row is appended to the organism (token-type) embedding and
//! is the only parameter; every other weight is frozen, so the optimizer keeps state for that row
//! alone and the rest of the model comes out bitwise unchanged.

use std::collections::HashMap;
use std::path::Path;

use crate::bigbird::{
    load_model, masked_lm_loss, save_model, AttentionType, BigBirdConfig, BigBirdForMaskedLM, ForwardMode,
    TOKEN_TYPE_EMBEDDINGS,
};
use crate::{CodonError, OrganismTable};
use candle_core::{DType, Device, Tensor};
use codon_data::MlmBatch;

use super::masked_lm::upload;
use codon_train::Parameters;
use codon_train::Precision;
use codon_train::{Checkpointable, TrainableModel};
use codon_train::{Result, TrainError};

/// The trainable parameter: the new organism's embedding row, shape (1, hidden).
pub const NEW_ORGANISM_ROW: &str = "bert.embeddings.token_type_embeddings.new_organism_row";

/// A trained model plus one organism whose embedding row is the only thing that trains. Every
/// batch is that organism's, whatever organism its records name.
pub struct NewOrganismModel {
    /// The frozen weights as loaded (f32), for saving.
    frozen: HashMap<String, Tensor>,
    /// The frozen weights in the compute dtype, for the forward pass.
    compute: HashMap<String, Tensor>,
    /// The config with the new row counted.
    config: BigBirdConfig,
    organisms: OrganismTable,
    organism_id: u32,
    row: Parameters,
    attention: AttentionType,
}

impl NewOrganismModel {
    /// Add `name` to a model whose organisms are `organisms`; the new row starts as the mean of
    /// the existing ones.
    pub fn new(
        model: &BigBirdForMaskedLM,
        organisms: &OrganismTable,
        name: &str,
        precision: Precision,
        attention: AttentionType,
    ) -> Result<Self> {
        precision.check_device(model.device())?;
        let rows = model.config().type_vocab_size;
        if rows != organisms.len() {
            return Err(TrainError::Config(format!(
                "the model has {rows} organism rows but its organism table {} names",
                organisms.len()
            )));
        }
        let (organisms, organism_id) = organisms.with_organism(name).map_err(CodonError::from)?;
        let frozen: HashMap<String, Tensor> = model
            .named_parameters()
            .into_iter()
            .map(|(n, t)| Ok((n, t.to_dtype(DType::F32)?)))
            .collect::<Result<_>>()?;
        let table = frozen
            .get(TOKEN_TYPE_EMBEDDINGS)
            .ok_or_else(|| TrainError::Config(format!("the model has no {TOKEN_TYPE_EMBEDDINGS}")))?;
        let init = table.mean_keepdim(0)?;
        let row = Parameters::trainable(vec![(NEW_ORGANISM_ROW.to_string(), init)], precision.dtype())?;
        let compute =
            frozen.iter().map(|(n, t)| Ok((n.clone(), t.to_dtype(precision.dtype())?))).collect::<Result<_>>()?;
        let mut config = model.config().clone();
        config.type_vocab_size = rows + 1;
        Ok(Self { frozen, compute, config, organisms, organism_id, row, attention })
    }

    /// The new organism's id.
    pub fn organism_id(&self) -> u32 {
        self.organism_id
    }

    /// The organism table with the new organism.
    pub fn organisms(&self) -> &OrganismTable {
        &self.organisms
    }

    /// `weights` with the embedding table extended by `row`.
    fn with_row(&self, weights: &HashMap<String, Tensor>, row: &Tensor) -> Result<HashMap<String, Tensor>> {
        let mut named = weights.clone();
        let table = &weights[TOKEN_TYPE_EMBEDDINGS];
        let row = row.to_device(table.device())?.to_dtype(table.dtype())?;
        named.insert(TOKEN_TYPE_EMBEDDINGS.to_string(), Tensor::cat(&[table, &row], 0)?);
        Ok(named)
    }

    /// The whole model in f32 with a given new row, as it is saved.
    fn saved_model(&self, weights: &[(String, Tensor)]) -> Result<BigBirdForMaskedLM> {
        let row = weights
            .iter()
            .find(|(n, _)| n == NEW_ORGANISM_ROW)
            .map(|(_, t)| t)
            .ok_or_else(|| TrainError::Config(format!("no {NEW_ORGANISM_ROW} among the weights to save")))?;
        Ok(BigBirdForMaskedLM::from_named(self.config.clone(), self.with_row(&self.frozen, row)?)?)
    }
}

impl TrainableModel for NewOrganismModel {
    type Batch = MlmBatch;

    fn parameters(&self) -> Parameters {
        self.row.clone()
    }

    fn loss(&self, batch: &MlmBatch, seed: u64) -> Result<Tensor> {
        let row = self.row.named()[0].1.as_tensor().clone();
        let model = BigBirdForMaskedLM::from_named(self.config.clone(), self.with_row(&self.compute, &row)?)?;
        let (mut input, labels) = upload(batch, model.config(), model.device())?;
        let shape = (batch.encoding.batch_size, batch.encoding.seq_len);
        input.token_type_ids = Tensor::from_vec(vec![self.organism_id; shape.0 * shape.1], shape, model.device())?;
        let logits = model.forward(&input, ForwardMode::train(self.attention, seed))?;
        Ok(masked_lm_loss(&logits, &labels)?)
    }

    fn tokens(&self, batch: &MlmBatch) -> usize {
        batch.encoding.num_tokens()
    }

    fn checkpointable(&self) -> Option<&dyn Checkpointable> {
        Some(self)
    }
}

impl Checkpointable for NewOrganismModel {
    fn save(&self, weights: &[(String, Tensor)], dir: &Path) -> Result<()> {
        save_model(&self.saved_model(weights)?, dir)?;
        Ok(self.organisms.save(dir).map_err(CodonError::from)?)
    }

    fn load(&self, dir: &Path) -> Result<HashMap<String, Tensor>> {
        let model = load_model(dir, Some(self.config.clone()), &Device::Cpu, DType::F32)?;
        let table = model
            .named_parameters()
            .into_iter()
            .find(|(n, _)| n == TOKEN_TYPE_EMBEDDINGS)
            .map(|(_, t)| t)
            .ok_or_else(|| TrainError::Config(format!("{}: no {TOKEN_TYPE_EMBEDDINGS}", dir.display())))?;
        let row = table.narrow(0, self.organism_id as usize, 1)?;
        Ok(HashMap::from([(NEW_ORGANISM_ROW.to_string(), row)]))
    }

    fn save_state_dict(&self, weights: &[(String, Tensor)], path: &Path) -> Result<()> {
        let model = self.saved_model(weights)?;
        crate::bigbird::weights::save_torch_state_dict(&model.named_parameters(), path)?;
        Ok(self.organisms.save(codon_files::parent_dir(path)).map_err(CodonError::from)?)
    }
}
