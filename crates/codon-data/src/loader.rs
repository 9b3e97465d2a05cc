//! A prefetching batch loader over a [`JsonlDataset`].
//!
//! A reader thread streams (and shuffles) the records, cuts them into numbered batches,
//! and hands them to worker threads that tokenize and mask ahead of the training loop.
//! Batch `k` of epoch `e` is masked with an RNG seeded from `(seed, e, k)` and batches are
//! delivered in order, so the output never depends on the number of workers.

use std::collections::BTreeMap;
use std::thread::JoinHandle;

use crossbeam_channel::{bounded, Receiver, Sender};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::collator::{MlmBatch, MlmCollator};
use crate::dataset::{JsonlDataset, Shard};
use crate::error::{DataError, Result};
use crate::record::TrainingRecord;

/// Loader settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoaderConfig {
    /// Records per batch.
    pub batch_size: usize,
    /// Worker threads; 0 builds batches on the calling thread.
    pub num_workers: usize,
    /// Batches built ahead of the consumer.
    pub prefetch: usize,
    /// Base seed of shuffling and masking.
    pub seed: u64,
    /// Shuffle buffer in records; 0 keeps file order.
    pub shuffle_buffer: usize,
    /// Length bucketing: sort windows of this many batches by length, so rows of a batch
    /// have similar lengths and need less padding; batch order within a window is shuffled.
    pub bucket_batches: Option<usize>,
    /// Drop a last, incomplete batch.
    pub drop_last: bool,
    /// The slice of the data this process reads (distributed rank).
    pub shard: Shard,
}

impl Default for LoaderConfig {
    fn default() -> Self {
        Self {
            batch_size: 6,
            num_workers: 2,
            prefetch: 4,
            seed: 123,
            shuffle_buffer: 10_000,
            bucket_batches: None,
            drop_last: false,
            shard: Shard::default(),
        }
    }
}

