//! Dataset preparation: CSV or FASTA gene records become an upstream-format JSONL
//! training file (`prepare_training_data` + `read_fasta_file` upstream).
//!
//! Each record goes through: translation when no protein is given, the `is_correct_seq`
//! filter, organism lookup, and `get_merged_seq`. Dropped records are counted by reason.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;

use codon_vocab::vocab::MAX_AMINO_ACIDS;
use codon_vocab::{merged_sequence_with, parse_organism, ProteinConfig};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::error::{DataError, Result};
use crate::record::TrainingRecord;
use crate::translate::{check_cds, translate};

/// One raw gene record read from a CSV row or a FASTA entry.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GeneRecord {
    /// Coding DNA.
    pub dna: String,
    /// Protein, if the input gives one (else it is translated from the DNA).
    pub protein: Option<String>,
    /// Organism name or id as written in the input, if any.
    pub organism: Option<String>,
}

/// Options of [`prepare`].
#[derive(Debug, Clone, Default)]
pub struct PrepareOptions {
    /// Organism for records that name none (and for all FASTA records, as upstream's argument).
    pub organism: Option<String>,
    /// Keep records that fail `is_correct_seq` (upstream `prepare_training_data` keeps them).
    pub keep_incorrect: bool,
    /// Keep records whose given protein is not the DNA's translation (by default they are
    /// dropped: their merged tokens would be outside the vocabulary, `[UNK]` at training time).
    pub keep_mismatched: bool,
    /// Shuffle the output with this seed (upstream shuffles unseeded).
    pub shuffle_seed: Option<u64>,
    /// Protein preprocessing settings.
    pub protein_config: ProteinConfig,
    /// Seed of the RNG that resolves ambiguous amino acids.
    pub seed: u64,
}

/// What [`prepare`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PrepareReport {
    /// Records read.
    pub read: usize,
    /// Records written.
    pub written: usize,
    /// Dropped records per reason.
    pub dropped: BTreeMap<String, usize>,
    /// Written records longer than the model's input ([`MAX_AMINO_ACIDS`] codons): training sees
    /// only their beginning.
    pub too_long: usize,
}

impl PrepareReport {
    /// Total dropped records.
    pub fn dropped_total(&self) -> usize {
        self.dropped.values().sum()
    }
}

impl std::fmt::Display for PrepareReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "read {} records, wrote {}, dropped {}", self.read, self.written, self.dropped_total())?;
        if self.too_long > 0 {
            write!(
                f,
                "\n  warning: {} records are longer than {MAX_AMINO_ACIDS} codons; training sees only the first {MAX_AMINO_ACIDS} of each",
                self.too_long
            )?;
        }
        for (reason, n) in &self.dropped {
            write!(f, "\n  dropped {n}: {reason}")?;
        }
        Ok(())
    }
}

/// The input formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputFormat {
    /// CSV with a header naming `dna`, and optionally `protein` and `organism`.
    Csv,
    /// FASTA, optionally with `[organism=…]` in headers.
    Fasta,
}

impl InputFormat {
    /// Tell the format from a file extension.
    pub fn from_path(path: &Path) -> Result<Self> {
        let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("csv") => Ok(Self::Csv),
            Some("fasta" | "fa" | "fna" | "ffn" | "fas") => Ok(Self::Fasta),
            _ => Err(DataError::UnknownFormat { path: path.to_path_buf() }),
        }
    }
}

