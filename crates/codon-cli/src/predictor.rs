//! The one way a command opens a model for prediction (`predict`, `serve`, and the Python
//! bindings to come): `--model` resolved (a folder, a checkpoint file or a Hub id, upstream's
//! published model by default), the dtype checked against the device, the weights loaded with the
//! model's own organism table.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device};
use codon_model::bigbird::{load_model, BigBirdConfig};
use codon_model::{OrganismTable, Predictor};

/// `--model` as given, or upstream's published model (`adibvafa/CodonTransformer`) without one.
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
) -> anyhow::Result<Predictor> {
    let model = &codon_model::hub::resolve_model(&model_spec(model))?;
    if let Some(ascend) = candle_ascend::ascend_device(device) {
        if dtype == DType::BF16 && !ascend.soc().has_bf16() {
            anyhow::bail!(
                "--dtype bf16: {} ({}) has no BF16; use --dtype f16 or f32",
                ascend.soc().name,
                ascend.name()
            );
        }
    }
    codon_ops::malloc_tuning::retain_freed_memory();
    let config = config.map(BigBirdConfig::from_file).transpose()?;
    Ok(Predictor::with_organisms(load_model(model, config, device, dtype)?, OrganismTable::for_model(model)?)?)
}
