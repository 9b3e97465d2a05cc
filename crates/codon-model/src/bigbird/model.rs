//! `BigBirdForMaskedLM`: embeddings → post-LN encoder layers → MLM head tied to the word
//! embeddings (transformers' `BigBirdEmbeddings`). Module and parameter names follow transformers.

use std::collections::HashMap;

use candle_core::backprop::GradStore;
use candle_core::{DType, Device, Tensor, Var, D};

use super::attention::{block_sparse_attention, block_sparse_masks, BlockSparseMask};
use super::config::{AttentionType, BigBirdConfig, HiddenAct};
use super::random_blocks::{BlockGeometry, RandomBlocks};
use crate::error::{CodonError, Result, TensorContext};
use crate::tokenizer::BatchEncoding;
use codon_ops::attention::full_attention;
use codon_ops::linear::LinearLayer;
use codon_ops::DropoutStream;

pub use codon_ops::cross_entropy::IGNORE_INDEX;

/// A `LayerNorm` over the last dimension.
#[derive(Debug, Clone)]
pub struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
    eps: f64,
}

impl LayerNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(codon_ops::layer_norm(x, &self.weight, &self.bias, self.eps)?)
    }

    /// `forward(x + residual)`, one launch where the part adds and normalizes together.
    fn forward_add(&self, x: &Tensor, residual: &Tensor) -> Result<Tensor> {
        Ok(codon_ops::add_layer_norm(x, residual, &self.weight, &self.bias, self.eps)?)
    }
}

#[derive(Debug, Clone)]
struct Embeddings {
    word: Tensor,
    position: Tensor,
    token_type: Tensor,
    norm: LayerNorm,
}

#[derive(Debug, Clone)]
struct EncoderLayer {
    query: LinearLayer,
    key: LinearLayer,
    value: LinearLayer,
    attention_output: LinearLayer,
    attention_norm: LayerNorm,
    intermediate: LinearLayer,
    output: LinearLayer,
    output_norm: LayerNorm,
}

/// How to run a forward pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForwardMode {
    /// The attention requested; block-sparse falls back to full attention for short inputs,
    /// decided for this call only.
    pub attention: AttentionType,
    /// Training semantics: dropout as configured and layer-seeded random blocks.
    pub train: bool,
    /// Seed of this pass's dropout masks.
    pub dropout_seed: u64,
}

impl ForwardMode {
    /// Eval mode with the given attention.
    pub fn eval(attention: AttentionType) -> Self {
        Self { attention, train: false, dropout_seed: 0 }
    }

    /// Training mode with the given attention and dropout seed.
    pub fn train(attention: AttentionType, dropout_seed: u64) -> Self {
        Self { attention, train: true, dropout_seed }
    }
}

/// Model inputs, each (batch, length): token ids, organism ids, 1/0 attention mask.
/// Integer tensors may be u8, u32 or i64; [`ModelInput::from_encoding`] uploads the mask as u8.
#[derive(Debug, Clone)]
pub struct ModelInput {
    /// Token ids.
    pub input_ids: Tensor,
    /// Organism id at every position.
    pub token_type_ids: Tensor,
    /// 1 on tokens, 0 on padding.
    pub attention_mask: Tensor,
}

impl ModelInput {
    /// Upload an encoded batch, each id checked against the configuration first: a token id
    /// outside the vocabulary, an organism id without an embedding row or a mask that is not
    /// 0/1 is an error here, where on an NPU it would surface as a late AI-core fault.
    pub fn from_encoding(encoding: &BatchEncoding, config: &BigBirdConfig, device: &Device) -> Result<Self> {
        let shape = (encoding.batch_size, encoding.seq_len);
        let n = shape.0 * shape.1;
        for (name, ids, bound) in [
            ("input_ids", &encoding.input_ids, config.vocab_size),
            ("token_type_ids", &encoding.token_type_ids, config.type_vocab_size),
            ("attention_mask", &encoding.attention_mask, 2),
        ] {
            if ids.len() != n {
                return Err(CodonError::Input(format!("{name}: {} values for shape {shape:?}", ids.len())));
            }
            if let Some((i, &id)) = ids.iter().enumerate().find(|(_, &id)| id as usize >= bound) {
                return Err(CodonError::Input(format!(
                    "{name}[{}][{}] = {id} is outside 0..{bound} (the model's {})",
                    i / shape.1.max(1),
                    i % shape.1.max(1),
                    match name {
                        "input_ids" => "vocab_size",
                        "token_type_ids" => "type_vocab_size: one row per organism",
                        _ => "mask values",
                    }
                )));
            }
        }
        let upload = |ids: &[u32]| Tensor::from_slice(ids, shape, device).op("uploading the batch");
        Ok(Self {
            input_ids: upload(&encoding.input_ids)?,
            token_type_ids: upload(&encoding.token_type_ids)?,
            // u8: the 910's Cast has an AI Core kernel from UINT8 to FLOAT but not from UINT32, whose
            // cast would run on the AI CPU (soc/aclnn_kernels.tsv).
            attention_mask: Tensor::from_vec(
                encoding.attention_mask.iter().map(|&m| m as u8).collect::<Vec<u8>>(),
                shape,
                device,
            )
            .op("uploading the batch")?,
        })
    }
}

