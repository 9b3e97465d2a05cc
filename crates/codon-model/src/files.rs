//! Files written the way users expect ([`codon_vocab::files`]: atomic, ordinary permissions,
//! never over an input), and the model's one file format of its own: safetensors.

use std::collections::HashMap;
use std::path::Path;

use candle_core::Tensor;

pub use codon_vocab::files::*;

use crate::error::{CodonError, Result, TensorContext};

/// Write tensors as a safetensors file, atomically and with ordinary permissions. (The
/// safetensors crate replaces the file it is given by a 0600 file of its own; the mode an
/// ordinary create gets is put back before the rename.)
pub fn write_safetensors(tensors: &HashMap<String, Tensor>, path: &Path) -> Result<()> {
    write_atomically_at(path, |tmp| {
        let permissions = tmp.metadata().map_err(|e| CodonError::io(tmp, e))?.permissions();
        candle_core::safetensors::save(tensors, tmp).op(&format!("writing {}", path.display()))?;
        std::fs::set_permissions(tmp, permissions).map_err(|e| CodonError::io(tmp, e))
    })
}
