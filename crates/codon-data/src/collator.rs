//! The masked-LM collator with CodonTransformer's exact semantics
//! (`MaskedTokenizerCollator` upstream).
//!
//! For every token with id ≥ 5: selected with probability 0.15. Of the selected, 80 %
//! become `TOKEN2MASK[id]` (a codon becomes its amino acid's `x_unk`); of the remaining
//! 20 %, one in ten (so 2 % of the selected) becomes a uniform random codon id in 26..=89;
//! the rest stay unchanged. Labels hold the original id where selected and −100 elsewhere.
//! Padding is dynamic (to the longest row), and the output depends only on the records and
//! the RNG state.

use codon_vocab::vocab::{FIRST_CODON_ID, FIRST_MASKABLE_ID, PAD_ID, TOKEN2MASK};
use codon_vocab::{BatchEncoding, CodonTokenizer};
use rand::Rng;

use crate::error::{DataError, Result};
use crate::record::TrainingRecord;

/// Label of a position that takes no loss (the loss's own constant, re-exported).
/// The label of a position the loss ignores: torch's `ignore_index` and transformers' collator
/// convention (`codon_ops::cross_entropy::IGNORE_INDEX`, checked equal in codon-train's tests).
pub const IGNORE_INDEX: i64 = -100;

/// A masked-LM batch: the encoded rows, their token ids masked, and the labels, in row-major
/// `(batch_size, seq_len)` layout.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MlmBatch {
    /// The padded rows, with masked token ids.
    pub encoding: BatchEncoding,
    /// Original id where selected, −100 elsewhere.
    pub labels: Vec<i64>,
}

/// Masking probabilities. The defaults are upstream's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MaskingConfig {
    /// Probability that an eligible token is selected (0.15).
    pub select: f64,
    /// Probability that a selected token becomes its mask token (0.8).
    pub replace: f64,
    /// Probability that a selected, not replaced token becomes a random codon (0.1).
    pub randomize: f64,
}

impl Default for MaskingConfig {
    fn default() -> Self {
        Self { select: 0.15, replace: 0.8, randomize: 0.1 }
    }
}

/// Probability `p` as a threshold on a uniform `u32`.
fn threshold(p: f64) -> u64 {
    (p.clamp(0.0, 1.0) * 4_294_967_296.0) as u64
}

/// Tokenizes, pads and masks batches of training records.
#[derive(Debug, Clone)]
pub struct MlmCollator {
    tokenizer: CodonTokenizer,
    select: u64,
    replace: u64,
    randomize: u64,
}

impl MlmCollator {
    /// A collator with upstream's probabilities.
    pub fn new(tokenizer: CodonTokenizer) -> Self {
        Self::from_valid(tokenizer, MaskingConfig::default())
    }

    /// A collator with custom probabilities, each in [0, 1].
    pub fn with_config(tokenizer: CodonTokenizer, config: MaskingConfig) -> Result<Self> {
        for (name, p) in [("select", config.select), ("replace", config.replace), ("randomize", config.randomize)] {
            if !(0.0..=1.0).contains(&p) {
                return Err(DataError::Config(format!("masking probability {name} = {p} is not in [0, 1]")));
            }
        }
        Ok(Self::from_valid(tokenizer, config))
    }

