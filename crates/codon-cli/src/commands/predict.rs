//! Predict organism-specific DNA for proteins (`predict_dna_sequence` upstream).
//!
//! ```text
//! codon predict --model DIR --protein MALWMRLL... --organism "Escherichia coli general"
//! codon predict --model DIR --input proteins.csv --output predictions.csv --match-protein
//! codon predict --method high-frequency --reference train.jsonl --input proteins.csv --output hfc.csv
//! ```
//! Batch files are CSV with columns `protein_sequence` (or `protein`) and `organism` (name or
//! id), or FASTA (`>name`, the organism from an `[organism=NAME]` header tag or `--organism`).
//! The output's extension picks its format: CSV adds `predicted_dna` (with several sequences: one
//! row per sequence, best first), `error` (empty unless the row failed) and the scores
//! `log_likelihood`, `mean_log_likelihood` and `least_likely_codons` (`position:ln p`, positions
//! from 1); `.fasta`/`.fa` holds one entry per sequence with its scores in the header; `.jsonl`
//! one object per sequence, with `--per-codon` each position's codon probabilities. The score is
//! the pseudo-log-likelihood of `codon_model::predict::SequenceScore`. `--score FILE` scores
//! existing DNA (CSV `dna` or `predicted_dna` and `organism` columns, or FASTA) the same way. Any failed row makes the exit status 1 once every row
//! is written, unless `--allow-failures`. `--protein` with `--output` writes the same file for
//! its one row. On a device that skips arithmetic (`CANDLE_ASCEND_SIM_NO_MATH=1`) a warning is
//! printed and a `no_math` column says so on every row. A batch shows its progress on stderr: a
//! bar on a terminal, a plain line every few seconds otherwise.
//!
//! `--method` picks the codon choice: the model (default), or one of upstream's baselines, which
//! read each organism's codon frequencies from `--reference` or `--codon-table`: the most frequent
//! codon (`high-frequency`), a codon drawn by its frequency (`background`), or a uniformly drawn
//! synonym (`uniform`). Every method decodes the same residues, stop included.
//!
//! Infill: `--dna` (or a `dna` column) gives known codons, `NNN` where the model chooses; known
//! codons are kept exactly. Constraints (`--avoid-sites`, `--avoid-motif`, `--gc-window` with
//! `--gc-min`/`--gc-max`, `--max-homopolymer`, `--max-repeat`) are met by synonymous changes that
//! cost the model the least log-probability; each edit is reported (stdout, or the CSV's
//! `edits`, `edit_cost` and `remaining` columns). A constraint no change can meet is an error
//! naming it and its position, unless `--best-effort`.

use crate::cli::{
    AllowFailuresArg, BatchTokensArg, ConfigArg, InputArg, ModelRunArgs, OrganismArg, OutputArg, SeedArg,
};
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::common::csv_table::CsvTable;
use super::common::design_args::{edit_lines, DesignArgs};
use super::common::prediction_output::{codon_probabilities, render, score_fields, OutputFormat, OutputRow};
use super::common::reference_args::{ReferenceArgs, References};
use crate::{errln, outln};
use anyhow::Context;
use clap::Parser;
use codon_design::{repair, Repair, RepairOptions};
use codon_eval::baselines::{background_frequency_choice, high_frequency_choice, uniform_random_choice};
use codon_model::predict::SequenceScore;
use codon_model::vocab::codon_ids_for;
use codon_model::{prediction_residues, OrganismRef, OrganismTable, PredictOptions, Predictor, ProteinInput};
use rand::SeedableRng;

/// How codons are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Method {
    /// CodonTransformer.
    Model,
    /// The most frequent codon of each amino acid in the organism's reference.
    HighFrequency,
    /// A codon drawn with its frequency in the organism's reference (seeded by --seed).
    Background,
    /// A synonymous codon drawn uniformly (seeded by --seed).
    Uniform,
}

crate::display_as_spelled!(Method);

