//! A CSV file read whole, with its columns found by name: the batch input of `predict` and
//! `evaluate`. A FASTA file reads as the same table.

use std::path::{Path, PathBuf};

use codon_data::text_input::shown;

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
    /// Read a whole CSV file; two columns of one name are an error (which would be read?).
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        codon_data::text_input::refuse_compressed(path)?;
        let mut reader = csv::Reader::from_path(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let headers = reader.headers().map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?.clone();
        let mut seen = std::collections::HashMap::new();
        for (second, name) in headers.iter().map(str::trim).enumerate().filter(|(_, n)| !n.is_empty()) {
            if let Some(first) = seen.insert(name, second) {
                let (first, second, name) = (first + 1, second + 1, shown(name).into_owned());
                return Err(
                    codon_data::DataError::DuplicateColumn { path: path.to_path_buf(), name, first, second }.into()
                );
            }
        }
        let rows =
            reader.records().collect::<Result<_, _>>().map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        Ok(Self { path: path.to_path_buf(), headers, rows, fasta: false })
    }

    /// A batch file as a table: CSV as it is, or FASTA (by extension) as the columns `name` (the
    /// header's first word), `sequence_column` and `organism` (the header's [organism=NAME] tag,
    /// else `organism`; an entry with neither is an error when `organism_required`, else empty).
    /// In a CSV file the `organism` column wins over `organism`, which fills its empty cells (and
    /// is the column when the file has none); a note says so. A file with no rows is an error, and
    /// FASTA names given twice get a warning.
    pub fn read_any(
        path: &Path,
        sequence_column: &str,
        organism: Option<&str>,
        organism_required: bool,
    ) -> anyhow::Result<Self> {
        use codon_data::InputFormat;
        let table = if InputFormat::from_path(path).ok() == Some(InputFormat::Fasta) {
            Self::read_fasta(path, sequence_column, organism, organism_required)?
        } else {
            let mut table = Self::read(path)?;
            if let Some(organism) = organism {
                table.fill_organism(organism);
            }
            table
        };
        anyhow::ensure!(!table.rows.is_empty(), "{}: no sequences in the file", path.display());
        Ok(table)
    }

    /// `--organism` beside a CSV file: the column when there is none, else its empty cells.
    fn fill_organism(&mut self, organism: &str) {
        match self.optional_column("organism") {
            None => {
                self.headers.push_field("organism");
                self.rows.iter_mut().for_each(|r| r.push_field(organism));
            }
            Some(column) => {
                let mut filled = 0;
                for row in &mut self.rows {
                    if row.get(column).is_some_and(|cell| cell.trim().is_empty()) {
                        let fields: Vec<&str> =
                            row.iter().enumerate().map(|(i, f)| if i == column { organism } else { f }).collect();
                        *row = csv::StringRecord::from(fields);
                        filled += 1;
                    }
                }
                crate::errln!(
                    "note: {} has an organism column, which wins over --organism ({filled} empty cells took it)",
                    self.path.display()
                );
            }
        }
    }

    /// A FASTA file as the table `read_any` describes.
    fn read_fasta(
        path: &Path,
        sequence_column: &str,
        organism: Option<&str>,
        organism_required: bool,
    ) -> anyhow::Result<Self> {
        use codon_data::prepare::{fasta_header_field, read_fasta_entries};
        let mut rows = Vec::new();
        let mut seen = std::collections::HashMap::new();
        let mut repeated = 0;
        for (i, entry) in read_fasta_entries(path)?.into_iter().enumerate() {
            if let Some(first) = seen.insert(entry.name().to_string(), i + 1) {
                repeated += 1;
                if repeated <= 3 {
                    crate::errln!(
                        "warning: {}: entry {} repeats the name {} of entry {first}; rows are told apart by their number",
                        path.display(),
                        i + 1,
                        shown(entry.name())
                    );
                }
            }
            let tagged = fasta_header_field("organism", &entry.header).or(organism);
            if tagged.is_none() && organism_required {
                anyhow::bail!(
                    "{}: entry {} has no [organism=NAME] tag in its header: add one, or give --organism",
                    path.display(),
                    shown(entry.name())
                );
            }
            rows.push(csv::StringRecord::from(vec![entry.name(), &entry.sequence, tagged.unwrap_or("")]));
        }
        if repeated > 3 {
            crate::errln!("warning: {}: {repeated} entries repeat an earlier name in all", path.display());
        }
        let headers = csv::StringRecord::from(vec!["name", sequence_column, "organism"]);
        Ok(Self { path: path.to_path_buf(), headers, rows, fasta: true })
    }

    /// Where row `i` (from 0) is, for messages: `FILE: row N (line L)`, or `FILE: entry N (NAME)`.
    pub fn location(&self, i: usize) -> String {
        if self.fasta {
            let name = self.rows.get(i).and_then(|r| r.get(0)).unwrap_or("");
            format!("{}: entry {} ({})", self.path.display(), i + 1, shown(name))
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

    /// The rows as prediction inputs: the protein from `protein_sequence` (or `protein`, as
    /// prepare-data names it), the organism, and a non-empty `dna` as the known DNA.
    pub fn protein_inputs(&self) -> anyhow::Result<Vec<codon_model::ProteinInput>> {
        let (protein, organism) = (self.first_column(&["protein_sequence", "protein"])?, self.column("organism")?);
        let dna = self.optional_column("dna");
        Ok(self
            .rows
            .iter()
            .map(|r| codon_model::ProteinInput {
                protein: r.get(protein).unwrap_or("").to_string(),
                organism: codon_model::OrganismRef::parse(r.get(organism).unwrap_or("")),
                known_dna: dna.and_then(|c| r.get(c)).filter(|d| !d.trim().is_empty()).map(str::to_string),
            })
            .collect())
    }
}
