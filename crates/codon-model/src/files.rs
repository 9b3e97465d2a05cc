//! Files written the way users expect ([`codon_vocab::files`]: atomic, ordinary permissions,
//! never over an input), and the model's one file format of its own: safetensors.

use std::collections::HashMap;
use std::path::Path;

use candle_core::Tensor;

pub use codon_vocab::files::*;

use crate::error::{Result, TensorContext};

/// Write tensors as a safetensors file, atomically and with ordinary permissions.
pub fn write_safetensors(tensors: &HashMap<String, Tensor>, path: &Path) -> Result<()> {
    write_atomically_replaced(path, |tmp| -> Result<()> {
        candle_core::safetensors::save(tensors, tmp).op(&format!("writing {}", path.display()))
    })
}
