//! The CodonTransformer tokenizer, built on the `tokenizers` crate from the vocabulary in code.
//!
//! Pipeline (identical to upstream `CodonTransformerTokenizer.json`):
//! Lowercase normaliser → `Split(" ", Isolated)` + `Whitespace` pre-tokenizer → WordPiece
//! over [`VOCAB`] (no `##` pieces, so any unknown word is one `[UNK]`) → `[CLS] $A [SEP]`
//! template, truncation to [`MAX_LEN`] and right padding with `[PAD]` to the longest row.
//! The organism id is written into `token_type_ids` at every position, pads included.
//!
//! Merged sequences are ASCII without `[`, and for those the encoder takes a direct
//! path that yields the same ids as the `tokenizers` pipeline (checked by a differential
//! test) at a fraction of the cost; any other input goes through `tokenizers`.

use std::path::Path;

use tokenizers::models::wordpiece::WordPiece;
use tokenizers::normalizers::{Lowercase, Sequence as NormalizerSequence};
use tokenizers::pre_tokenizers::sequence::Sequence as PreTokenizerSequence;
use tokenizers::pre_tokenizers::split::Split;
use tokenizers::pre_tokenizers::whitespace::Whitespace;
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{AddedToken, PaddingParams, PaddingStrategy, SplitDelimiterBehavior, Tokenizer, TruncationParams};

use crate::error::{Result, VocabError};
use crate::vocab::{
    codon_index, CLS_ID, FIRST_CODON_ID, MAX_LEN, PAD_ID, SEP_ID, SPECIAL_TOKENS, UNK_ID, VOCAB, VOCAB_SIZE,
};

/// WordPiece's `max_input_chars_per_word`: longer words become `[UNK]`.
const MAX_INPUT_CHARS_PER_WORD: usize = 100;

/// A padded batch in row-major `(batch_size, seq_len)` layout.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BatchEncoding {
    /// Number of rows.
    pub batch_size: usize,
    /// Common row length (the longest row, at most [`MAX_LEN`]).
    pub seq_len: usize,
    /// Token ids, `[PAD]` on the right.
    pub input_ids: Vec<u32>,
    /// 1 on tokens, 0 on pads.
    pub attention_mask: Vec<u32>,
    /// The row's organism id at every position.
    pub token_type_ids: Vec<u32>,
}

impl BatchEncoding {
    /// Number of non-pad tokens.
    pub fn num_tokens(&self) -> usize {
        self.attention_mask.iter().filter(|&&m| m != 0).count()
    }

    /// The rows of one of this batch's flat fields, for display or JSON output.
    pub fn rows<T: Clone>(&self, flat: &[T]) -> Vec<Vec<T>> {
        if self.seq_len == 0 {
            return vec![Vec::new(); self.batch_size];
        }
        flat.chunks(self.seq_len).map(<[T]>::to_vec).collect()
    }

    /// Row `i` of `input_ids`.
    pub fn input_ids_row(&self, i: usize) -> &[u32] {
        &self.input_ids[i * self.seq_len..(i + 1) * self.seq_len]
    }
    /// Row `i` of `attention_mask`.
    pub fn attention_mask_row(&self, i: usize) -> &[u32] {
        &self.attention_mask[i * self.seq_len..(i + 1) * self.seq_len]
    }
    /// Row `i` of `token_type_ids`.
    pub fn token_type_ids_row(&self, i: usize) -> &[u32] {
        &self.token_type_ids[i * self.seq_len..(i + 1) * self.seq_len]
    }
}

/// The CodonTransformer tokenizer.
#[derive(Clone)]
pub struct CodonTokenizer {
    inner: Tokenizer,
    /// True when built from the vocabulary in code, so the direct path is exact.
    builtin: bool,
    max_len: usize,
}

impl std::fmt::Debug for CodonTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CodonTokenizer").field("builtin", &self.builtin).field("max_len", &self.max_len).finish()
    }
}

fn tok_err(e: impl std::fmt::Display) -> VocabError {
    VocabError::Tokenizer(e.to_string())
}

/// Run `f`, a call into `tokenizers` with a user's file behind it, turning a panic into the
/// panic's message: some components it accepts from a file (a `Precompiled` normalizer without
/// its map, a `FixedLength` pre-tokenizer of length 0) panic instead of returning an error.
fn unpanicked<T>(f: impl FnOnce() -> T) -> std::result::Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|payload| {
        let text =
            payload.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| payload.downcast_ref::<String>().cloned());
        format!("the tokenizers library failed on it ({})", text.as_deref().unwrap_or("a panic"))
    })
}

