//! `codon_ascend._native`: the Rust half of the `codon_ascend` Python package. The Python half
//! (`py_src/codon_ascend`) gives it upstream CodonTransformer's module layout, names and
//! defaults; everything that computes is here, and each call releases the GIL while it runs.

use pyo3::prelude::*;

mod data;
mod errors;
mod evaluation;
mod guard;
mod model;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    model::register(m)?;
    evaluation::register(m)?;
    data::register(m)?;
    Ok(())
}