/// Read gene records from a CSV file. Columns are found by name (`dna`, `protein`,
/// `organism`, case-insensitive); other columns, such as a pandas index, are ignored.
pub fn read_csv(path: &Path) -> Result<Vec<GeneRecord>> {
    let csv_err = |e: csv::Error| DataError::Csv { path: path.to_path_buf(), message: e.to_string() };
    crate::text_input::refuse_compressed(path)?;
    let text = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
    if let Some(line) = unterminated_quote(&text) {
        return Err(DataError::MalformedLine {
            path: path.to_path_buf(),
            line,
            message: "a quoted field opens here and is never closed (unterminated quote)".into(),
        });
    }
    let mut reader = csv::ReaderBuilder::new().flexible(true).from_reader(text.as_slice());
    let headers = reader.headers().map_err(csv_err)?.clone();
    let named = |name: &str| -> Vec<usize> {
        headers.iter().enumerate().filter(|(_, h)| h.trim().eq_ignore_ascii_case(name)).map(|(i, _)| i).collect()
    };
    for name in ["dna", "protein", "organism"] {
        if let [first, second, ..] = named(name)[..] {
            let (first, second) = (first + 1, second + 1);
            return Err(DataError::DuplicateColumn { path: path.to_path_buf(), name: name.into(), first, second });
        }
    }
    let column = |name: &str| named(name).first().copied();
    let Some(dna_col) = column("dna") else {
        return Err(DataError::MissingColumns {
            path: path.to_path_buf(),
            required: "dna (protein and organism optional)".into(),
            found: headers.iter().collect::<Vec<_>>().join(","),
        });
    };
    let protein_col = column("protein");
    let organism_col = column("organism");
    let mut records = Vec::new();
    for row in reader.records() {
        let row = row.map_err(csv_err)?;
        // A line break inside a sequence or organism field means a stray quote merged rows.
        if let Some(col) = [Some(dna_col), protein_col, organism_col]
            .into_iter()
            .flatten()
            .find(|&c| row.get(c).is_some_and(|f| f.contains('\n')))
        {
            return Err(DataError::MalformedLine {
                path: path.to_path_buf(),
                line: row.position().map_or(0, |p| p.line() as usize),
                message: format!(
                    "the {:?} field runs over several lines: a stray or unterminated quote merged rows",
                    headers.get(col).unwrap_or("")
                ),
            });
        }
        let field = |col: Option<usize>| col.and_then(|c| row.get(c)).map(str::trim).filter(|s| !s.is_empty());
        records.push(GeneRecord {
            dna: field(Some(dna_col)).unwrap_or_default().to_string(),
            protein: field(protein_col).map(str::to_string),
            organism: field(organism_col).map(str::to_string),
        });
    }
    Ok(records)
}

/// The 1-based line of a CSV quote that opens a field and never closes, if any (RFC 4180: a
/// quote inside a quoted field is doubled, so quotes pair up in a well-formed file).
fn unterminated_quote(text: &[u8]) -> Option<usize> {
    let (mut line, mut open_line, mut inside) = (1, 0, false);
    let mut field_start = true;
    let mut bytes = text.iter().peekable();
    while let Some(&b) = bytes.next() {
        match b {
            b'"' if inside && bytes.peek() == Some(&&b'"') => {
                bytes.next();
            }
            b'"' if inside => inside = false,
            // Only a quote that starts a field opens one; elsewhere the reader keeps it literally.
            b'"' if field_start => {
                inside = true;
                open_line = line;
            }
            b'\n' => line += 1,
            _ => {}
        }
        field_start = !inside && matches!(b, b',' | b'\n' | b'\r');
    }
    inside.then_some(open_line)
}

/// `find_pattern_in_fasta`: the value of `[keyword=value]` in a FASTA header, if present.
pub fn fasta_header_field<'a>(keyword: &str, header: &'a str) -> Option<&'a str> {
    let key = format!("{keyword}=");
    let start = header.find(&key)? + key.len();
    let end = header[start..].find(']')? + start;
    Some(&header[start..end])
}

/// One FASTA entry: its header (after `>`) and its sequence, lines joined.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FastaEntry {
    /// The header line without `>`.
    pub header: String,
    /// The sequence, as written (case kept), without line breaks or spaces.
    pub sequence: String,
}

impl FastaEntry {
    /// The entry's name: the header's first word.
    pub fn name(&self) -> &str {
        self.header.split_whitespace().next().unwrap_or("")
    }
}

/// Read every entry of a FASTA file.
pub fn read_fasta_entries(path: &Path) -> Result<Vec<FastaEntry>> {
    crate::text_input::refuse_compressed(path)?;
    let file = std::fs::File::open(path).map_err(|e| DataError::io(path, e))?;
    let mut entries: Vec<FastaEntry> = Vec::new();
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| DataError::io(path, e))?;
        let line = crate::text_input::without_bom(i + 1, line.trim_end());
        if let Some(header) = line.strip_prefix('>') {
            entries.push(FastaEntry { header: header.trim().to_string(), ..Default::default() });
        } else if let Some(entry) = entries.last_mut() {
            entry.sequence.extend(line.chars().filter(|c| !c.is_whitespace()));
        } else if !line.trim().is_empty() {
            return Err(DataError::MalformedLine {
                path: path.to_path_buf(),
                line: 1,
                message: "FASTA sequence data before the first '>' header".into(),
            });
        }
    }
    Ok(entries)
}