/// What a forward pass did, besides its logits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardInfo {
    /// The attention that actually ran.
    pub attention: AttentionType,
    /// Encoder length (the input length, or its block-padded length in block-sparse mode).
    pub encoder_len: usize,
    /// The random-block tables used, per layer (block-sparse only).
    pub random_blocks: Vec<RandomBlocks>,
}

/// One pass's padded inputs, attention masks and dropout generators.
struct Pass {
    ids: Tensor,
    types: Tensor,
    /// Tokens before padding.
    n: usize,
    /// Tokens after block padding.
    n_pad: usize,
    attention: PassAttention,
    dropout: Option<DropoutStream>,
    attention_dropout: Option<(DropoutStream, f64)>,
}

enum PassAttention {
    BlockSparse { masks: BlockSparseMask, geometry: BlockGeometry, train: bool },
    Full { key_bias: Tensor },
}

impl Pass {
    fn attention(&self) -> AttentionType {
        match self.attention {
            PassAttention::BlockSparse { .. } => AttentionType::BlockSparse,
            PassAttention::Full { .. } => AttentionType::OriginalFull,
        }
    }
}

/// `BigBirdForMaskedLM` on candle.
#[derive(Debug, Clone)]
pub struct BigBirdForMaskedLM {
    config: BigBirdConfig,
    embeddings: Embeddings,
    layers: Vec<EncoderLayer>,
    transform: LinearLayer,
    transform_norm: LayerNorm,
    decoder_bias: Tensor,
    /// The same tensors by transformers name, in state-dict order.
    parameters: Vec<(String, Tensor)>,
    dtype: DType,
    device: Device,
}

/// The token embedding table's parameter name.
pub const WORD_EMBEDDINGS: &str = "bert.embeddings.word_embeddings.weight";

/// The organism (token-type) embedding table's parameter name: one row per organism.
pub const TOKEN_TYPE_EMBEDDINGS: &str = "bert.embeddings.token_type_embeddings.weight";

/// Every parameter name and shape of a configuration, in transformers' state-dict order
/// (the tied decoder keys excluded).
pub fn parameter_shapes(c: &BigBirdConfig) -> Vec<(String, Vec<usize>)> {
    let mut shapes = Vec::new();
    // Stand-ins that hold no memory: only the walk's names and shapes are kept.
    let walked = walk_parameters(c, &mut |name, shape| {
        shapes.push((name.to_string(), shape.to_vec()));
        Tensor::zeros((), DType::F32, &Device::Cpu)?.broadcast_as(shape).op("parameter shapes")
    });
    debug_assert!(walked.is_ok(), "zero-sized stand-ins cannot fail");
    shapes
}

/// The model's parts as [`walk_parameters`] assembles them.
struct Parts {
    embeddings: Embeddings,
    layers: Vec<EncoderLayer>,
    decoder_bias: Tensor,
    transform: LinearLayer,
    transform_norm: LayerNorm,
}

