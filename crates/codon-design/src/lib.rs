//! Designing DNA under synthesis constraints: restriction sites and motifs to avoid (both
//! strands, IUPAC), GC content in every window, homopolymers and exact repeats; and the repair
//! of a predicted sequence by synonymous codon changes that cost the model the least
//! log-probability.
//!
//! - [`iupac`]: patterns and reverse complements; [`enzymes`]: the built-in enzyme table.
//! - [`constraints`]: each constraint lists its violations, with whole-number severities.
//! - [`repair`](mod@repair): the fixed-point repair over per-codon scores.

pub mod constraints;
pub mod enzymes;
pub mod error;
pub mod iupac;
pub mod repair;

pub use constraints::{violations, Constraint, ConstraintSpec, Violation};
pub use error::{DesignError, Result};
pub use repair::{repair, Edit, Repair, RepairOptions};
