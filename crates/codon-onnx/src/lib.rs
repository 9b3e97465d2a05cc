//! ONNX export of CodonTransformer's BigBird masked-LM with full attention (what upstream's
//! `predict_dna_sequence` runs by default), for CANN's ATC and any ONNX runtime.
//!
//! The graph takes `input_ids`, `attention_mask` and `token_type_ids` (int64, batch × length, both
//! dynamic up to `max_position_embeddings`) and gives `logits` (batch × length × vocab), in f32 or
//! f16. It uses only the operators of [`OPERATORS`], each registered with ATC's ONNX parser at
//! [`OPSET`]; LayerNorm and GELU are written out in them (ATC registers LayerNormalization for
//! opsets 17/18 and float16 only). Block-sparse attention (transformers' 5-D einsums) is not exported.
#![warn(missing_docs)]

pub mod graph;
mod operators;

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};
use codon_model::bigbird::{BigBirdConfig, BigBirdForMaskedLM, HiddenAct};
pub use graph::Float;
use graph::{Attr, Graph};
pub use operators::{Operator, OPERATORS};

/// The ONNX opset the graph is written at: every operator of [`OPERATORS`] is registered with
/// ATC's ONNX parser at this opset.
pub const OPSET: i64 = 13;

/// What can go wrong.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The model has something the export does not write.
    #[error("export: {0}")]
    Unsupported(String),
    /// A parameter is missing or has another shape.
    #[error("export: parameter {name}: {problem}")]
    Parameter {
        /// Its transformers name.
        name: String,
        /// What is wrong.
        problem: String,
    },
    /// Reading a parameter's values failed.
    #[error("export: reading {name}: {source}")]
    Tensor {
        /// Its transformers name.
        name: String,
        /// candle's error.
        source: candle_core::Error,
    },
    /// Encoding the model failed.
    #[error("export: encoding the ONNX model: {0}")]
    Encode(#[from] protobuf::Error),
}

/// The result of an export.
pub type Result<T> = std::result::Result<T, ExportError>;

/// The model as an ONNX `ModelProto`, serialised, with its weights in `float`.
pub fn export(model: &BigBirdForMaskedLM, float: Float) -> Result<Vec<u8>> {
    use onnx_protobuf::Message;
    Ok(model_proto(model, float)?.write_to_bytes()?)
}

/// The model as an ONNX `ModelProto`.
pub fn model_proto(model: &BigBirdForMaskedLM, float: Float) -> Result<onnx_protobuf::ModelProto> {
    let c = model.config();
    if c.hidden_act != HiddenAct::GeluNew {
        return Err(ExportError::Unsupported(format!(
            "hidden_act {:?}: the export writes gelu_new (CodonTransformer's)",
            c.hidden_act
        )));
    }
    if c.num_attention_heads == 0 || !c.hidden_size.is_multiple_of(c.num_attention_heads) {
        return Err(ExportError::Unsupported("hidden_size is not a multiple of num_attention_heads".into()));
    }
    let params: HashMap<String, Tensor> = model.named_parameters().into_iter().collect();
    let mut w = Weights { params: &params, graph: Graph::new(float) };
    w.masked_lm(c)?;
    let mut g = w.graph;
    g.float_output(LOGITS, &["batch", "length", "vocab"]);
    let doc = format!(
        "CodonTransformer (BigBirdForMaskedLM, full attention): {} layers, hidden {}, {} heads, vocabulary {}",
        c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.vocab_size
    );
    Ok(g.into_model(OPSET, &doc))
}

/// The graph's output.
const LOGITS: &str = "logits";

/// `m` (rows × cols, row-major) transposed.
fn transposed(m: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut t = vec![0f32; m.len()];
    for r in 0..rows {
        for c in 0..cols {
            t[c * rows + r] = m[r * cols + c];
        }
    }
    t
}

/// The parameters, read into the graph as initializers as they are used.
struct Weights<'a> {
    params: &'a HashMap<String, Tensor>,
    graph: Graph,
}

