//! A CSV file read whole, with its columns found by name: the batch input of `predict` and
//! `evaluate`. A FASTA file reads as the same table.

use std::path::{Path, PathBuf};

/// The header and rows of a CSV file.
pub struct CsvTable {
    /// The file.
    pub path: PathBuf,
    /// Its header.
    pub headers: csv::StringRecord,
    /// Its data rows.
    pub rows: Vec<csv::StringRecord>,
    /// Whether the rows are FASTA entries (the first column their names), not CSV lines.
    pub fasta: bool,
}

impl CsvTable {
    /// Read a whole CSV file.
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let mut reader = csv::Reader::from_path(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let headers = reader.headers().map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?.clone();
        let rows =
            reader.records().collect::<Result<_, _>>().map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        Ok(Self { path: path.to_path_buf(), headers, rows, fasta: false })
    }

    /// A batch file as a table: CSV as it is, or FASTA (by extension) as the columns `name` (the
    /// header's first word), `sequence_column` and `organism` (the header's [organism=NAME] tag,
    /// else `organism`; an entry with neither is an error when `organism_required`, else empty).
    pub fn read_any(
        path: &Path,
        sequence_column: &str,
        organism: Option<&str>,
        organism_required: bool,
    ) -> anyhow::Result<Self> {
        use codon_ascend::data::prepare::{fasta_header_field, read_fasta_entries};
        use codon_ascend::data::InputFormat;
        if InputFormat::from_path(path).ok() != Some(InputFormat::Fasta) {
            return Self::read(path);
        }
        let mut rows = Vec::new();
        for entry in read_fasta_entries(path)? {
            let tagged = fasta_header_field("organism", &entry.header).or(organism);
            if tagged.is_none() && organism_required {
                anyhow::bail!(
                    "{}: entry {} has no [organism=NAME] tag in its header: add one, or give --organism",
                    path.display(),
                    entry.name()
                );
            }
            rows.push(csv::StringRecord::from(vec![entry.name(), &entry.sequence, tagged.unwrap_or("")]));
        }
        let headers = csv::StringRecord::from(vec!["name", sequence_column, "organism"]);
        Ok(Self { path: path.to_path_buf(), headers, rows, fasta: true })
    }

    /// Where row `i` (from 0) is, for messages: `FILE: row N (line L)`, or `FILE: entry N (NAME)`.
    pub fn location(&self, i: usize) -> String {
        if self.fasta {
            let name = self.rows.get(i).and_then(|r| r.get(0)).unwrap_or("");
            format!("{}: entry {} ({name})", self.path.display(), i + 1)
        } else {
            format!("{}: row {} (line {})", self.path.display(), i + 1, i + 2)
        }
    }

    /// The index of an optional column.
    pub fn optional_column(&self, name: &str) -> Option<usize> {
        self.headers.iter().position(|h| h.trim() == name)
    }

    /// The index of a required column; an error naming the columns the file has.
    pub fn column(&self, name: &str) -> anyhow::Result<usize> {
        self.first_column(&[name])
    }

    /// The index of the first of `names` the file has (one column under the names other
    /// commands give it); an error naming them and the columns the file has.
    pub fn first_column(&self, names: &[&str]) -> anyhow::Result<usize> {
        names.iter().find_map(|name| self.optional_column(name)).ok_or_else(|| {
            let found: Vec<&str> = self.headers.iter().collect();
            let wanted: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
            anyhow::anyhow!("{}: no {} column (found: {})", self.path.display(), wanted.join(" or "), found.join(", "))
        })
    }
}
