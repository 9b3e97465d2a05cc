//! The protein-preprocessing flags shared by `prepare_data` and `tokenize`.

use crate::cli::SeedArg;
use codon_model::{AmbiguousBehavior, ProteinConfig};

/// How ambiguous amino acids are resolved.
#[derive(clap::Args, Debug)]
pub struct ProteinArgs {
    /// Ambiguous amino acids: standardize_random, standardize_deterministic or raise_error.
    #[arg(long, default_value = "standardize_random")]
    pub ambiguous: AmbiguousBehavior,
    #[command(flatten)]
    pub seed: SeedArg<0>,
}

impl ProteinArgs {
    /// The preprocessing configuration these flags describe.
    pub fn config(&self) -> ProteinConfig {
        ProteinConfig::new(self.ambiguous)
    }
}
