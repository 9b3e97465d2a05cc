//! Weights: loading transformers model directories, safetensors and PyTorch state dicts
//! (`.pt` / `.ckpt`, with or without Lightning's `model.` prefix), saving in the
//! transformers layout, and transformers' random initialisation.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};
use rayon::prelude::*;

use super::config::BigBirdConfig;
use super::model::{parameter_shapes, BigBirdForMaskedLM};
use crate::error::{CodonError, Result, TensorContext};

/// Keys a checkpoint may hold that the model rebuilds or does not need: the tied decoder
/// and the non-persistent position / token-type buffers of old transformers versions.
const IGNORED_KEYS: [&str; 4] = [
    "cls.predictions.decoder.weight",
    "cls.predictions.decoder.bias",
    "bert.embeddings.position_ids",
    "bert.embeddings.token_type_ids",
];

/// Read every tensor of a checkpoint file, by extension; safetensors files' f32 tensors are
/// made in `dtype` as they are read.
fn read_tensors(path: &Path, device: &Device, dtype: DType) -> Result<Vec<(String, Tensor)>> {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or_default().to_ascii_lowercase();
    let context = |e: candle_core::Error| CodonError::Tensor { op: format!("reading {}", path.display()), source: e };
    match ext.as_str() {
        "safetensors" => read_safetensors(path, device, dtype).map_err(context),
        "pt" | "pth" | "bin" | "ckpt" => {
            // Lightning checkpoints keep the weights under "state_dict"; plain dumps are the dict itself.
            let tensors = match candle_core::pickle::read_all_with_key(path, Some("state_dict")) {
                Ok(t) if !t.is_empty() => t,
                _ => candle_core::pickle::read_all(path).map_err(context)?,
            };
            tensors.into_iter().map(|(k, t)| Ok((k, t.to_device(device).map_err(context)?))).collect()
        }
        _ => Err(CodonError::Input(format!(
            "{}: unsupported checkpoint type (expected a model directory, .safetensors, .pt or .ckpt)",
            path.display()
        ))),
    }
}

/// A safetensors file's tensors. f32 tensors (what transformers writes) are converted to
/// `dtype` straight from the file's bytes, each in parallel: one pass, with no f32 copy of the
/// whole model first. Other dtypes load as stored and are cast. Tensors go to the device one
/// after the other, in the file's order, from this thread (a device context is per thread).
fn read_safetensors(path: &Path, device: &Device, dtype: DType) -> candle_core::Result<Vec<(String, Tensor)>> {
    let bytes = std::fs::read(path)?;
    let file = safetensors::SafeTensors::deserialize(&bytes)?;
    file.tensors()
        .into_iter()
        .map(|(name, view)| {
            let words = || view.data().par_chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
            let cpu = &Device::Cpu;
            let t = match (view.dtype(), dtype) {
                (safetensors::Dtype::F32, DType::F32) => {
                    Tensor::from_vec(words().collect::<Vec<f32>>(), view.shape(), cpu)?
                }
                (safetensors::Dtype::F32, DType::BF16) => {
                    Tensor::from_vec(words().map(half::bf16::from_f32).collect::<Vec<_>>(), view.shape(), cpu)?
                }
                _ => candle_core::safetensors::Load::load(&view, cpu)?.to_dtype(dtype)?,
            };
            Ok((name, t.to_device(device)?))
        })
        .collect()
}