/// Mix a seed with a counter (SplitMix64 finaliser) so nearby values give unrelated streams.
pub fn mix_seed(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_add(0x9E37_79B9_7F4A_7C15).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The most worker threads a loader starts, and the most batches it builds ahead: each costs a
/// thread or a channel slot made up front, and more than this only waits on the training step.
pub const MAX_WORKERS: usize = 256;
/// See [`MAX_WORKERS`].
pub const MAX_PREFETCH: usize = 4096;

/// Records a batch window reserves up front; a larger one grows as it fills, so a batch size
/// larger than the data never asks for memory the data would not fill.
const RESERVE_RECORDS: usize = 1 << 16;

/// Batches over a dataset.
#[derive(Debug, Clone)]
pub struct DataLoader {
    dataset: JsonlDataset,
    collator: MlmCollator,
    config: LoaderConfig,
}

impl DataLoader {
    /// A loader; the batch size must be positive, the bucket window's records countable, and
    /// the workers and prefetch at most [`MAX_WORKERS`] and [`MAX_PREFETCH`].
    pub fn new(dataset: JsonlDataset, collator: MlmCollator, config: LoaderConfig) -> Result<Self> {
        if config.batch_size == 0 {
            return Err(DataError::Config("batch size must be positive".into()));
        }
        if config.bucket_batches == Some(0) {
            return Err(DataError::Config("bucket window must hold at least one batch".into()));
        }
        if config.bucket_batches.unwrap_or(1).checked_mul(config.batch_size).is_none() {
            return Err(DataError::Config(format!(
                "a bucket window of {} batches of {} records is more records than can be counted",
                config.bucket_batches.unwrap_or(1),
                config.batch_size
            )));
        }
        if config.num_workers > MAX_WORKERS {
            return Err(DataError::Config(format!("{} workers: at most {MAX_WORKERS}", config.num_workers)));
        }
        if config.prefetch > MAX_PREFETCH {
            return Err(DataError::Config(format!("prefetch of {} batches: at most {MAX_PREFETCH}", config.prefetch)));
        }
        Ok(Self { dataset, collator, config })
    }

    /// The dataset.
    pub fn dataset(&self) -> &JsonlDataset {
        &self.dataset
    }

    /// The settings.
    pub fn config(&self) -> &LoaderConfig {
        &self.config
    }

    /// Records this shard reads per epoch.
    pub fn records_per_epoch(&self) -> usize {
        self.config.shard.len_of(self.dataset.len())
    }

    /// Batches per epoch, known before the first batch is read.
    pub fn batches_per_epoch(&self) -> usize {
        let n = self.records_per_epoch();
        if self.config.drop_last {
            n / self.config.batch_size
        } else {
            n.div_ceil(self.config.batch_size)
        }
    }

    /// The batches of one epoch, in order.
    pub fn epoch(&self, epoch: u64) -> EpochBatches {
        let seed = mix_seed(self.config.seed, epoch);
        let groups = BatchGroups {
            records: self.dataset.shuffled(self.config.shard, self.config.shuffle_buffer.max(1), seed),
            config: self.config,
            rng: ChaCha8Rng::seed_from_u64(mix_seed(seed, 1)),
            pending: Vec::new().into_iter(),
            next_index: 0,
            done: false,
        };
        if self.config.num_workers == 0 {
            return EpochBatches(Mode::Inline(Box::new(Inline { groups, collator: self.collator.clone(), seed })));
        }
        EpochBatches(Mode::Threaded(Box::new(Threaded::start(groups, self.collator.clone(), seed, &self.config))))
    }
}

/// Numbered groups of records, one per batch, in delivery order.
struct BatchGroups {
    records: crate::dataset::ShuffledStream,
    config: LoaderConfig,
    rng: ChaCha8Rng,
    pending: std::vec::IntoIter<Vec<TrainingRecord>>,
    next_index: u64,
    done: bool,
}

impl BatchGroups {
    fn take_records(&mut self, n: usize) -> Result<Vec<TrainingRecord>> {
        let mut out = Vec::with_capacity(n.min(RESERVE_RECORDS));
        while out.len() < n {
            match self.records.next() {
                Some(r) => out.push(r?),
                None => break,
            }
        }
        Ok(out)
    }

    fn refill(&mut self) -> Result<()> {
        let bs = self.config.batch_size;
        let window = self.config.bucket_batches.unwrap_or(1) * bs;
        let mut records = self.take_records(window)?;
        if records.len() < window {
            self.done = true;
        }
        if self.config.bucket_batches.is_some() {
            records.sort_by_key(TrainingRecord::num_tokens);
        }
        let mut groups: Vec<Vec<TrainingRecord>> = Vec::new();
        let mut it = records.into_iter().peekable();
        while it.peek().is_some() {
            groups.push(it.by_ref().take(bs).collect());
        }
        if self.config.drop_last {
            groups.retain(|g| g.len() == bs);
        }
        if self.config.bucket_batches.is_some() {
            groups.shuffle(&mut self.rng);
        }
        self.pending = groups.into_iter();
        Ok(())
    }
}

impl Iterator for BatchGroups {
    type Item = Result<(u64, Vec<TrainingRecord>)>;
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(group) = self.pending.next() {
                let index = self.next_index;
                self.next_index += 1;
                return Some(Ok((index, group)));
            }
            if self.done {
                return None;
            }
            if let Err(e) = self.refill() {
                self.done = true;
                return Some(Err(e));
            }
        }
    }
}

fn collate_numbered(collator: &MlmCollator, seed: u64, index: u64, records: &[TrainingRecord]) -> Result<MlmBatch> {
    collator.collate(records, &mut ChaCha8Rng::seed_from_u64(mix_seed(seed, index.wrapping_add(2))))
}

/// The batches of one epoch, in order.
pub struct EpochBatches(Mode);

enum Mode {
    Inline(Box<Inline>),
    Threaded(Box<Threaded>),
}

/// Batches built on the calling thread.
struct Inline {
    groups: BatchGroups,
    collator: MlmCollator,
    seed: u64,
}

impl Iterator for EpochBatches {
    type Item = Result<MlmBatch>;
    fn next(&mut self) -> Option<Self::Item> {
        match &mut self.0 {
            Mode::Inline(inline) => {
                let Inline { groups, collator, seed } = &mut **inline;
                Some(groups.next()?.and_then(|(index, records)| collate_numbered(collator, *seed, index, &records)))
            }
            Mode::Threaded(t) => t.next(),
        }
    }
}

