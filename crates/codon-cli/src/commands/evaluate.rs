//! Evaluate DNA sequences with CodonTransformer's metrics (upstream `CodonEvaluation`).
//!
//! ```text
//! codon evaluate --input seqs.csv --reference train.jsonl --output metrics.csv
//! codon evaluate --input seqs.csv --codon-table ecoli.kazusa.txt --output metrics.csv --plot plots/
//! ```
//! `--input` has the columns `dna` and `organism` (a name or an id; not needed with
//! `--codon-table`), and optionally `reference_dna` (an empty cell: none for that row). The output adds `csi`, `gc_content`, `cfd`,
//! `minmax_mean`, `similarity` (with `reference_dna`), `complexity` and `error`. A row that cannot
//! be evaluated is reported with its row number, keeps its place with an empty result and an
//! error, and makes the command exit non-zero once every row is written (unless `--allow-failures`).

use crate::cli::{AllowFailuresArg, FileArgs};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::common::csv_table::CsvTable;
use super::common::reference_args::{ReferenceArgs, References};
use crate::{errln, outln};
use clap::Parser;
use codon_eval::metrics::{min_max_profile, DEFAULT_CFD_THRESHOLD, DEFAULT_MINMAX_WINDOW, MAX_MINMAX_WINDOW};
use codon_eval::plot::{plot_distributions, plot_minmax, reference_band, OrganismValues, ProfileBand, ProfileSeries};
use codon_eval::{Dna, MetricOptions, OrganismReference, SequenceMetrics};
use codon_model::{organism_name, parse_organism};
use rayon::prelude::*;

/// Evaluate DNA sequences against their organism's reference codon usage.
#[derive(Parser)]
pub struct Args {
    #[command(flatten)]
    files: FileArgs,
    #[command(flatten)]
    reference: ReferenceArgs,
    /// %MinMax window, in codons.
    #[arg(long, default_value_t = DEFAULT_MINMAX_WINDOW,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=MAX_MINMAX_WINDOW as u64))]
    window: usize,
    /// CFD: a codon is rare below this fraction of its most frequent synonym's frequency.
    #[arg(long, alias = "cfd_threshold", default_value_t = DEFAULT_CFD_THRESHOLD)]
    cfd_threshold: f64,
    /// Write one %MinMax SVG per row and a summary SVG of CSI and GC per organism into this folder.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// The column holding the DNA to evaluate [default: dna, or predict's predicted_dna].
    #[arg(long, alias = "dna_column")]
    dna_column: Option<String>,
    #[command(flatten)]
    allow_failures: AllowFailuresArg,
}

/// One input row, resolved.
struct Row {
    organism: Option<u32>,
    dna: Result<Dna, String>,
    reference_dna: Option<Result<Dna, String>>,
}

/// The metric columns, in output order (`similarity` only with `reference_dna`).
const METRIC_COLUMNS: [&str; 6] = ["csi", "gc_content", "cfd", "minmax_mean", "similarity", "complexity"];