/// Check named tensors against the model's parameters and convert them to `dtype`.
pub fn check_tensors(
    config: &BigBirdConfig,
    path: &Path,
    tensors: Vec<(String, Tensor)>,
    dtype: DType,
) -> Result<HashMap<String, Tensor>> {
    let expected: HashMap<String, Vec<usize>> = parameter_shapes(config).into_iter().collect();
    let mut found = HashMap::new();
    let (mut unexpected, mut misshapen, mut present) = (Vec::new(), Vec::new(), std::collections::HashSet::new());
    let has_lightning_prefix = tensors.iter().all(|(k, _)| k.starts_with("model."));
    for (key, tensor) in tensors {
        let key = if has_lightning_prefix { key["model.".len()..].to_string() } else { key };
        if IGNORED_KEYS.contains(&key.as_str()) {
            continue;
        }
        match expected.get(&key) {
            None => unexpected.push(key),
            Some(shape) if tensor.dims() != shape.as_slice() => {
                misshapen.push(format!("{key}: expected {shape:?}, found {:?}", tensor.dims()));
                present.insert(key);
            }
            Some(_) => {
                let t = tensor.to_dtype(dtype).op(&format!("converting {key} to {dtype:?}"))?;
                found.insert(key, t);
            }
        }
    }
    // A key with the wrong shape is misshapen, not missing as well.
    let mut missing: Vec<String> =
        expected.keys().filter(|k| !found.contains_key(*k) && !present.contains(*k)).cloned().collect();
    if !missing.is_empty() || !unexpected.is_empty() || !misshapen.is_empty() {
        missing.sort();
        unexpected.sort();
        misshapen.sort();
        return Err(CodonError::Weights { path: path.to_path_buf(), missing, unexpected, misshapen });
    }
    let mut tensors = Vec::new();
    for (key, t) in &found {
        if !codon_ops::optim::all_finite(t).op(&format!("checking {key}"))? {
            tensors.push(key.clone());
        }
    }
    if !tensors.is_empty() {
        tensors.sort();
        return Err(CodonError::NonFiniteWeights { path: path.to_path_buf(), tensors });
    }
    Ok(found)
}

/// Load a model: a transformers directory (`config.json` + `model.safetensors`, or
/// `pytorch_model.bin` where that is all it holds), or a
/// checkpoint file (`.safetensors`, `.pt`, `.ckpt`) with `config` (default: CodonTransformer's).
pub fn load_model(
    path: impl AsRef<Path>,
    config: Option<BigBirdConfig>,
    device: &Device,
    dtype: DType,
) -> Result<BigBirdForMaskedLM> {
    let path = path.as_ref();
    let (config, file) = if path.is_dir() {
        let config = match config {
            Some(c) => c,
            None => BigBirdConfig::from_file(path.join("config.json"))?,
        };
        // transformers writes model.safetensors; older Hub repositories hold only pytorch_model.bin.
        let safetensors = path.join("model.safetensors");
        let pickle = path.join("pytorch_model.bin");
        (config, if !safetensors.exists() && pickle.exists() { pickle } else { safetensors })
    } else {
        (config.unwrap_or_default(), path.to_path_buf())
    };
    if !file.exists() {
        return Err(CodonError::io(&file, std::io::Error::new(std::io::ErrorKind::NotFound, "no such file")));
    }
    let tensors = read_tensors(&file, device, dtype)?;
    let named = check_tensors(&config, &file, tensors, dtype)?;
    BigBirdForMaskedLM::from_named(config, named)
}

/// Save in the transformers layout (`config.json` + `model.safetensors` in f32, tied
/// decoder keys omitted), so `BigBirdForMaskedLM.from_pretrained(dir)` loads it.
/// Each file is written to a temporary name and renamed.
pub fn save_model(model: &BigBirdForMaskedLM, dir: impl AsRef<Path>) -> Result<()> {
    let dir = dir.as_ref();
    std::fs::create_dir_all(dir).map_err(|e| CodonError::io(dir, e))?;
    let mut tensors = HashMap::new();
    for (name, t) in model.named_parameters() {
        let t = t.detach().to_dtype(DType::F32)?.to_device(&Device::Cpu).op(&format!("copying {name} to host"))?;
        tensors.insert(name, t);
    }
    crate::files::write_safetensors(&tensors, &dir.join("model.safetensors"))?;
    let config = model.config().to_json();
    Ok(crate::files::write_atomically(&dir.join("config.json"), |w| w.write_all(config.as_bytes()))?)
}