impl Weights<'_> {
    /// Parameter `name` as f32 values of shape `dims`.
    fn values(&self, name: &str, dims: &[usize]) -> Result<Vec<f32>> {
        let t = self
            .params
            .get(name)
            .ok_or_else(|| ExportError::Parameter { name: name.into(), problem: "missing".into() })?;
        if t.dims() != dims {
            return Err(ExportError::Parameter {
                name: name.into(),
                problem: format!("shape {:?}, expected {dims:?}", t.dims()),
            });
        }
        let read = || t.to_device(&Device::Cpu)?.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>();
        read().map_err(|source| ExportError::Tensor { name: name.into(), source })
    }

    /// Parameter `name` as an initializer of its own shape.
    fn weight(&mut self, name: &str, dims: &[usize]) -> Result<String> {
        let values = self.values(name, dims)?;
        Ok(self.graph.weight(name, dims, &values))
    }

    /// A linear layer `x·Wᵀ + b` (`prefix.weight` (out, in), `prefix.bias`): W is stored
    /// transposed so that the product is one MatMul.
    fn linear(&mut self, x: &str, prefix: &str, out_dim: usize, in_dim: usize) -> Result<String> {
        let name = format!("{prefix}.weight");
        let w = transposed(&self.values(&name, &[out_dim, in_dim])?, out_dim, in_dim);
        let wt = self.graph.weight(&format!("{name}_transposed"), &[in_dim, out_dim], &w);
        let b = self.weight(&format!("{prefix}.bias"), &[out_dim])?;
        let y = self.graph.node("MatMul", &[x, &wt], vec![]);
        Ok(self.graph.node("Add", &[&y, &b], vec![]))
    }

    /// LayerNorm over the last dimension, written out: (x − mean)/√(var + eps)·γ + β.
    fn layer_norm(&mut self, x: &str, prefix: &str, dim: usize, eps: f64) -> Result<String> {
        let gamma = self.weight(&format!("{prefix}.weight"), &[dim])?;
        let beta = self.weight(&format!("{prefix}.bias"), &[dim])?;
        let g = &mut self.graph;
        let last = || vec![Attr::Ints("axes", vec![-1]), Attr::Int("keepdims", 1)];
        let mean = g.node("ReduceMean", &[x], last());
        let centred = g.node("Sub", &[x, &mean], vec![]);
        let squared = g.node("Mul", &[&centred, &centred], vec![]);
        let var = g.node("ReduceMean", &[&squared], last());
        let eps = g.scalar(eps as f32);
        let var_eps = g.node("Add", &[&var, &eps], vec![]);
        let std = g.node("Sqrt", &[&var_eps], vec![]);
        let normed = g.node("Div", &[&centred, &std], vec![]);
        let scaled = g.node("Mul", &[&normed, &gamma], vec![]);
        Ok(g.node("Add", &[&scaled, &beta], vec![]))
    }

    /// gelu_new(x) = ½·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
    fn gelu_new(&mut self, x: &str) -> String {
        let g = &mut self.graph;
        let (cubic, root, half, one) =
            (g.scalar(0.044_715), g.scalar((2.0 / std::f32::consts::PI).sqrt()), g.scalar(0.5), g.scalar(1.0));
        let x2 = g.node("Mul", &[x, x], vec![]);
        let x3 = g.node("Mul", &[&x2, x], vec![]);
        let cx3 = g.node("Mul", &[&x3, &cubic], vec![]);
        let inner = g.node("Add", &[x, &cx3], vec![]);
        let u = g.node("Mul", &[&inner, &root], vec![]);
        let t = g.node("Tanh", &[&u], vec![]);
        let one_t = g.node("Add", &[&t, &one], vec![]);
        let hx = g.node("Mul", &[x, &half], vec![]);
        g.node("Mul", &[&hx, &one_t], vec![])
    }

    /// The graph of the masked-LM, its last node writing [`LOGITS`].
    fn masked_lm(&mut self, c: &BigBirdConfig) -> Result<()> {
        let (hd, heads, inter, eps) = (c.hidden_size, c.num_attention_heads, c.intermediate_size, c.layer_norm_eps);
        let ids = self.graph.int64_input("input_ids", &["batch", "length"]);
        let mask = self.graph.int64_input("attention_mask", &["batch", "length"]);
        let types = self.graph.int64_input("token_type_ids", &["batch", "length"]);
        // Embeddings: word + organism + the first `length` positions.
        let word_values = self.values(codon_model::bigbird::WORD_EMBEDDINGS, &[c.vocab_size, hd])?;
        let word = self.graph.weight(codon_model::bigbird::WORD_EMBEDDINGS, &[c.vocab_size, hd], &word_values);
        let type_table = self.weight(codon_model::bigbird::TOKEN_TYPE_EMBEDDINGS, &[c.type_vocab_size, hd])?;
        let positions = self.weight("bert.embeddings.position_embeddings.weight", &[c.max_position_embeddings, hd])?;
        let g = &mut self.graph;
        let mut x = g.node("Gather", &[&word, &ids], vec![Attr::Int("axis", 0)]);
        if c.rescale_embeddings {
            let s = g.scalar((hd as f32).sqrt());
            x = g.node("Mul", &[&x, &s], vec![]);
        }
        let t = g.node("Gather", &[&type_table, &types], vec![Attr::Int("axis", 0)]);
        let shape = g.node("Shape", &[&ids], vec![]);
        let (one, two, zero) = (g.ints(&[1], &[1]), g.ints(&[1], &[2]), g.ints(&[1], &[0]));
        let length = g.node("Slice", &[&shape, &one, &two], vec![]);
        let p = g.node("Slice", &[&positions, &zero, &length, &zero], vec![]);
        let xt = g.node("Add", &[&x, &t], vec![]);
        let x = g.node("Add", &[&xt, &p], vec![]);
        let mut x = self.layer_norm(&x, "bert.embeddings.LayerNorm", hd, eps)?;
        // Masked keys get the dtype's lowest finite value, as the CPU and NPU paths add.
        let g = &mut self.graph;
        let m = g.node("Cast", &[&mask], vec![Attr::Int("to", g.float().data_type_id())]);
        let (one_f, lowest) = (g.scalar(1.0), g.scalar(g.float().lowest()));
        let unmasked = g.node("Sub", &[&one_f, &m], vec![]);
        let bias = g.node("Mul", &[&unmasked, &lowest], vec![]);
        let axes = g.ints(&[2], &[1, 2]);
        let key_bias = g.node("Unsqueeze", &[&bias, &axes], vec![]);
        let d = hd / heads;
        let split = g.ints(&[4], &[0, 0, heads as i64, d as i64]);
        let merge = g.ints(&[3], &[0, 0, hd as i64]);
        let scale = g.scalar(1.0 / (d as f32).sqrt());
        for l in 0..c.num_hidden_layers {
            let p = format!("bert.encoder.layer.{l}");
            let q = self.linear(&x, &format!("{p}.attention.self.query"), hd, hd)?;
            let k = self.linear(&x, &format!("{p}.attention.self.key"), hd, hd)?;
            let v = self.linear(&x, &format!("{p}.attention.self.value"), hd, hd)?;
            let g = &mut self.graph;
            let heads_of = |g: &mut Graph, t: &str, perm: Vec<i64>| {
                let r = g.node("Reshape", &[t, &split], vec![]);
                g.node("Transpose", &[&r], vec![Attr::Ints("perm", perm)])
            };
            let qh = heads_of(g, &q, vec![0, 2, 1, 3]);
            let kt = heads_of(g, &k, vec![0, 2, 3, 1]);
            let vh = heads_of(g, &v, vec![0, 2, 1, 3]);
            let scores = g.node("MatMul", &[&qh, &kt], vec![]);
            let scaled = g.node("Mul", &[&scores, &scale], vec![]);
            let biased = g.node("Add", &[&scaled, &key_bias], vec![]);
            let probs = g.node("Softmax", &[&biased], vec![Attr::Int("axis", -1)]);
            let ctx = g.node("MatMul", &[&probs, &vh], vec![]);
            let ctx = g.node("Transpose", &[&ctx], vec![Attr::Ints("perm", vec![0, 2, 1, 3])]);
            let ctx = g.node("Reshape", &[&ctx, &merge], vec![]);
            let a = self.linear(&ctx, &format!("{p}.attention.output.dense"), hd, hd)?;
            let a = self.graph.node("Add", &[&a, &x], vec![]);
            let a = self.layer_norm(&a, &format!("{p}.attention.output.LayerNorm"), hd, eps)?;
            let h = self.linear(&a, &format!("{p}.intermediate.dense"), inter, hd)?;
            let h = self.gelu_new(&h);
            let o = self.linear(&h, &format!("{p}.output.dense"), hd, inter)?;
            let o = self.graph.node("Add", &[&o, &a], vec![]);
            x = self.layer_norm(&o, &format!("{p}.output.LayerNorm"), hd, eps)?;
        }
        // The MLM head: transform, GELU, LayerNorm, then the tied decoder.
        let t = self.linear(&x, "cls.predictions.transform.dense", hd, hd)?;
        let t = self.gelu_new(&t);
        let t = self.layer_norm(&t, "cls.predictions.transform.LayerNorm", hd, eps)?;
        let decoder = transposed(&word_values, c.vocab_size, hd);
        let decoder = self.graph.weight("cls.predictions.decoder.weight_transposed", &[hd, c.vocab_size], &decoder);
        let decoder_bias = self.weight("cls.predictions.bias", &[c.vocab_size])?;
        let y = self.graph.node("MatMul", &[&t, &decoder], vec![]);
        self.graph.node_named("Add", &[&y, &decoder_bias], vec![], LOGITS);
        Ok(())
    }
}
