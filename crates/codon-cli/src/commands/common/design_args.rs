//! The synthesis-constraint flags of `predict`, and how a repair is reported.

use codon_design::{Constraint, ConstraintSpec, Repair};

/// Constraints the predicted DNA must meet; it is repaired by synonymous changes when it does not.
#[derive(clap::Args, Debug, Default)]
pub struct DesignArgs {
    /// Restriction sites to avoid on both strands, by enzyme name: BsaI,BsmBI,EcoRI,...
    #[arg(long, alias = "avoid_sites", value_name = "ENZYMES")]
    pub avoid_sites: Option<String>,
    /// A motif to avoid on both strands, in IUPAC letters (repeatable).
    #[arg(long, alias = "avoid_motif", value_name = "SEQ")]
    pub avoid_motif: Vec<String>,
    /// Window (nucleotides) for --gc-min/--gc-max.
    #[arg(long, alias = "gc_window", value_name = "N", requires = "gc_min", requires = "gc_max")]
    pub gc_window: Option<usize>,
    /// Lowest GC percentage in every window.
    #[arg(long, alias = "gc_min", value_name = "P", requires = "gc_window")]
    pub gc_min: Option<f64>,
    /// Highest GC percentage in every window.
    #[arg(long, alias = "gc_max", value_name = "P", requires = "gc_window")]
    pub gc_max: Option<f64>,
    /// Longest run of one base.
    #[arg(long, alias = "max_homopolymer", value_name = "N")]
    pub max_homopolymer: Option<usize>,
    /// Longest exact repeat.
    #[arg(long, alias = "max_repeat", value_name = "N")]
    pub max_repeat: Option<usize>,
    /// Keep the sequence and report what is left when a constraint cannot be met (else: exit 1).
    #[arg(long, alias = "best_effort")]
    pub best_effort: bool,
}

impl DesignArgs {
    /// The constraints the flags ask for (none: no repair).
    pub fn constraints(&self) -> anyhow::Result<Vec<Constraint>> {
        let spec = ConstraintSpec {
            avoid_sites: self.avoid_sites.iter().cloned().collect(),
            avoid_motifs: self.avoid_motif.clone(),
            gc_window: self.gc_window.zip(self.gc_min).zip(self.gc_max).map(|((w, min), max)| (w, min, max)),
            max_homopolymer: self.max_homopolymer,
            max_repeat: self.max_repeat,
        };
        Ok(spec.constraints()?)
    }
}

/// Each edit as `codon 12 (nt 34-36) GTC>GTG cost 0.412: reason`.
pub fn edit_lines(repair: &Repair) -> Vec<String> {
    repair
        .edits
        .iter()
        .map(|e| {
            let nt = 3 * e.codon + 1;
            format!("codon {} (nt {}-{}) {}>{} cost {:.3}: {}", e.codon + 1, nt, nt + 2, e.old, e.new, e.cost, e.reason)
        })
        .collect()
}