pub fn run(args: Args) -> anyhow::Result<()> {
    if !(args.cfd_threshold.is_finite() && args.cfd_threshold >= 0.0) {
        anyhow::bail!("--cfd-threshold {}: must be a non-negative number", args.cfd_threshold);
    }
    let inputs: Vec<&Path> = std::iter::once(args.files.input.path.as_path()).chain(args.reference.paths()).collect();
    codon_files::refuse_overwriting(&inputs, &[&args.files.output.path])?;

    if let Some(dir) = args.plot.as_deref().filter(|d| d.exists() && !d.is_dir()) {
        anyhow::bail!("--plot {}: a file is there; give a folder", dir.display());
    }
    codon_files::check_output_location(&args.files.output.path)?;
    let table = CsvTable::read_any(&args.files.input.path, "dna", None, false)?;
    let dna_col = match &args.dna_column {
        Some(name) => table.column(name)?,
        None => table.first_column(&["dna", "predicted_dna"])?,
    };
    let organism_col = if args.reference.is_single_table() {
        // FASTA entries without [organism=...] tags: the one table covers them.
        let untagged = |c: usize| table.fasta && table.rows.iter().all(|r| r.get(c).is_none_or(str::is_empty));
        table.optional_column("organism").filter(|&c| !untagged(c))
    } else {
        Some(table.column("organism")?)
    };
    let reference_col = table.optional_column("reference_dna");
    let rows: Vec<Result<Row, String>> = table
        .rows
        .iter()
        .map(|r| {
            let field = |c: usize| r.get(c).unwrap_or("");
            let organism =
                organism_col.map(|c| parse_organism(field(c)).map_err(|e| format!("organism: {e}"))).transpose()?;
            Ok(Row {
                organism,
                dna: Dna::parse(field(dna_col)).map_err(|e| format!("dna: {e}")),
                // An empty cell: no reference DNA for this row.
                reference_dna: reference_col
                    .filter(|&c| !field(c).trim().is_empty())
                    .map(|c| Dna::parse(field(c)).map_err(|e| format!("reference_dna: {e}"))),
            })
        })
        .collect();

    let organisms: BTreeSet<u32> = rows.iter().flatten().filter_map(|r| r.organism).collect();
    let plotting = args.plot.is_some();
    let references = args.reference.load(|id| plotting && organisms.contains(&id))?;
    let mut by_organism: BTreeMap<Option<u32>, Result<OrganismReference, String>> = BTreeMap::new();
    for row in rows.iter().flatten() {
        by_organism.entry(row.organism).or_insert_with(|| references.for_organism(row.organism));
    }

    let options = MetricOptions { window: args.window, cfd_threshold: args.cfd_threshold };
    let results: Vec<Result<SequenceMetrics, String>> = rows
        .par_iter()
        .map(|row| {
            let row = row.as_ref().map_err(Clone::clone)?;
            let reference = by_organism[&row.organism].as_ref().map_err(Clone::clone)?;
            let dna = row.dna.as_ref().map_err(Clone::clone)?;
            let reference_dna = row.reference_dna.as_ref().map(|r| r.as_ref().map_err(Clone::clone)).transpose()?;
            reference.evaluate(dna, reference_dna, &options).map_err(|e| e.to_string())
        })
        .collect();

    let mut failed = 0;
    for (i, result) in results.iter().enumerate() {
        if let Err(e) = result {
            failed += 1;
            errln!("{}: {e}", table.location(i));
        }
    }
    write_output(&args.files.output.path, &table, reference_col.is_some(), &results)?;
    print_summary(&rows, &results, reference_col.is_some());
    if let Some(dir) = &args.plot {
        let written = write_plots(dir, &rows, &results, &references, &by_organism, &options)?;
        outln!("plots: {written} SVG files in {}", dir.display());
    }
    crate::reportln!(
        &args.files.output.path,
        "evaluated {} of {} rows; wrote {}",
        results.len() - failed,
        results.len(),
        args.files.output.path.display()
    );
    if failed > 0 && !args.allow_failures.allowed {
        anyhow::bail!(
            "{failed} of {} rows could not be evaluated (their errors are in the error column of {}; --allow-failures exits 0)",
            results.len(),
            args.files.output.path.display()
        );
    }
    Ok(())
}

/// A metric's column text: shortest round-trip decimal, empty when absent.
fn cell(value: Option<f64>) -> String {
    value.map_or(String::new(), |v| v.to_string())
}

fn metric_values(m: &SequenceMetrics) -> [Option<f64>; 6] {
    [Some(m.csi), Some(m.gc_content), Some(m.cfd), m.minmax_mean, m.similarity, Some(m.complexity)]
}

fn selected_columns(with_similarity: bool) -> impl Iterator<Item = usize> {
    (0..METRIC_COLUMNS.len()).filter(move |&i| with_similarity || METRIC_COLUMNS[i] != "similarity")
}

fn write_output(
    path: &Path,
    table: &CsvTable,
    with_similarity: bool,
    results: &[Result<SequenceMetrics, String>],
) -> anyhow::Result<()> {
    let mut writer = csv::Writer::from_writer(Vec::new());
    // An input with an error column (predict's) keeps it, and this command's errors go there too.
    let input_error = table.optional_column("error");
    let header: Vec<&str> = table
        .headers
        .iter()
        .enumerate()
        .filter(|(c, _)| Some(*c) != input_error)
        .map(|(_, h)| h)
        .chain(selected_columns(with_similarity).map(|i| METRIC_COLUMNS[i]))
        .chain(["error"])
        .collect();
    writer.write_record(&header)?;
    for (row, result) in table.rows.iter().zip(results) {
        let earlier_error = input_error.and_then(|c| row.get(c)).filter(|e| !e.is_empty());
        let mut record: Vec<String> =
            row.iter().enumerate().filter(|(c, _)| Some(*c) != input_error).map(|(_, v)| v.to_string()).collect();
        match result {
            Ok(m) => {
                let values = metric_values(m);
                record.extend(selected_columns(with_similarity).map(|i| cell(values[i])));
                record.push(earlier_error.unwrap_or_default().to_string());
            }
            Err(e) => {
                record.extend(selected_columns(with_similarity).map(|_| String::new()));
                record.push(earlier_error.map_or_else(|| e.clone(), str::to_string));
            }
        }
        writer.write_record(&record)?;
    }
    let bytes = writer.into_inner().map_err(|e| anyhow::anyhow!("{e}"))?;
    codon_files::write_atomically(path, |w| w.write_all(&bytes))?;
    Ok(())
}

