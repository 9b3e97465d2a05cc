//! What several commands share: batch tables, prediction outputs, design and reference flags.

pub mod csv_table;
pub mod design_args;
pub mod prediction_output;
pub mod protein_args;
pub mod reference_args;
