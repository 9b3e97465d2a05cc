//! What `predict` writes, in the format the output's extension names: `.fasta`/`.fa`/`.fna`
//! (one entry per sequence, its scores in the header), `.jsonl` (one object per sequence, with
//! the per-codon probabilities when asked), or CSV (the input's columns, then the prediction's).

use std::collections::BTreeMap;
use std::path::Path;

use codon_model::predict::SequenceScore;

/// The score columns every format carries.
pub const SCORE_COLUMNS: [&str; 3] = ["log_likelihood", "mean_log_likelihood", "least_likely_codons"];

/// An output file's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    Csv,
    Jsonl,
    Fasta,
}

impl OutputFormat {
    /// The format of `path`, by extension: CSV unless it says JSON Lines or FASTA.
    pub fn of(path: &Path) -> Self {
        match path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
            Some("jsonl" | "ndjson") => Self::Jsonl,
            Some("fasta" | "fa" | "fna" | "fas" | "ffn") => Self::Fasta,
            _ => Self::Csv,
        }
    }
}

/// One written sequence (or one failed input row).
pub struct OutputRow<'a> {
    /// The input row it answers.
    pub input: &'a csv::StringRecord,
    /// Its index among the input rows, from 0.
    pub row: usize,
    /// Its rank among the row's sequences, from 1 (best first).
    pub rank: usize,
    /// The sequence a FASTA entry holds; `None` for a failed row.
    pub dna: Option<String>,
    /// The values of the output's own columns (`columns` of [`write`]).
    pub fields: Vec<String>,
    /// The model's score of `dna`, where the model made or scored it.
    pub score: Option<SequenceScore>,
    /// Per codon position, the allowed codons' probabilities (with `--per-codon`).
    pub per_codon: Option<Vec<BTreeMap<String, f64>>>,
}

/// The allowed codons' probabilities at each position, from log-probabilities (−∞: not allowed),
/// renormalised as [`SequenceScore`] does.
pub fn codon_probabilities(log_probs: &[[f32; 64]]) -> Vec<BTreeMap<String, f64>> {
    log_probs
        .iter()
        .map(|row| {
            let renormalised = codon_model::predict::renormalised(row);
            (0..64)
                .filter(|&i| row[i].is_finite())
                .filter_map(|i| {
                    let codon = codon_model::vocab::codon_at(i)?;
                    Some((String::from_utf8_lossy(&codon).into_owned(), renormalised[i].exp()))
                })
                .collect()
        })
        .collect()
}

/// The three score fields as text (empty without a score): the two log-likelihoods, and the least
/// likely codons as `position:ln p` pairs, positions from 1.
pub fn score_fields(score: Option<&SequenceScore>) -> [String; 3] {
    match score {
        None => Default::default(),
        Some(s) => [
            format!("{:.4}", s.log_likelihood),
            format!("{:.4}", s.mean_log_likelihood),
            s.lowest.iter().map(|(pos, lp)| format!("{}:{lp:.3}", pos + 1)).collect::<Vec<_>>().join(";"),
        ],
    }
}

/// The file's bytes: `headers` are the input's columns, `columns` the output's own (one per
/// entry of each row's `fields`), then the score columns, then `marks` (a column name and the
/// value every row carries, e.g. `no_math`).
pub fn render(
    format: OutputFormat,
    headers: &csv::StringRecord,
    columns: &[&str],
    rows: &[OutputRow<'_>],
    mark: Option<(&str, &str)>,
) -> anyhow::Result<Vec<u8>> {
    match format {
        OutputFormat::Csv => {
            let mut writer = csv::Writer::from_writer(Vec::new());
            let mark_column: Vec<&str> = mark.iter().map(|(name, _)| *name).collect();
            writer
                .write_record(headers.iter().chain(columns.iter().copied()).chain(SCORE_COLUMNS).chain(mark_column))?;
            for r in rows {
                let scores = score_fields(r.score.as_ref());
                let mark_value: Vec<&str> = mark.iter().map(|(_, v)| *v).collect();
                writer.write_record(
                    r.input
                        .iter()
                        .chain(r.fields.iter().map(String::as_str))
                        .chain(scores.iter().map(String::as_str))
                        .chain(mark_value),
                )?;
            }
            writer.into_inner().map_err(|e| anyhow::anyhow!("{e}"))
        }
        OutputFormat::Jsonl => {
            let mut out = Vec::new();
            for r in rows {
                let mut object = serde_json::Map::new();
                object.insert("row".into(), (r.row + 1).into());
                object.insert("rank".into(), r.rank.into());
                for (name, value) in headers.iter().zip(r.input.iter()) {
                    object.insert(name.trim().to_string(), value.into());
                }
                for (name, value) in columns.iter().zip(&r.fields) {
                    object.insert(name.to_string(), value.as_str().into());
                }
                if let Some(s) = &r.score {
                    object.insert("log_likelihood".into(), finite_or_null(s.log_likelihood));
                    object.insert("mean_log_likelihood".into(), finite_or_null(s.mean_log_likelihood));
                    let lowest: Vec<serde_json::Value> = s
                        .lowest
                        .iter()
                        .map(|(pos, lp)| serde_json::json!({"position": pos + 1, "log_probability": finite_or_null(*lp)}))
                        .collect();
                    object.insert("least_likely_codons".into(), lowest.into());
                }
                if let Some(per_codon) = &r.per_codon {
                    object.insert("codon_probabilities".into(), serde_json::to_value(per_codon)?);
                }
                if let Some((name, value)) = mark {
                    object.insert(name.into(), value.into());
                }
                serde_json::to_writer(&mut out, &object)?;
                out.push(b'\n');
            }
            Ok(out)
        }
        OutputFormat::Fasta => {
            let column = |name: &str| headers.iter().position(|h| h.trim() == name);
            let (name_col, organism_col) = (column("name"), column("organism"));
            let mut out = String::new();
            for r in rows {
                let Some(dna) = &r.dna else { continue };
                let name = name_col.and_then(|c| r.input.get(c)).filter(|n| !n.is_empty());
                let mut header = name.map_or_else(|| format!("row{}", r.row + 1), str::to_string);
                if rows.iter().any(|o| o.row == r.row && o.rank > 1) {
                    header.push_str(&format!(" rank={}", r.rank));
                }
                if let Some(organism) = organism_col.and_then(|c| r.input.get(c)) {
                    header.push_str(&format!(" [organism={organism}]"));
                }
                if let Some(s) = &r.score {
                    let [ll, mean, _] = score_fields(Some(s));
                    header.push_str(&format!(" log_likelihood={ll} mean_log_likelihood={mean}"));
                }
                if let Some((name, value)) = mark {
                    header.push_str(&format!(" {name}={value}"));
                }
                out.push('>');
                out.push_str(&header);
                out.push('\n');
                for line in dna.as_bytes().chunks(60) {
                    out.push_str(&String::from_utf8_lossy(line));
                    out.push('\n');
                }
            }
            Ok(out.into_bytes())
        }
    }
}

fn finite_or_null(v: f64) -> serde_json::Value {
    serde_json::Number::from_f64(v).map_or(serde_json::Value::Null, serde_json::Value::Number)
}
