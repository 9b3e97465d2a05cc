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

/// A safetensors file's tensors. f32 tensors (what transformers writes) are read and converted
/// to `dtype` in parallel chunks straight from the file (positioned reads into a small buffer per
/// task): no copy of the whole file in memory, and the reading and the conversion share the
/// threads. Other dtypes load as stored and are cast. Tensors go to the device one after the
/// other, in the file's order, from this thread (a device context is per thread).
fn read_safetensors(path: &Path, device: &Device, dtype: DType) -> candle_core::Result<Vec<(String, Tensor)>> {
    let file = std::fs::File::open(path)?;
    let (data_start, header) = safetensors_header(&file)?;
    let cpu = &Device::Cpu;
    let read_at = |offset: usize, buf: &mut [u8]| -> candle_core::Result<()> {
        Ok(std::os::unix::fs::FileExt::read_exact_at(&file, buf, (data_start + offset) as u64)?)
    };
    header
        .offset_keys()
        .into_iter()
        .map(|name| {
            let info =
                header.info(&name).ok_or_else(|| candle_core::Error::msg(format!("{name}: not in the header")))?;
            let (start, end) = info.data_offsets;
            let t = match (info.dtype, dtype) {
                (safetensors::Dtype::F32, DType::F32) => {
                    Tensor::from_vec(read_f32_as(start, end, read_at, |x| x)?, info.shape.as_slice(), cpu)?
                }
                (safetensors::Dtype::F32, DType::BF16) => Tensor::from_vec(
                    read_f32_as(start, end, read_at, half::bf16::from_f32)?,
                    info.shape.as_slice(),
                    cpu,
                )?,
                _ => {
                    let mut bytes = vec![0u8; end - start];
                    read_at(start, &mut bytes)?;
                    let view = safetensors::tensor::TensorView::new(info.dtype, info.shape.clone(), &bytes)?;
                    let t = candle_core::safetensors::Load::load(&view, cpu)?;
                    // Integer tensors keep their dtype, so a weight stored as one is refused, not cast.
                    if t.dtype().is_float() {
                        t.to_dtype(dtype)?
                    } else {
                        t
                    }
                }
            };
            Ok((name, t.to_device(device)?))
        })
        .collect()
}

/// Bytes of an f32 tensor that one task reads and converts (in L2 beside its output).
const READ_CHUNK: usize = 256 << 10;