/// The one place the transformers parameter names are written: the parts of a model of
/// configuration `c`, each tensor asked of `get` by name and shape, in state-dict order.
fn walk_parameters(c: &BigBirdConfig, get: &mut dyn FnMut(&str, &[usize]) -> Result<Tensor>) -> Result<Parts> {
    let (hd, inter, eps) = (c.hidden_size, c.intermediate_size, c.layer_norm_eps);
    let mut w = Walk(get);
    let embeddings = Embeddings {
        word: w.tensor(WORD_EMBEDDINGS, &[c.vocab_size, hd])?,
        position: w.tensor("bert.embeddings.position_embeddings.weight", &[c.max_position_embeddings, hd])?,
        token_type: w.tensor(TOKEN_TYPE_EMBEDDINGS, &[c.type_vocab_size, hd])?,
        norm: w.norm("bert.embeddings.LayerNorm", hd, eps)?,
    };
    let mut layers = Vec::with_capacity(c.num_hidden_layers);
    for i in 0..c.num_hidden_layers {
        let l = format!("bert.encoder.layer.{i}");
        layers.push(EncoderLayer {
            query: w.linear(&format!("{l}.attention.self.query"), [hd, hd], c.use_bias)?,
            key: w.linear(&format!("{l}.attention.self.key"), [hd, hd], c.use_bias)?,
            value: w.linear(&format!("{l}.attention.self.value"), [hd, hd], c.use_bias)?,
            attention_output: w.linear(&format!("{l}.attention.output.dense"), [hd, hd], true)?,
            attention_norm: w.norm(&format!("{l}.attention.output.LayerNorm"), hd, eps)?,
            intermediate: w.linear(&format!("{l}.intermediate.dense"), [inter, hd], true)?,
            output: w.linear(&format!("{l}.output.dense"), [hd, inter], true)?,
            output_norm: w.norm(&format!("{l}.output.LayerNorm"), hd, eps)?,
        });
    }
    // transformers' pooler: in the state dict (and trained, with zero gradients), unused by the
    // masked-LM head.
    w.linear("bert.pooler", [hd, hd], true)?;
    Ok(Parts {
        embeddings,
        layers,
        decoder_bias: w.tensor("cls.predictions.bias", &[c.vocab_size])?,
        transform: w.linear("cls.predictions.transform.dense", [hd, hd], true)?,
        transform_norm: w.norm("cls.predictions.transform.LayerNorm", hd, eps)?,
    })
}

/// [`walk_parameters`]'s source of tensors, with the `weight`/`bias` suffixes of its layers.
struct Walk<'a>(&'a mut dyn FnMut(&str, &[usize]) -> Result<Tensor>);

impl Walk<'_> {
    fn tensor(&mut self, name: &str, shape: &[usize]) -> Result<Tensor> {
        (self.0)(name, shape)
    }
    fn linear(&mut self, prefix: &str, [out_dim, in_dim]: [usize; 2], bias: bool) -> Result<LinearLayer> {
        let weight = self.tensor(&format!("{prefix}.weight"), &[out_dim, in_dim])?;
        let bias = if bias { Some(self.tensor(&format!("{prefix}.bias"), &[out_dim])?) } else { None };
        Ok(LinearLayer::new(weight, bias))
    }
    fn norm(&mut self, prefix: &str, dim: usize, eps: f64) -> Result<LayerNorm> {
        let weight = self.tensor(&format!("{prefix}.weight"), &[dim])?;
        Ok(LayerNorm { weight, bias: self.tensor(&format!("{prefix}.bias"), &[dim])?, eps })
    }
}

impl BigBirdForMaskedLM {
    /// Build the model from named tensors: every name of [`parameter_shapes`] with its shape
    /// (others are ignored). Tensors that are `Var`s make the model trainable.
    pub fn from_named(config: BigBirdConfig, mut tensors: HashMap<String, Tensor>) -> Result<Self> {
        config.validate()?;
        let mut parameters = Vec::new();
        let parts = walk_parameters(&config, &mut |name, shape| {
            let t = tensors.remove(name).ok_or_else(|| CodonError::Input(format!("missing parameter {name}")))?;
            if t.dims() != shape {
                return Err(CodonError::Input(format!(
                    "parameter {name} has shape {:?}, expected {shape:?}",
                    t.dims()
                )));
            }
            parameters.push((name.to_string(), t.clone()));
            Ok(t)
        })?;
        let word = &parts.embeddings.word;
        let (dtype, device) = (word.dtype(), word.device().clone());
        Ok(Self {
            embeddings: parts.embeddings,
            layers: parts.layers,
            transform: parts.transform,
            transform_norm: parts.transform_norm,
            decoder_bias: parts.decoder_bias,
            parameters,
            config,
            dtype,
            device,
        })
    }

    /// The same architecture over other tensors, named as [`Self::named_parameters`].
    pub fn with_parameters(&self, tensors: impl IntoIterator<Item = (String, Tensor)>) -> Result<Self> {
        Self::from_named(self.config.clone(), tensors.into_iter().collect())
    }

