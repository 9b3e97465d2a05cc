//! The model's one file format of its own: safetensors, written the way users expect
//! ([`codon_files`]: atomic, ordinary permissions).

use std::collections::HashMap;
use std::path::Path;

use candle_core::Tensor;

use crate::error::{Result, TensorContext};

/// Write tensors as a safetensors file, atomically and with ordinary permissions. The header
/// carries `{"format": "pt"}`, as transformers' `save_pretrained` writes it: transformers 4.x
/// refuses a model file without it.
pub fn write_safetensors(tensors: &HashMap<String, Tensor>, path: &Path) -> Result<()> {
    let metadata = HashMap::from([("format".to_string(), "pt".to_string())]);
    codon_files::write_atomically_replaced(path, |tmp| -> Result<()> {
        safetensors::tensor::serialize_to_file(tensors, Some(metadata), tmp)
            .map_err(candle_core::Error::from)
            .op(&format!("writing {}", path.display()))
    })
}
