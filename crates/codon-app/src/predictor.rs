//! The one way a front end opens a model for prediction (`codon predict`, `codon serve`, the
//! Python package's `load_model`): the model resolved (a folder, a checkpoint file or a Hub id,
//! upstream's published model by default), the dtype checked against the device, the weights
//! loaded with the model's own organism table.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device};
use codon_model::bigbird::{load_model, BigBirdConfig};
use codon_model::hub::HubError;
use codon_model::{CodonError, OrganismTable, Predictor};

/// Why a model could not be opened for prediction.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The model is neither a local file or folder nor a Hub model that could be fetched.
    #[error(transparent)]
    Hub(#[from] HubError),
    /// BF16 asked for on an Ascend part without BF16 arithmetic.
    #[error("--dtype bf16: {soc} ({device}) has no BF16; use --dtype f16 or f32")]
    NoBf16 {
        /// The part's name (`Ascend910A`).
        soc: String,
        /// The device's name (`npu:0`).
        device: String,
    },
    /// The model's files could not be read, or do not make a model.
    #[error(transparent)]
    Model(#[from] CodonError),
}

/// The model as given, or upstream's published model (`adibvafa/CodonTransformer`) without one.
pub fn model_spec(model: Option<&Path>) -> PathBuf {
    model.map_or_else(|| PathBuf::from(codon_model::hub::DEFAULT_MODEL), Path::to_path_buf)
}

/// Open `model` (default: `adibvafa/CodonTransformer` from the Hub) on `device` in `dtype`;
/// `config` is a checkpoint file's config.json when it is not CodonTransformer's size. Freed
/// memory is kept in the process from here on: each forward pass allocates and frees the same
/// large activations (on the CPU fresh pages cost a quarter of a batch's time).
pub fn open_predictor(
    model: Option<&Path>,
    config: Option<&Path>,
    device: &Device,
    dtype: DType,
) -> Result<Predictor, OpenError> {
    let model = &codon_model::hub::resolve_model(&model_spec(model))?;
    if let Some(ascend) = candle_ascend::ascend_device(device) {
        if dtype == DType::BF16 && !ascend.soc().has_bf16() {
            return Err(OpenError::NoBf16 { soc: ascend.soc().name.to_string(), device: ascend.name() });
        }
    }
    codon_ops::malloc_tuning::retain_freed_memory();
    let config = config.map(BigBirdConfig::from_file).transpose()?;
    let organisms = OrganismTable::for_model(model).map_err(CodonError::from)?;
    Ok(Predictor::with_organisms(load_model(model, config, device, dtype)?, organisms)?)
}