impl CodonTokenizer {
    /// The upstream tokenizer, built from [`VOCAB`].
    pub fn new() -> Result<Self> {
        let vocab: [(String, u32); VOCAB_SIZE] = std::array::from_fn(|i| (VOCAB[i].to_string(), i as u32));
        let model = WordPiece::builder()
            .vocab(vocab)
            .unk_token("[UNK]".into())
            .continuing_subword_prefix("##".into())
            .max_input_chars_per_word(MAX_INPUT_CHARS_PER_WORD)
            .build()
            .map_err(tok_err)?;
        let split = Split::new(" ", SplitDelimiterBehavior::Isolated, false).map_err(tok_err)?;
        let template = TemplateProcessing::builder()
            .try_single("[CLS] $A [SEP]")
            .and_then(|b| b.try_pair("[CLS] $A [SEP] $B:1 [SEP]:1"))
            .map_err(tok_err)?
            .special_tokens(vec![("[CLS]", CLS_ID), ("[SEP]", SEP_ID)])
            .build()
            .map_err(tok_err)?;
        let mut inner = Tokenizer::new(model);
        inner
            .with_normalizer(Some(NormalizerSequence::new(vec![Lowercase.into()])))
            .map_err(tok_err)?
            .with_pre_tokenizer(Some(PreTokenizerSequence::new(vec![split.into(), Whitespace.into()])))
            .with_post_processor(Some(template));
        let _added = inner.add_special_tokens(SPECIAL_TOKENS.iter().map(|t| AddedToken::from(*t, true)));
        Self::configure(inner, true)
    }

    /// Load an external `tokenizer.json` (for users who have the upstream file). Truncation
    /// and padding are set as upstream calls it: 2048 tokens, right padding with `[PAD]`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let failed = |message: String| VocabError::TokenizerFile { path: path.to_path_buf(), message };
        let inner = unpanicked(|| Tokenizer::from_file(path)).map_err(failed)?.map_err(|e| failed(e.to_string()))?;
        Self::configure(inner, false)
    }

    fn configure(mut inner: Tokenizer, builtin: bool) -> Result<Self> {
        inner.with_truncation(Some(TruncationParams { max_length: MAX_LEN, ..Default::default() })).map_err(tok_err)?;
        inner.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            pad_id: PAD_ID,
            pad_token: "[PAD]".into(),
            ..Default::default()
        }));
        Ok(Self { inner, builtin, max_len: MAX_LEN })
    }

    /// The underlying `tokenizers` tokenizer (e.g. to save it as `tokenizer.json`).
    pub fn inner(&self) -> &Tokenizer {
        &self.inner
    }

    /// Ids of one merged sequence, `[CLS]` … `[SEP]`, truncated to 2048, unpadded.
    pub fn encode(&self, merged: &str) -> Result<Vec<u32>> {
        let mut ids = Vec::new();
        self.encode_into(merged, &mut ids)?;
        Ok(ids)
    }

    /// Append the ids of one merged sequence to `out`.
    pub fn encode_into(&self, merged: &str, out: &mut Vec<u32>) -> Result<()> {
        if self.builtin && merged.is_ascii() && !merged.contains('[') {
            encode_direct(merged, self.max_len, out);
            return Ok(());
        }
        out.extend_from_slice(self.library_encoding(merged)?.get_ids());
        Ok(())
    }

    /// Ids through the `tokenizers` pipeline only (the reference for the direct path).
    pub fn encode_with_library(&self, merged: &str) -> Result<Vec<u32>> {
        Ok(self.library_encoding(merged)?.get_ids().to_vec())
    }

    fn library_encoding(&self, merged: &str) -> Result<tokenizers::Encoding> {
        unpanicked(|| self.inner.encode(merged, true)).map_err(tok_err)?.map_err(tok_err)
    }

    /// Encode and pad a batch. `organism_ids[i]` fills row `i` of `token_type_ids`.
    pub fn encode_batch(&self, merged: &[&str], organism_ids: &[u32]) -> Result<BatchEncoding> {
        let mut rows: Vec<Vec<u32>> = Vec::with_capacity(merged.len());
        for m in merged {
            rows.push(self.encode(m)?);
        }
        pad_rows(&rows, organism_ids)
    }
}

