//! `codon-ops`: the fused ops CodonTransformer trains with. Each op is one type, in the style of
//! candle-nn's `ops.rs`: its CPU body, its Ascend body (one aclnn fused operator, launched
//! through `candle_ascend::fused` where the part's support table has it), its backward, and the
//! composed reference used in tests and on devices without a body. The crate has no model
//! semantics; model code calls the op and never asks which device it is on.
#![warn(missing_docs)]
// Without the Ascend bodies, the state their launches keep is made but never read.
#![cfg_attr(not(feature = "ascend"), allow(dead_code))]

pub mod activation;
pub mod attention;
pub mod cpu_bf16;
pub mod cpu_gemm;
pub mod cpu_isa;
pub mod cross_entropy;
#[cfg(feature = "cuda")]
mod cuda;
pub mod dropout;
pub mod embedding;
pub mod f32_views;
pub mod fast_math;
pub mod function;
mod launch;
pub mod layer_norm;
pub mod linear;
pub mod malloc_tuning;
pub mod optim;
pub mod philox;
mod selection;
pub mod support;

pub use activation::{gelu_new, softmax_last_dim_f32};

pub use cross_entropy::cross_entropy;
pub use dropout::{dropout, DropoutDraw, DropoutStream};
pub use embedding::embedding;
pub use layer_norm::{add_layer_norm, layer_norm};
pub use linear::linear;