/// Predict DNA for a protein and an organism.
#[derive(Parser)]
#[command(mut_arg("input", |a| a.requires("output")))]
pub struct Args {
    /// How codons are chosen: the model, or a baseline.
    #[arg(long, value_enum, default_value_t = Method::Model)]
    method: Method,
    #[command(flatten)]
    run: ModelRunArgs,
    #[command(flatten)]
    reference: ReferenceArgs,
    #[command(flatten)]
    config: ConfigArg,
    /// Print the organisms (id and name) the model knows (with --model, its own table), and exit.
    #[arg(long, alias = "list_organisms")]
    list_organisms: bool,
    /// Protein sequence.
    #[arg(long, conflicts_with = "input")]
    protein: Option<String>,
    #[command(flatten)]
    organism: OrganismArg,
    /// Infill (with --protein): the protein's DNA with NNN for each codon to predict.
    #[arg(long, value_name = "PARTIAL", requires = "protein")]
    dna: Option<String>,
    /// Proteins: CSV with protein_sequence (or protein) and organism columns, or FASTA (`>name`,
    /// the organism from an [organism=NAME] header tag or --organism); needs --output.
    #[command(flatten)]
    input: Option<InputArg<false>>,
    /// Score existing coding sequences instead of predicting: CSV with dna and organism columns,
    /// or FASTA (as --input). Written to --output, or as CSV on stdout.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["input", "protein"])]
    score: Option<PathBuf>,
    #[command(flatten)]
    output: Option<OutputArg<false>>,
    /// With a .jsonl --output: each codon position's allowed codons and their probabilities.
    #[arg(long, alias = "per_codon", requires = "output")]
    per_codon: bool,
    /// Only codons of each residue's amino acid.
    #[arg(long, alias = "match_protein")]
    match_protein: bool,
    /// Sample with this temperature instead of argmax.
    #[arg(long, allow_negative_numbers = true)]
    temperature: Option<f64>,
    /// Nucleus mass for sampling [default: 0.95] (sampling only: needs --temperature).
    #[arg(long, alias = "top_p", requires = "temperature", allow_negative_numbers = true)]
    top_p: Option<f64>,
    /// Sequences per protein (sampling), at most 100 as in the design service.
    #[arg(long, alias = "num_sequences", default_value_t = 1, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=codon_model::MAX_NUM_SEQUENCES as u64))]
    num_sequences: usize,
    #[command(flatten)]
    allow_failures: AllowFailuresArg,
    #[command(flatten)]
    batch_tokens: BatchTokensArg,
    #[command(flatten)]
    seed: SeedArg<0>,
    #[command(flatten)]
    design: DesignArgs,
}

impl Args {
    /// The `--output` file, when one was given.
    fn output_path(&self) -> Option<&std::path::Path> {
        self.output.as_ref().map(|o| o.path.as_path())
    }

    /// The `--input` file, when one was given.
    fn input_path(&self) -> Option<&std::path::Path> {
        self.input.as_ref().map(|i| i.path.as_path())
    }
}

/// One predicted DNA, with the model's codon scores when constraints or --per-codon need them,
/// and its score (the model's predictions only).
struct Predicted {
    dna: String,
    scores: Option<Vec<[f32; 64]>>,
    score: Option<SequenceScore>,
}

impl Predicted {
    /// The score of `dna` (the prediction, or its repair) against the model's codon scores.
    fn score_of(&self, dna: &str) -> Option<SequenceScore> {
        if dna == self.dna {
            return self.score.clone();
        }
        self.scores.as_ref().and_then(|s| SequenceScore::of(s, dna).ok())
    }
}

/// Proteins done, on stderr: an indicatif bar on a terminal, else a line every few seconds.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
    done_verb: &'static str,
    noun: &'static str,
    total: usize,
    done: usize,
    start: Instant,
    last_line: Instant,
}

impl Progress {
    const LINE_EVERY: Duration = Duration::from_secs(5);

    /// Progress of `total` items, each line saying what was done to them (`predicted`, `scored`).
    fn new(total: usize, done_verb: &'static str) -> Self {
        let template = "{bar:40} {pos}/{len} {msg}  {per_sec}  elapsed {elapsed}  ETA {eta}";
        let bar = codon_train::progress::terminal_bar(total, template);
        let noun = if done_verb == "scored" { "sequences" } else { "proteins" };
        if let Some(bar) = &bar {
            bar.set_message(noun);
        }
        let now = Instant::now();
        Self { bar, total, done: 0, start: now, last_line: now, done_verb, noun }
    }