type Numbered = (u64, Result<MlmBatch>);

/// Worker-thread state of an epoch.
struct Threaded {
    results: Option<Receiver<Numbered>>,
    reorder: BTreeMap<u64, Result<MlmBatch>>,
    next: u64,
    threads: Vec<JoinHandle<()>>,
    finished: bool,
}

impl Threaded {
    fn start(groups: BatchGroups, collator: MlmCollator, seed: u64, config: &LoaderConfig) -> Self {
        let capacity = config.prefetch.max(1);
        let (work_tx, work_rx) = bounded::<(u64, Result<Vec<TrainingRecord>>)>(capacity);
        let (result_tx, result_rx) = bounded::<Numbered>(capacity + config.num_workers);
        let mut threads = Vec::with_capacity(config.num_workers + 1);
        threads.push(std::thread::spawn(move || read_groups(groups, work_tx)));
        for _ in 0..config.num_workers {
            let (rx, tx, collator) = (work_rx.clone(), result_tx.clone(), collator.clone());
            threads.push(std::thread::spawn(move || {
                for (index, records) in rx {
                    let batch = records.and_then(|r| collate_numbered(&collator, seed, index, &r));
                    if tx.send((index, batch)).is_err() {
                        return;
                    }
                }
            }));
        }
        Self { results: Some(result_rx), reorder: BTreeMap::new(), next: 0, threads, finished: false }
    }
}

fn read_groups(groups: BatchGroups, work: Sender<(u64, Result<Vec<TrainingRecord>>)>) {
    let mut last = 0;
    for item in groups {
        let sent = match item {
            Ok((index, records)) => {
                last = index + 1;
                work.send((index, Ok(records)))
            }
            // A read error takes the next index so it is delivered in order, then ends the epoch.
            Err(e) => {
                let _ = work.send((last, Err(e)));
                return;
            }
        };
        if sent.is_err() {
            return;
        }
    }
}

impl Iterator for Threaded {
    type Item = Result<MlmBatch>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.finished {
            return None;
        }
        loop {
            if let Some(batch) = self.reorder.remove(&self.next) {
                self.next += 1;
                if batch.is_err() {
                    self.finished = true;
                }
                return Some(batch);
            }
            let received = self.results.as_ref().map(|rx| rx.recv());
            match received {
                Some(Ok((index, batch))) => {
                    self.reorder.insert(index, batch);
                }
                _ => {
                    self.finished = true;
                    // All senders are gone: either the epoch is complete or a worker died.
                    let panicked = std::mem::take(&mut self.threads).into_iter().any(|t| t.join().is_err());
                    return panicked.then_some(Err(DataError::WorkerPanicked));
                }
            }
        }
    }
}