    /// A copy of this model whose parameters are trainable `Var`s in `dtype` (fresh storage,
    /// even where the parameters already are `Var`s), and those `Var`s by name in state-dict
    /// order (what an optimizer updates and gradients are keyed by).
    pub fn trainable(&self, dtype: DType) -> Result<(Self, Vec<(String, Var)>)> {
        let vars = self
            .parameters
            .iter()
            .map(|(name, t)| Ok((name.clone(), Var::from_tensor(&t.to_dtype(dtype)?.detach())?)))
            .collect::<candle_core::Result<Vec<_>>>()
            .op("trainable parameters")?;
        let model = self.with_parameters(vars.iter().map(|(name, v)| (name.clone(), v.as_tensor().clone())))?;
        Ok((model, vars))
    }

    /// The configuration.
    pub fn config(&self) -> &BigBirdConfig {
        &self.config
    }

    /// The parameter dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Every parameter under its transformers name, in state-dict order.
    pub fn named_parameters(&self) -> Vec<(String, Tensor)> {
        self.parameters.clone()
    }

    /// Number of parameters (tied tensors once).
    pub fn num_parameters(&self) -> usize {
        self.named_parameters().iter().map(|(_, t)| t.elem_count()).sum()
    }

    /// Logits (batch, length, vocab) of a forward pass.
    pub fn forward(&self, input: &ModelInput, mode: ForwardMode) -> Result<Tensor> {
        Ok(self.forward_with_info(input, mode)?.0)
    }

    /// Logits and what the pass did.
    pub fn forward_with_info(&self, input: &ModelInput, mode: ForwardMode) -> Result<(Tensor, ForwardInfo)> {
        let mut pass = self.prepare(input, mode)?;
        let mut x = self.embed(&pass.ids, &pass.types, pass.n_pad, pass.dropout.as_mut()).op("embeddings")?;
        let mut info = ForwardInfo { attention: pass.attention(), encoder_len: pass.n_pad, random_blocks: Vec::new() };
        for l in 0..self.layers.len() {
            let rand;
            (x, rand) = self.encoder_layer(l, &x, &mut pass)?;
            info.random_blocks.extend(rand);
        }
        let logits = self.head(&x, &pass)?;
        Ok((logits, info))
    }

    /// A training forward and backward pass with activation checkpointing: each encoder layer
    /// keeps only its input, and the backward pass runs the layer's forward again (same dropout
    /// masks and random blocks) just before its gradients. Activation memory is then one
    /// layer's instead of every layer's, for about a third more arithmetic. `objective` turns
    /// the logits into the scalar to differentiate; it and its gradients are returned, the
    /// gradients equal to those of `objective(forward(..))` by backpropagation through the
    /// whole graph.
    pub fn backward_checkpointed(
        &self,
        input: &ModelInput,
        mode: ForwardMode,
        objective: impl FnOnce(&Tensor) -> Result<Tensor>,
    ) -> Result<(Tensor, GradStore)> {
        let mut pass = self.prepare(input, mode)?;
        let embedded = self.embed(&pass.ids, &pass.types, pass.n_pad, pass.dropout.as_mut()).op("embeddings")?;
        // Each layer's input and the dropout generators as the layer found them.
        let mut saved = Vec::with_capacity(self.layers.len());
        let mut x = embedded.detach();
        for l in 0..self.layers.len() {
            saved.push((x.clone(), pass.dropout, pass.attention_dropout));
            x = self.encoder_layer(l, &x, &mut pass)?.0.detach();
        }
        let top = Var::from_view(&x)?;
        let value = objective(&self.head(top.as_tensor(), &pass)?)?;
        let mut grads = value.backward()?;
        let mut grad = grads.remove(top.as_tensor());
        let params: Vec<Tensor> = self.named_parameters().into_iter().map(|(_, p)| p).collect();
        for (l, (input, dropout, attention_dropout)) in saved.into_iter().enumerate().rev() {
            let Some(g) = grad.take() else { break };
            (pass.dropout, pass.attention_dropout) = (dropout, attention_dropout);
            let input = Var::from_view(&input)?;
            let y = self.encoder_layer(l, input.as_tensor(), &mut pass)?.0;
            let mut layer_grads = (y * g)?.sum_all()?.backward()?;
            grad = layer_grads.remove(input.as_tensor());
            merge_grads(&params, &mut grads, layer_grads)?;
        }
        if let Some(g) = grad {
            merge_grads(&params, &mut grads, (embedded * g)?.sum_all()?.backward()?)?;
        }
        Ok((value, grads))
    }

