//! Where per-organism codon statistics come from: a training JSONL (`--reference`) or one
//! codon-usage table (`--codon-table`). Shared by `evaluate` and `predict`'s baselines.
// `predict` uses less of it than `evaluate`.
#![allow(dead_code)]

use std::path::PathBuf;

pub use codon_eval::References;
use codon_eval::{read_codon_usage, OrganismReference, ReferenceSet};

/// The reference flags.
#[derive(clap::Args, Debug)]
pub struct ReferenceArgs {
    /// Training JSONL in upstream's format ({"codons": "M_ATG ...", "organism": id}): each
    /// organism's codon frequencies and CSI weights come from its sequences in it.
    #[arg(long, conflicts_with = "codon_table")]
    pub reference: Option<PathBuf>,
    /// One codon-usage table (Kazusa or GCG layout) used for every organism.
    #[arg(long, alias = "codon_table")]
    pub codon_table: Option<PathBuf>,
}

impl ReferenceArgs {
    /// Load the reference; sequences are kept for the organisms `keep_sequences` accepts.
    pub fn load(&self, keep_sequences: impl Fn(u32) -> bool) -> anyhow::Result<References> {
        match (&self.reference, &self.codon_table) {
            (Some(path), None) => Ok(References::Set(ReferenceSet::read_jsonl(path, keep_sequences)?)),
            (None, Some(path)) => {
                Ok(References::Table(Box::new(OrganismReference::from_counts(&read_codon_usage(path)?)?)))
            }
            _ => anyhow::bail!(
                "give --reference TRAIN.jsonl (per-organism statistics) or --codon-table FILE (one table)"
            ),
        }
    }

    /// The files these flags name, which the command's outputs must not replace.
    pub fn paths(&self) -> impl Iterator<Item = &std::path::Path> {
        self.reference.as_deref().into_iter().chain(self.codon_table.as_deref())
    }

    /// True when one table serves every organism, so rows need no organism.
    pub fn is_single_table(&self) -> bool {
        self.codon_table.is_some()
    }
}