/// Right-pad rows of ids to the longest one and build the mask and the organism rows; one
/// organism id per row.
pub fn pad_rows(rows: &[Vec<u32>], organism_ids: &[u32]) -> Result<BatchEncoding> {
    if rows.len() != organism_ids.len() {
        return Err(VocabError::Tokenizer(format!("{} sequences but {} organism ids", rows.len(), organism_ids.len())));
    }
    let seq_len = rows.iter().map(Vec::len).max().unwrap_or(0);
    let n = rows.len() * seq_len;
    let mut enc = BatchEncoding {
        batch_size: rows.len(),
        seq_len,
        input_ids: Vec::with_capacity(n),
        attention_mask: Vec::with_capacity(n),
        token_type_ids: Vec::with_capacity(n),
    };
    for (row, &organism) in rows.iter().zip(organism_ids) {
        enc.input_ids.extend_from_slice(row);
        enc.input_ids.resize(enc.input_ids.len() + seq_len - row.len(), PAD_ID);
        enc.attention_mask.resize(enc.attention_mask.len() + row.len(), 1);
        enc.attention_mask.resize(enc.attention_mask.len() + seq_len - row.len(), 0);
        enc.token_type_ids.resize(enc.token_type_ids.len() + seq_len, organism);
    }
    Ok(enc)
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

fn is_space_byte(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// Id of a lower-case ASCII word: the vocabulary entry if any, else `[UNK]`.
fn word_id(word: &[u8]) -> u32 {
    if word.len() == 5 && word[1] == b'_' {
        let candidate = if &word[2..] == b"unk" {
            // x_unk ids follow the alphabetical amino-acid order; `__unk` is 25.
            VOCAB[5..=25].iter().position(|t| t.as_bytes()[0] == word[0]).map(|i| i + 5)
        } else {
            let upper = [word[2].to_ascii_uppercase(), word[3].to_ascii_uppercase(), word[4].to_ascii_uppercase()];
            codon_index(&upper).map(|i| i + FIRST_CODON_ID as usize)
        };
        if let Some(id) = candidate {
            if VOCAB[id].as_bytes() == word {
                return id as u32;
            }
        }
    }
    UNK_ID
}

/// The direct path for ASCII input without `[` (no added token can match there).
fn encode_direct(merged: &str, max_len: usize, out: &mut Vec<u32>) {
    let bytes = merged.as_bytes();
    let budget = max_len.saturating_sub(2);
    let start = out.len();
    out.push(CLS_ID);
    let mut word = [0u8; MAX_INPUT_CHARS_PER_WORD];
    let mut i = 0;
    while i < bytes.len() && out.len() - start - 1 < budget {
        let b = bytes[i];
        if is_space_byte(b) {
            i += 1;
            continue;
        }
        let word_class = is_word_byte(b);
        let begin = i;
        while i < bytes.len() && !is_space_byte(bytes[i]) && is_word_byte(bytes[i]) == word_class {
            i += 1;
        }
        let len = i - begin;
        let id = if len > MAX_INPUT_CHARS_PER_WORD {
            UNK_ID
        } else {
            for (dst, src) in word.iter_mut().zip(&bytes[begin..i]) {
                *dst = src.to_ascii_lowercase();
            }
            word_id(&word[..len])
        };
        out.push(id);
    }
    out.push(SEP_ID);
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn reference_encodings() {
        let t = CodonTokenizer::new().unwrap();
        for tok in [false, true] {
            let enc = |s: &str| if tok { t.encode_with_library(s).unwrap() } else { t.encode(s).unwrap() };
            assert_eq!(enc("M_UNK A_UNK L_UNK __UNK"), [1, 15, 5, 14, 25, 2]);
            assert_eq!(enc("M_ATG A_GCT V_GTG __TAA"), [1, 40, 65, 72, 74, 2]);
            assert_eq!(enc("m_atg\ta_gct\n\nv_gtg  __taa"), [1, 40, 65, 72, 74, 2]);
            assert_eq!(enc("M_ATG A_UNK __TAG"), [1, 40, 5, 76, 2]);
            assert_eq!(enc("X_UNK B_UNK"), [1, 0, 0, 2]);
            assert_eq!(enc("M-UNK"), [1, 0, 0, 0, 2]);
            assert_eq!(enc("M_ATGA"), [1, 0, 2]);
            assert_eq!(enc(""), [1, 2]);
            let long = vec!["A_UNK"; 3000].join(" ");
            let ids = enc(&long);
            assert_eq!(ids.len(), 2048);
            assert_eq!(&ids[2045..], [5, 5, 2]);
        }
    }

    #[test]
    fn batch_padding() {
        let t = CodonTokenizer::new().unwrap();
        let b = t.encode_batch(&["M_UNK __UNK", "M_ATG A_GCT V_GTG __TAA"], &[51, 7]).unwrap();
        assert_eq!((b.batch_size, b.seq_len), (2, 6));
        assert_eq!(b.input_ids_row(0), [1, 15, 25, 2, 3, 3]);
        assert_eq!(b.attention_mask_row(0), [1, 1, 1, 1, 0, 0]);
        assert_eq!(b.token_type_ids_row(0), [51; 6]);
        assert_eq!(b.token_type_ids_row(1), [7; 6]);
        assert!(t.encode_batch(&["M_UNK"], &[]).is_err());
    }

    /// The direct path and the `tokenizers` pipeline agree on random ASCII text built
    /// from vocabulary words, near-misses, punctuation and every ASCII whitespace.
    #[test]
    fn direct_path_matches_library_on_random_ascii() {
        let t = CodonTokenizer::new().unwrap();
        let pieces = [
            "M_ATG", "m_atg", "A_UNK", "__UNK", "__TAA", "*_UNK", "K_AAA", "Z_UNK", "M_ATGA", "M-UNK", "m_", "_", "__",
            "unk", "ATG", "##", "#", "*", "?", "-", "a1_cgt", "W_TGG", "r_agg", "x", "MM_UNK", "]", "PAD]",
        ];
        let seps = [" ", "  ", "\t", "\n", "\r", "\x0b", "\x0c", "", "\x1c", "\x7f"];
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        for _ in 0..3000 {
            let n = rng.random_range(0..12);
            let mut s = String::new();
            for _ in 0..n {
                s.push_str(pieces[rng.random_range(0..pieces.len())]);
                s.push_str(seps[rng.random_range(0..seps.len())]);
            }
            if rng.random_bool(0.05) {
                s.push_str(&"a".repeat(rng.random_range(95..110)));
            }
            assert_eq!(t.encode(&s).unwrap(), t.encode_with_library(&s).unwrap(), "{s:?}");
        }
    }

    #[test]
    fn external_tokenizer_file_loads_and_encodes_the_same() {
        let built = CodonTokenizer::new().unwrap();
        let dir = std::env::temp_dir().join(format!("codon-tok-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tokenizer.json");
        built.inner().save(&path, false).unwrap();
        let loaded = CodonTokenizer::from_file(&path).unwrap();
        for s in ["M_ATG A_GCT V_GTG __TAA", "M*M", "X_UNK [PAD] m_atg", ""] {
            assert_eq!(loaded.encode(s).unwrap(), built.encode(s).unwrap(), "{s:?}");
        }
        let b = loaded.encode_batch(&["M_UNK __UNK", "M_ATG A_GCT V_GTG __TAA"], &[1, 2]).unwrap();
        assert_eq!(b.input_ids_row(0), [1, 15, 25, 2, 3, 3]);
        std::fs::write(&path, "{not json").unwrap();
        let err = CodonTokenizer::from_file(&path).unwrap_err().to_string();
        assert!(err.starts_with(&format!("cannot load tokenizer from {}", path.display())), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_whose_components_panic_in_the_library_is_an_error() {
        let dir = std::env::temp_dir().join(format!("codon-tok-panic-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tokenizer.json");
        let mut json: serde_json::Value =
            serde_json::from_str(&CodonTokenizer::new().unwrap().inner().to_string(false).unwrap()).unwrap();
        // Panics while loading.
        json["normalizer"] = serde_json::json!({"type": "Precompiled", "precompiled_charsmap": null});
        std::fs::write(&path, json.to_string()).unwrap();
        let err = CodonTokenizer::from_file(&path).unwrap_err().to_string();
        assert!(err.contains("the tokenizers library failed on it"), "{err}");
        // Loads, then panics on every text it encodes.
        json["normalizer"] = serde_json::Value::Null;
        json["pre_tokenizer"] = serde_json::json!({"type": "FixedLength", "length": 0});
        std::fs::write(&path, json.to_string()).unwrap();
        let t = CodonTokenizer::from_file(&path).unwrap();
        let err = t.encode("M_ATG").unwrap_err().to_string();
        assert!(err.contains("the tokenizers library failed on it"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn non_ascii_and_special_tokens_use_the_library() {
        let t = CodonTokenizer::new().unwrap();
        assert_eq!(t.encode("[PAD] M_ATG").unwrap(), [1, 3, 40, 2]);
        assert_eq!(t.encode("M_ATG é").unwrap(), t.encode_with_library("M_ATG é").unwrap());
    }
}
