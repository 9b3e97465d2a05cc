//! A CSV file read whole, with its columns found by name: the batch input of `predict` and
//! `evaluate`.

use std::path::{Path, PathBuf};

/// The header and rows of a CSV file.
pub struct CsvTable {
    /// The file.
    pub path: PathBuf,
    /// Its header.
    pub headers: csv::StringRecord,
    /// Its data rows.
    pub rows: Vec<csv::StringRecord>,
}

impl CsvTable {
    /// Read a whole CSV file.
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let mut reader = csv::Reader::from_path(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let headers = reader.headers().map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?.clone();
        let rows =
            reader.records().collect::<Result<_, _>>().map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        Ok(Self { path: path.to_path_buf(), headers, rows })
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
