//! BigBirdForMaskedLM on candle, at parity with Hugging Face transformers.

pub mod attention;
pub mod config;
pub mod model;
pub mod numpy_rng;
pub mod random_blocks;
pub mod weights;

pub use config::{AttentionType, BigBirdConfig, HiddenAct};
pub use model::{
    masked_lm_loss, parameter_shapes, BigBirdForMaskedLM, ForwardInfo, ForwardMode, ModelInput, IGNORE_INDEX,
    TOKEN_TYPE_EMBEDDINGS, WORD_EMBEDDINGS,
};
pub use random_blocks::{BlockGeometry, RandomBlocks};
pub use weights::{init_weights, load_model, save_model};