/// The f32 values in the data bytes `start..end`, each converted by `convert`, read in parallel
/// chunks through `read_at(offset, buf)`.
fn read_f32_as<T: Send + Default + Clone>(
    start: usize,
    end: usize,
    read_at: impl Fn(usize, &mut [u8]) -> candle_core::Result<()> + Sync,
    convert: impl Fn(f32) -> T + Sync,
) -> candle_core::Result<Vec<T>> {
    let mut out = vec![T::default(); (end - start) / 4];
    out.par_chunks_mut(READ_CHUNK / 4).enumerate().try_for_each_init(Vec::new, |buf, (i, dst)| {
        buf.resize(dst.len() * 4, 0u8);
        read_at(start + i * READ_CHUNK, buf)?;
        for (d, b) in dst.iter_mut().zip(buf.chunks_exact(4)) {
            *d = convert(f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        }
        Ok::<_, candle_core::Error>(())
    })?;
    Ok(out)
}

/// The most header bytes a safetensors file may declare (the safetensors crate's own bound).
const MAX_HEADER_BYTES: u64 = 100_000_000;

/// A safetensors file's header, checked as the safetensors crate checks a whole file (offsets
/// contiguous, sizes matching the shapes, the data ending where the file ends), and where its
/// data starts.
fn safetensors_header(file: &std::fs::File) -> candle_core::Result<(usize, safetensors::tensor::Metadata)> {
    use std::os::unix::fs::FileExt;
    let invalid = |what: String| candle_core::Error::msg(format!("not a safetensors file: {what}"));
    let file_len = file.metadata()?.len();
    if file_len < 8 {
        return Err(invalid(format!("{file_len} bytes, shorter than the header's length")));
    }
    let mut len = [0u8; 8];
    file.read_exact_at(&mut len, 0)?;
    let header_len = u64::from_le_bytes(len);
    if header_len > MAX_HEADER_BYTES || 8 + header_len > file_len {
        return Err(invalid(format!("a header of {header_len} bytes in a file of {file_len}")));
    }
    let mut header = vec![0u8; header_len as usize];
    file.read_exact_at(&mut header, 8)?;
    let metadata: safetensors::tensor::Metadata =
        serde_json::from_slice(&header).map_err(|e| invalid(format!("its header: {e}")))?;
    let data_start = 8 + header_len;
    // data_len comes from the file: compared, not added, so that no sum can overflow.
    if metadata.data_len() as u64 != file_len - data_start {
        return Err(invalid(format!(
            "its header describes {} bytes of data, the file holds {}",
            metadata.data_len(),
            file_len - data_start
        )));
    }
    Ok((data_start as usize, metadata))
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
            Some(_) if !tensor.dtype().is_float() => {
                misshapen.push(format!("{key}: expected floating-point values, found {:?}", tensor.dtype()));
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
    Ok(codon_files::write_atomically(&dir.join("config.json"), |w| w.write_all(config.as_bytes()))?)
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

    let written = codon_files::write_atomically(path, |w| {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A file with an f32 tensor larger than a read chunk (with a tail), a small one and an
    /// integer one, written by candle's own safetensors writer.
    fn sample_file(dir: &Path) -> (std::path::PathBuf, HashMap<String, Tensor>) {
        let cpu = &Device::Cpu;
        let big = (READ_CHUNK / 4) * 2 + 1000;
        let values: Vec<f32> = (0..big).map(|i| ((i as f32) * 0.37).sin() * 3.0).collect();
        let tensors = HashMap::from([
            ("big".to_string(), Tensor::from_vec(values, (big / 4, 4), cpu).unwrap()),
            ("small".to_string(), Tensor::new(&[1.5f32, -2.25, 1e-3], cpu).unwrap()),
            ("ids".to_string(), Tensor::new(&[7i64, -1, 3], cpu).unwrap()),
        ]);
        let path = dir.join("sample.safetensors");
        candle_core::safetensors::save(&tensors, &path).unwrap();
        (path, tensors)
    }

    /// A `torch.save`-layout zip holding the pickle `pkl` and the storages `entries`.
    fn torch_zip(dir: &Path, pkl: &[u8], entries: &[(&str, &[u8])]) -> std::path::PathBuf {
        let path = dir.join("hostile.ckpt");
        let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
        let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
        zip.start_file("archive/data.pkl", opts).unwrap();
        zip.write_all(pkl).unwrap();
        for (name, bytes) in entries {
            zip.start_file(format!("archive/data/{name}"), opts).unwrap();
            zip.write_all(bytes).unwrap();
        }
        zip.finish().unwrap();
        path
    }

    /// A state dict of one tensor `w` of `storage` class with `dims`, whose storage starts at
    /// element `offset`.
    fn one_tensor_pickle(storage: &str, offset: i64, dims: &[i64]) -> Vec<u8> {
        let mut p =
            b"\x80\x02}X\x01\x00\x00\x00wctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storage".to_vec();
        p.extend_from_slice(format!("ctorch\n{storage}\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpu").as_bytes());
        // As pickle writes integers: BININT where 32 bits hold them, LONG1 of 8 bytes otherwise.
        let long = |p: &mut Vec<u8>, v: i64| match i32::try_from(v) {
            Ok(v) => {
                p.push(b'J');
                p.extend_from_slice(&v.to_le_bytes());
            }
            Err(_) => {
                p.extend_from_slice(b"\x8a\x08");
                p.extend_from_slice(&v.to_le_bytes());
            }
        };
        long(&mut p, 4);
        p.extend_from_slice(b"tQ");
        long(&mut p, offset);
        p.push(b'(');
        dims.iter().for_each(|&d| long(&mut p, d));
        p.extend_from_slice(b"t(");
        dims.iter().for_each(|_| long(&mut p, 1));
        p.extend_from_slice(b"t\x89ccollections\nOrderedDict\n)RtRs.");
        p
    }

    #[test]
    fn a_well_formed_one_tensor_pickle_loads() {
        // The hostile cases below differ from this one in one field each.
        let dir = tempfile::tempdir().unwrap();
        let storage: Vec<u8> = [1.5f32, -2.0, 0.25, 8.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let path = torch_zip(dir.path(), &one_tensor_pickle("FloatStorage", 1, &[3]), &[("0", &storage)]);
        let tensors = read_tensors(&path, &Device::Cpu, DType::F32).unwrap();
        assert_eq!(tensors.len(), 1);
        assert_eq!(tensors[0].1.to_vec1::<f32>().unwrap(), [-2.0, 0.25, 8.0]);
    }

    /// The error reading a checkpoint whose pickle is `pkl` ends with.
    fn pickle_error(pkl: &[u8]) -> String {
        let dir = tempfile::tempdir().unwrap();
        let path = torch_zip(dir.path(), pkl, &[]);
        read_tensors(&path, &Device::Cpu, DType::F32).unwrap_err().to_string()
    }

    #[test]
    fn memo_references_that_double_are_refused_before_they_take_memory() {
        // 416 bytes whose memo references double at each of 40 levels: 2^40 objects if copied.
        let mut pkl = b"\x80\x02K\x01q\x00".to_vec();
        for i in 0..40u8 {
            pkl.extend_from_slice(&[b'h', i, b'h', i, 0x86, b'q', i + 1]);
        }
        pkl.push(b'.');
        let err = pickle_error(&pkl);
        assert!(err.contains("expand past"), "{err}");
    }

    #[test]
    fn deeply_nested_pickles_are_refused() {
        // A million nested tuples would overflow the stack when dropped.
        let mut pkl = b"\x80\x02".to_vec();
        pkl.extend(std::iter::repeat_n(b'(', 1_000_000));
        pkl.extend(std::iter::repeat_n(b't', 1_000_000));
        pkl.push(b'.');
        let err = pickle_error(&pkl);
        assert!(err.contains("nest deeper"), "{err}");
    }

    #[test]
    fn tensors_past_their_storage_or_offsets_that_overflow_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let storage = [0u8; 16];
        for (offset, dims, what) in [
            (1i64 << 62, vec![3i64], "out of range"),
            (-1, vec![3], "out of range"),
            (0, vec![1 << 40], "needs more bytes"),
            (0, vec![1 << 32, 1 << 32, 1 << 32], "more elements"),
        ] {
            let path = torch_zip(dir.path(), &one_tensor_pickle("FloatStorage", offset, &dims), &[("0", &storage)]);
            let err = read_tensors(&path, &Device::Cpu, DType::F32).unwrap_err().to_string();
            assert!(err.contains(what), "offset {offset}, dims {dims:?}: {err}");
        }
    }

    #[test]
    fn integer_tensors_are_refused_as_weights() {
        let config = BigBirdConfig::demo();
        let mut tensors = vec![];
        for (name, shape) in parameter_shapes(&config) {
            let dtype = if name.ends_with("LayerNorm.bias") { DType::I64 } else { DType::F32 };
            tensors.push((name, Tensor::zeros(shape, dtype, &Device::Cpu).unwrap()));
        }
        let err = check_tensors(&config, Path::new("m.safetensors"), tensors, DType::F32).unwrap_err().to_string();
        assert!(err.contains("expected floating-point values, found I64"), "{err}");
    }

    #[test]
    fn tensors_load_exactly_across_read_chunks_in_f32_and_bf16() {
        let dir = tempfile::tempdir().unwrap();
        let (path, originals) = sample_file(dir.path());
        for dtype in [DType::F32, DType::BF16] {
            let loaded: HashMap<String, Tensor> =
                read_safetensors(&path, &Device::Cpu, dtype).unwrap().into_iter().collect();
            assert_eq!(loaded.len(), originals.len());
            for (name, original) in &originals {
                // Integer tensors keep their dtype, so that a weight stored as one can be refused.
                let want_dtype = if original.dtype().is_float() { dtype } else { original.dtype() };
                let want = original.to_dtype(want_dtype).unwrap().to_dtype(DType::F64).unwrap().flatten_all().unwrap();
                let got = &loaded[name];
                assert_eq!(got.dtype(), want_dtype, "{name}");
                assert_eq!(got.dims(), original.dims(), "{name}");
                let got = got.to_dtype(DType::F64).unwrap().flatten_all().unwrap();
                assert_eq!(got.to_vec1::<f64>().unwrap(), want.to_vec1::<f64>().unwrap(), "{name} in {dtype:?}");
            }
        }
    }

    #[test]
    fn short_truncated_or_overlong_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _) = sample_file(dir.path());
        let bytes = std::fs::read(&path).unwrap();
        let header = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let mut longer = bytes.clone();
        longer.push(0);
        let mut huge_header = bytes.clone();
        huge_header[..8].copy_from_slice(&(bytes.len() as u64).to_le_bytes());
        for (what, contents) in [
            ("four bytes", bytes[..4].to_vec()),
            ("the header cut", bytes[..8 + header / 2].to_vec()),
            ("the data cut", bytes[..bytes.len() - 5].to_vec()),
            ("a byte after the data", longer),
            ("a header longer than the file", huge_header),
        ] {
            let bad = dir.path().join("bad.safetensors");
            std::fs::write(&bad, &contents).unwrap();
            let err = read_safetensors(&bad, &Device::Cpu, DType::F32).unwrap_err().to_string();
            assert!(err.contains("not a safetensors file"), "{what}: {err}");
        }
    }
}