    fn from_valid(tokenizer: CodonTokenizer, config: MaskingConfig) -> Self {
        Self {
            tokenizer,
            select: threshold(config.select),
            replace: threshold(config.replace),
            randomize: threshold(config.randomize),
        }
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &CodonTokenizer {
        &self.tokenizer
    }

    /// Tokenize and pad records without masking.
    pub fn encode(&self, records: &[TrainingRecord]) -> Result<BatchEncoding> {
        let mut rows = Vec::with_capacity(records.len());
        for r in records {
            rows.push(self.tokenizer.encode(&r.codons)?);
        }
        let organisms: Vec<u32> = records.iter().map(|r| r.organism).collect();
        Ok(codon_vocab::pad_rows(&rows, &organisms)?)
    }

    /// Tokenize, pad and mask a batch of records.
    pub fn collate(&self, records: &[TrainingRecord], rng: &mut impl Rng) -> Result<MlmBatch> {
        // Rows are encoded into a reused per-thread buffer, then padded, masked and labelled
        // in one pass: the only allocations are the four output arrays.
        thread_local! {
            static SCRATCH: std::cell::RefCell<(Vec<u32>, Vec<usize>)> = const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
        }
        SCRATCH.with(|scratch| {
            let (ids, ends) = &mut *scratch.borrow_mut();
            ids.clear();
            ends.clear();
            for r in records {
                self.tokenizer.encode_into(&r.codons, ids)?;
                ends.push(ids.len());
            }
            let mut start = 0;
            let rows: Vec<&[u32]> = ends
                .iter()
                .map(|&end| {
                    let row = &ids[start..end];
                    start = end;
                    row
                })
                .collect();
            Ok(self.pad_and_mask(&rows, records, rng))
        })
    }

    fn pad_and_mask(&self, rows: &[&[u32]], records: &[TrainingRecord], rng: &mut impl Rng) -> MlmBatch {
        let seq_len = rows.iter().map(|r| r.len()).max().unwrap_or(0);
        let n = rows.len() * seq_len;
        let mut input_ids = Vec::with_capacity(n);
        let mut attention_mask = Vec::with_capacity(n);
        let mut token_type_ids = Vec::with_capacity(n);
        let mut labels = vec![IGNORE_INDEX; n];
        for (row_index, (row, record)) in rows.iter().zip(records).enumerate() {
            let row_labels = &mut labels[row_index * seq_len..row_index * seq_len + row.len()];
            for (&id, label) in row.iter().zip(row_labels.iter_mut()) {
                input_ids.push(self.mask_token(id, label, rng));
            }
            input_ids.resize(input_ids.len() + seq_len - row.len(), PAD_ID);
            attention_mask.resize(attention_mask.len() + row.len(), 1);
            attention_mask.resize(attention_mask.len() + seq_len - row.len(), 0);
            token_type_ids.resize(token_type_ids.len() + seq_len, record.organism);
        }
        let encoding = BatchEncoding { batch_size: rows.len(), seq_len, input_ids, attention_mask, token_type_ids };
        MlmBatch { encoding, labels }
    }

    /// The masked id of one token, with its label written when it is selected.
    #[inline]
    fn mask_token(&self, id: u32, label: &mut i64, rng: &mut impl Rng) -> u32 {
        if id < FIRST_MASKABLE_ID || u64::from(rng.next_u32()) >= self.select {
            return id;
        }
        *label = i64::from(id);
        if u64::from(rng.next_u32()) < self.replace {
            TOKEN2MASK.get(id as usize).copied().unwrap_or(id)
        } else if u64::from(rng.next_u32()) < self.randomize {
            FIRST_CODON_ID + rng.random_range(0..64)
        } else {
            id
        }
    }
}

/// A deterministic masked-LM batch of `b` sequences of `n` tokens (`[CLS]`, codon tokens,
/// `[SEP]`, all of upstream's default organism; every 7th token from the 4th masked as the
/// collator masks), for benchmarks, timing runs and self-tests. `n` is at least 2.
pub fn synthetic_mlm_batch(b: usize, n: usize) -> MlmBatch {
    use codon_vocab::vocab::{CLS_ID, SEP_ID};
    let n = n.max(2);
    let organism = codon_vocab::organism_id(codon_vocab::DEFAULT_ORGANISM).unwrap_or_default();
    let mut input_ids = Vec::with_capacity(b * n);
    let mut labels = Vec::with_capacity(b * n);
    for i in 0..b * n {
        let id = match i % n {
            0 => CLS_ID,
            p if p == n - 1 => SEP_ID,
            p => FIRST_CODON_ID + ((p * 7 + i / n) % 64) as u32,
        };
        let masked = i % 7 == 3 && id >= FIRST_CODON_ID;
        input_ids.push(if masked { TOKEN2MASK[id as usize] } else { id });
        labels.push(if masked { i64::from(id) } else { IGNORE_INDEX });
    }
    let encoding = BatchEncoding {
        batch_size: b,
        seq_len: n,
        input_ids,
        attention_mask: vec![1; b * n],
        token_type_ids: vec![organism; b * n],
    };
    MlmBatch { encoding, labels }
}

#[cfg(test)]
mod tests {
    use super::*;
    use codon_vocab::vocab::{is_codon_id, MASK_ID};
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn random_records(n: usize, rng: &mut ChaCha8Rng) -> Vec<TrainingRecord> {
        (0..n)
            .map(|i| {
                let len = rng.random_range(150..900);
                let mut toks: Vec<&str> = (0..len)
                    .map(|_| {
                        let id = if rng.random_bool(0.01) { rng.random_range(5..25) } else { rng.random_range(26..90) };
                        codon_vocab::vocab::VOCAB[id]
                    })
                    .collect();
                toks.push("__taa");
                TrainingRecord { idx: i as u64, codons: toks.join(" ").to_uppercase(), organism: (i * 7 % 164) as u32 }
            })
            .collect()
    }

