//! A streaming JSONL dataset of training records.
//!
//! The file is read line by line and never held in memory. Opening it counts (and
//! validates) the records up front, so training knows its number of steps before it
//! starts: the "total_steps = -1" failure of iterable datasets cannot happen.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

use crate::error::{DataError, Result};
use crate::record::TrainingRecord;

/// What to do with a line that is not a valid record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MalformedPolicy {
    /// Fail with an error that names the file and line (the default).
    #[default]
    Error,
    /// Skip the line and count it.
    Skip,
}

/// A slice of the records: record `i` belongs to the shard if `i % count == index`.
///
/// Matches upstream `IterableData`: worker `k` of global rank `r` with `w` workers per
/// rank reads every `(world_size · w)`-th record starting at `r · w + k`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// This shard's position, `0..count`.
    pub index: usize,
    /// Number of shards.
    pub count: usize,
}

impl Default for Shard {
    fn default() -> Self {
        Shard { index: 0, count: 1 }
    }
}

impl Shard {
    /// The shard of a distributed rank.
    pub fn new(rank: usize, world_size: usize) -> Result<Self> {
        if world_size == 0 || rank >= world_size {
            return Err(DataError::Config(format!("rank {rank} is not below world size {world_size}")));
        }
        Ok(Shard { index: rank, count: world_size })
    }

    /// Split this shard further by worker, as upstream does.
    pub fn worker(self, worker: usize, num_workers: usize) -> Result<Self> {
        if num_workers == 0 || worker >= num_workers {
            return Err(DataError::Config(format!("worker {worker} is not below the number of workers {num_workers}")));
        }
        Ok(Shard { index: self.index * num_workers + worker, count: self.count * num_workers })
    }

    /// Whether record `i` belongs to this shard.
    pub fn contains(&self, i: usize) -> bool {
        i % self.count == self.index
    }

    /// How many of `n` records belong to this shard.
    pub fn len_of(&self, n: usize) -> usize {
        n / self.count + usize::from(self.index < n % self.count)
    }
}

#[derive(Deserialize)]
struct RecordRef<'a> {
    idx: u64,
    #[serde(borrow)]
    codons: std::borrow::Cow<'a, str>,
    organism: u32,
}

fn parse_line(line: &str) -> std::result::Result<TrainingRecord, String> {
    let r: RecordRef = serde_json::from_str(line).map_err(|e| e.to_string())?;
    if r.organism as usize >= codon_vocab::NUM_ORGANISMS {
        return Err(format!("organism id {} is not below {}", r.organism, codon_vocab::NUM_ORGANISMS));
    }
    Ok(TrainingRecord { idx: r.idx, codons: r.codons.into_owned(), organism: r.organism })
}

/// Largest share of a dataset's tokens that may lie outside the vocabulary: above it the file
/// is refused; below it, [`JsonlDataset::unknown_tokens`] says how many there are.
pub const MAX_UNKNOWN_TOKEN_FRACTION: f64 = 0.01;

/// Tokens of a file outside the vocabulary (`Q_ATG`, `M_XYZ`), which train as `[UNK]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnknownTokens {
    /// How many.
    pub count: usize,
    /// Of all the file's tokens.
    pub total: usize,
    /// The first, with its line.
    pub first: Option<(usize, String)>,
}

impl UnknownTokens {
    /// Count the words of a record's `codons` (case-insensitive, as the tokenizer reads them).
    fn count_words(&mut self, line: usize, codons: &str) {
        for word in codons.split_ascii_whitespace() {
            self.total += 1;
            if !is_vocabulary_word(word) {
                self.count += 1;
                self.first.get_or_insert_with(|| (line, word.to_string()));
            }
        }
    }
}

/// Whether a merged word is a vocabulary token once lower-cased (the tokenizer's normalisation).
fn is_vocabulary_word(word: &str) -> bool {
    let mut lower = [0u8; 8];
    let Some(buf) = lower.get_mut(..word.len()) else { return false };
    buf.copy_from_slice(word.as_bytes());
    buf.make_ascii_lowercase();
    std::str::from_utf8(buf).ok().and_then(codon_vocab::vocab::token_id).is_some()
}