    fn advance(&mut self, n: usize) {
        self.done += n;
        if let Some(bar) = &self.bar {
            bar.inc(n as u64);
            return;
        }
        if self.done < self.total && self.last_line.elapsed() < Self::LINE_EVERY {
            return;
        }
        self.last_line = Instant::now();
        let seconds = self.start.elapsed().as_secs_f64();
        let rate = self.done as f64 / seconds.max(1e-9);
        let eta = self.total.saturating_sub(self.done) as f64 / rate.max(1e-9);
        let (verb, noun) = (self.done_verb, self.noun);
        errln!("{verb} {}/{} {noun}, {rate:.2} {noun}/s, ETA {eta:.0} s", self.done, self.total);
    }

    fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}

/// Upstream's baselines, each protein's draws seeded by (seed, row).
struct Baseline {
    method: Method,
    references: Option<References>,
    seed: u64,
    num_sequences: usize,
}

impl Baseline {
    fn predict(&self, input: &ProteinInput, row: usize) -> anyhow::Result<Vec<Predicted>> {
        anyhow::ensure!(input.known_dna.is_none(), "known codons (infill) need --method model");
        let residues = prediction_residues(&input.protein)?;
        let organism = input.organism.resolve()?;
        let frequencies = match (&self.references, self.method) {
            (_, Method::Uniform) | (None, _) => None,
            (Some(r), _) => Some(r.for_organism(Some(organism)).map_err(anyhow::Error::msg)?.frequencies),
        };
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(codon_data::mix_seed(self.seed, row as u64));
        (0..self.num_sequences)
            .map(|_| {
                let dna = match (self.method, &frequencies) {
                    (Method::HighFrequency, Some(f)) => high_frequency_choice(&residues, f)?,
                    (Method::Background, Some(f)) => background_frequency_choice(&residues, f, &mut rng)?,
                    (Method::Uniform, _) => uniform_random_choice(&residues, &mut rng)?,
                    _ => anyhow::bail!("--method {} needs --reference or --codon-table", self.method),
                };
                Ok(Predicted { dna: dna.as_str().to_string(), scores: None, score: None })
            })
            .collect()
    }
}

/// Print the organisms (id and name) a model knows: the built-in ones, or with `model` its own
/// table (a model taught more keeps one beside its weights).
pub fn list_organisms(model: Option<&std::path::Path>) -> anyhow::Result<()> {
    let organisms = model_organisms(model)?;
    for (id, name) in organisms.names().iter().enumerate() {
        if crate::output::stdout_closed() {
            break;
        }
        outln!("{id}\t{name}");
    }
    Ok(())
}

/// The organisms of the model `--model` names (a folder, a checkpoint file or a Hub id): the
/// built-in ones, or the table stored with a model taught more.
fn model_organisms(model: Option<&std::path::Path>) -> anyhow::Result<OrganismTable> {
    let Some(spec) = model else { return Ok(OrganismTable::default()) };
    Ok(OrganismTable::for_model(&codon_model::hub::resolve_model(spec)?)?)
}

