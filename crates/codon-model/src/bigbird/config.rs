//! `BigBirdConfig`, read from a transformers `config.json`.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{CodonError, Result};

/// The activation of the feed-forward layers and the MLM head transform.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum HiddenAct {
    /// `gelu_new`: the tanh approximation (CodonTransformer's).
    #[serde(rename = "gelu_new", alias = "gelu_pytorch_tanh", alias = "gelu_fast")]
    GeluNew,
    /// `gelu`: the exact erf form.
    #[serde(rename = "gelu")]
    Gelu,
    /// `relu`.
    #[serde(rename = "relu")]
    Relu,
}

/// Which attention the model runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum AttentionType {
    /// Dense attention over all tokens.
    #[serde(rename = "original_full")]
    OriginalFull,
    /// BigBird's global + sliding + random block attention.
    #[serde(rename = "block_sparse")]
    #[default]
    BlockSparse,
}

fn d_vocab() -> usize {
    90
}
fn d_hidden() -> usize {
    768
}
fn d_layers() -> usize {
    12
}
fn d_heads() -> usize {
    12
}
fn d_intermediate() -> usize {
    3072
}
fn d_act() -> HiddenAct {
    HiddenAct::GeluNew
}
fn d_dropout() -> f64 {
    0.1
}
fn d_max_pos() -> usize {
    4096
}
fn d_type_vocab() -> usize {
    164
}
fn d_init_range() -> f64 {
    0.02
}
fn d_eps() -> f64 {
    1e-12
}
fn d_true() -> bool {
    true
}
fn d_block() -> usize {
    64
}
fn d_random_blocks() -> usize {
    3
}
fn d_sep() -> u32 {
    2
}
fn d_bos() -> u32 {
    1
}
fn d_eos() -> u32 {
    2
}

/// The fields of a transformers `BigBirdConfig` that affect `BigBirdForMaskedLM`.
/// Unknown fields are ignored. [`Default`] is the CodonTransformer configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BigBirdConfig {
    /// Vocabulary size (90).
    #[serde(default = "d_vocab")]
    pub vocab_size: usize,
    /// Hidden size (768).
    #[serde(default = "d_hidden")]
    pub hidden_size: usize,
    /// Encoder layers (12).
    #[serde(default = "d_layers")]
    pub num_hidden_layers: usize,
    /// Attention heads (12).
    #[serde(default = "d_heads")]
    pub num_attention_heads: usize,
    /// Feed-forward size (3072).
    #[serde(default = "d_intermediate")]
    pub intermediate_size: usize,
    /// Activation (gelu_new).
    #[serde(default = "d_act")]
    pub hidden_act: HiddenAct,
    /// Dropout after embeddings, attention output and feed-forward (0.1).
    #[serde(default = "d_dropout")]
    pub hidden_dropout_prob: f64,
    /// Dropout of attention probabilities, full attention only (0.1).
    #[serde(default = "d_dropout")]
    pub attention_probs_dropout_prob: f64,
    /// Position table size (4096).
    #[serde(default = "d_max_pos")]
    pub max_position_embeddings: usize,
    /// Token types = organisms (164).
    #[serde(default = "d_type_vocab")]
    pub type_vocab_size: usize,
    /// Standard deviation of the weight initialisation (0.02).
    #[serde(default = "d_init_range")]
    pub initializer_range: f64,
    /// LayerNorm epsilon (1e-12).
    #[serde(default = "d_eps")]
    pub layer_norm_eps: f64,
    /// Embedding `padding_idx` and the id of block padding (0).
    #[serde(default)]
    pub pad_token_id: u32,
    /// `[CLS]` (1).
    #[serde(default = "d_bos")]
    pub bos_token_id: u32,
    /// `[SEP]` (2).
    #[serde(default = "d_eos")]
    pub eos_token_id: u32,
    /// `[SEP]` (2).
    #[serde(default = "d_sep")]
    pub sep_token_id: u32,
    /// The default attention (block_sparse); each call may choose another.
    #[serde(default)]
    pub attention_type: AttentionType,
    /// Biases on query/key/value (true).
    #[serde(default = "d_true")]
    pub use_bias: bool,
    /// Multiply word embeddings by √hidden (false).
    #[serde(default)]
    pub rescale_embeddings: bool,
    /// Tokens per block (64).
    #[serde(default = "d_block")]
    pub block_size: usize,
    /// Random blocks per query block (3).
    #[serde(default = "d_random_blocks")]
    pub num_random_blocks: usize,
    /// The MLM decoder shares the word embeddings (true).
    #[serde(default = "d_true")]
    pub tie_word_embeddings: bool,
    /// Must be false: BigBirdForMaskedLM is an encoder.
    #[serde(default)]
    pub is_decoder: bool,
    /// Must be false.
    #[serde(default)]
    pub add_cross_attention: bool,
    /// Architectures named in the file (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architectures: Option<Vec<String>>,
    /// `model_type` (informational; `big_bird` when written).
    #[serde(default = "d_model_type")]
    pub model_type: String,
}

