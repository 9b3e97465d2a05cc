//! The ONNX operators the export relies on, each registered for opset 13 by CANN's ONNX parser.
//! The source of each is the vendor's own plugin, the file that registers the ONNX op type with
//! ATC (`REGISTER_CUSTOM_OP(…).FrameworkType(ONNX).OriginOpType("ai.onnx::13::…")`), in the
//! hicann ops-math and ops-nn repositories (commits c41933244c31 and e5c3fa9327ea, 2025): every
//! operator here is registered for opsets 8–18. The CANN 8.1.RC1 toolkit mirror
//! (`leideng/CANN-8.1.RC1`) lists the compiled plugin (`opp/built-in/framework/onnx/
//! libops_all_onnx_plugin.so`) but does not hold it, so 8.1.RC1's own registrations are not read
//! here; a first conversion with ATC is that check (docs/onnx.md).

/// One operator of the exported graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operator {
    /// The ONNX op type.
    pub name: &'static str,
    /// What the export uses it for.
    pub used_for: &'static str,
    /// The vendor plugin that registers it for ONNX (repository: path).
    pub registered_in: &'static str,
}

/// Every operator the exported graph may contain.
pub const OPERATORS: &[Operator] = &[
    Operator {
        name: "Gather",
        used_for: "the word and organism embedding lookups",
        registered_in: "ops-nn: index/gather_v2/framework/gather_onnx_plugin.cpp",
    },
    Operator {
        name: "Shape",
        used_for: "the input's length, for the position embeddings",
        registered_in: "ops-math: math/shape/framework/shape_onnx_plugin.cpp",
    },
    Operator {
        name: "Slice",
        used_for: "the first `length` position embeddings",
        registered_in: "ops-math: conversion/strided_slice_v2/framework/slice_onnx_plugin.cpp",
    },
    Operator {
        name: "Add",
        used_for: "biases, residuals, embeddings, the key mask",
        registered_in: "ops-math: common/src/framework/similar_opp_onnx_plugin.cpp",
    },
    Operator {
        name: "Sub",
        used_for: "LayerNorm's centring; 1 − mask",
        registered_in: "ops-math: common/src/framework/similar_opp_onnx_plugin.cpp",
    },
    Operator {
        name: "Mul",
        used_for: "scales, LayerNorm's γ, GELU's polynomial",
        registered_in: "ops-math: common/src/framework/similar_opp_onnx_plugin.cpp",
    },
    Operator {
        name: "Div",
        used_for: "LayerNorm's normalisation",
        registered_in: "ops-math: common/src/framework/similar_opp_onnx_plugin.cpp (as RealDiv)",
    },
    Operator {
        name: "Sqrt",
        used_for: "LayerNorm's standard deviation",
        registered_in: "ops-math: common/src/framework/similar_opp_onnx_plugin.cpp",
    },
    Operator {
        name: "ReduceMean",
        used_for: "LayerNorm's mean and variance (written out: ATC lists LayerNormalization for float16 only)",
        registered_in: "ops-math: math/reduce_mean/framework/reduce_mean_onnx_plugin.cpp",
    },
    Operator {
        name: "Tanh",
        used_for: "gelu_new",
        registered_in: "ops-math: common/src/framework/similar_opp_onnx_plugin.cpp",
    },
    Operator {
        name: "MatMul",
        used_for: "the linear layers, q·kᵀ, probabilities·v, the decoder",
        registered_in: "ops-nn: matmul/mat_mul_v3/framework/matmul_onnx_plugin.cpp",
    },
    Operator {
        name: "Reshape",
        used_for: "splitting and merging attention heads",
        registered_in: "ops-math: conversion/reshape/framework/reshape_onnx_plugin.cpp",
    },
    Operator {
        name: "Transpose",
        used_for: "splitting and merging attention heads",
        registered_in: "ops-math: conversion/transpose/framework/transpose_onnx_plugin.cpp",
    },
    Operator {
        name: "Softmax",
        used_for: "attention probabilities (axis −1)",
        registered_in: "ops-nn: activation/softmax_v2/framework/softmax_onnx_plugin.cpp",
    },
    Operator {
        name: "Cast",
        used_for: "the int64 attention mask to the float dtype",
        registered_in: "ops-math: math/cast/framework/cast_onnx_plugin.cpp",
    },
    Operator {
        name: "Unsqueeze",
        used_for: "the key mask to (batch, 1, 1, length)",
        registered_in: "ops-math: conversion/unsqueeze/framework/unsequeeze_onnx_plugin.cpp",
    },
];