/// Run `codon predict`.
pub fn run(args: Args) -> anyhow::Result<()> {
    if args.list_organisms {
        return list_organisms(args.run.model.as_deref());
    }
    // The organism is checked before the model is opened (a Hub model may need a download): a
    // local model's own table, else the built-in one.
    let organisms = args.run.model.as_deref().map(OrganismTable::for_model).transpose()?.unwrap_or_default();
    if let Some(output) = args.output_path() {
        // A model folder's files are inputs too: an output inside the folder is refused.
        let inputs: Vec<&std::path::Path> =
            [args.input_path(), args.score.as_deref(), args.run.model.as_deref(), args.config.path.as_deref()]
                .into_iter()
                .flatten()
                .chain(args.reference.paths())
                .collect();
        codon_files::refuse_overwriting(&inputs, &[output])?;
        codon_files::check_output_location(output)?;
    }
    if let Some(organism) = &args.organism.name {
        organisms.resolve(&OrganismRef::parse(organism)).context("--organism (predict --list-organisms lists them)")?;
    }
    let constraints = args.design.constraints()?;
    let designer =
        Designer { constraints, options: RepairOptions { best_effort: args.design.best_effort, ..Default::default() } };
    if !designer.constraints.is_empty() && args.method != Method::Model {
        anyhow::bail!("constraints are repaired with the model's scores: use them with --method model");
    }
    if let Some(file) = &args.score {
        anyhow::ensure!(args.method == Method::Model, "--score uses the model: drop --method");
        anyhow::ensure!(designer.constraints.is_empty(), "--score scores sequences as given: drop the constraints");
        return score_sequences(&args, file);
    }
    let (predict, no_math) = match args.method {
        Method::Model => model_predictions(&args, !designer.constraints.is_empty() || args.per_codon)?,
        method => (baseline_predictions(&args, method)?, false),
    };
    if no_math {
        errln!("{}", crate::NO_MATH_WARNING);
    }
    let table = match (&args.protein, args.input_path(), args.output_path()) {
        (Some(protein), _, None) => return print_predictions(&args, protein, &designer, &predict),
        // One protein with --output: a one-row batch, written as a batch is.
        (Some(protein), _, Some(_)) => one_row_table(&args, protein)?,
        (None, Some(input), Some(_)) => {
            CsvTable::read_any(input, "protein_sequence", args.organism.name.as_deref(), true)?
        }
        _ => anyhow::bail!("give --protein and --organism, --input FILE and --output FILE, or --score FILE"),
    };
    let output = args.output_path().unwrap_or(std::path::Path::new(""));
    let format = OutputFormat::of(output);
    anyhow::ensure!(
        !args.per_codon || format == OutputFormat::Jsonl,
        "--per-codon writes each position's codon probabilities into a .jsonl --output"
    );
    let items = table.protein_inputs()?;
    let mut progress = Progress::new(items.len(), "predicted");
    let results = predict(&items, &mut |n| progress.advance(n))?;
    progress.finish();
    let (mut failed, mut unsatisfied) = (0, 0);
    let designing = !designer.constraints.is_empty();
    let columns: &[&str] = if designing {
        &["predicted_dna", "edits", "edit_cost", "remaining", "error"]
    } else {
        &["predicted_dna", "error"]
    };
    let mut rows: Vec<OutputRow<'_>> = Vec::new();
    for (i, (row, result)) in table.rows.iter().zip(results).enumerate() {
        let designed: anyhow::Result<Vec<OutputRow<'_>>> = result.and_then(|predictions| {
            predictions
                .iter()
                .enumerate()
                .map(|(k, p)| {
                    let (dna, mut fields) = match designer.apply(p)? {
                        None => (p.dna.clone(), vec![p.dna.clone()]),
                        Some(r) => {
                            let remaining: Vec<String> = r.remaining.iter().map(ToString::to_string).collect();
                            let fields = vec![
                                r.dna.clone(),
                                edit_lines(&r).join("; "),
                                format!("{:.6}", r.cost),
                                remaining.join("; "),
                            ];
                            (r.dna, fields)
                        }
                    };
                    if let Some(warning) = mismatch_warning(&items[i].protein, &dna) {
                        errln!("warning: {}: {warning}", table.location(i));
                    }
                    fields.resize(columns.len(), String::new());
                    Ok(OutputRow {
                        input: row,
                        row: i,
                        rank: k + 1,
                        score: p.score_of(&dna),
                        per_codon: args.per_codon.then(|| p.scores.as_deref().map(codon_probabilities)).flatten(),
                        dna: Some(dna),
                        fields,
                    })
                })
                .collect()
        });
        match designed {
            Ok(mut sequences) => rows.append(&mut sequences),
            Err(e) => {
                failed += 1;
                unsatisfied += usize::from(e.downcast_ref::<codon_design::DesignError>().is_some());
                errln!("{}: {e}", table.location(i));
                let mut fields = vec![String::new(); columns.len() - 1];
                fields.push(crate::error_line(e.as_ref()));
                rows.push(OutputRow { input: row, row: i, rank: 1, dna: None, fields, score: None, per_codon: None });
            }
        }
    }
    // On a device that skips its arithmetic, every row says its DNA is meaningless.
    let mark = no_math.then_some(("no_math", "true"));
    let bytes = render(format, &table.headers, columns, &rows, mark)?;
    codon_files::write_atomically(output, |w| w.write_all(&bytes))?;
    let ranked = if args.num_sequences > 1 { ", each protein's sequences best first by log-likelihood" } else { "" };
    crate::reportln!(
        output,
        "predicted {} proteins ({failed} failed){ranked}; wrote {}",
        table.rows.len() - failed,
        output.display()
    );
    if failed > 0 && !args.allow_failures.allowed {
        let hint = match unsatisfied {
            0 => String::new(),
            n => format!(
                "; {n} have a constraint no synonymous change can meet (--best-effort keeps the closest sequence)"
            ),
        };
        // A FASTA file has no error column: its failed entries' errors are the lines above.
        let where_errors = match format {
            OutputFormat::Fasta => "their errors are on stderr above, one line each".to_string(),
            _ => format!("their errors are in the error column of {}", output.display()),
        };
        anyhow::bail!("{failed} of {} rows failed{hint} ({where_errors}; --allow-failures exits 0)", table.rows.len());
    }
    Ok(())
}

