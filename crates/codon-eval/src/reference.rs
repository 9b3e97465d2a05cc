//! A reference set: the codons of each organism in a training JSONL file in upstream's format
//! (`{"codons": "M_ATG A_GCT … __TAA", "organism": id}`).

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::counts::CodonCounts;
use crate::dna::Dna;
use crate::error::{EvalError, Result};
use crate::genetic_code::{amino_acid, codon_index};
use crate::metrics::OrganismReference;

/// The fields of a training record that evaluation reads.
#[derive(Deserialize)]
struct Record {
    codons: String,
    organism: u32,
}

/// Per organism: its codon counts, and its sequences when asked to keep them.
#[derive(Debug, Default)]
struct Organism {
    counts: CodonCounts,
    sequences: Vec<Dna>,
}

/// The codons of every organism of a training file.
#[derive(Debug)]
pub struct ReferenceSet {
    path: PathBuf,
    organisms: BTreeMap<u32, Organism>,
}

impl ReferenceSet {
    /// Read a training JSONL file. Every record is counted; the sequences themselves are kept
    /// only for the organisms `keep_sequences` accepts (the %MinMax band of a plot needs them).
    pub fn read_jsonl(path: &Path, keep_sequences: impl Fn(u32) -> bool) -> Result<Self> {
        let io = |source| EvalError::Io { path: path.to_path_buf(), source };
        let reader = std::io::BufReader::new(std::fs::File::open(path).map_err(io)?);
        let mut organisms: BTreeMap<u32, Organism> = BTreeMap::new();
        for (i, line) in reader.lines().enumerate() {
            let line = line.map_err(io)?;
            if line.trim().is_empty() {
                continue;
            }
            let malformed = |detail: String| EvalError::Malformed { path: path.to_path_buf(), line: i + 1, detail };
            let record: Record = serde_json::from_str(&line).map_err(|e| malformed(e.to_string()))?;
            let codons =
                record.codons.split_ascii_whitespace().map(token_codon).collect::<std::result::Result<Vec<u8>, _>>();
            let dna = Dna::from_codons(codons.map_err(malformed)?);
            let organism = organisms.entry(record.organism).or_default();
            organism.counts.add(&dna);
            if keep_sequences(record.organism) && !dna.is_empty() {
                organism.sequences.push(dna);
            }
        }
        if organisms.values().all(|o| o.counts.is_empty()) {
            return Err(EvalError::EmptyReference { what: path.display().to_string() });
        }
        Ok(Self { path: path.to_path_buf(), organisms })
    }

    /// The file it was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The organism ids with at least one record.
    pub fn organisms(&self) -> impl Iterator<Item = u32> + '_ {
        self.organisms.keys().copied()
    }

    /// An organism's codon counts; an error when the file has no codon of it.
    pub fn counts(&self, organism: u32) -> Result<&CodonCounts> {
        match self.organisms.get(&organism) {
            Some(o) if !o.counts.is_empty() => Ok(&o.counts),
            _ => Err(EvalError::OrganismNotInReference {
                organism: describe_organism(organism),
                reference: self.path.clone(),
            }),
        }
    }

    /// An organism's kept sequences (empty unless `keep_sequences` accepted it).
    pub fn sequences(&self, organism: u32) -> &[Dna] {
        self.organisms.get(&organism).map_or(&[], |o| &o.sequences)
    }

    /// An organism's frequencies and CSI weights.
    pub fn reference(&self, organism: u32) -> Result<OrganismReference> {
        OrganismReference::from_counts(self.counts(organism)?)
    }
}

/// `id (name)`, or just the id when it is not one of the model's organisms.
fn describe_organism(id: u32) -> String {
    match codon_vocab::organism_name(i64::from(id)) {
        Ok(name) => format!("{id} ({name})"),
        Err(_) => id.to_string(),
    }
}

/// The codon index of a merged token such as `M_ATG` or `__TAA` (either case), checked
/// against the token's amino acid.
fn token_codon(token: &str) -> std::result::Result<u8, String> {
    let bytes = token.as_bytes();
    if bytes.len() != 5 || bytes[1] != b'_' {
        return Err(format!("token {token:?} is not of the form A_CCC (amino acid, '_', codon)"));
    }
    let codon = bytes[2..].to_ascii_uppercase();
    let index = codon_index(&codon).ok_or_else(|| format!("token {token:?} has no A/C/G/T codon"))?;
    let residue = (bytes[0] as char).to_ascii_uppercase();
    let encoded = amino_acid(index);
    if residue != encoded {
        return Err(format!("token {token:?}: {} encodes {encoded}, not {residue}", String::from_utf8_lossy(&codon)));
    }
    Ok(index as u8)
}

/// Where per-organism codon statistics come from: a training file's organisms, or one
/// codon-usage table for every organism.
#[derive(Debug)]
pub enum References {
    /// Per organism, from a training file.
    Set(ReferenceSet),
    /// One table for every organism.
    Table(Box<OrganismReference>),
}

impl References {
    /// An organism's frequencies and weights (`None` organism: only with a single table).
    pub fn for_organism(&self, organism: Option<u32>) -> std::result::Result<OrganismReference, String> {
        match (self, organism) {
            (References::Table(reference), _) => Ok(reference.as_ref().clone()),
            (References::Set(set), Some(organism)) => set.reference(organism).map_err(|e| e.to_string()),
            (References::Set(_), None) => Err("no organism given".to_string()),
        }
    }

    /// The reference sequences of an organism (none for a table).
    pub fn sequences(&self, organism: u32) -> &[Dna] {
        match self {
            References::Set(set) => set.sequences(organism),
            References::Table(_) => &[],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_checked_against_their_amino_acid() {
        assert_eq!(token_codon("M_ATG"), Ok(14));
        assert_eq!(token_codon("__taa"), Ok(48));
        assert!(token_codon("K_ATG").unwrap_err().contains("ATG encodes M, not K"));
        assert!(token_codon("M_UNK").unwrap_err().contains("no A/C/G/T codon"));
        assert!(token_codon("MATG").is_err());
    }
}