    /// Inputs padded and masks built for one pass.
    fn prepare(&self, input: &ModelInput, mode: ForwardMode) -> Result<Pass> {
        let c = &self.config;
        let (b, n) = input.input_ids.dims2().op("input_ids must be (batch, length)")?;
        for (name, t) in [("token_type_ids", &input.token_type_ids), ("attention_mask", &input.attention_mask)] {
            if t.dims() != [b, n] {
                return Err(CodonError::Input(format!("{name} has shape {:?}, input_ids ({b}, {n})", t.dims())));
            }
        }
        if n == 0 {
            return Err(CodonError::Input("empty sequence".into()));
        }
        // The fallback is decided per call: upstream makes it permanent.
        let sparse = mode.attention == AttentionType::BlockSparse && n > c.max_tokens_full_fallback();
        let wm = c.block_size;
        let pad = if sparse { (wm - n % wm) % wm } else { 0 };
        let n_pad = n + pad;
        if n_pad > c.max_position_embeddings {
            return Err(CodonError::Input(format!(
                "sequence length {n_pad} exceeds max_position_embeddings {}",
                c.max_position_embeddings
            )));
        }
        let (ids, types, mask) = if pad > 0 {
            // The padding is made on the host: a device fill of u8 or u32 runs on the 910's AI CPU
            // (its Fill kernel takes neither; soc/aclnn_kernels.tsv).
            let padded = |t: &Tensor, value: f64| -> Result<Tensor> {
                let fill =
                    Tensor::full(value as f32, (b, pad), &Device::Cpu)?.to_dtype(t.dtype())?.to_device(t.device())?;
                Ok(Tensor::cat(&[t, &fill], 1)?)
            };
            (
                padded(&input.input_ids, c.pad_token_id as f64)?,
                padded(&input.token_type_ids, 0.0)?,
                padded(&input.attention_mask, 0.0)?,
            )
        } else {
            (input.input_ids.clone(), input.token_type_ids.clone(), input.attention_mask.clone())
        };
        let dropout = (mode.train && c.hidden_dropout_prob > 0.0).then(|| DropoutStream::new(mode.dropout_seed));
        // XOR with MurmurHash2's mixing constant: an attention-dropout stream unrelated to the hidden one.
        let attention_dropout = (mode.train && c.attention_probs_dropout_prob > 0.0)
            .then(|| (DropoutStream::new(mode.dropout_seed ^ 0x5bd1_e995), c.attention_probs_dropout_prob));
        let attention = if sparse {
            let geometry = BlockGeometry {
                seq_len: n_pad,
                block_size: wm,
                num_random_blocks: c.num_random_blocks,
                num_heads: c.num_attention_heads,
                max_position_embeddings: c.max_position_embeddings,
            };
            PassAttention::BlockSparse {
                masks: block_sparse_masks(&mask, wm, self.dtype).op("block-sparse masks")?,
                geometry,
                train: mode.train,
            }
        } else {
            // Masked keys get finfo(f32).min: zero weight, finite, so no NaN in any dtype.
            let key_bias = ((1.0 - mask.to_dtype(DType::F32)?)? * f32::MIN as f64)?.reshape((b, 1, 1, n_pad))?;
            PassAttention::Full { key_bias }
        };
        Ok(Pass { ids, types, n, n_pad, attention, dropout, attention_dropout })
    }

    /// Encoder layer `l` of a pass; block-sparse layers also return their random blocks.
    fn encoder_layer(&self, l: usize, x: &Tensor, pass: &mut Pass) -> Result<(Tensor, Option<RandomBlocks>)> {
        let layer = &self.layers[l];
        let dropout = pass.dropout.as_mut();
        let out = match &pass.attention {
            PassAttention::BlockSparse { masks, geometry, train } => {
                let rand = if *train { RandomBlocks::training(geometry, l) } else { RandomBlocks::zeros(geometry) };
                let y = self.layer_forward(layer, x, |q, k, v| block_sparse_attention(q, k, v, masks, &rand), dropout);
                y.map(|y| (y, Some(rand)))
            }
            PassAttention::Full { key_bias } => {
                let heads = self.config.num_attention_heads;
                let drop = pass.attention_dropout.as_mut().map(|(rng, p)| (rng, *p));
                let y = self.layer_forward(
                    layer,
                    x,
                    |q, k, v| Ok(full_attention(q, k, v, heads, key_bias, drop)?),
                    dropout,
                );
                y.map(|y| (y, None))
            }
        };
        out.map_err(|e| layer_context(e, l))
    }