/// `--score FILE`: the model's score of each sequence as given.
fn score_sequences(args: &Args, file: &std::path::Path) -> anyhow::Result<()> {
    let table = CsvTable::read_any(file, "dna", args.organism.name.as_deref(), true)?;
    // predict's own output can be scored as it is.
    let (dna_col, organism_col) = (table.first_column(&["dna", "predicted_dna"])?, table.column("organism")?);
    let items: Vec<(String, OrganismRef)> = table
        .rows
        .iter()
        .map(|r| (r.get(dna_col).unwrap_or("").to_string(), OrganismRef::parse(r.get(organism_col).unwrap_or(""))))
        .collect();
    let (predictor, options, no_math) = load_predictor(args, false)?;
    if no_math {
        errln!("{}", crate::NO_MATH_WARNING);
    }
    let mut progress = Progress::new(items.len(), "scored");
    let scores = predictor.score_batch(&items, &options, &mut |n| progress.advance(n))?;
    progress.finish();
    let mut failed = 0;
    let rows: Vec<OutputRow<'_>> = table
        .rows
        .iter()
        .zip(scores)
        .enumerate()
        .map(|(i, (row, score))| match score {
            Ok(score) => OutputRow {
                input: row,
                row: i,
                rank: 1,
                dna: Some(items[i].0.to_uppercase()),
                fields: vec![String::new()],
                score: Some(score),
                per_codon: None,
            },
            Err(e) => {
                failed += 1;
                errln!("{}: {e}", table.location(i));
                let fields = vec![crate::error_line(&e)];
                OutputRow { input: row, row: i, rank: 1, dna: None, fields, score: None, per_codon: None }
            }
        })
        .collect();
    let mark = no_math.then_some(("no_math", "true"));
    match args.output_path() {
        Some(output) => {
            let bytes = render(OutputFormat::of(output), &table.headers, &["error"], &rows, mark)?;
            codon_files::write_atomically(output, |w| w.write_all(&bytes))?;
            crate::reportln!(
                output,
                "scored {} sequences ({failed} failed); wrote {}",
                rows.len() - failed,
                output.display()
            );
        }
        None => {
            outln!("row,log_likelihood,mean_log_likelihood,least_likely_codons,error");
            for r in &rows {
                let [ll, mean, lowest] = score_fields(r.score.as_ref());
                outln!("{},{ll},{mean},{lowest},{}", r.row + 1, r.fields[0]);
            }
        }
    }
    if failed > 0 && !args.allow_failures.allowed {
        anyhow::bail!("{failed} of {} sequences could not be scored (--allow-failures exits 0)", rows.len());
    }
    Ok(())
}