/// A JSONL training file.
#[derive(Debug, Clone)]
pub struct JsonlDataset {
    path: PathBuf,
    len: usize,
    malformed: usize,
    unknown: UnknownTokens,
    policy: MalformedPolicy,
}

impl JsonlDataset {
    /// Open a file, counting and validating its records. Blank lines are ignored.
    pub fn open(path: impl AsRef<Path>, policy: MalformedPolicy) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let mut len = 0;
        let mut malformed = 0;
        let mut unknown = UnknownTokens::default();
        for_each_line(&path, |line_no, line| {
            match parse_line(line) {
                Ok(record) => {
                    len += 1;
                    unknown.count_words(line_no, &record.codons);
                }
                Err(message) => match policy {
                    MalformedPolicy::Error => {
                        return Err(DataError::MalformedLine { path: path.clone(), line: line_no, message })
                    }
                    MalformedPolicy::Skip => malformed += 1,
                },
            }
            Ok(true)
        })?;
        if len == 0 {
            return Err(DataError::EmptyDataset { path });
        }
        if unknown.count as f64 > MAX_UNKNOWN_TOKEN_FRACTION * unknown.total as f64 {
            let (line, example) = unknown.first.unwrap_or_default();
            return Err(DataError::UnknownTokens { path, unknown: unknown.count, total: unknown.total, example, line });
        }
        Ok(Self { path, len, malformed, unknown, policy })
    }

    /// The tokens outside the vocabulary (at most [`MAX_UNKNOWN_TOKEN_FRACTION`] of them).
    pub fn unknown_tokens(&self) -> &UnknownTokens {
        &self.unknown
    }

    /// Number of valid records.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: an empty file is rejected by [`JsonlDataset::open`].
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of malformed lines skipped (always 0 under [`MalformedPolicy::Error`]).
    pub fn malformed_lines(&self) -> usize {
        self.malformed
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stream the records of a shard in file order.
    pub fn stream(&self, shard: Shard) -> RecordStream {
        RecordStream::new(self.clone(), shard)
    }

    /// Stream the records of a shard, shuffled within a buffer of `buffer` records.
    /// The order depends only on `seed`, `shard` and `buffer`.
    pub fn shuffled(&self, shard: Shard, buffer: usize, seed: u64) -> ShuffledStream {
        ShuffledStream {
            inner: self.stream(shard),
            // Reserved as it fills: a buffer larger than the data never asks for more.
            buffer: Vec::new(),
            capacity: buffer.max(1),
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }
}

/// Call `f(line_number, line)` for every non-blank line until it returns `Ok(false)`.
fn for_each_line(path: &Path, mut f: impl FnMut(usize, &str) -> Result<bool>) -> Result<()> {
    crate::text_input::refuse_compressed(path)?;
    let file = std::fs::File::open(path).map_err(|e| DataError::io(path, e))?;
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut buf = String::new();
    let mut line_no = 0;
    loop {
        buf.clear();
        let n = reader.read_line(&mut buf).map_err(|e| DataError::io(path, e))?;
        if n == 0 {
            return Ok(());
        }
        line_no += 1;
        let line = crate::text_input::without_bom(line_no, buf.trim());
        if line.is_empty() {
            continue;
        }
        if !f(line_no, line)? {
            return Ok(());
        }
    }
}

/// Records of one shard, in file order.
pub struct RecordStream {
    dataset: JsonlDataset,
    shard: Shard,
    reader: Option<BufReader<std::fs::File>>,
    line_no: usize,
    record_no: usize,
    buf: String,
    failed: bool,
}

impl RecordStream {
    fn new(dataset: JsonlDataset, shard: Shard) -> Self {
        Self { dataset, shard, reader: None, line_no: 0, record_no: 0, buf: String::new(), failed: false }
    }

    fn next_record(&mut self) -> Result<Option<TrainingRecord>> {
        let path = &self.dataset.path;
        if self.reader.is_none() {
            let file = std::fs::File::open(path).map_err(|e| DataError::io(path, e))?;
            self.reader = Some(BufReader::with_capacity(1 << 20, file));
        }
        let Some(reader) = self.reader.as_mut() else { return Ok(None) };
        loop {
            self.buf.clear();
            if reader.read_line(&mut self.buf).map_err(|e| DataError::io(path, e))? == 0 {
                return Ok(None);
            }
            self.line_no += 1;
            let line = crate::text_input::without_bom(self.line_no, self.buf.trim());
            if line.is_empty() {
                continue;
            }
            let record = match parse_line(line) {
                Ok(r) => r,
                Err(_) if self.dataset.policy == MalformedPolicy::Skip => continue,
                Err(message) => {
                    // The file changed since it was opened.
                    return Err(DataError::MalformedLine { path: path.clone(), line: self.line_no, message });
                }
            };
            let i = self.record_no;
            self.record_no += 1;
            if self.shard.contains(i) {
                return Ok(Some(record));
            }
        }
    }
}

impl Iterator for RecordStream {
    type Item = Result<TrainingRecord>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let r = self.next_record();
        self.failed = r.is_err();
        r.transpose()
    }
}