fn d_model_type() -> String {
    "big_bird".into()
}

impl Default for BigBirdConfig {
    fn default() -> Self {
        serde_json::from_str("{}").unwrap_or_else(|_| unreachable!("every field has a default"))
    }
}

/// The largest value each size of a configuration may take: far above any BigBird published
/// (CodonTransformer: vocabulary 90, hidden 768, 12 layers, intermediate 3072, 2048 positions,
/// 164 organisms, blocks of 64 with 3 random), and small enough that no product of two
/// overflows. docs/model.md lists them.
pub const SIZE_LIMITS: [(&str, usize); 9] = [
    ("vocab_size", 1 << 20),
    ("hidden_size", 16_384),
    ("num_hidden_layers", 256),
    ("num_attention_heads", 1024),
    ("intermediate_size", 65_536),
    ("max_position_embeddings", 65_536),
    ("type_vocab_size", 1 << 20),
    ("block_size", 4096),
    ("num_random_blocks", 64),
];

/// The most parameters a configuration may have: 11 times CodonTransformer's, 4 GB of f32 weights.
pub const MAX_PARAMETERS: usize = 1_000_000_000;

impl BigBirdConfig {
    /// A size field by its `config.json` name (those of [`SIZE_LIMITS`]).
    fn size(&self, name: &str) -> usize {
        match name {
            "vocab_size" => self.vocab_size,
            "hidden_size" => self.hidden_size,
            "num_hidden_layers" => self.num_hidden_layers,
            "num_attention_heads" => self.num_attention_heads,
            "intermediate_size" => self.intermediate_size,
            "max_position_embeddings" => self.max_position_embeddings,
            "type_vocab_size" => self.type_vocab_size,
            "block_size" => self.block_size,
            _ => self.num_random_blocks,
        }
    }

    /// The small BigBird of the demo run, the tests and the benches' emulator workloads: 2 layers,
    /// hidden 64, 4 heads, intermediate 128, block 16. It trains in seconds on a CPU, and the
    /// emulator, whose kernels are plain C, can time it.
    pub fn demo() -> Self {
        Self {
            hidden_size: 64,
            num_hidden_layers: 2,
            num_attention_heads: 4,
            intermediate_size: 128,
            block_size: 16,
            num_random_blocks: 1,
            max_position_embeddings: 1024,
            ..Default::default()
        }
    }