/// `--protein` without `--output`: each sequence on stdout, with the edits that met the constraints.
fn print_predictions(args: &Args, protein: &str, designer: &Designer, predict: &PredictFn<'_>) -> anyhow::Result<()> {
    let organism = args.organism.name.as_deref().ok_or_else(|| anyhow::anyhow!("--protein needs --organism"))?;
    let items = [ProteinInput {
        protein: protein.to_string(),
        organism: OrganismRef::parse(organism),
        known_dna: args.dna.clone(),
    }];
    let predictions = predict(&items, &mut |_| {})?.pop().unwrap_or_else(|| Err(anyhow::anyhow!("no prediction")))?;
    if predictions.len() > 1 && predictions[0].score.is_some() {
        errln!("{} sequences, best first by log-likelihood", predictions.len());
    }
    for (k, predicted) in predictions.iter().enumerate() {
        let repair = designer.apply(predicted)?;
        let dna = repair.as_ref().map_or(&predicted.dna, |r| &r.dna);
        if let Some(warning) = mismatch_warning(protein, dna) {
            errln!("warning: {warning}");
        }
        if let Some(score) = predicted.score_of(dna) {
            let [ll, mean, lowest] = score_fields(Some(&score));
            errln!(
                "sequence {}: log-likelihood {ll} (mean {mean} per codon); least likely codons (position:ln p) {lowest}",
                k + 1
            );
        }
        match repair {
            None => outln!("{}", predicted.dna),
            Some(repair) => {
                outln!("{}", repair.dna);
                for line in edit_lines(&repair) {
                    outln!("edit: {line}");
                }
                outln!("log-probability cost: {:.3} over {} edits", repair.cost, repair.edits.len());
                for v in &repair.remaining {
                    outln!("remaining: {v}");
                }
            }
        }
    }
    Ok(())
}

/// Why `dna` is not a coding sequence of `protein`, if it is not: the model may choose a codon
/// of another amino acid unless `--match-protein`. Ambiguous residues (X, B, Z, …) match anything.
fn mismatch_warning(protein: &str, dna: &str) -> Option<String> {
    let residues = prediction_residues(protein).ok()?;
    let encoded = codon_data::translate(dna).ok()?;
    let given: Vec<char> =
        protein.trim().chars().map(|c| if c == '*' { '_' } else { c.to_ascii_uppercase() }).collect();
    let (i, (wanted, got)) = residues
        .chars()
        .zip(encoded.chars())
        .enumerate()
        .find(|&(i, (wanted, got))| wanted != got && given.get(i).is_none_or(|&g| !codon_ids_for(g).is_empty()))?;
    Some(format!(
        "the predicted DNA does not encode the protein: residue {} is {wanted}, but codon {} encodes {got} (--match-protein keeps every residue's amino acid)",
        i + 1,
        dna.get(3 * i..3 * i + 3).unwrap_or("?")
    ))
}

/// `--protein`, `--organism` and `--dna` as the one row of a batch table.
fn one_row_table(args: &Args, protein: &str) -> anyhow::Result<CsvTable> {
    let organism = args.organism.name.as_deref().ok_or_else(|| anyhow::anyhow!("--protein needs --organism"))?;
    let mut headers = vec!["protein_sequence", "organism"];
    let mut row = vec![protein, organism];
    if let Some(dna) = &args.dna {
        headers.push("dna");
        row.push(dna);
    }
    Ok(CsvTable {
        path: std::path::PathBuf::from("--protein"),
        headers: csv::StringRecord::from(headers),
        rows: vec![csv::StringRecord::from(row)],
        fasta: false,
    })
}

/// The constraints, and their repair of a prediction.
struct Designer {
    constraints: Vec<codon_design::Constraint>,
    options: RepairOptions,
}

impl Designer {
    /// The repaired prediction, or `None` without constraints.
    fn apply(&self, predicted: &Predicted) -> anyhow::Result<Option<Repair>> {
        if self.constraints.is_empty() {
            return Ok(None);
        }
        let scores = predicted.scores.as_ref().ok_or_else(|| anyhow::anyhow!("constraints need the model's scores"))?;
        Ok(Some(repair(&predicted.dna, scores, &self.constraints, &self.options)?))
    }
}