/// Read gene records from a FASTA file; the organism comes from `[organism=…]` in the header.
pub fn read_fasta(path: &Path) -> Result<Vec<GeneRecord>> {
    Ok(read_fasta_entries(path)?
        .into_iter()
        .map(|e| GeneRecord {
            organism: fasta_header_field("organism", &e.header).map(str::to_string),
            dna: e.sequence.to_uppercase(),
            ..Default::default()
        })
        .collect())
}

/// Turn one gene record into a training record, or say why it is dropped.
pub fn process_record(
    record: &GeneRecord,
    idx: u64,
    options: &PrepareOptions,
    rng: &mut ChaCha8Rng,
) -> std::result::Result<TrainingRecord, String> {
    let organism_text = record.organism.as_deref().or(options.organism.as_deref()).ok_or_else(|| {
        "no organism (give an organism column, a FASTA [organism=...] tag, or --organism)".to_string()
    })?;
    let organism = parse_organism(organism_text).map_err(|e| e.summary())?;
    if record.dna.is_empty() {
        return Err("empty DNA".into());
    }
    let protein = match &record.protein {
        Some(p) => given_protein(p, &record.dna, options.keep_mismatched)?,
        None => translate(&record.dna).map_err(|e| format!("untranslatable DNA: {e}"))?,
    };
    if !options.keep_incorrect {
        check_cds(&record.dna.to_uppercase(), &protein.to_uppercase())
            .map_err(|defect| format!("not a correct CDS: {defect}"))?;
    }
    let codons =
        merged_sequence_with(&protein, &record.dna, "_", &options.protein_config, rng).map_err(|e| e.summary())?;
    Ok(TrainingRecord { idx, codons, organism })
}

/// A record's given protein, with `*` read as the stop symbol `_` (as `predict` reads it) and
/// each ambiguous letter replaced by the residue its codon encodes; checked against the DNA's
/// translation unless `keep_mismatched`.
fn given_protein(protein: &str, dna: &str, keep_mismatched: bool) -> std::result::Result<String, String> {
    let protein = protein.trim().replace('*', "_");
    let Ok(translated) = translate(dna) else { return Ok(protein) };
    let dna = dna.trim().to_ascii_uppercase();
    if !protein.ends_with('_') && translated.ends_with('_') {
        let codon = dna.get(3 * (translated.len() - 1)..3 * translated.len()).unwrap_or("?");
        return Err(format!(
            "the protein has no stop symbol ('_' or '*') at its end, but the DNA ends in the stop codon {codon}"
        ));
    }
    if protein.chars().count() != translated.chars().count() {
        return Ok(protein); // the merged sequence reports the lengths, as upstream does
    }
    let mut resolved = String::with_capacity(protein.len());
    let mut encoded_residues = translated.chars();
    for (i, given) in protein.chars().enumerate() {
        let upper = given.to_ascii_uppercase();
        let resolved_residue = match encoded_residues.next() {
            Some(encoded) if encoded == 'X' || upper == encoded => given,
            // A letter no codon encodes (X, B, Z, J, …) is ambiguous: it stands for what the DNA encodes.
            Some(encoded) if codon_vocab::vocab::codon_ids_for(upper).is_empty() => encoded,
            Some(_) if keep_mismatched => given,
            Some(encoded) => {
                let codon = dna.get(3 * i..3 * i + 3).unwrap_or("?");
                return Err(format!(
                    "the protein is not the DNA's translation: residue {} is {upper}, but codon {codon} encodes \
                     {encoded} (--keep-mismatched keeps such records)",
                    i + 1
                ));
            }
            None => given,
        };
        resolved.push(resolved_residue);
    }
    Ok(resolved)
}

/// Prepare a JSONL training file from a CSV or FASTA input. The output is written atomically.
pub fn prepare(input: &Path, output: &Path, options: &PrepareOptions) -> Result<PrepareReport> {
    codon_files::refuse_overwriting(&[input], &[output])?;
    codon_files::check_output_location(output)?;
    let records = match InputFormat::from_path(input)? {
        InputFormat::Csv => read_csv(input)?,
        InputFormat::Fasta => read_fasta(input)?,
    };
    let mut rng = ChaCha8Rng::seed_from_u64(options.seed);
    let mut report = PrepareReport { read: records.len(), ..Default::default() };
    let mut out = Vec::with_capacity(records.len());
    for (idx, record) in records.iter().enumerate() {
        match process_record(record, idx as u64, options, &mut rng) {
            Ok(r) => out.push(r),
            Err(reason) => *report.dropped.entry(reason).or_default() += 1,
        }
    }
    if let Some(seed) = options.shuffle_seed {
        out.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
    }
    report.written = out.len();
    report.too_long = out.iter().filter(|r| r.num_tokens() > MAX_AMINO_ACIDS).count();
    write_jsonl(output, &out)?;
    Ok(report)
}