/// transformers' initialisation: normal(0, initializer_range) for linear and embedding
/// weights, zero biases, LayerNorm weights 1 and biases 0, a zero padding row.
pub fn init_weights(
    config: &BigBirdConfig,
    seed: u64,
    device: &Device,
    dtype: DType,
) -> Result<HashMap<String, Tensor>> {
    config.validate()?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let normal = Normal::new(0.0f32, config.initializer_range as f32)
        .map_err(|e| CodonError::Config(format!("initializer_range: {e}")))?;
    let mut out = HashMap::new();
    for (name, shape) in parameter_shapes(config) {
        let n: usize = shape.iter().product();
        let values: Vec<f32> = if name.contains("LayerNorm.weight") {
            vec![1.0; n]
        } else if name.ends_with(".bias") {
            vec![0.0; n]
        } else {
            let mut v: Vec<f32> = (0..n).map(|_| normal.sample(&mut rng)).collect();
            if name == super::model::WORD_EMBEDDINGS {
                let pad = config.pad_token_id as usize * config.hidden_size;
                v[pad..pad + config.hidden_size].fill(0.0);
            }
            v
        };
        let t = Tensor::from_vec(values, shape.as_slice(), device)?.to_dtype(dtype)?;
        out.insert(name, t);
    }
    Ok(out)
}

/// Write named f32 tensors as a PyTorch state-dict file (`torch.save(state_dict)` layout: a
/// zip with `data.pkl` and one storage per tensor), readable by `torch.load` and by
/// upstream's tools. This is the upstream-style `--checkpoint_filename` file.
pub fn save_torch_state_dict(tensors: &[(String, Tensor)], path: &Path) -> Result<()> {
    let mut pickle = Vec::new();
    pickle.extend_from_slice(b"\x80\x02");
    pickle.extend_from_slice(b"ccollections\nOrderedDict\n)R(");
    let unicode = |out: &mut Vec<u8>, s: &str| {
        out.push(b'X');
        out.extend_from_slice(&(s.len() as u32).to_le_bytes());
        out.extend_from_slice(s.as_bytes());
    };
    let int = |out: &mut Vec<u8>, v: usize| {
        out.push(b'J');
        out.extend_from_slice(&(v as i32).to_le_bytes());
    };
    let mut storages = Vec::with_capacity(tensors.len());
    for (i, (name, tensor)) in tensors.iter().enumerate() {
        let t = tensor.to_dtype(DType::F32)?.to_device(&Device::Cpu)?.flatten_all()?;
        let data: Vec<f32> = t.to_vec1()?;
        let dims = tensor.dims();
        unicode(&mut pickle, name);
        pickle.extend_from_slice(b"ctorch._utils\n_rebuild_tensor_v2\n(");
        pickle.push(b'(');
        unicode(&mut pickle, "storage");
        pickle.extend_from_slice(b"ctorch\nFloatStorage\n");
        unicode(&mut pickle, &i.to_string());
        unicode(&mut pickle, "cpu");
        int(&mut pickle, data.len());
        pickle.extend_from_slice(b"tQ");
        int(&mut pickle, 0);
        pickle.push(b'(');
        dims.iter().for_each(|&d| int(&mut pickle, d));
        pickle.push(b't');
        pickle.push(b'(');
        let mut stride = 1;
        let mut strides = vec![0; dims.len()];
        for (s, &d) in strides.iter_mut().zip(dims).rev() {
            *s = stride;
            stride *= d;
        }
        strides.iter().for_each(|&s| int(&mut pickle, s));
        pickle.push(b't');
        pickle.extend_from_slice(b"\x89ccollections\nOrderedDict\n)Rt");
        pickle.push(b'R');
        storages.push(data);
    }
    pickle.extend_from_slice(b"u.");

    let written = crate::files::write_atomically(path, |w| {
        let mut zip = zip::ZipWriter::new(w);
        let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
        zip.start_file("archive/data.pkl", opts)?;
        zip.write_all(&pickle)?;
        for (i, data) in storages.iter().enumerate() {
            zip.start_file(format!("archive/data/{i}"), opts)?;
            let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
            zip.write_all(&bytes)?;
        }
        zip.start_file("archive/version", opts)?;
        zip.write_all(b"3\n")?;
        zip.finish()?;
        Ok(())
    });
    Ok(written?)
}