impl Drop for Threaded {
    fn drop(&mut self) {
        // Closing the result channel makes workers and the reader stop at their next send.
        drop(self.results.take());
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::MalformedPolicy;
    use codon_vocab::CodonTokenizer;
    use rand::Rng;
    use std::io::Write;

    fn dataset(n: usize) -> (tempfile::NamedTempFile, JsonlDataset) {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(42);
        for i in 0..n {
            let len = rng.random_range(3..120);
            let codons = vec!["M_ATG"; len].join(" ") + " __TAA";
            let r = TrainingRecord { idx: i as u64, codons, organism: (i % 164) as u32 };
            writeln!(f, "{}", r.to_json_line()).unwrap();
        }
        let ds = JsonlDataset::open(f.path(), MalformedPolicy::Error).unwrap();
        (f, ds)
    }

    fn loader(ds: &JsonlDataset, config: LoaderConfig) -> DataLoader {
        DataLoader::new(ds.clone(), MlmCollator::new(CodonTokenizer::new().unwrap()), config).unwrap()
    }

    #[test]
    fn output_does_not_depend_on_the_number_of_workers() {
        let (_f, ds) = dataset(103);
        let base = LoaderConfig { batch_size: 8, shuffle_buffer: 32, seed: 7, ..Default::default() };
        let reference: Vec<MlmBatch> =
            loader(&ds, LoaderConfig { num_workers: 0, ..base }).epoch(3).map(|b| b.unwrap()).collect();
        assert_eq!(reference.len(), 13);
        assert_eq!(reference.len(), loader(&ds, base).batches_per_epoch());
        for workers in [1, 2, 5] {
            for prefetch in [1, 8] {
                let got: Vec<MlmBatch> = loader(&ds, LoaderConfig { num_workers: workers, prefetch, ..base })
                    .epoch(3)
                    .map(|b| b.unwrap())
                    .collect();
                assert_eq!(got, reference, "{workers} workers, prefetch {prefetch}");
            }
        }
        let other_epoch: Vec<MlmBatch> = loader(&ds, base).epoch(4).map(|b| b.unwrap()).collect();
        assert_ne!(other_epoch, reference, "epochs reshuffle");
    }

    #[test]
    fn every_record_appears_once_per_epoch() {
        let (_f, ds) = dataset(50);
        let l = loader(&ds, LoaderConfig { batch_size: 7, num_workers: 3, shuffle_buffer: 10, ..Default::default() });
        let total: usize = l.epoch(0).map(|b| b.unwrap().encoding.batch_size).sum();
        assert_eq!(total, 50);
        let dropped = loader(&ds, LoaderConfig { batch_size: 7, drop_last: true, ..Default::default() });
        assert_eq!(dropped.batches_per_epoch(), 7);
        assert!(dropped.epoch(0).all(|b| b.unwrap().encoding.batch_size == 7));
        assert_eq!(dropped.epoch(0).count(), 7);
    }

    #[test]
    fn bucketing_reduces_padding() {
        let (_f, ds) = dataset(400);
        let padding = |bucket: Option<usize>| -> usize {
            let l = loader(&ds, LoaderConfig { batch_size: 8, bucket_batches: bucket, ..Default::default() });
            l.epoch(0)
                .map(|b| b.unwrap())
                .map(|b| b.encoding.batch_size * b.encoding.seq_len - b.encoding.num_tokens())
                .sum()
        };
        let (plain, bucketed) = (padding(None), padding(Some(16)));
        assert!(bucketed * 3 < plain, "padding {bucketed} with bucketing vs {plain} without");
        let l = loader(&ds, LoaderConfig { batch_size: 8, bucket_batches: Some(16), ..Default::default() });
        assert_eq!(l.epoch(0).map(|b| b.unwrap().encoding.batch_size).sum::<usize>(), 400);
    }

    #[test]
    fn dropping_mid_epoch_stops_the_threads() {
        let (_f, ds) = dataset(300);
        let l = loader(&ds, LoaderConfig { batch_size: 2, num_workers: 3, prefetch: 2, ..Default::default() });
        let mut it = l.epoch(0);
        assert!(it.next().unwrap().is_ok());
        drop(it); // joins the threads: a hang here hangs the test run, which CI's time limit ends
    }

    #[test]
    fn read_errors_surface_in_order() {
        let (f, ds) = dataset(40);
        // Corrupt the file after it was opened and counted.
        let text = std::fs::read_to_string(f.path()).unwrap();
        let mut lines: Vec<&str> = text.lines().collect();
        lines[25] = "{not json";
        std::fs::write(f.path(), lines.join("\n")).unwrap();
        for workers in [0, 2] {
            let l = loader(
                &ds,
                LoaderConfig { batch_size: 4, num_workers: workers, shuffle_buffer: 1, ..Default::default() },
            );
            let results: Vec<Result<MlmBatch>> = l.epoch(0).collect();
            assert_eq!(results.len(), 7, "6 good batches then the error");
            let err = results.last().unwrap().as_ref().unwrap_err().to_string();
            assert!(err.contains(":26: malformed record"), "{err}");
        }
    }

    #[test]
    fn invalid_settings_are_rejected() {
        let (_f, ds) = dataset(5);
        let c = MlmCollator::new(CodonTokenizer::new().unwrap());
        assert!(DataLoader::new(ds.clone(), c.clone(), LoaderConfig { batch_size: 0, ..Default::default() }).is_err());
        assert!(DataLoader::new(ds, c, LoaderConfig { bucket_batches: Some(0), ..Default::default() }).is_err());
    }
}