/// Predictions of each item (its DNA sequences, or its error); `progress(n)` as `n` are done.
type PredictFn<'a> =
    Box<dyn Fn(&[ProteinInput], &mut dyn FnMut(usize)) -> anyhow::Result<Vec<anyhow::Result<Vec<Predicted>>>> + 'a>;

/// The model's predictions, and whether its device skips arithmetic (its values are then meaningless).
fn model_predictions(args: &Args, keep_codon_scores: bool) -> anyhow::Result<(PredictFn<'static>, bool)> {
    let (predictor, options, no_math) = load_predictor(args, keep_codon_scores)?;
    let predict: PredictFn<'static> = Box::new(move |items, progress| {
        let results = predictor.predict_batch_with_progress(items, &options, progress)?;
        Ok(results
            .into_iter()
            .map(|r| {
                Ok(r?
                    .into_iter()
                    .map(|p| Predicted { dna: p.predicted_dna, scores: p.codon_log_probs, score: Some(p.score) })
                    .collect())
            })
            .collect())
    });
    Ok((predict, no_math))
}

/// The model on its device with the prediction options the flags give, and whether the device
/// skips arithmetic.
fn load_predictor(args: &Args, keep_codon_scores: bool) -> anyhow::Result<(Predictor, PredictOptions, bool)> {
    let device = args.run.device.open()?;
    let no_math = crate::skips_math(&device);
    let options = PredictOptions {
        deterministic: args.temperature.is_none(),
        temperature: args.temperature.unwrap_or(0.2),
        top_p: args.top_p.unwrap_or(0.95),
        num_sequences: args.num_sequences,
        match_protein: args.match_protein,
        seed: args.seed.value,
        keep_codon_scores,
        max_batch_tokens: args.batch_tokens.value,
        max_padding_fraction: codon_model::predict::max_padding_fraction_on(&device),
        ..Default::default()
    };
    options.validate()?;
    // The arguments were checked before this, so a mistake costs no download.
    let predictor = crate::predictor::open_predictor(
        args.run.model.as_deref(),
        args.config.path.as_deref(),
        &device,
        args.run.dtype.into(),
    )?;
    if let Some(ascend) = candle_ascend::ascend_device(&device) {
        preflight(ascend, &predictor, &options)?;
    }
    Ok((predictor, options, no_math))
}

fn baseline_predictions(args: &Args, method: Method) -> anyhow::Result<PredictFn<'static>> {
    if args.temperature.is_some() || args.run.model.is_some() {
        anyhow::bail!("--method {method}: --model and --temperature belong to --method model");
    }
    if method == Method::HighFrequency && args.num_sequences > 1 {
        anyhow::bail!("--method high-frequency is deterministic: --num-sequences must be 1");
    }
    let references = (method != Method::Uniform).then(|| args.reference.load(|_| false)).transpose()?;
    let baseline = Baseline { method, references, seed: args.seed.value, num_sequences: args.num_sequences.max(1) };
    Ok(Box::new(move |items, progress| {
        Ok(items
            .iter()
            .enumerate()
            .map(|(row, input)| {
                let result = baseline.predict(input, row);
                progress(1);
                result
            })
            .collect())
    }))
}

/// A prediction of a short and a long protein with every launch reduced to phase 1: fails before
/// the first real prediction, listing every op the part refuses. The long one reaches the model's
/// block-sparse length where it has one, so the preflight launches what any input can.
fn preflight(
    ascend: &candle_ascend::AscendDevice,
    predictor: &Predictor,
    options: &PredictOptions,
) -> anyhow::Result<()> {
    let c = predictor.model().config();
    // Residues: [CLS] and [SEP] take two of the probe's tokens.
    let long = c.block_sparse_probe_len().saturating_sub(2).max(1);
    let items: Vec<(String, OrganismRef)> =
        [1, long].iter().map(|&n| ("M".repeat(n), OrganismRef::Name(codon_model::DEFAULT_ORGANISM.into()))).collect();
    ascend.preflight(|| {
        predictor.predict_batch(&items, options).map(|_| ()).map_err(|e| candle_core::Error::Msg(e.to_string()))
    })?;
    errln!("preflight on {}: every op of a prediction is supported", ascend.soc().name);
    Ok(())
}
