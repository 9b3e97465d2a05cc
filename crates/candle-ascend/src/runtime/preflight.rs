//! Preflight: run a closure (one step of the real run) with every launch reduced to phase 1,
//! and collect each op the part refuses, so a run fails before its first step with one message
//! listing all of them, rather than mid-step on the first.
use std::collections::BTreeSet;

/// The refusals collected while a preflight runs.
#[derive(Debug, Default)]
pub struct Preflight {
    /// `op (operands): reason`, sorted and without repeats.
    pub(crate) refused: BTreeSet<String>,
}