/// Write training records as JSONL, atomically.
pub fn write_jsonl(path: &Path, records: &[TrainingRecord]) -> Result<()> {
    Ok(codon_files::write_atomically(path, |w| {
        for r in records {
            writeln!(w, "{}", r.to_json_line())?;
        }
        Ok(())
    })?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn byte_order_marks_gzip_and_duplicate_columns() {
        let dir = tempfile::tempdir().unwrap();
        // A BOM before the first header was "sequence data before the first '>' header".
        let p = write(dir.path(), "bom.fasta", "\u{feff}>sequence1 [organism=Homo sapiens]\nATGAAA\n");
        let recs = read_fasta(&p).unwrap();
        assert_eq!((recs[0].dna.as_str(), recs[0].organism.as_deref()), ("ATGAAA", Some("Homo sapiens")));
        // gzip was "stream did not contain valid UTF-8".
        let gz = dir.path().join("genes.fasta");
        std::fs::write(&gz, b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\xff").unwrap();
        let err = read_fasta(&gz).unwrap_err().to_string();
        assert!(err.contains("gzip-compressed; decompress it first (gunzip -k"), "{err}");
        // Two dna columns: the first silently won.
        let p = write(dir.path(), "dup.csv", "dna,organism,DNA\nATGAAATAA,Homo sapiens,ATGTAA\n");
        let err = read_csv(&p).unwrap_err().to_string();
        assert!(err.contains("columns 1 and 3 are both named \"dna\""), "{err}");
    }

    #[test]
    fn fasta_reading_matches_upstream_test() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(dir.path(), "a.fasta", ">sequence1\nATGATGATGATGATG\n>sequence2\nTGATGATGATGA\n");
        let recs = read_fasta(&p).unwrap();
        assert_eq!(recs.iter().map(|r| r.dna.as_str()).collect::<Vec<_>>(), ["ATGATGATGATGATG", "TGATGATGATGA"]);
        assert_eq!(fasta_header_field("keyword", "seq1 [keyword=value1] [x=y]"), Some("value1"));
        assert_eq!(fasta_header_field("nonexistent", "seq1 [keyword=value1]"), None);
        let bad = write(dir.path(), "b.fasta", "ATG\n>x\nATG\n");
        assert!(matches!(read_fasta(&bad), Err(DataError::MalformedLine { .. })));
    }

    #[test]
    fn prepare_filters_and_reports_reasons() {
        let dir = tempfile::tempdir().unwrap();
        let input = write(
            dir.path(),
            "in.csv",
            "dna,protein,organism\n\
             ATGGCCTGA,,Escherichia coli general\n\
             ATGGCCTGA,MA_,51\n\
             ATGTAAGCCTGA,,51\n\
             ATGGCCTG,,51\n\
             AAAGCCTGA,,51\n\
             ATGGCCTGA,,E. coli\n\
             ATGXYZTGA,,51\n\
             ATGGCCTGA,MAV_,51\n\
             ATGCCGTGA,,\n",
        );
        let out = dir.path().join("out.jsonl");
        let report = prepare(&input, &out, &PrepareOptions::default()).unwrap();
        assert_eq!(report.read, 9);
        assert_eq!(report.written, 2);
        let reasons: Vec<&str> = report.dropped.keys().map(String::as_str).collect();
        assert_eq!(
            reasons,
            [
                "Invalid organism name: E. coli.",
                "Length of protein (including stop symbol such as \"_\") and the number of codons in DNA sequence (including stop codon) must be equal.",
                "no organism (give an organism column, a FASTA [organism=...] tag, or --organism)",
                "not a correct CDS: DNA length is not a multiple of 3",
                "not a correct CDS: internal stop codon",
                "not a correct CDS: no start codon (ATG, TTG, CTG, GTG)",
                "untranslatable DNA: Codon 'XYZ' is invalid",
            ]
        );
        let text = std::fs::read_to_string(&out).unwrap();
        assert_eq!(
            text,
            "{\"idx\": 0, \"codons\": \"M_ATG A_GCC __TGA\", \"organism\": 51}\n{\"idx\": 1, \"codons\": \"M_ATG A_GCC __TGA\", \"organism\": 51}\n"
        );
        // A given protein must be the DNA's translation; `*` is the stop symbol.
        let given = write(
            dir.path(),
            "given.csv",
            "dna,protein,organism\nATGAAAGCGTAA,MWW_,51\nATGAAAGCGTAA,MKA*,51\nATGAAAGCGTAA,MKA,51\nATGAAAGCGTAA,MXA_,51\n",
        );
        let report = prepare(&given, &out, &PrepareOptions::default()).unwrap();
        assert_eq!(report.written, 2, "{report:?}");
        let reasons: Vec<&str> = report.dropped.keys().map(String::as_str).collect();
        assert_eq!(
            reasons,
            [
                "the protein has no stop symbol ('_' or '*') at its end, but the DNA ends in the stop codon TAA",
                "the protein is not the DNA's translation: residue 2 is W, but codon AAA encodes K (--keep-mismatched keeps such records)",
            ]
        );
        let text = std::fs::read_to_string(&out).unwrap();
        assert!(text.contains("M_ATG K_AAA A_GCG __TAA") && !text.contains("W_"), "{text}");
        let keep = PrepareOptions { keep_mismatched: true, ..Default::default() };
        assert_eq!(prepare(&given, &out, &keep).unwrap().written, 3);
        // --organism fills in the missing one.
        let opts = PrepareOptions { organism: Some("Homo sapiens".into()), ..Default::default() };
        let report = prepare(&input, &out, &opts).unwrap();
        assert_eq!(report.written, 3);
    }

    #[test]
    fn missing_dna_column_and_unknown_format_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let input = write(dir.path(), "in.csv", "protein,organism\nMA_,51\n");
        let err = prepare(&input, &dir.path().join("o.jsonl"), &PrepareOptions::default()).unwrap_err();
        assert!(err.to_string().contains("Input dataset must have columns"), "{err}");
        let err = prepare(&dir.path().join("x.txt"), &dir.path().join("o.jsonl"), &PrepareOptions::default());
        assert!(matches!(err, Err(DataError::UnknownFormat { .. })));
        let err = prepare(&dir.path().join("missing.fasta"), &dir.path().join("o.jsonl"), &PrepareOptions::default());
        assert!(matches!(err, Err(DataError::Io { .. })));
    }

    #[test]
    fn csv_quotes_that_merge_rows_are_reported_with_their_line() {
        let dir = tempfile::tempdir().unwrap();
        let head = "dna,organism\n";
        let unterminated = write(dir.path(), "a.csv", &format!("{head}ATGAAATAA,51\n\"ATGCCCTAA,51\nATGGGGTAA,51\n"));
        let err = read_csv(&unterminated).unwrap_err();
        assert!(matches!(err, DataError::MalformedLine { line: 3, .. }), "{err}");
        assert!(err.to_string().contains("unterminated quote"), "{err}");
        let merged = write(dir.path(), "b.csv", &format!("{head}\"ATGAAATAA,51\nATGCCCTAA\",51\n"));
        let err = read_csv(&merged).unwrap_err();
        assert!(err.to_string().contains("runs over several lines"), "{err}");
        // Doubled quotes inside a quoted field, and a quote inside an unquoted one, are fine.
        let fine = write(dir.path(), "c.csv", &format!("{head}ATGAAATAA,\"Homo \"\"sapiens\"\"\"\nATGCCCTAA,5\"1\n"));
        assert_eq!(read_csv(&fine).unwrap().len(), 2);
    }

    #[test]
    fn records_longer_than_the_model_input_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        let long = format!("ATG{}TAA", "GCT".repeat(MAX_AMINO_ACIDS));
        let short = format!("ATG{}TAA", "GCT".repeat(10));
        let input = write(dir.path(), "g.csv", &format!("dna,organism\n{long},51\n{short},51\n"));
        let report = prepare(&input, &dir.path().join("t.jsonl"), &PrepareOptions::default()).unwrap();
        assert_eq!((report.written, report.too_long), (2, 1));
        assert!(report.to_string().contains("1 records are longer than 2046 codons"), "{report}");
    }
}
