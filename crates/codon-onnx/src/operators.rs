//! The ONNX operators the export relies on, each on CANN's ONNX operator list (the "operator
//! list / ONNX" section of the CANN 7.0–8.x documentation, which follows ONNX 1.12 and gives each
//! operator's opsets within 9–18). The list is as gathered in this project's deployment notes
//! (2026-11-27); each operator's page was not re-read for opset 13 specifically, so a first
//! conversion with ATC is the check (docs/onnx.md).

/// One operator of the exported graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operator {
    /// The ONNX op type.
    pub name: &'static str,
    /// What the export uses it for.
    pub used_for: &'static str,
}

/// Every operator the exported graph may contain.
pub const OPERATORS: &[Operator] = &[
    Operator { name: "Gather", used_for: "the word and organism embedding lookups" },
    Operator { name: "Shape", used_for: "the input's length, for the position embeddings" },
    Operator { name: "Slice", used_for: "the first `length` position embeddings" },
    Operator { name: "Add", used_for: "biases, residuals, embeddings, the key mask" },
    Operator { name: "Sub", used_for: "LayerNorm's centring; 1 − mask" },
    Operator { name: "Mul", used_for: "scales, LayerNorm's γ, GELU's polynomial" },
    Operator { name: "Div", used_for: "LayerNorm's normalisation" },
    Operator { name: "Sqrt", used_for: "LayerNorm's standard deviation" },
    Operator {
        name: "ReduceMean",
        used_for: "LayerNorm's mean and variance (written out: ATC lists LayerNormalization for float16 only)",
    },
    Operator { name: "Tanh", used_for: "gelu_new" },
    Operator { name: "MatMul", used_for: "the linear layers, q·kᵀ, probabilities·v, the decoder" },
    Operator { name: "Reshape", used_for: "splitting and merging attention heads" },
    Operator { name: "Transpose", used_for: "splitting and merging attention heads" },
    Operator { name: "Softmax", used_for: "attention probabilities (axis −1)" },
    Operator { name: "Cast", used_for: "the int64 attention mask to the float dtype" },
    Operator { name: "Unsqueeze", used_for: "the key mask to (batch, 1, 1, length)" },
];