    /// The masking rule, measured over ~500k tokens as the fixture README does.
    #[test]
    fn masking_statistics_match_upstream() {
        let collator = MlmCollator::new(CodonTokenizer::new().unwrap());
        let mut rng = ChaCha8Rng::seed_from_u64(123);
        let (mut eligible, mut selected, mut special_selected) = (0usize, 0usize, 0usize);
        let (mut codon_selected, mut to_mask, mut to_other_codon, mut unchanged) = (0usize, 0usize, 0usize, 0usize);
        let mut random_ids = std::collections::BTreeSet::new();
        for _ in 0..6 {
            let records = random_records(96, &mut rng);
            let enc = collator.encode(&records).unwrap();
            let batch = collator.collate(&records, &mut rng).unwrap();
            assert_eq!(batch.encoding.attention_mask, enc.attention_mask);
            assert_eq!(batch.encoding.token_type_ids, enc.token_type_ids);
            for (row, r) in records.iter().enumerate() {
                assert!(batch.encoding.token_type_ids
                    [row * batch.encoding.seq_len..(row + 1) * batch.encoding.seq_len]
                    .iter()
                    .all(|&t| t == r.organism));
            }
            for ((&orig, &new), &label) in enc.input_ids.iter().zip(&batch.encoding.input_ids).zip(&batch.labels) {
                assert_ne!(new, MASK_ID);
                if orig < 5 {
                    assert_eq!((new, label), (orig, IGNORE_INDEX));
                    special_selected += usize::from(label != IGNORE_INDEX);
                    continue;
                }
                eligible += 1;
                if label == IGNORE_INDEX {
                    assert_eq!(new, orig, "unselected tokens are untouched");
                    continue;
                }
                assert_eq!(label, i64::from(orig));
                selected += 1;
                if is_codon_id(orig) {
                    codon_selected += 1;
                    if new == TOKEN2MASK[orig as usize] {
                        to_mask += 1;
                    } else if new == orig {
                        unchanged += 1;
                    } else {
                        assert!(is_codon_id(new));
                        random_ids.insert(new);
                        to_other_codon += 1;
                    }
                }
            }
        }
        let frac = |a: usize, b: usize| a as f64 / b as f64;
        assert!(eligible > 250_000);
        assert_eq!(special_selected, 0);
        assert!((frac(selected, eligible) - 0.15).abs() < 0.003, "{}", frac(selected, eligible));
        assert!((frac(to_mask, codon_selected) - 0.80).abs() < 0.008);
        assert!((frac(to_other_codon, codon_selected) - 0.02 * 63.0 / 64.0).abs() < 0.003);
        assert!((frac(unchanged, codon_selected) - (0.18 + 0.02 / 64.0)).abs() < 0.008);
        assert_eq!(random_ids.len(), 64, "random ids cover 26..=89");
        assert_eq!((*random_ids.first().unwrap(), *random_ids.last().unwrap()), (26, 89));
    }

    #[test]
    fn x_unk_tokens_are_eligible_and_map_to_themselves() {
        let collator = MlmCollator::with_config(
            CodonTokenizer::new().unwrap(),
            MaskingConfig { select: 1.0, replace: 1.0, randomize: 0.0 },
        )
        .unwrap();
        let recs = [TrainingRecord { idx: 0, codons: "M_UNK A_GCT __TAA __UNK".into(), organism: 3 }];
        let b = collator.collate(&recs, &mut ChaCha8Rng::seed_from_u64(0)).unwrap();
        assert_eq!(b.encoding.input_ids, [1, 15, 5, 25, 25, 2]);
        assert_eq!(b.labels, [-100, 15, 65, 74, 25, -100]);
    }

    #[test]
    fn deterministic_for_a_seed_and_dynamically_padded() {
        let collator = MlmCollator::new(CodonTokenizer::new().unwrap());
        let recs = random_records(4, &mut ChaCha8Rng::seed_from_u64(5));
        let a = collator.collate(&recs, &mut ChaCha8Rng::seed_from_u64(9)).unwrap();
        let b = collator.collate(&recs, &mut ChaCha8Rng::seed_from_u64(9)).unwrap();
        let c = collator.collate(&recs, &mut ChaCha8Rng::seed_from_u64(10)).unwrap();
        assert_eq!(a, b);
        assert_ne!(a.encoding.input_ids, c.encoding.input_ids);
        let longest = recs.iter().map(|r| r.num_tokens() + 2).max().unwrap();
        assert_eq!(a.encoding.seq_len, longest);
        assert_eq!(a.encoding.rows(&a.labels).len(), 4);
    }

    #[test]
    fn invalid_probabilities_are_rejected() {
        let cfg = MaskingConfig { select: 1.5, ..Default::default() };
        assert!(MlmCollator::with_config(CodonTokenizer::new().unwrap(), cfg).is_err());
    }
}