fn organism_label(organism: Option<u32>) -> String {
    organism.map_or_else(
        || "(codon table)".to_string(),
        |id| organism_name(i64::from(id)).map_or(id.to_string(), str::to_string),
    )
}

/// Mean and sample standard deviation (pandas' `std`, ddof 1) of the finite values.
fn mean_std(values: &[f64]) -> Option<(f64, f64)> {
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    let n = finite.len() as f64;
    let mean = (!finite.is_empty()).then(|| finite.iter().sum::<f64>() / n)?;
    let var = finite.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    Some((mean, var.sqrt()))
}

fn print_summary(rows: &[Result<Row, String>], results: &[Result<SequenceMetrics, String>], with_similarity: bool) {
    let mut groups: BTreeMap<String, Vec<&SequenceMetrics>> = BTreeMap::new();
    for (row, result) in rows.iter().zip(results) {
        if let (Ok(row), Ok(m)) = (row, result) {
            groups.entry(organism_label(row.organism)).or_default().push(m);
        }
    }
    let columns: Vec<usize> = selected_columns(with_similarity).collect();
    let width = groups.keys().map(String::len).max().unwrap_or(8).max(8);
    let mut header = format!("{:<width$} {:>5}", "organism", "n");
    for &c in &columns {
        header.push_str(&format!(" {:>21}", format!("{} mean ± sd", METRIC_COLUMNS[c])));
    }
    outln!("{header}");
    for (organism, metrics) in &groups {
        let mut line = format!("{organism:<width$} {:>5}", metrics.len());
        for &c in &columns {
            let values: Vec<f64> = metrics.iter().filter_map(|m| metric_values(m)[c]).collect();
            let text = match mean_std(&values) {
                Some((mean, sd)) if sd.is_finite() => format!("{mean:.4} ± {sd:.4}"),
                Some((mean, _)) => format!("{mean:.4}"),
                None => "-".to_string(),
            };
            line.push_str(&format!(" {text:>21}"));
        }
        outln!("{line}");
    }
}

fn write_plots(
    dir: &Path,
    rows: &[Result<Row, String>],
    results: &[Result<SequenceMetrics, String>],
    references: &References,
    by_organism: &BTreeMap<Option<u32>, Result<OrganismReference, String>>,
    options: &MetricOptions,
) -> anyhow::Result<usize> {
    std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("--plot {}: {e}", dir.display()))?;
    // An earlier run's plots go first: a row-N.svg left behind would describe another sequence.
    for entry in std::fs::read_dir(dir).map_err(|e| anyhow::anyhow!("--plot {}: {e}", dir.display()))?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let row_plot = name
            .strip_prefix("row-")
            .and_then(|n| n.strip_suffix(".svg"))
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if row_plot || name == "summary.svg" {
            std::fs::remove_file(entry.path()).map_err(|e| anyhow::anyhow!("{}: {e}", entry.path().display()))?;
        }
    }
    let mut bands: BTreeMap<Option<u32>, Option<ProfileBand>> = BTreeMap::new();
    let mut summary: BTreeMap<String, OrganismValues> = BTreeMap::new();
    let mut written = 0;
    for (i, (row, result)) in rows.iter().zip(results).enumerate() {
        let (Ok(row), Ok(metrics)) = (row, result) else { continue };
        let Some(Ok(reference)) = by_organism.get(&row.organism) else { continue };
        let label = organism_label(row.organism);
        let band = bands.entry(row.organism).or_insert_with(|| {
            let sequences = row.organism.map_or(&[][..], |id| references.sequences(id));
            reference_band(sequences, reference, options)
        });
        let reference_profile = match &row.reference_dna {
            Some(Ok(r)) => Some(min_max_profile(r, &reference.frequencies, options.window)?),
            _ => None,
        };
        let mut series = vec![ProfileSeries { name: "sequence", values: &metrics.minmax }];
        if let Some(p) = &reference_profile {
            series.push(ProfileSeries { name: "reference_dna", values: p });
        }
        let path = dir.join(format!("row-{:04}.svg", i + 1));
        let title = format!("row {}: %MinMax, {label}, window {}", i + 1, options.window);
        plot_minmax(&path, &title, &series, band.as_ref())?;
        written += 1;
        let values = summary.entry(label.clone()).or_insert_with(|| OrganismValues {
            organism: label,
            csi: Vec::new(),
            gc_content: Vec::new(),
        });
        values.csi.push(metrics.csi);
        values.gc_content.push(metrics.gc_content);
    }
    let summary: Vec<OrganismValues> = summary.into_values().collect();
    plot_distributions(&dir.join("summary.svg"), &summary)?;
    Ok(written + 1)
}