    /// Parse and validate a `config.json` text.
    pub fn from_json(text: &str) -> Result<Self> {
        let config: Self = serde_json::from_str(text).map_err(|e| CodonError::Config(e.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    /// Read and validate a `config.json` file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| CodonError::io(path, e))?;
        Self::from_json(&text).map_err(|e| CodonError::Config(format!("{}: {e}", path.display())))
    }

    /// The config as transformers writes it.
    pub fn to_json(&self) -> String {
        let mut value = serde_json::to_value(self).unwrap_or_default();
        if let Some(obj) = value.as_object_mut() {
            obj.insert("architectures".into(), serde_json::json!(["BigBirdForMaskedLM"]));
            obj.insert("dtype".into(), serde_json::json!("float32"));
        }
        serde_json::to_string_pretty(&value).unwrap_or_default()
    }

    /// Longest unpadded input that still falls back to full attention: (5 + 2r)·block.
    pub fn max_tokens_full_fallback(&self) -> usize {
        (5 + 2 * self.num_random_blocks) * self.block_size
    }

    /// Training FLOPs per token with `parameters` parameters: 6 per parameter, plus attention's
    /// 12 · layers · hidden · keys, where a query sees (5 + r) blocks of keys under block-sparse
    /// attention and `length` keys under full attention.
    pub fn training_flops_per_token(&self, parameters: usize, attention: AttentionType, length: usize) -> f64 {
        let keys = match attention {
            AttentionType::BlockSparse => ((5 + self.num_random_blocks) * self.block_size).min(length),
            _ => length,
        };
        6.0 * parameters as f64 + 12.0 * (self.num_hidden_layers * self.hidden_size * keys) as f64
    }

    /// A length (in tokens) that runs the block-sparse path: two blocks past the full-attention
    /// fallback, within the position table. Preflights use it to launch what long inputs will.
    pub fn block_sparse_probe_len(&self) -> usize {
        (self.max_tokens_full_fallback() + 2 * self.block_size).min(self.max_position_embeddings)
    }

    /// The parameters a model of this configuration has (the tied decoder counted once),
    /// saturating rather than overflowing on hostile sizes.
    pub fn parameter_count(&self) -> u128 {
        let (h, i) = (self.hidden_size as u128, self.intermediate_size as u128);
        let rows = (self.vocab_size as u128)
            .saturating_add(self.max_position_embeddings as u128)
            .saturating_add(self.type_vocab_size as u128);
        let embeddings = rows.saturating_mul(h).saturating_add(2 * h);
        let square = h.saturating_mul(h);
        // q, k, v (biases with use_bias), the attention output, two LayerNorms, the feed-forward pair.
        let qkv_bias = if self.use_bias { 3 * h } else { 0 };
        let layer = square
            .saturating_mul(4)
            .saturating_add(qkv_bias + h)
            .saturating_add(4 * h)
            .saturating_add(h.saturating_mul(i).saturating_mul(2))
            .saturating_add(i)
            .saturating_add(h);
        // The pooler, the head's transform and LayerNorm, the decoder bias.
        let head = square.saturating_mul(2).saturating_add(4 * h).saturating_add(self.vocab_size as u128);
        embeddings.saturating_add(layer.saturating_mul(self.num_hidden_layers as u128)).saturating_add(head)
    }

    /// Reject combinations the model cannot run, and sizes past [`SIZE_LIMITS`] or
    /// [`MAX_PARAMETERS`], before anything is allocated.
    pub fn validate(&self) -> Result<()> {
        let err = |m: String| Err(CodonError::Config(m));
        for (name, limit) in SIZE_LIMITS {
            let v = self.size(name);
            if v > limit {
                return err(format!("{name} = {v} is past this build's limit of {limit}"));
            }
        }
        let parameters = self.parameter_count();
        if parameters > MAX_PARAMETERS as u128 {
            return err(format!(
                "the configuration has {parameters} parameters, past this build's limit of {MAX_PARAMETERS}"
            ));
        }
        if self.hidden_size == 0
            || self.num_attention_heads == 0
            || !self.hidden_size.is_multiple_of(self.num_attention_heads)
        {
            return err(format!(
                "hidden_size {} must be a positive multiple of num_attention_heads {}",
                self.hidden_size, self.num_attention_heads
            ));
        }
        for (name, v) in [
            ("vocab_size", self.vocab_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("intermediate_size", self.intermediate_size),
            ("max_position_embeddings", self.max_position_embeddings),
            ("type_vocab_size", self.type_vocab_size),
            ("block_size", self.block_size),
        ] {
            if v == 0 {
                return err(format!("{name} must be positive"));
            }
        }
        if self.num_random_blocks == 0 {
            return err("num_random_blocks must be positive (transformers does not support 0)".into());
        }
        for (name, p) in [
            ("hidden_dropout_prob", self.hidden_dropout_prob),
            ("attention_probs_dropout_prob", self.attention_probs_dropout_prob),
        ] {
            if !(0.0..1.0).contains(&p) {
                return err(format!("{name} = {p} must be in [0, 1)"));
            }
        }
        if self.layer_norm_eps.is_nan() || self.layer_norm_eps <= 0.0 {
            return err(format!("layer_norm_eps = {} must be positive", self.layer_norm_eps));
        }
        if self.pad_token_id as usize >= self.vocab_size {
            return err(format!("pad_token_id {} is not below vocab_size {}", self.pad_token_id, self.vocab_size));
        }
        if self.is_decoder || self.add_cross_attention {
            return err("is_decoder and add_cross_attention must be false for BigBirdForMaskedLM".into());
        }
        if !self.tie_word_embeddings {
            return err("tie_word_embeddings = false is not supported (CodonTransformer ties the decoder)".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_codontransformer() {
        let c = BigBirdConfig::default();
        assert_eq!((c.vocab_size, c.type_vocab_size, c.sep_token_id, c.hidden_size), (90, 164, 2, 768));
        assert_eq!(c.max_tokens_full_fallback(), 704);
        assert_eq!(c.attention_type, AttentionType::BlockSparse);
        c.validate().unwrap();
    }

    #[test]
    fn sizes_past_their_limits_are_refused_before_anything_is_allocated() {
        // Each of these aborted the process or panicked when the model was built.
        for (field, value) in [
            ("num_hidden_layers", "100000000000"),
            ("vocab_size", "18446744073709551615"),
            ("intermediate_size", "10000000000"),
            ("hidden_size", "4000000"),
            ("max_position_embeddings", "1000000000"),
            ("type_vocab_size", "1000000000"),
            ("num_random_blocks", "4611686018427387904"),
        ] {
            let text = format!("{{\"{field}\": {value}}}");
            let err = BigBirdConfig::from_json(&text).unwrap_err().to_string();
            assert!(err.contains(field) && err.contains("limit"), "{field}: {err}");
        }
        // Every size within its limit, and the whole still too large.
        let big = r#"{"hidden_size": 16384, "num_attention_heads": 16, "num_hidden_layers": 64}"#;
        let err = BigBirdConfig::from_json(big).unwrap_err().to_string();
        assert!(err.contains("parameters, past"), "{err}");
        // The count is the model's own: the walk over its parameters' shapes.
        let no_bias = BigBirdConfig { use_bias: false, ..BigBirdConfig::demo() };
        for c in [BigBirdConfig::default(), BigBirdConfig::demo(), no_bias] {
            let walked: usize =
                crate::bigbird::model::parameter_shapes(&c).iter().map(|(_, s)| s.iter().product::<usize>()).sum();
            assert_eq!(c.parameter_count(), walked as u128);
        }
    }

    #[test]
    fn reads_fixture_config_and_ignores_unknown_fields() {
        // tests/fixtures/bigbird/config.json, inline so that the packaged crate reads nothing outside it.
        let text = r#"{
  "add_cross_attention": false,
  "architectures": [
    "BigBirdForMaskedLM"
  ],
  "attention_probs_dropout_prob": 0.0,
  "attention_type": "block_sparse",
  "block_size": 4,
  "bos_token_id": 1,
  "classifier_dropout": null,
  "dtype": "float32",
  "eos_token_id": 2,
  "hidden_act": "gelu_new",
  "hidden_dropout_prob": 0.0,
  "hidden_size": 32,
  "initializer_range": 0.02,
  "intermediate_size": 48,
  "is_decoder": false,
  "layer_norm_eps": 1e-12,
  "max_position_embeddings": 4096,
  "model_type": "big_bird",
  "num_attention_heads": 2,
  "num_hidden_layers": 2,
  "num_random_blocks": 1,
  "pad_token_id": 0,
  "rescale_embeddings": false,
  "sep_token_id": 2,
  "tie_word_embeddings": true,
  "transformers_version": "5.23.0",
  "type_vocab_size": 164,
  "use_bias": true,
  "use_cache": true,
  "vocab_size": 90
}"#;
        let c = BigBirdConfig::from_json(text).unwrap();
        assert_eq!((c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.intermediate_size), (32, 2, 2, 48));
        assert_eq!((c.block_size, c.num_random_blocks, c.hidden_dropout_prob), (4, 1, 0.0));
        let round = BigBirdConfig::from_json(&c.to_json()).unwrap();
        assert_eq!(round, c);
    }

    #[test]
    fn invalid_combinations_are_errors() {
        for (json, needle) in [
            (r#"{"hidden_size": 30, "num_attention_heads": 4}"#, "multiple of num_attention_heads"),
            (r#"{"num_random_blocks": 0}"#, "num_random_blocks"),
            (r#"{"block_size": 0}"#, "block_size"),
            (r#"{"hidden_dropout_prob": 1.0}"#, "hidden_dropout_prob"),
            (r#"{"is_decoder": true}"#, "is_decoder"),
            (r#"{"pad_token_id": 90}"#, "pad_token_id"),
            (r#"{"hidden_act": "swish"}"#, "unknown variant"),
            (r#"{"attention_type": "dense"}"#, "unknown variant"),
            (r#"{"tie_word_embeddings": false}"#, "tie_word_embeddings"),
            (r#"{"layer_norm_eps": 0}"#, "layer_norm_eps"),
        ] {
            let err = BigBirdConfig::from_json(json).unwrap_err().to_string();
            assert!(err.contains(needle), "{json}: {err}");
        }
    }
}