/// Records shuffled within a bounded buffer: each incoming record replaces a random
/// buffered one, which is emitted; the remainder is emitted in random order at the end.
pub struct ShuffledStream {
    inner: RecordStream,
    buffer: Vec<TrainingRecord>,
    capacity: usize,
    rng: ChaCha8Rng,
}

impl Iterator for ShuffledStream {
    type Item = Result<TrainingRecord>;
    fn next(&mut self) -> Option<Self::Item> {
        while self.buffer.len() < self.capacity {
            match self.inner.next() {
                Some(Ok(r)) => self.buffer.push(r),
                Some(Err(e)) => return Some(Err(e)),
                None => break,
            }
        }
        if self.buffer.is_empty() {
            return None;
        }
        let j = self.rng.random_range(0..self.buffer.len());
        Some(Ok(self.buffer.swap_remove(j)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn tokens_outside_the_vocabulary_are_counted_and_too_many_refused() {
        let write = |lines: &[&str]| {
            let mut f = tempfile::NamedTempFile::new().unwrap();
            for (i, codons) in lines.iter().enumerate() {
                let r = TrainingRecord { idx: i as u64, codons: codons.to_string(), organism: 51 };
                writeln!(f, "{}", r.to_json_line()).unwrap();
            }
            f
        };
        let good = "M_ATG K_AAA m_unk __UNK __TAA ".repeat(40);
        let f = write(&[&good, "M_ATG Q_ATG __TAA"]);
        let ds = JsonlDataset::open(f.path(), MalformedPolicy::Error).unwrap();
        assert_eq!(ds.unknown_tokens(), &UnknownTokens { count: 1, total: 203, first: Some((2, "Q_ATG".into())) });
        let f = write(&["M_ATG K_AAA __TAA", "M_XYZ K_AAA __TAA"]);
        let err = JsonlDataset::open(f.path(), MalformedPolicy::Error).unwrap_err().to_string();
        assert!(err.contains("1 of 6 tokens are not in the vocabulary (the first, \"M_XYZ\", at line 2)"), "{err}");
    }

    fn dataset_file(n: usize) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        for i in 0..n {
            let r = TrainingRecord { idx: i as u64, codons: "M_ATG __TAA".into(), organism: (i % 164) as u32 };
            writeln!(f, "{}", r.to_json_line()).unwrap();
            if i % 7 == 3 {
                writeln!(f).unwrap();
            }
        }
        f
    }

    fn idxs(it: impl Iterator<Item = Result<TrainingRecord>>) -> Vec<u64> {
        it.map(|r| r.unwrap().idx).collect()
    }

    #[test]
    fn a_byte_order_mark_opens_a_jsonl_file_unnoticed() {
        // It made line 1 a malformed record, in the count and again in the stream.
        let f = dataset_file(3);
        let text = std::fs::read_to_string(f.path()).unwrap();
        std::fs::write(f.path(), format!("\u{feff}{text}")).unwrap();
        let ds = JsonlDataset::open(f.path(), MalformedPolicy::Error).unwrap();
        assert_eq!(idxs(ds.stream(Shard::default())), [0, 1, 2]);
    }

    #[test]
    fn counts_and_streams_in_order() {
        let f = dataset_file(50);
        let ds = JsonlDataset::open(f.path(), MalformedPolicy::Error).unwrap();
        assert_eq!(ds.len(), 50);
        assert_eq!(idxs(ds.stream(Shard::default())), (0..50).collect::<Vec<_>>());
    }

    #[test]
    fn shards_partition_the_records_like_upstream() {
        let f = dataset_file(53);
        let ds = JsonlDataset::open(f.path(), MalformedPolicy::Error).unwrap();
        let mut all = Vec::new();
        for rank in 0..2 {
            for worker in 0..3 {
                let shard = Shard::new(rank, 2).unwrap().worker(worker, 3).unwrap();
                let got = idxs(ds.stream(shard));
                let start = (rank * 3 + worker) as u64;
                assert_eq!(got, (start..53).step_by(6).collect::<Vec<_>>());
                assert_eq!(got.len(), shard.len_of(53));
                all.extend(got);
            }
        }
        all.sort();
        assert_eq!(all, (0..53).collect::<Vec<_>>());
        assert!(Shard::new(2, 2).is_err());
        assert!(Shard::default().worker(0, 0).is_err());
    }

    #[test]
    fn shuffle_is_seeded_bounded_and_complete() {
        let f = dataset_file(200);
        let ds = JsonlDataset::open(f.path(), MalformedPolicy::Error).unwrap();
        let a = idxs(ds.shuffled(Shard::default(), 16, 1));
        let b = idxs(ds.shuffled(Shard::default(), 16, 1));
        let c = idxs(ds.shuffled(Shard::default(), 16, 2));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(a, (0..200).collect::<Vec<_>>());
        // A record cannot move earlier than (its index - buffer + 1).
        for (pos, &idx) in a.iter().enumerate() {
            assert!(idx as usize <= pos + 15, "record {idx} emitted at {pos}");
        }
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(sorted, (0..200).collect::<Vec<_>>());
    }

    #[test]
    fn malformed_lines_name_file_and_line_or_are_skipped() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        writeln!(f, "{{\"idx\": 0, \"codons\": \"M_ATG __TAA\", \"organism\": 51}}").unwrap();
        writeln!(f, "{{\"idx\": 1, \"codons\": \"M_ATG __TAA\"").unwrap();
        writeln!(f, "{{\"idx\": 2, \"codons\": \"M_ATG __TAA\", \"organism\": 999}}").unwrap();
        writeln!(f, "{{\"idx\": 3, \"codons\": \"M_ATG __TAA\", \"organism\": 0}}").unwrap();
        let err = JsonlDataset::open(f.path(), MalformedPolicy::Error).unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with(&format!("{}:2: malformed record", f.path().display())), "{msg}");
        let ds = JsonlDataset::open(f.path(), MalformedPolicy::Skip).unwrap();
        assert_eq!((ds.len(), ds.malformed_lines()), (2, 2));
        assert_eq!(idxs(ds.stream(Shard::default())), [0, 3]);
    }

    #[test]
    fn empty_and_missing_files_are_errors() {
        let f = tempfile::NamedTempFile::new().unwrap();
        assert!(matches!(JsonlDataset::open(f.path(), MalformedPolicy::Error), Err(DataError::EmptyDataset { .. })));
        assert!(matches!(
            JsonlDataset::open("/nonexistent/x.jsonl", MalformedPolicy::Error),
            Err(DataError::Io { .. })
        ));
    }
}