    /// The MLM head over the encoder's output, padding removed.
    fn head(&self, x: &Tensor, pass: &Pass) -> Result<Tensor> {
        let x = if pass.n_pad > pass.n { x.narrow(1, 0, pass.n)? } else { x.clone() };
        self.mlm_head(&x).op("MLM head")
    }

    fn embed(&self, ids: &Tensor, types: &Tensor, n: usize, dropout: Option<&mut DropoutStream>) -> Result<Tensor> {
        let e = &self.embeddings;
        // padding_idx: the lookup passes no gradient to the pad row (the decoder still does).
        let mut x = codon_ops::embedding(&e.word, ids, Some(self.config.pad_token_id as usize))?;
        let hd = self.config.hidden_size;
        if self.config.rescale_embeddings {
            x = (x * (hd as f64).sqrt())?;
        }
        let types = codon_ops::embedding(&e.token_type, types, None)?;
        let positions = e.position.narrow(0, 0, n)?.unsqueeze(0)?;
        let mut x = (x + types)?.broadcast_add(&positions)?;
        if let Some(d) = dropout {
            x = codon_ops::dropout(&x, self.config.hidden_dropout_prob, d)?;
        }
        e.norm.forward(&x)
    }

    fn layer_forward(
        &self,
        layer: &EncoderLayer,
        x: &Tensor,
        attend: impl FnOnce(&Tensor, &Tensor, &Tensor) -> Result<Tensor>,
        mut dropout: Option<&mut DropoutStream>,
    ) -> Result<Tensor> {
        let c = &self.config;
        let q = layer.query.forward(x)?;
        let k = layer.key.forward(x)?;
        let v = layer.value.forward(x)?;
        let ctx = attend(&q, &k, &v)?;
        // Dropout sits between each dense layer and its residual connection.
        let dense_residual_norm = |dense: &LinearLayer,
                                   input: &Tensor,
                                   residual: &Tensor,
                                   norm: &LayerNorm,
                                   dropout: Option<&mut DropoutStream>| match dropout
        {
            Some(d) => norm.forward_add(&dense.forward_dropout(input, d, c.hidden_dropout_prob)?, residual),
            None => norm.forward(&dense.forward_residual(input, residual)?),
        };
        let x = dense_residual_norm(&layer.attention_output, &ctx, x, &layer.attention_norm, dropout.as_deref_mut())?;
        let inter = match c.hidden_act {
            HiddenAct::GeluNew => layer.intermediate.forward_gelu_new(&x)?,
            act => activation(act, &layer.intermediate.forward(&x)?)?,
        };
        dense_residual_norm(&layer.output, &inter, &x, &layer.output_norm, dropout)
    }

    fn mlm_head(&self, x: &Tensor) -> Result<Tensor> {
        let t = activation(self.config.hidden_act, &self.transform.forward(x)?)?;
        let t = self.transform_norm.forward(&t)?;
        Ok(codon_ops::linear(&t, &self.embeddings.word, &self.decoder_bias)?)
    }
}

/// Add the gradients of `params` in `from` to those in `into`.
fn merge_grads(params: &[Tensor], into: &mut GradStore, mut from: GradStore) -> Result<()> {
    for p in params {
        if let Some(g) = from.remove(p) {
            let sum = match into.remove(p) {
                Some(acc) => (acc + g)?,
                None => g,
            };
            into.insert(p, sum);
        }
    }
    Ok(())
}

fn layer_context(e: CodonError, layer: usize) -> CodonError {
    match e {
        CodonError::Tensor { op, source } => CodonError::Tensor { op: format!("encoder layer {layer}: {op}"), source },
        other => other,
    }
}

fn activation(act: HiddenAct, x: &Tensor) -> Result<Tensor> {
    match act {
        HiddenAct::GeluNew => Ok(codon_ops::gelu_new(x)?),
        HiddenAct::Gelu => Ok(x.gelu_erf()?),
        HiddenAct::Relu => Ok(x.relu()?),
    }
}

/// Masked-LM loss: mean cross-entropy over positions whose label is not −100, computed on
/// the device in f32 (NaN when no position is labelled, as PyTorch): `codon_ops::cross_entropy`.
pub fn masked_lm_loss(logits: &Tensor, labels: &Tensor) -> Result<Tensor> {
    let vocab = logits.dim(D::Minus1)?;
    Ok(codon_ops::cross_entropy(&logits.reshape(((), vocab))?, &labels.flatten_all()?)?)
}
