//! `codon_ascend._native`: the Rust half of the `codon_ascend` Python package. The Python half
//! (`py_src/codon_ascend`) gives it upstream CodonTransformer's module layout, names and
//! defaults; everything that computes is here, and each call releases the GIL while it runs.

use pyo3::prelude::*;

mod data;
mod errors;
mod evaluation;
mod guard;
mod model;

/// Run the `codon` program with `argv` (its first item the program's name), as the wheel's
/// `codon` command does; returns the exit status. In a process forked after the extension
/// started its threads it raises `RuntimeError` instead ([`guard::threads_here`]).
#[pyfunction]
fn run_cli(py: Python<'_>, argv: Vec<String>) -> PyResult<i32> {
    guard::threads_here("run_cli")?;
    Ok(py.detach(|| codon_cli::commands::main_from(argv)))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(run_cli, m)?)?;
    model::register(m)?;
    evaluation::register(m)?;
    data::register(m)?;
    Ok(())
}
